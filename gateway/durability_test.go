package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// gatedStore is a store whose PutAnchor does not start writing until the
// test releases it: what the gateway does while an anchor is not yet durable
// becomes observable, every time.
type gatedStore struct {
	store.Store
	entered chan store.Anchor // one per PutAnchor call, when it starts waiting
	release chan struct{}     // closed by the test
	once    sync.Once
}

func newGatedStore(st store.Store) *gatedStore {
	return &gatedStore{Store: st, entered: make(chan store.Anchor, 16), release: make(chan struct{})}
}

func (g *gatedStore) PutAnchor(ctx context.Context, a store.Anchor) error {
	g.entered <- a
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Store.PutAnchor(ctx, a)
}

func (g *gatedStore) open() { g.once.Do(func() { close(g.release) }) }

// awaitWrite waits until the gateway has started an anchor write.
func (g *gatedStore) awaitWrite(t *testing.T) store.Anchor {
	t.Helper()
	select {
	case a := <-g.entered:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("the gateway never wrote an anchor")
	}
	return store.Anchor{}
}

// blockedFor is how long a test watches for something that must not happen
// while the anchor write is held. The gateway gives up on a write after 5s.
const blockedFor = 600 * time.Millisecond

// frame is one event the client received (or the end of its stream).
type frame struct {
	typ  string
	data []byte
	err  error
}

// readFrames turns an SSE body into a channel of events, closed at the end.
func readFrames(body io.Reader) <-chan frame {
	ch := make(chan frame, 64)
	go func() {
		defer close(ch)
		r := sse.NewReader(body, 1<<20)
		for {
			ev, err := r.Next()
			if err != nil {
				if err != io.EOF {
					ch <- frame{err: err}
				}
				return
			}
			ch <- frame{typ: gjson.GetBytes(ev.Data, "type").Str, data: append([]byte(nil), ev.Data...)}
		}
	}()
	return ch
}

// until receives frames until one of type typ; it fails on a terminal event
// of another type, the end of the stream, or the deadline.
func until(t *testing.T, ch <-chan frame, typ string, d time.Duration) frame {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before %s", typ)
			}
			if f.err != nil {
				t.Fatalf("reading the stream: %v", f.err)
			}
			if f.typ == typ {
				return f
			}
			if isTerminal(f.typ) {
				t.Fatalf("got %s while waiting for %s: %s", f.typ, typ, f.data)
			}
		case <-deadline:
			t.Fatalf("no %s within %v", typ, d)
		}
	}
}

// noTerminalFor fails if a terminal event arrives, or the stream ends, within
// d. Other events may arrive (or stay buffered in the gateway).
func noTerminalFor(t *testing.T, ch <-chan frame, d time.Duration, why string) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the stream ended", why)
			}
			if f.err != nil || isTerminal(f.typ) {
				t.Fatalf("%s: the client got %s: %s %v", why, f.typ, f.data, f.err)
			}
		case <-deadline:
			return
		}
	}
}

// checkDurable checks that the anchor of id is in the underlying store.
func checkDurable(t *testing.T, st store.Store, id, owner string) {
	t.Helper()
	a, err := st.GetAnchor(context.Background(), id)
	if err != nil || a.Upstream != owner {
		t.Fatalf("the client saw %s complete but its anchor is not durable: %+v %v", id, a, err)
	}
}

