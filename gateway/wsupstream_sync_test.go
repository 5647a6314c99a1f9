package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

const wsSyncBody = `{"model":"gpt-fake-1","input":"hi","stream":true}`

// sessionStream posts a streaming Responses request in the session scope
// session ("": the client key's scope) and returns the events the client
// got.
func (h *harness) sessionStream(ctx context.Context, session string) []eventLike {
	h.t.Helper()
	header := map[string]string{"Authorization": "Bearer sk-client-secret"}
	if session != "" {
		header["Session_id"] = session
	}
	return h.streamWithHeaders(ctx, header)
}

// streamWithHeaders posts wsSyncBody with the given headers (without
// Authorization, an anonymous client) and returns the events the client
// got; a failure once ctx ended is no error.
func (h *harness) streamWithHeaders(ctx context.Context, header map[string]string) []eventLike {
	h.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/responses", strings.NewReader(wsSyncBody))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			h.t.Errorf("POST /v1/responses: %v", err)
		}
		return nil
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 64<<20)
	var evs []eventLike
	for {
		ev, err := r.Next()
		if err != nil {
			if err != io.EOF && ctx.Err() == nil {
				h.t.Errorf("client read: %v (after %d events)", err, len(evs))
			}
			return evs
		}
		evs = append(evs, eventLike{typ: eventType(ev), code: errorCode(ev), data: append([]byte(nil), ev.Data...)})
	}
}

// assertOwnAnswer checks that a stream is one whole answer of its own: it
// opens with response.created, ends with response.completed of the same
// response as its only terminal event, every event naming a response names
// that one, and nothing of another response (stale) is in it.
func assertOwnAnswer(t testing.TB, evs []eventLike, stale string) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	if evs[0].typ != "response.created" {
		t.Fatalf("the stream opens with %s, not response.created: %s", evs[0].typ, evs[0].data)
	}
	id := gjson.GetBytes(evs[0].data, "response.id").Str
	for _, ev := range evs {
		if strings.Contains(string(ev.data), stale) {
			t.Fatalf("another response's event reached the client: %s", ev.data)
		}
		if got := gjson.GetBytes(ev.data, "response.id"); got.Exists() && got.Str != id {
			t.Fatalf("%s names response %s in the stream of %s", ev.typ, got.Str, id)
		}
	}
}

// attemptsOf is the upstream attempt outcomes the metrics count for A.
func attemptsOf(h *harness, outcome string) bool {
	return strings.Contains(h.metrics(), `sluice_upstream_attempts_total{outcome="`+outcome+`",upstream="A"}`)
}

// Frames an upstream sends after what ended a response never become the
// next request's answer: the socket that carried them is closed, and the
// next request gets its own answer (on a new socket), whether they arrived
// while the socket waited for the next request or as that request's first
// frames. Before, every later request of the scope got the answer to the
// one before it.
func TestWebSocketUpstreamFramesAfterTheResponseAreNotTheNextAnswer(t *testing.T) {
	const stale = "STALE-FRAME"
	leftovers := []upstreamtest.Frame{
		upstreamtest.SSEEvent([]byte(`{"type":"response.output_text.delta","item_id":"msg_first","output_index":0,"content_index":0,"delta":"` + stale + `","sequence_number":9}`)),
		upstreamtest.SSEEvent([]byte(`{"type":"error","error":{"type":"server_error","code":"server_error","message":"` + stale + ` error"}}`)),
	}
	afterCompleted := append(upstreamtest.ResponsesStream("resp_first", "gpt-fake-1", "first answer", 2), leftovers...)

	// A bare error event after content ends the client's stream, but the
	// upstream goes on with the response: its rest must not be the next
	// request's answer either.
	evs := upstreamtest.ResponsesEvents("resp_first", "gpt-fake-1", "first answer "+stale, 3)
	var afterError []upstreamtest.Frame
	for i, ev := range evs {
		afterError = append(afterError, upstreamtest.SSEEvent(ev))
		if i == 4 { // the first text delta
			afterError = append(afterError, upstreamtest.SSEEvent([]byte(`{"type":"error","error":{"type":"server_error","code":"server_error","message":"mid-response error"}}`)))
		}
	}

	for _, tc := range []struct {
		name   string
		frames []upstreamtest.Frame
	}{
		{"frames after response.completed", afterCompleted},
		{"the rest of a response after an error event", afterError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
			h.ups["A"].Enqueue(upstreamtest.Script{Frames: tc.frames})
			assertOneTerminal(t, h.sessionStream(context.Background(), ""))
			for range 3 {
				evs := h.sessionStream(context.Background(), "")
				assertOwnAnswer(t, evs, stale)
				if gjson.GetBytes(evs[0].data, "response.id").Str == "resp_first" {
					t.Fatal("a later request got the first request's response")
				}
			}
		})
	}

	// The next request may already wait for the socket when the leftovers
	// arrive, and take it before they are seen: then they are its first
	// frames, and the request goes to a new socket instead of failing.
	t.Run("a request waiting for the socket", func(t *testing.T) {
		// A session's requests share its socket (a request of no session
		// would take a free socket of its own and not wait).
		h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: afterCompleted, Latency: 100 * time.Millisecond})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.sessionStream(context.Background(), "s1")
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
			t.Fatal(err)
		}
		evs := h.sessionStream(context.Background(), "s1")
		wg.Wait()
		assertOwnAnswer(t, evs, stale)
		assertOwnAnswer(t, h.sessionStream(context.Background(), "s1"), stale)
	})
}

