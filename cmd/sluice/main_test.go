package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// binary is the sluice executable built once for the process-level tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-bin-*")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	// The in-process tests (serve, policy commands) must leave no goroutine
	// behind, like the gateway's own.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startProcess runs the binary and returns it with a reader of its stdout.
// lockedBuilder is a strings.Builder that the process's stderr copier and
// the test may use at once.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startProcess(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader, *lockedBuilder) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuilder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(stdout), &stderr
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

func waitListening(t *testing.T, out *bufio.Reader) string {
	t.Helper()
	for {
		line, err := out.ReadString('\n')
		if m := listening.FindStringSubmatch(line); m != nil {
			return m[1]
		}
		if err != nil {
			t.Fatalf("process ended before listening: %v", err)
		}
	}
}

// openStream posts a streaming Responses request to base and reads its
// first n events.
func openStream(t *testing.T, base string, n int) *sse.Reader {
	t.Helper()
	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(`{"model":"gpt-fake-1","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	r := sse.NewReader(resp.Body, 1<<20)
	for i := 0; i < n; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	return r
}

// lastEvent reads r to its end and returns the last event.
func lastEvent(r *sse.Reader) sse.Event {
	var last sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			return last
		}
		last = ev.Clone()
	}
}

func TestServeDrainsOnSIGTERMAndExitsZero(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	up.Enqueue(upstreamtest.HangAfter(3))
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\ntimeouts:\n  drain_grace: 500ms\nupstreams:\n  - name: A\n    base_url: %s\n", up.URL)), 0o600)
	cmd, out, stderr := startProcess(t, "serve", "--config", cfg, "--data-dir", t.TempDir())
	base := waitListening(t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()

	r := openStream(t, base, 3)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	last := lastEvent(r)
	if last.Name != "response.failed" || !strings.Contains(string(last.Data), "stream_incomplete") {
		t.Fatalf("last event %s %s", last.Name, last.Data)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("process did not exit after SIGTERM")
	}
}

func TestConfigErrorsNameTheKeyAndExitNonZero(t *testing.T) {
	tests := []struct {
		yaml, want string
	}{
		{"upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    api_key: ${SLUICE_TEST_UNSET_VAR}\n", "upstreams[0].api_key"},
		{"upstreams:\n  - name: a\n    base_url: nope\n", "upstreams[0].base_url"},
		{"timeouts:\n  idle: forever\n", "forever"},
		{"bogus_key: 1\n", "bogus_key"},
		{"listen: 127.0.0.1:0\n", "at least one upstream"},
	}
	for _, tt := range tests {
		cfg := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(cfg, []byte(tt.yaml), 0o600)
		var stdout, stderr strings.Builder
		code := run(context.Background(), []string{"serve", "--config", cfg}, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("config %q: exit %d, stderr %q; want non-zero naming %q", tt.yaml, code, stderr.String(), tt.want)
		}
	}
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"serve", "--config", "/nonexistent/sluice.yaml"}, &stdout, &stderr); code == 0 {
		t.Error("missing config file accepted")
	}
	if code := run(context.Background(), []string{"frobnicate"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown command exit %d", code)
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "sluice ") {
		t.Fatalf("version: %d %q", code, stdout.String())
	}
}

func TestDemoServesAndPrintsACurlLine(t *testing.T) {
	cmd, out, _ := startProcess(t, "demo", "--listen", "127.0.0.1:0", "--log-level", "warn")
	var sawCurl bool
	var base string
	for base == "" {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("demo ended: %v", err)
		}
		if strings.Contains(line, "curl -N http://127.0.0.1:") {
			sawCurl = true
		}
		if m := listening.FindStringSubmatch(line); m != nil {
			base = m[1]
		}
	}
	if !sawCurl {
		t.Fatal("demo printed no curl line")
	}
	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(`{"model":"gpt-fake-1","input":"Say hello","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "Hello from demo") || !strings.Contains(string(body), "response.completed") {
		t.Fatalf("demo answer: %s", body)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo exit: %v", err)
	}
}

func TestAnchorsSurviveKill9(t *testing.T) {
	a := upstreamtest.NewServer(upstreamtest.Options{Name: "A", StrictPrevious: true})
	defer a.Close()
	b := upstreamtest.NewServer(upstreamtest.Options{Name: "B", StrictPrevious: true})
	defer b.Close()
	dataDir := t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--upstream", a.URL, "--upstream", b.URL, "--log-level", "error"}

	cmd, out, _ := startProcess(t, args...)
	base := waitListening(t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	id := completedID(t, base, "")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	owner := a
	if strings.HasPrefix(id, "resp_B_") {
		owner = b
	}
	a.ClearRequests()
	b.ClearRequests()
	_, out2, _ := startProcess(t, args...)
	base2 := waitListening(t, out2)
	go func() { _, _ = io.Copy(io.Discard, out2) }()
	for i := 0; i < 3; i++ {
		next := completedID(t, base2, id)
		if next[:7] != id[:7] {
			t.Fatalf("follow-up %d after kill -9 served as %s, want the owner of %s", i, next, id)
		}
	}
	if owner.RequestCount() != 3 {
		t.Fatalf("owner received %d of 3 follow-ups", owner.RequestCount())
	}
}

// completedID runs one streaming turn and returns the completed response id.
func completedID(t *testing.T, base, prev string) string {
	t.Helper()
	body := `{"model":"gpt-fake-1","input":"hi","stream":true`
	if prev != "" {
		body += `,"previous_response_id":"` + prev + `"`
	}
	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(body+"}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	for {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("stream ended without response.completed: %v", err)
		}
		if ev.Name == "response.completed" {
			var v struct{ Response struct{ ID string } }
			_ = json.Unmarshal(ev.Data, &v)
			return v.Response.ID
		}
		if ev.Name == "response.failed" {
			t.Fatalf("turn failed: %s", ev.Data)
		}
	}
}

func TestStreamingInputThroughTheBinary(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	_, out, _ := startProcess(t, "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--upstream", up.URL, "--log-level", "error")
	base := waitListening(t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()

	post := func(path, body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-x")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Mode B: REST sessions.
	code, body := post("/v1/streaming_input/sessions", `{"endpoint":"/v1/responses","template":{"model":"gpt-fake-1","input":"Say: "}}`, nil)
	var sess struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal([]byte(body), &sess)
	if code != 200 || sess.SessionID == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	prefix := "/v1/streaming_input/sessions/" + sess.SessionID
	if code, body := post(prefix+"/chunks", `{"sequence_id":0,"payload":"hello"}`, nil); code != 202 {
		t.Fatalf("chunk: %d %s", code, body)
	}
	if code, body := post(prefix+"/finish", `{}`, nil); code != 200 {
		t.Fatalf("finish: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, base+prefix+"/result", nil)
	req.Header.Set("Authorization", "Bearer sk-x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	result, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(result), "Hello from A") {
		t.Fatalf("result: %s", result)
	}
	if got := string(up.Requests()[0].Body); !strings.Contains(got, "Say: hello") {
		t.Fatalf("upstream saw %s", got)
	}
	// Mode A: one NDJSON request.
	code, body = post("/v1/responses", "{\"template\":{\"model\":\"gpt-fake-1\",\"input\":\"Say: \"}}\n{\"payload\":\"bye\"}\n",
		map[string]string{"X-Streaming-Input": "true", "Content-Type": "application/x-ndjson"})
	if code != 200 || !strings.Contains(body, "Hello from A") {
		t.Fatalf("mode A: %d %s", code, body)
	}
	if got := string(up.Requests()[1].Body); !strings.Contains(got, "Say: bye") {
		t.Fatalf("mode A upstream saw %s", got)
	}
}

func TestStoreThatCannotOpenIsAStartupError(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A file where the store's directory should be.
	if err := os.WriteFile(filepath.Join(dataDir, "store"), []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--upstream", up.URL}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "continuity store") || !strings.Contains(stderr.String(), dataDir) {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "context canceled") { // stopping the probes is not an upstream failure
		t.Fatalf("misleading probe failure after the failed start:\n%s", stderr.String())
	}
}
