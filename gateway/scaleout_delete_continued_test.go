package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// heldStream is a fake upstream whose streams wait before their text
// deltas: the n-th delta (from 1) waits for hold[n] to be closed, or for
// the gateway to give the request up (gaveUp is closed then).
type heldStream struct {
	*upstreamtest.Server
	hold   map[int]chan struct{}
	gaveUp chan struct{}
}

func newHeldStream(t *testing.T, name string, holds ...int) *heldStream {
	t.Helper()
	h := &heldStream{Server: upstreamtest.NewHandler(upstreamtest.Options{Name: name}), hold: map[int]chan struct{}{},
		gaveUp: make(chan struct{})}
	for _, n := range holds {
		h.hold[n] = make(chan struct{})
	}
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			stop := context.AfterFunc(r.Context(), func() { once.Do(func() { close(h.gaveUp) }) })
			defer stop()
			w = &heldWriter{ResponseWriter: w, ctx: r.Context(), hold: h.hold}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		for _, c := range h.hold {
			select {
			case <-c:
			default:
				close(c)
			}
		}
		srv.Close()
		h.Close()
	})
	h.URL = srv.URL + "/v1"
	return h
}

type heldWriter struct {
	http.ResponseWriter
	ctx    context.Context
	hold   map[int]chan struct{}
	deltas int
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"response.output_text.delta"`)) {
		w.deltas++
		if c := w.hold[w.deltas]; c != nil {
			select {
			case <-c:
			case <-w.ctx.Done():
				return 0, w.ctx.Err()
			}
		}
	}
	return w.ResponseWriter.Write(p)
}

func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestScaleOutDeleteOnAnotherReplicaStopsAContinuation: DELETE through the
// replica that does not run a stream cancels it where it runs also while
// that replica writes nothing to the store: here a continuation that
// restarts the answer after a cut and is still replaying what the client
// has (README "The resource API": DELETE "cancels it if it still runs on
// whichever replica runs it"). The continuation target's request is given
// up though it holds its next delta, and the client's stream ends
// response.failed (cancelled).
func TestScaleOutDeleteOnAnotherReplicaStopsAContinuation(t *testing.T) {
	rd := redistest.Start(t)
	p := upstreamtest.NewServer(upstreamtest.Options{Name: "P"})
	t.Cleanup(p.Close)
	// B restarts the answer (no prefill): its first three deltas repeat
	// what the client has, so nothing reaches the client (or the log)
	// while they come; its second waits until the gateway gives the
	// request up.
	b := newHeldStream(t, "B", 2)
	replica := func() *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: rd.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := gateway.Options{LifecycleHold: -1, IdleTimeout: 20 * time.Second, Routes: []gateway.Route{{Models: []string{"m"},
			Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}}, Continuation: gateway.ContinuationAuto}}}
		o.Store, o.Resume.Store = rs, rs
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b.Server}, opts: o,
			prefill: map[string]bool{"P": false, "B": false}})
	}
	r1, r2 := replica(), replica()
	p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	b.Enqueue(upstreamtest.Answer(fullAnswer, 9))

	src := openStream(t, context.Background(), r1, `{"model":"m","input":"hi","stream":true}`)
	var evs [][]byte
	var text string
	deltas := 0
	for deltas < 3 { // P's three
		ev, err := readEvents(src, 1)
		if err != nil {
			t.Fatalf("%v: %s\n%s", err, summary(evs), r1.logs.String())
		}
		evs = append(evs, ev[0])
		if gjson.GetBytes(ev[0], "type").Str == "response.output_text.delta" {
			deltas++
			text += gjson.GetBytes(ev[0], "delta").Str
		}
	}
	id := gjson.GetBytes(evs[0], "response.id").Str
	eventually(t, "the record in the store and B asked", func() bool {
		status, body := r2.callBody(http.MethodGet, "/v1/responses/"+id, "")
		return status == http.StatusOK && bytes.Contains(body, []byte(text)) && b.RequestCount() == 1
	})
	// Past the flush that the continuation's start scheduled (the record
	// rewritten as the attempt begins, within 100ms): from here on the
	// running replica writes nothing until B sends new text.
	time.Sleep(500 * time.Millisecond)
	status, body := r2.callBody(http.MethodDelete, "/v1/responses/"+id, "")
	if status != http.StatusOK || gjson.GetBytes(body, "deleted").Type != gjson.True {
		t.Fatalf("DELETE on the other replica: %d %s", status, body)
	}

	select {
	case <-b.gaveUp:
	case <-time.After(15 * time.Second):
		t.Fatalf("the continuation target's request still runs after the DELETE\n%s", r1.logs.String())
	}
	rest, err := readEvents(src, -1)
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, rest...)
	end := gjson.ParseBytes(evs[len(evs)-1])
	if end.Get("type").Str != "response.failed" || end.Get("response.status").Str != "cancelled" {
		t.Fatalf("the client's stream ended with %s %s, want it cancelled: %s", end.Get("type").Str, end.Get("response.status").Str, summary(evs))
	}
}
