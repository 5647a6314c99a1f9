package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestUpstreamConnectionReusedAfterAStream: a stream the upstream ended
// itself leaves its connection in the pool. Go's transport reuses a
// connection only when the body was read to its end, and the gateway stops
// reading at the terminal event, so it reads the rest (the last chunk)
// before closing: without that, every stream dialled the upstream anew (a
// TLS handshake per request to a real one).
func TestUpstreamConnectionReusedAfterAStream(t *testing.T) {
	for _, tc := range []struct {
		name, protocol, path, body string
	}{
		{"responses", "responses", "/v1/responses", respBody},
		{"chat upstream", "chat", "/v1/responses", respBody},
		{"chat completions", "responses", "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": tc.protocol}})
			stream := func() {
				t.Helper()
				resp, evs := h.streamEvents(tc.path, tc.body)
				if resp.StatusCode != http.StatusOK || len(evs) < 3 {
					t.Fatalf("status %d, %d events", resp.StatusCode, len(evs))
				}
			}
			stream()
			after1 := h.ups["A"].Connections()
			for range 3 {
				stream()
			}
			if got := h.ups["A"].Connections(); got != after1 {
				t.Fatalf("the upstream accepted %d connections for 4 sequential streams, %d after the first: a stream's connection was not reused", got, after1)
			}
		})
	}
}

// TestStreamEndsWhenTheUpstreamHoldsItsBodyOpen: an upstream that sends
// response.completed and then keeps the response open does not hold the
// client: reading the rest of its body is bounded, the client gets the
// terminal event at once and its response ends soon after.
func TestStreamEndsWhenTheUpstreamHoldsItsBodyOpen(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: time.Minute}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(1000)) // every canned frame, completed included, then hold
	start := time.Now()
	resp, err := http.Post(h.url+"/v1/responses", "application/json", strings.NewReader(respBody))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("reading the stream: %v after %v", err, took)
	}
	if !strings.Contains(string(body), "event: response.completed") {
		t.Fatalf("no response.completed in %q", body)
	}
	if took > 5*time.Second {
		t.Fatalf("the client's response ended after %v: the held upstream body kept it open", took)
	}
}
