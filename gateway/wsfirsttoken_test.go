package gateway_test

import (
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A WebSocket upstream that takes response.create and then sends nothing is
// left at the route's first_token, as an HTTP one is: the wait for its first
// frame (which may refuse the request with a status) counts as first_token's.
func TestFirstTokenCoversAWebSocketUpstreamsFirstFrame(t *testing.T) {
	route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: 300 * time.Millisecond,
		Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts:      gateway.Options{Routes: []gateway.Route{route}, IdleTimeout: 20 * time.Second}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(0))
	_, evs := h.responsesStream(`{"model":"gpt-5","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s %q, want the next target's answer", last.typ, last.code)
	}
	if h.ups["B"].RequestCount() != 1 {
		t.Fatalf("B got %d requests, want 1", h.ups["B"].RequestCount())
	}
}
