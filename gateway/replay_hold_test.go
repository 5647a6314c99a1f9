package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestSlowReplayDecisionKeepsTheHeldEvents: an upstream opens its stream
// with response.created and response.in_progress, then fails before
// content; the replay policy takes longer to answer than the lifecycle
// hold. The held events must not go out while it decides: the client gets
// the second upstream's answer alone, one response.created, not the first
// attempt's and then the second's.
func TestSlowReplayDecisionKeepsTheHeldEvents(t *testing.T) {
	const hold = 20 * time.Millisecond
	p := &overridePolicy{override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
		time.Sleep(10 * hold) // a policy call on a loaded machine
		return hostabi.ReplayOtherUpstream, true
	}}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: p, LifecycleHold: hold},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	resp, raw := replayAfterHeldCreated(t, h)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), "resp_held") || strings.Count(string(raw), "event: response.created") != 1 ||
		!strings.Contains(string(raw), "response.completed") {
		t.Fatalf("client got %d:\n%s\nwant B's answer alone", resp.StatusCode, raw)
	}
}
