package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// postSession starts a streaming request of session s1 and returns its
// answer once its headers are in.
func postSession(t *testing.T, h *harness) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"gpt-fake-1","input":"hi","stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Session_id", "s1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sessionQueue makes A (over a WebSocket) busy with a request of session
// s1 for hold, and starts a second one of s1, which waits for the
// session's socket; it returns the second one's answer once its headers
// are in, and waits for the first to end.
func sessionQueue(t *testing.T, h *harness, hold time.Duration) (second <-chan *http.Response, firstDone func()) {
	t.Helper()
	h.ups["A"].Enqueue(upstreamtest.Script{Latency: hold})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp := postSession(t, h)
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *http.Response, 1)
	go func() { ch <- postSession(t, h) }()
	return ch, wg.Wait
}

// A request queued behind another on its session's upstream WebSocket has
// started nothing: when the drain begins it is refused at once with the
// drain's 503, as a status (nothing was committed), and never sent
// upstream (README "Running it"). Before, it waited for the socket and was
// then started upstream during the drain.
func TestDrainRefusesARequestWaitingForItsSessionSocket(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"},
		opts: gateway.Options{DrainGrace: time.Hour, KeepAlive: time.Hour}})
	second, firstDone := sessionQueue(t, h, 2*time.Second)
	time.Sleep(200 * time.Millisecond) // lets the second request reach its wait (not an assertion)
	go func() { _ = h.gw.Shutdown(context.Background()) }()
	resp := <-second
	body, _ := io.ReadAll(resp.Body)
	var got struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(body, &got)
	if resp.StatusCode != http.StatusServiceUnavailable || got.Error.Code != "upstream_unavailable" || !strings.Contains(got.Error.Message, "shutting down") {
		t.Fatalf("queued request during the drain: HTTP %d %s", resp.StatusCode, body)
	}
	firstDone()
	if n := h.ups["A"].RequestCount(); n != 1 {
		t.Fatalf("%d upstream requests, want only the one in flight when the drain began", n)
	}
}

// A request waiting for its session's upstream WebSocket gets its headers
// and a `: keepalive` comment once the wait passes timeouts.keepalive,
// while the request ahead still runs, then its own answer (README
// "Upstream WebSockets"). Before, it got no byte until the request ahead
// ended.
func TestSessionSocketWaitIsKeptAlive(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"},
		opts: gateway.Options{KeepAlive: 20 * time.Millisecond}})
	second, firstDone := sessionQueue(t, h, 2*time.Second)
	resp := <-second
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("first line %q (%v), want a keepalive comment", line, err)
	}
	if n := h.ups["A"].RequestCount(); n != 1 {
		t.Fatalf("%d upstream requests when the waiting request got its keepalive, want the one ahead only", n)
	}
	rest, _ := io.ReadAll(r)
	if strings.Count(string(rest), "event: response.completed") != 1 || strings.Contains(string(rest), "response.failed") {
		t.Fatalf("the waiting request's stream:\n%s", rest)
	}
	firstDone()
}

// A transport: websocket upstream that answers the upgrade 426 (no
// Responses WebSocket mode) is not asked again at once, and only its
// WebSocket transport cools down, for the reason it gave: its
// non-streaming requests, sent as HTTP POST, still work meanwhile. Before,
// the upgrade was retried and the whole upstream cooled down as a
// "connect failure", failing its JSON requests with 503.
func TestWebSocketModeRefusalCoolsOnlyTheWebSocketTransport(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A", DisableWebSocket: true}},
		transport: map[string]string{"A": "websocket"}})
	for i := range 2 {
		_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
		last := assertOneTerminal(t, evs)
		if msg := string(last.data); last.typ != "response.failed" || !strings.Contains(msg, "refused the WebSocket upgrade with HTTP 426") ||
			strings.Contains(msg, "connect failure") || !strings.Contains(msg, "please try again in") {
			t.Fatalf("stream %d: %s %s", i, last.typ, last.data)
		}
		if n := h.ups["A"].WebSocketRefused(); n != 1 {
			t.Fatalf("stream %d: %d upgrades refused, want the first one only", i, n)
		}
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("non-streaming request after the refusal: HTTP %d %s", resp.StatusCode, body)
		}
	}
}
