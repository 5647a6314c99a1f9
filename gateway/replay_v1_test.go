package gateway_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// TestVersion1ReplayAfterHeldResponseCreated: an upstream that opens its
// stream with response.created (an id) and response.in_progress, then fails
// before content, is replayed invisibly by a version-1 policy that follows
// the version-1 rule "never once a response.created or an id reached the
// client" (the committed example 10-vendor-overloaded.wasm, which asks
// sdk.DefaultReplay): the gateway holds those events back, so the replay
// input says response_created_seen and response_id_assigned false (ABI.md
// §3.2), and the client gets the second upstream's answer alone. The code
// is one the built-in table does not replay, so only the policy can.
func TestVersion1ReplayAfterHeldResponseCreated(t *testing.T) {
	rt := moduleFileRuntime(t, "10-vendor-overloaded.wasm", filepath.Join("..", "examples", "policies", "10-vendor-overloaded.wasm"))
	if st := policyStatus(rt, "10-vendor-overloaded"); st.State != plugins.StateActive || st.ABIVersion != 1 {
		t.Fatalf("example policy: %+v; want an active version-1 module", st)
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	resp, raw := replayAfterHeldCreated(t, h)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), "vendor_overloaded") || strings.Contains(string(raw), "resp_held") ||
		!strings.Contains(string(raw), "response.completed") {
		t.Fatalf("client got %d:\n%s\nwant B's answer alone", resp.StatusCode, raw)
	}
}

// replayAfterHeldCreated streams a request whose first upstream, A, opens
// with response.created and response.in_progress and then fails with
// vendor_overloaded, before content, and checks that it was replayed on B;
// it returns the client's answer.
func replayAfterHeldCreated(t *testing.T, h *harness) (*http.Response, []byte) {
	t.Helper()
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
	return resp, raw
}
