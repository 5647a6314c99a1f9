package streaminput_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// stallGate holds the fake upstream's streamed answer after its first
// `after` writes (one SSE frame each) until the test releases it.
type stallGate struct {
	after   int
	release chan struct{}
	once    sync.Once
}

func newStallGate(t *testing.T, after int) *stallGate {
	g := &stallGate{after: after, release: make(chan struct{})}
	t.Cleanup(g.open) // registered after the env: runs before its shutdown
	return g
}

func (g *stallGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *stallGate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&gatedWriter{ResponseWriter: w, g: g, ctx: r.Context()}, r)
	})
}

type gatedWriter struct {
	http.ResponseWriter
	g      *stallGate
	ctx    context.Context
	writes int
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if w.writes == w.g.after {
		select {
		case <-w.g.release:
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	w.writes++
	return w.ResponseWriter.Write(p)
}

func (w *gatedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rawResult is a reader of GET …/result that keeps every byte, comments
// included (an sse.Reader skips them).
type rawResult struct {
	body syncBuffer
	done chan struct{}
}

func openRawResult(t *testing.T, e *env, id string) *rawResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result", nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		t.Fatalf("result on %s: %d %v", e.url, resp.StatusCode, resp.Header)
	}
	r := &rawResult{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer resp.Body.Close()
		_, _ = io.Copy(&r.body, resp.Body)
	}()
	return r
}

// whole waits for the end of the answer and returns all it got.
func (r *rawResult) whole(t *testing.T) string {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the answer did not end; so far: %q", r.body.String())
	}
	return r.body.String()
}

// sseComments counts the comment lines of an event stream.
func sseComments(body string) int {
	n := strings.Count(body, "\n:")
	if strings.HasPrefix(body, ":") {
		n++
	}
	return n
}

// keepalivesWritten is the gateway's sluice_keepalives_total, all
// surfaces together.
func keepalivesWritten(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "sluice_keepalives_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// keepaliveSurfaces are the two answers a session streams: where the
// upstream stalls (after the first text delta: on Responses after
// response.created, response.in_progress, the item, its part and the
// delta; on Chat after the role chunk and the delta), and how such an
// answer ends.
var keepaliveSurfaces = []struct {
	name, endpoint, template string
	stallAfter               int // upstream frames before the stall
	last                     string
}{
	{"responses", streaminput.EndpointResponses, respTemplate, 5, "event: response.completed\n"},
	{"chat", streaminput.EndpointChat, `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"Q: "}]}`, 2, "data: [DONE]\n\n"},
}

// runnerKeepAlive is the dispatch handler's keepalive (the gateway's
// timeouts.keepalive): many of them during the stall.
const runnerKeepAlive = 5 * time.Millisecond

// TestResultKeepalivesAreTheReadersOwn: the keepalive comments the
// gateway writes to the answer while its upstream is silent are not part
// of the answer. A live reader whose own keepalive period has not passed
// gets none of them, a late reader's replay has none, and a reader on a
// replica that follows the answer from the shared store gets keepalives
// from its own timer only. The stall is held by the fake upstream until
// the gateway has written several keepalives.
func TestResultKeepalivesAreTheReadersOwn(t *testing.T) {
	for _, surface := range keepaliveSurfaces {
		t.Run(surface.name+"/pebble", func(t *testing.T) {
			gate := newStallGate(t, surface.stallAfter)
			reg := prometheus.NewRegistry()
			e := newEnv(t, envConfig{
				opts:     streaminput.Options{KeepAlive: time.Hour}, // the reader's own: not within this test
				gateway:  func(o *gateway.Options) { o.KeepAlive, o.Registry = runnerKeepAlive, reg },
				upstream: gate.wrap,
			})
			e.up.SetDefault(upstreamtest.Answer("Hello there, world", 3))
			id := e.create(sessionBody(surface.endpoint, "on_end_only", surface.template))
			e.mustChunk(id, textChunk(0, "hi", true))
			live := openRawResult(t, e, id)
			eventually(t, 10*time.Second, "the gateway writes keepalives during the stall", func() bool { return keepalivesWritten(t, reg) >= 3 })
			gate.open()

			got := live.whole(t)
			if !strings.Contains(got, surface.last) {
				t.Fatalf("the live reader's answer is not complete: %q", got)
			}
			if n := sseComments(got); n != 0 {
				t.Fatalf("the live reader got %d comments, none from its own timer (period 1h): %q", n, got)
			}
			if late := openRawResult(t, e, id).whole(t); late != got {
				t.Fatalf("a late reader's replay:\n%q\nwant what the live reader got:\n%q", late, got)
			}
		})

		t.Run(surface.name+"/redis", func(t *testing.T) {
			gate := newStallGate(t, surface.stallAfter)
			var regs []*prometheus.Registry
			r := replicasConfig(t, 2, redistest.Start(t), envConfig{
				gateway: func(o *gateway.Options) {
					o.KeepAlive, o.Registry = runnerKeepAlive, prometheus.NewRegistry()
					regs = append(regs, o.Registry)
				},
				upstream: gate.wrap,
				replica: func(i int, o *streaminput.Options) {
					o.KeepAlive = time.Hour // the runner's readers: not within this test
					if i == 1 {
						o.KeepAlive = 20 * time.Millisecond // the follower's readers: during the stall
					}
				},
			})
			runner, follower := r[0], r[1]
			runner.up.SetDefault(upstreamtest.Answer("Hello there, world", 3))
			id := runner.create(sessionBody(surface.endpoint, "on_end_only", surface.template))
			runner.mustChunk(id, textChunk(0, "hi", true)) // the first replica runs it
			atRunner, atFollower := openRawResult(t, runner, id), openRawResult(t, follower, id)
			eventually(t, 10*time.Second, "the gateway writes keepalives during the stall", func() bool { return keepalivesWritten(t, regs[0]) >= 3 })
			eventually(t, 10*time.Second, "the follower's reader gets a keepalive of its own during the stall", func() bool {
				return sseComments(atFollower.body.String()) > 0
			})
			gate.open()

			got := atRunner.whole(t)
			if !strings.Contains(got, surface.last) {
				t.Fatalf("the runner's reader's answer is not complete: %q", got)
			}
			if n := sseComments(got); n != 0 {
				t.Fatalf("the runner's reader got %d comments, none from its own timer (period 1h): %q", n, got)
			}
			if events := strings.ReplaceAll(atFollower.whole(t), ": keepalive\n\n", ""); events != got {
				t.Fatalf("the follower's reader's events:\n%q\nwant the runner's reader's:\n%q", events, got)
			}
			for name, e := range map[string]*env{"runner": runner, "follower": follower} {
				if late := openRawResult(t, e, id).whole(t); late != got {
					t.Fatalf("a late reader's replay on the %s:\n%q\nwant what the live reader got:\n%q", name, late, got)
				}
			}
		})
	}
}
