package streaminput_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// The restart tests run a gateway in a child process (this test binary,
// re-executed into TestRestartChild), let it acknowledge chunks, SIGKILL it,
// and start a new gateway over the same store directory.
const (
	childDirEnv  = "STREAMINPUT_CHILD_DIR"
	childModeEnv = "STREAMINPUT_CHILD_MODE"
)

// TestRestartChild is the child's side; it does nothing in a normal run.
func TestRestartChild(t *testing.T) {
	dir := os.Getenv(childDirEnv)
	if dir == "" {
		t.Skip("runs only as the child of a restart test")
	}
	cfg := envConfig{dir: dir}
	if os.Getenv(childModeEnv) == "finished" {
		// A dispatch that never reaches an upstream: the session is finished
		// but its request has not started anywhere when the process dies.
		cfg.dispatch = http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	}
	e := newEnv(t, cfg)
	if os.Getenv(childModeEnv) == "running" {
		runningChild(e)
		return
	}
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	fmt.Printf("SESSION %s\n", id)
	seqs := []int{0, 1, 2, 3, 4, 6} // 6 arrives early: buffered, acknowledged, durable
	if os.Getenv(childModeEnv) == "finished" {
		seqs = []int{0, 1, 2}
	}
	for _, seq := range seqs {
		e.mustChunk(id, textChunk(seq, fmt.Sprintf("c%d ", seq), false))
		fmt.Printf("ACK %d\n", seq)
	}
	if os.Getenv(childModeEnv) == "finished" {
		if code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", ""); code != http.StatusOK {
			t.Fatalf("finish: %d %s", code, b)
		}
		fmt.Println("FINISHED")
	}
	fmt.Println("READY")
	time.Sleep(time.Minute) // killed long before
}

// runChild starts the child, collects its acknowledgements until READY and
// kills it with SIGKILL.
func runChild(t *testing.T, dir, mode string) (id string, acked []int, finished bool) {
	t.Helper()
	for _, line := range childLines(t, dir, mode) {
		switch {
		case strings.HasPrefix(line, "SESSION "):
			id = strings.TrimPrefix(line, "SESSION ")
		case strings.HasPrefix(line, "ACK "):
			var seq int
			fmt.Sscan(strings.TrimPrefix(line, "ACK "), &seq)
			acked = append(acked, seq)
		case line == "FINISHED":
			finished = true
		}
	}
	return id, acked, finished
}

// childLines starts the child, collects what it prints until READY and
// kills it with SIGKILL.
func childLines(t *testing.T, dir, mode string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childModeEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	var got []string
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the child exited before READY")
			}
			if line == "READY" {
				break loop
			}
			got = append(got, line)
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("the child did not get ready")
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown code runs
		t.Fatal(err)
	}
	_ = cmd.Wait()
	go func() {
		for range lines {
		}
	}()
	return got
}

func TestRestartAfterKillResumesOpenSession(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	id, acked, _ := runChild(t, dir, "open")
	if id == "" || !slices.Equal(acked, []int{0, 1, 2, 3, 4, 6}) {
		t.Fatalf("child: session %q acks %v", id, acked)
	}

	e := newEnv(t, envConfig{dir: dir})
	code, st := e.status(id)
	if code != http.StatusOK || st.State != "open" || st.NextSequenceID != 5 || !slices.Equal(st.BufferedSequenceIDs, []uint64{6}) || st.ReceivedChunks != 6 || st.Started {
		t.Fatalf("restored status: %d %+v", code, st)
	}
	// Acknowledged chunks survived: a retransmission is a duplicate, a
	// changed one a conflict.
	if a := e.mustChunk(id, textChunk(3, "c3 ", false)); !a.Duplicate {
		t.Fatalf("retransmitted chunk 3: %+v", a)
	}
	if code, _, _ := e.chunk(id, textChunk(6, "other", false)); code != http.StatusConflict {
		t.Fatalf("conflicting chunk 6: %d", code)
	}
	// The session goes on where it left off.
	if a := e.mustChunk(id, textChunk(5, "c5 ", false)); a.NextSequenceID != 7 {
		t.Fatalf("chunk 5: %+v", a)
	}
	if a := e.mustChunk(id, textChunk(7, "c7 ", true)); !a.Started {
		t.Fatalf("chunk 7: %+v", a)
	}
	req := e.upstreamRequest(0)
	if got, want := inputOf(t, req.Body), "Q: c0 c1 c2 c3 c4 c5 c6 c7 "; got != want {
		t.Fatalf("upstream input %q, want %q", got, want)
	}
	// Credentials are never stored; the first request after the restart
	// brought them back.
	if req.Header.Get("Authorization") != clientKey {
		t.Fatalf("upstream Authorization %q", req.Header.Get("Authorization"))
	}
	_, evs, _ := e.result(id, "")
	if eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("result: %v", eventTypes(evs))
	}
}

func TestRestartAfterKillStartsFinishedSession(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	id, acked, finished := runChild(t, dir, "finished")
	if id == "" || len(acked) != 3 || !finished {
		t.Fatalf("child: %q %v %v", id, acked, finished)
	}
	// Nobody touches the session: the new gateway sends it by itself.
	e := newEnv(t, envConfig{dir: dir})
	req := e.upstreamRequest(0)
	if got := inputOf(t, req.Body); got != "Q: c0 c1 c2 " {
		t.Fatalf("upstream input %q", got)
	}
	if req.Header.Get("Authorization") != "" {
		t.Fatalf("a credential was restored from disk: %q", req.Header.Get("Authorization"))
	}
	_, evs, _ := e.result(id, "")
	if eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("result: %v", eventTypes(evs))
	}
	if e.up.RequestCount() != 1 {
		t.Fatalf("%d upstream requests", e.up.RequestCount())
	}
}

// TestCloseAndReopen: a clean shutdown ends running answers with a terminal
// event and keeps the sessions; the next Manager resumes them and sends a
// cut request again.
func TestCloseAndReopen(t *testing.T) {
	dir := t.TempDir()
	e1 := newEnv(t, envConfig{dir: dir})
	open := e1.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e1.mustChunk(open, textChunk(0, "one ", false))
	e1.up.SetDefault(upstreamHangScript())
	running := e1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e1.mustChunk(running, textChunk(0, "run", false))

	req, _ := http.NewRequest(http.MethodGet, e1.url+streaminput.PathPrefix+"/"+running+"/result", nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	if ev, err := r.Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e1.mgr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ev, err := r.Next()
	if err != nil || eventType(ev) != "response.failed" || failureCode(ev) != "upstream_unavailable" {
		t.Fatalf("after Close: %s %v", ev.Data, err)
	}
	e1.stop()

	e2 := newEnv(t, envConfig{dir: dir})
	if a := e2.mustChunk(open, textChunk(1, "two", true)); !a.Started {
		t.Fatalf("resumed session: %+v", a)
	}
	bodies := []string{inputOf(t, e2.upstreamRequest(0).Body), inputOf(t, e2.upstreamRequest(1).Body)}
	slices.Sort(bodies)
	if !slices.Equal(bodies, []string{"Q: one two", "Q: run"}) {
		t.Fatalf("upstream inputs after reopen: %q", bodies)
	}
	_, evs, _ := e2.result(running, "")
	if eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("re-sent answer: %v", eventTypes(evs))
	}
}
