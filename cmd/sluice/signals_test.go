package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// waitFor polls cond until it holds or a generous bound passes; the bound
// only ends a broken run, it asserts nothing about speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A hang-up (the terminal that started Sluice closing) must not end
// streams in flight without their terminal events, as SIGHUP's default
// action would: Sluice logs it and keeps serving.
func TestServeLogsAndIgnoresSIGHUP(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	cmd, out, stderr := startProcess(t, "serve", "--upstream", up.URL, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	base := waitListening(t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()

	r := openStream(t, base, 1)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP log line", func() bool { return strings.Contains(stderr.String(), "SIGHUP ignored") })
	last := lastEvent(r)
	if last.Name != "response.completed" {
		t.Fatalf("the stream in flight at the SIGHUP ended with %q %s, want response.completed\n%s", last.Name, last.Data, stderr.String())
	}
	if got := streamTurn(t, base); got == "" {
		t.Fatal("no answer after the SIGHUP")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// SIGTERM or SIGINT while the gateway is still starting is a request to
// stop, not a failed start: exit 0, and no ERROR line blames what the
// cancelled start interrupted.
func TestServeInterruptedWhileStartingExitsZero(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, []string{"serve", "--upstream", up.URL, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "[ERROR]") {
		t.Fatalf("an interrupted start logged errors:\n%s", stderr.String())
	}
}

// A signal that comes while the start waits for Redis (one that accepts
// connections and never answers) stops it there: exit 0, no listener
// announced, and no ERROR line about Redis or the policies the cancelled
// start did not load.
func TestServeInterruptedWhileConnectingToRedis(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			accepted <- struct{}{}
		}
	}()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: A\n    base_url: %s\n"+
		"store:\n  backend: redis\n  redis:\n    url: redis://%s/0\n    timeout: 30s\n", up.URL, mute.Addr())
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-accepted; cancel() }() // the start is waiting for Redis's answer
	var stdout, stderr strings.Builder
	code := run(ctx, []string{"serve", "--config", cfg, "--data-dir", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "listening") {
		t.Fatalf("a start stopped by a signal announced a listener:\n%s", stdout.String())
	}
	if strings.Contains(stderr.String(), "[ERROR]") {
		t.Fatalf("an interrupted start logged errors:\n%s", stderr.String())
	}
}

// README "Scale-out": a replica that starts while Redis is down starts
// anyway and logs it; the keys from the config work, continuity fails
// closed until Redis answers.
func TestServeStartsWhileRedisIsDown(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: A\n    base_url: %s\n"+
		"store:\n  backend: redis\n  redis:\n    url: redis://127.0.0.1:1/0\n    timeout: 200ms\n", up.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, nil, "serve", "--config", cfg, "--data-dir", t.TempDir())
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz %d with Redis down", resp.StatusCode)
	}
	stderr, err := stop()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "sluice.store: redis unreachable at start") {
		t.Fatalf("the outage at start was not logged (by the logger sluice.store):\n%s", stderr)
	}
}

// --pprof serves Go's profiles, but not the command line: it can hold an
// upstream's key, and keys are never returned by an endpoint (SECURITY.md).
func TestPprofDoesNotServeTheCommandLine(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	const key = "sk-pprof-secret-0123456789"
	keyed := strings.Replace(up.URL, "http://", "http://"+key+"@", 1)
	base, stop := startWithEnv(t, nil, "serve", "--pprof", "--upstream", keyed, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	defer func() { _, _ = stop() }()
	for path, want := range map[string]int{"/debug/pprof/": http.StatusOK, "/debug/pprof/goroutine?debug=1": http.StatusOK,
		"/debug/pprof/cmdline": http.StatusNotFound} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		if strings.Contains(string(body), key) {
			t.Errorf("GET %s returned the upstream's key", path)
		}
	}
	// The index links only to what is served: every link answers 200, and
	// none is cmdline (net/http/pprof's own index links to it).
	resp, err := http.Get(base + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	index, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	hrefs := regexp.MustCompile(`href=['"]([^'"]+)['"]`).FindAllStringSubmatch(string(index), -1)
	if len(hrefs) == 0 {
		t.Fatalf("the index links to nothing:\n%s", index)
	}
	for _, m := range hrefs {
		href := html.UnescapeString(m[1])
		switch { // short runs of the timed ones
		case href == "profile":
			href += "?seconds=1"
		case href == "trace":
			href += "?seconds=0.05"
		}
		resp, err := http.Get(base + "/debug/pprof/" + href)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the index links to %q, which answers %d", m[1], resp.StatusCode)
		}
	}
}

