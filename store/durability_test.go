package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childDirEnv, when set, turns TestDurabilityAfterSIGKILL into the child
// process that writes anchors into that directory.
const childDirEnv = "SLUICE_STORE_TEST_CHILD_DIR"

// TestDurabilityAfterSIGKILL runs a child process that writes anchors from
// several goroutines and reports each acknowledged write on stdout. The
// parent kills it with SIGKILL mid-stream, reopens the directory and expects
// every acknowledged anchor to be there.
func TestDurabilityAfterSIGKILL(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		durabilityChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const killAfter = 300 // acknowledged anchors before the kill

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDurabilityAfterSIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	acked := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for len(acked) < killAfter && sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
			acked[id] = true
		}
	}
	// The child holds the database: a second gateway must not open it.
	if s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1}); err == nil {
		s.Close()
		t.Error("Open succeeded while the child holds the database")
	} else if !strings.Contains(err.Error(), "locked") {
		t.Errorf("Open while the child holds the database: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Acks already written to the pipe before the kill count too.
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
			acked[id] = true
		}
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	if len(acked) < killAfter {
		t.Fatalf("child acknowledged only %d anchors", len(acked))
	}

	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	for id := range acked {
		a, err := s.GetAnchor(ctx, id)
		if err != nil {
			t.Fatalf("acknowledged anchor %s lost after SIGKILL: %v", id, err)
		}
		if a.Upstream != "up-"+id {
			t.Fatalf("anchor %s: upstream %q", id, a.Upstream)
		}
	}
	t.Logf("%d acknowledged anchors survived SIGKILL", len(acked))
}

// durabilityChild writes anchors until it is killed (or a minute passes),
// printing "ack <id>" after each PutAnchor returns.
func durabilityChild(dir string) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				id := "resp_" + strconv.Itoa(g) + "_" + strconv.Itoa(i)
				a := anchor(id, "up-"+id, "sess-"+strconv.Itoa(g))
				if err := s.PutAnchor(ctx, a); err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s\n", id)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	os.Exit(3) // not reached when the parent kills the child in time
}
