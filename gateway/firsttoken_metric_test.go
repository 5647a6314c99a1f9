package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestFirstTokenAfterLifecycleCountsAsFirstToken: a target that sends only
// its lifecycle events (released to the client when the hold expired) and
// no content within first_token, continued on the next target, is counted
// in sluice_upstream_attempts_total as first_token_timeout, as when the
// client saw nothing (README "Observability"), not as a stall after content
// the client never got.
func TestFirstTokenAfterLifecycleCountsAsFirstToken(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts: gateway.Options{LifecycleHold: 50 * time.Millisecond, IdleTimeout: 20 * time.Second, Routes: []gateway.Route{
			{Models: []string{"fast"}, FirstToken: 300 * time.Millisecond,
				Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}},
		}},
	})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(2)) // response.created, response.in_progress, then silence
	if text := streamedText(t, h, "fast"); text != "Hello from B" {
		t.Fatalf("client got %q, want B's answer", text)
	}
	m := h.metrics()
	if !strings.Contains(m, `sluice_upstream_attempts_total{outcome="first_token_timeout",upstream="A"} 1`) ||
		strings.Contains(m, `outcome="after_content_`) {
		t.Fatalf("A's attempt is not counted as first_token_timeout:\n%s", grepLines(m, "sluice_upstream_attempts_total"))
	}
}
