package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestFirstTokenAfterLifecycleLogSaysSo: a target that sends only its
// lifecycle events, released to the client when the hold expired, and no
// content within first_token is continued on the next target (README
// "Routes and fallbacks", the first_token row); the operator's log says the
// stream failed after its lifecycle events, not after content the client
// never got, and sluice_upstream_attempts_total counts the attempt as
// first_token_timeout, as when the client saw nothing (README
// "Observability").
func TestFirstTokenAfterLifecycleLogSaysSo(t *testing.T) {
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
	logs := h.logs.String()
	if !strings.Contains(logs, "stream failed after its lifecycle events (no content within first_token); continuing on the next target") ||
		strings.Contains(logs, "stream failed after content") {
		t.Fatalf("log does not say what failed:\n%s", grep(logs, "stream failed"))
	}
	m := h.metrics()
	if !strings.Contains(m, `sluice_upstream_attempts_total{outcome="first_token_timeout",upstream="A"} 1`) ||
		strings.Contains(m, `outcome="after_content_`) {
		t.Fatalf("A's attempt is not counted as first_token_timeout:\n%s", grepLines(m, "sluice_upstream_attempts_total"))
	}
}