// A policy that refuses its config at start (its self-test rejects it) is a
// config error, and a config for a name no policy has is logged, not
// silently ignored.
func TestPolicyConfigProblemsAtStart(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	write := func(yaml string) string {
		p := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(p, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: A\n    base_url: %s\n%s", up.URL, yaml)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"serve", "--config", write("policies:\n  rewrite: {model_aliases: [1, 2]}\n"), "--data-dir", t.TempDir()}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "policies.rewrite: the policy refused its config") ||
		!strings.Contains(stderr.String(), "model_aliases must map strings to strings") {
		t.Fatalf("a rejected policy config: exit %d\n%s", code, stderr.String())
	}
	// A misspelt key in the built-in rewrite's config would leave the alias
	// silently off: the start is refused, naming it.
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"serve", "--config", write("policies:\n  rewrite: {model_alias: {fast: gpt-fake-1}}\n"), "--data-dir", t.TempDir()}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `unknown key "model_alias"`) {
		t.Fatalf("a misspelt rewrite key: exit %d\n%s", code, stderr.String())
	}
	// sluice_fail_closed on a policy that rewrites nothing (the built-in
	// recover; the built-in rewrite with nothing to do) would refuse every
	// request: the start is refused, naming the key.
	for _, yaml := range []string{"policies:\n  recover: {sluice_fail_closed: true}\n", "policies:\n  rewrite: {sluice_fail_closed: true}\n"} {
		stdout.Reset()
		stderr.Reset()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a start that is not refused serves until then
		code = run(ctx, []string{"serve", "--config", write(yaml), "--data-dir", t.TempDir()}, &stdout, &stderr)
		cancel()
		if code != 1 || !strings.Contains(stderr.String(), ".sluice_fail_closed: only a policy that rewrites requests can fail closed") {
			t.Fatalf("%s: exit %d\n%s", yaml, code, stderr.String())
		}
	}

	base, stop := startWithEnv(t, nil, "serve", "--config", write("policies:\n  rewrit: {model_aliases: {fast: gpt-fake-1}}\n"), "--data-dir", t.TempDir())
	if got := streamTurn(t, base); got == "" {
		t.Fatal("no answer")
	}
	out, err := stop()
	if err != nil || !strings.Contains(out, "key=policies.rewrit") {
		t.Fatalf("a config for no loaded policy was not logged (exit %v):\n%s", err, out)
	}
}

// A second SIGTERM during the drain ends the grace: the stream in flight
// gets its terminal event now, not when timeouts.drain_grace (an hour
// here) runs out, and the process exits 0.
func TestServeSecondSignalEndsTheDrainGrace(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	up.Enqueue(upstreamtest.HangAfter(3))
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\ntimeouts:\n  drain_grace: 1h\nupstreams:\n  - name: A\n    base_url: %s\n", up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, out, stderr := startProcess(t, "serve", "--config", cfg, "--data-dir", t.TempDir())
	base := waitListening(t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()

	r := openStream(t, base, 3)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the drain to start", func() bool { return strings.Contains(stderr.String(), "draining") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	lastc := make(chan string, 1)
	go func() { last := lastEvent(r); lastc <- last.Name + " " + string(last.Data) }()
	select {
	case last := <-lastc:
		if !strings.HasPrefix(last, "response.failed ") || !strings.Contains(last, "stream_incomplete") {
			t.Fatalf("last event %s", last)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the stream still runs after a second SIGTERM\n%s", stderr.String())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("process did not exit after a second SIGTERM")
	}
	if !strings.Contains(stderr.String(), "second signal") {
		t.Fatalf("the second signal was not logged:\n%s", stderr.String())
	}
}