// An event naming another response than the one the stream is about is
// never relayed: the socket is out of step with its upstream and is closed,
// the stream ends with its one terminal event, and the next request gets a
// new socket.
func TestWebSocketUpstreamEventOfAnotherResponseClosesTheSocket(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
	evs := upstreamtest.ResponsesEvents("resp_mine", "gpt-fake-1", "my answer", 2)
	other := upstreamtest.ResponsesEvents("resp_other", "gpt-fake-1", "my answer", 2)
	evs[len(evs)-1] = other[len(other)-1] // response.completed of another response
	var frames []upstreamtest.Frame
	for _, ev := range evs {
		frames = append(frames, upstreamtest.SSEEvent(ev))
	}
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
	got := h.sessionStream(context.Background(), "")
	if last := assertOneTerminal(t, got); last.typ != "response.failed" {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	for _, ev := range got {
		if strings.Contains(string(ev.data), "resp_other") {
			t.Fatalf("an event of another response reached the client: %s", ev.data)
		}
	}
	connects := h.ups["A"].WebSocketConnects()
	assertOwnAnswer(t, h.sessionStream(context.Background(), ""), "resp_other")
	if h.ups["A"].WebSocketConnects() != connects+1 {
		t.Fatal("the socket that carried another response's event was reused")
	}
}

// A socket the upstream closed while it waited for the next request (an
// idle timeout of its own, a restart) is not the next request's failure:
// the request gets a new socket to the same upstream, and nothing is
// charged to the upstream. Before, it failed before its first event and,
// with no other upstream, the client got upstream_unavailable.
func TestWebSocketUpstreamClosedWhileIdleIsNotReused(t *testing.T) {
	closing := upstreamtest.Script{End: upstreamtest.EndCut} // the canned answer, then the connection closes
	t.Run("between requests", func(t *testing.T) {
		h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
		h.ups["A"].Enqueue(closing)
		assertOwnAnswer(t, h.sessionStream(context.Background(), ""), "resp_none")
		for range 2 {
			assertOwnAnswer(t, h.sessionStream(context.Background(), ""), "resp_none")
		}
		if n := h.ups["A"].WebSocketConnects(); n != 2 {
			t.Fatalf("%d upstream sockets, want the closed one and its replacement", n)
		}
		for _, outcome := range []string{"transport_error", "cut_before_first_event", "replayed"} {
			if attemptsOf(h, outcome) {
				t.Fatalf("the closed socket was charged to the upstream as %s:\n%s", outcome, h.metrics())
			}
		}
	})
	// A request that takes the socket before the close is seen finds it
	// out when it sends or reads: it is sent again, once, on a new socket.
	t.Run("a request waiting for the socket", func(t *testing.T) {
		h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
		closing := closing
		closing.Latency = 100 * time.Millisecond
		h.ups["A"].Enqueue(closing)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.sessionStream(context.Background(), "")
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
			t.Fatal(err)
		}
		evs := h.sessionStream(context.Background(), "")
		wg.Wait()
		assertOwnAnswer(t, evs, "resp_none")
		if attemptsOf(h, "transport_error") || attemptsOf(h, "cut_before_first_event") {
			t.Fatalf("the closed socket was charged to the upstream:\n%s", h.metrics())
		}
	})
}

// Reaching limits.upstream_sockets fails the attempt that needed one more
// socket with a 503 upstream_unavailable naming the limit, and charges
// nothing to the upstream: the sessions whose sockets exist keep being
// served. Before, the upstream was cooled down as if it had refused a
// connection, and every request to it failed for 5s.
func TestUpstreamSocketsCapDoesNotChargeTheUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}, opts: gateway.Options{UpstreamSockets: 1}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(2)) // holds the only socket until its client leaves
	holder, leave := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.sessionStream(holder, "s1")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}

	evs := h.sessionStream(context.Background(), "s2")
	last := assertOneTerminal(t, evs)
	if attemptsOf(h, "transport_error") {
		t.Fatalf("the cap was charged to the upstream as a transport error:\n%s", h.metrics())
	}
	msg := gjson.GetBytes(last.data, "response.error.message").Str
	if last.code != "upstream_unavailable" || !strings.Contains(msg, "limits.upstream_sockets") {
		t.Fatalf("with every socket busy: %s %s, want upstream_unavailable naming limits.upstream_sockets", last.code, last.data)
	}
	c := h.dialWS(map[string]string{"Session_id": "s3"})
	frames := c.turn(createFrame(""))
	if f := frames[0]; f.typ != "error" || gjson.GetBytes(f.data, "status").Int() != http.StatusServiceUnavailable ||
		gjson.GetBytes(f.data, "error.code").Str != "upstream_unavailable" {
		t.Fatalf("a WebSocket client with every socket busy: %s", f.data)
	}

	leave()
	wg.Wait()
	// s1's socket is free now: its session, and another one, are served.
	assertOwnAnswer(t, h.sessionStream(context.Background(), "s1"), "resp_none")
	assertOwnAnswer(t, h.sessionStream(context.Background(), "s2"), "resp_none")
	if attemptsOf(h, "transport_error") {
		t.Fatalf("the cap was charged to the upstream as a transport error:\n%s", h.metrics())
	}
}
