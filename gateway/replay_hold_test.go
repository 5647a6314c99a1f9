package gateway_test

import (
	"io"
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

	held := upstreamtest.ResponsesStream("resp_held", "m", "", 0)[:2] // response.created, response.in_progress
	failed := upstreamtest.SSEEvent([]byte(`{"type":"error","code":"vendor_overloaded","message":"the vendor is busy","param":null,"sequence_number":2}`))
	release := h.pool.Get("B").Acquire() // A is picked first
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: append(held, failed)})
	resp := h.post("/v1/responses", `{"model":"m","input":"x","stream":true}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	release()
	if h.ups["A"].RequestCount() != 1 || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("A got %d requests, B %d; want the failure on A replayed on B", h.ups["A"].RequestCount(), h.ups["B"].RequestCount())
	}
	if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), "resp_held") || strings.Count(string(raw), "event: response.created") != 1 ||
		!strings.Contains(string(raw), "response.completed") {
		t.Fatalf("client got %d:\n%s\nwant B's answer alone", resp.StatusCode, raw)
	}
}