// TestAnchorDurableBeforeCompletion holds the anchor write of a response and
// checks, on every surface that records anchors, that the client does not see
// the response complete until the write has finished.
func TestAnchorDurableBeforeCompletion(t *testing.T) {
	setup := func(t *testing.T) (*harness, *gatedStore, store.Store) {
		st := openStore(t, t.TempDir())
		g := newGatedStore(st)
		t.Cleanup(g.open) // never leave a write hanging
		return newHarness(t, harnessConfig{opts: gateway.Options{Store: g}}), g, st
	}

	t.Run("responses stream", func(t *testing.T) {
		h, g, st := setup(t)
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		defer resp.Body.Close()
		frames := readFrames(resp.Body)
		a := g.awaitWrite(t)
		noTerminalFor(t, frames, blockedFor, "the anchor write is held")
		g.open()
		done := until(t, frames, "response.completed", 5*time.Second)
		id := gjson.GetBytes(done.data, "response.id").Str
		if id != a.ResponseID {
			t.Fatalf("anchor written for %q, completed %q", a.ResponseID, id)
		}
		checkDurable(t, st, id, "A")
	})

	t.Run("responses json", func(t *testing.T) {
		h, g, st := setup(t)
		got := make(chan *http.Response, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"gpt-fake-1","input":"hi"}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				resp = &http.Response{StatusCode: -1, Body: io.NopCloser(strings.NewReader(err.Error()))}
			}
			got <- resp
		}()
		a := g.awaitWrite(t)
		select {
		case resp := <-got:
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("the answer arrived while its anchor write was held: %d %s", resp.StatusCode, b)
		case <-time.After(blockedFor):
		}
		g.open()
		var resp *http.Response
		select {
		case resp = <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("no answer after the anchor write was released")
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := gjson.GetBytes(b, "id").Str
		if resp.StatusCode != 200 || id != a.ResponseID {
			t.Fatalf("%d %s (anchor for %q)", resp.StatusCode, b, a.ResponseID)
		}
		checkDurable(t, st, id, "A")
	})

	t.Run("websocket", func(t *testing.T) {
		h, g, st := setup(t)
		c := h.dialWS(nil)
		c.send(createFrame(""))
		frames := make(chan frame, 64)
		go func() {
			defer close(frames)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				_, data, err := c.conn.Read(ctx)
				cancel()
				if err != nil {
					if websocket.CloseStatus(err) == -1 && !errors.Is(err, context.Canceled) {
						frames <- frame{err: err}
					}
					return
				}
				typ := gjson.GetBytes(data, "type").Str
				frames <- frame{typ: typ, data: data}
				if isTerminal(typ) {
					return
				}
			}
		}()
		a := g.awaitWrite(t)
		noTerminalFor(t, frames, blockedFor, "the anchor write is held")
		g.open()
		done := until(t, frames, "response.completed", 5*time.Second)
		id := gjson.GetBytes(done.data, "response.id").Str
		if id != a.ResponseID {
			t.Fatalf("anchor written for %q, completed %q", a.ResponseID, id)
		}
		checkDurable(t, st, id, "A")
	})
}

// fakeClock is a settable clock shared by the gateway and the store.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAnchorPastTTLIsAMissWithoutSweep moves a shared clock past an anchor's
// TTL, with no sweep: the anchor, though still in the memory cache and in the
// store, must be a miss (normal selection, the miss counted), both for the
// gateway that wrote it and for a restarted one that reads the store.
func TestAnchorPastTTLIsAMissWithoutSweep(t *testing.T) {
	const ttl = time.Hour
	clock := &fakeClock{t: time.Now()}
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	opts := gateway.Options{Store: st, AnchorTTL: ttl, Now: clock.Now}
	// Upstreams that keep no state: a follow-up they did not create still
	// completes, so only routing decides the outcome.
	h := newHarness(t, harnessConfig{opts: opts, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	_, id := h.turn("", nil)
	own := owner(id)
	if own == "" {
		t.Fatalf("turn 1: %q", id)
	}
	// The owner cools down (in real time): while the anchor lives, a
	// follow-up fails closed rather than going elsewhere.
	h.pool.Cooldown(h.pool.Get(own), time.Hour, "test")

	clock.Advance(ttl - time.Minute)
	if a := postForRetry(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,"previous_response_id":"`+id+`"}`); a.code != "upstream_unavailable" {
		t.Fatalf("a live anchor was not honoured: %d %s", a.status, a.body)
	}

	clock.Advance(2 * time.Minute) // past the TTL; nothing swept
	evs, next := h.turn(id, nil)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" || owner(next) != other(own) {
		t.Fatalf("past its TTL the anchor still pinned the follow-up: %s %s (served by %q)", last.typ, last.data, next)
	}
	m := h.metrics()
	if !strings.Contains(m, `continuity_owner_resolution_total{outcome="miss",source="store",surface="responses_stream"} 1`) ||
		!strings.Contains(m, `continuity_owner_resolution_total{outcome="hit",source="memory",surface="responses_stream"} 1`) {
		t.Fatalf("want one memory hit (before the TTL) and one store miss (after):\n%s", grep(m, "owner_resolution"))
	}
	if !strings.Contains(m, `continuity_fail_closed_total{reason="owner_unavailable",surface="responses_stream"} 1`) {
		t.Fatalf("want exactly one fail-closed (before the TTL):\n%s", grep(m, "fail_closed"))
	}

	// A restarted gateway has nothing in memory: the store's own expiry
	// check decides.
	h2 := newHarness(t, harnessConfig{opts: opts, servers: h.ups})
	h2.pool.Cooldown(h2.pool.Get(own), time.Hour, "test")
	evs, next = h2.turn(id, nil)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" || owner(next) != other(own) {
		t.Fatalf("after a restart, the expired anchor still pinned the follow-up: %s %s", last.typ, last.data)
	}
	if m := h2.metrics(); !strings.Contains(m, `continuity_owner_resolution_total{outcome="miss",source="store",surface="responses_stream"} 1`) {
		t.Fatalf("want a store miss after the restart:\n%s", grep(m, "owner_resolution"))
	}
	var a json.RawMessage
	if code := h2.getJSON("/admin/continuity/"+id, &a); code != http.StatusNotFound {
		t.Fatalf("the admin endpoint shows an expired anchor (%d): %s", code, a)
	}
}
