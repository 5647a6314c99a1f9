package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// envPGO=FILE profiles every measured sluice binary (its CPU, in windows of
// pgoWindow, from start to stop) and merges the profiles into FILE when the
// run ends: the profile Go's profile-guided optimisation builds Sluice with
// (`just pgo` writes cmd/sluice/default.pgo; docs/ARCHITECTURE.md §11). A
// relative FILE is relative to this package's directory.
const envPGO = "SLUICE_BENCH_PGO"

const (
	// pgoToken is the admin token the profiled binaries get: --pprof serves
	// the profiles behind it.
	pgoToken = "bench-pgo"
	// pgoWindow is one profile's length: the window under way when a
	// binary stops is lost.
	pgoWindow = 3 * time.Second
)

// pgoProfiles holds the profiles collected in this run.
var pgoProfiles struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	pieces [][]byte
}

// withPGO makes cmd, a `sluice serve`, serve its profiles when envPGO is
// set.
func withPGO(cmd *exec.Cmd) {
	if os.Getenv(envPGO) == "" {
		return
	}
	cmd.Args = append(cmd.Args, "--pprof")
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "SLUICE_ADMIN_TOKEN="+pgoToken)
}

// collectPGO profiles p, started from a command withPGO prepared, until it
// exits; a command it did not prepare is left alone.
func collectPGO(p *process) {
	if os.Getenv(envPGO) == "" || !slices.Contains(p.cmd.Args, "--pprof") {
		return
	}
	pgoProfiles.wg.Add(1)
	go func() {
		defer pgoProfiles.wg.Done()
		url := p.url + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(pgoWindow/time.Second))
		for p.alive() {
			piece, err := fetchProfile(url)
			if err != nil {
				select {
				case <-p.done: // stopped mid-window
				case <-time.After(time.Second):
					fmt.Fprintf(os.Stderr, "bench: profiling %s: %v\n", p.name, err)
				}
				return
			}
			pgoProfiles.mu.Lock()
			pgoProfiles.pieces = append(pgoProfiles.pieces, piece)
			pgoProfiles.mu.Unlock()
		}
	}()
}

// fetchProfile takes one CPU profile from url.
func fetchProfile(url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgoWindow+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+pgoToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, nil
}

// writePGO waits for the collectors (every binary has stopped when the
// benchmarks returned) and merges what they collected into envPGO's file
// with `go tool pprof -proto`.
func writePGO() error {
	file := os.Getenv(envPGO)
	if file == "" {
		return nil
	}
	pgoProfiles.wg.Wait()
	if len(pgoProfiles.pieces) == 0 {
		return fmt.Errorf("%s: no sluice binary was profiled (run a case that measures the binary)", envPGO)
	}
	dir, err := os.MkdirTemp("", "sluice-pgo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args := []string{"tool", "pprof", "-proto"}
	for i, piece := range pgoProfiles.pieces {
		path := filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", i))
		if err := os.WriteFile(path, piece, 0o644); err != nil {
			return err
		}
		args = append(args, path)
	}
	tool, err := goTool()
	if err != nil {
		return err
	}
	cmd := exec.Command(tool, args...)
	var stderr tailBuffer
	stderr.max = 4 << 10
	cmd.Stderr = &stderr
	merged, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -proto: %v\n%s", err, stderr.String())
	}
	if err := os.WriteFile(file, merged, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s (%d profiles merged, %d bytes)\n", file, len(pgoProfiles.pieces), len(merged))
	return nil
}
