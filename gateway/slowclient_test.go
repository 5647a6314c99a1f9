package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestSlowClientIsNotTheUpstreamsSilence: timeouts.idle bounds the
// upstream's silence, so time the gateway spends blocked writing to a client
// that pauses reading does not count, even when it is longer than the idle
// timeout (the client's own bound is timeouts.client_write).
func TestSlowClientIsNotTheUpstreamsSilence(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: 300 * time.Millisecond,
		ClientWriteTimeout: 20 * time.Second, MaxEventBytes: 16 << 20}})
	// Tens of MB of events, far more than the socket buffers hold, sent at
	// once: the gateway blocks writing while the client pauses.
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_big", "gpt-fake-1", strings.Repeat("x", 4<<20), 64)})
	resp := h.post("/v1/responses", respBody)
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 64<<20)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // five idle timeouts without reading
	var last sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		last = ev.Clone()
	}
	if last.Name != "response.completed" {
		t.Fatalf("the stream ended with %s %s, want response.completed", last.Name, gjson.GetBytes(last.Data, "response.error"))
	}
}
