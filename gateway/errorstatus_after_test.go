package gateway_test

import (
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestErrorStatusCodeAfterContentIsContinued: after content, an upstream
// error whose code is a 5xx status (as llama.cpp sends, in an `error:` field
// or an error chunk) or whose type is server_error is a server error as it is
// before content (TestErrorStatusCodeIsJudgedAlike): the stream is continued
// on the route's next target, on every client surface.
func TestErrorStatusCodeAfterContentIsContinued(t *testing.T) {
	tails := []struct {
		name string
		tail upstreamtest.Frame // what P sends after three deltas (Responses; Chat gets it as an error chunk)
		chat upstreamtest.Frame
	}{
		{"error field with the number 500", upstreamtest.RawFrame([]byte("error: {\"message\":\"llama boom\",\"type\":\"server_error\",\"code\":500}\n\n")),
			upstreamtest.SSEData([]byte(`{"error":{"message":"llama boom","type":"server_error","code":500}}`))},
		{"server_error type with another code", upstreamtest.SSEEvent([]byte(`{"type":"error","error":{"type":"server_error","code":"model_crashed","message":"boom"}}`)),
			upstreamtest.SSEData([]byte(`{"error":{"type":"server_error","code":"model_crashed","message":"boom"}}`))},
	}
	for _, tc := range tails {
		for _, s := range rescueSurfaces {
			t.Run(tc.name+"/"+s.name, func(t *testing.T) {
				p := upstreamtest.Answer(fullAnswer, 9)
				p.StopAfterDeltas = 3
				p.Tail = []upstreamtest.Frame{tc.tail}
				p.ChatTail = []upstreamtest.Frame{tc.chat, upstreamtest.SSEData([]byte("[DONE]"))}
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
				h.ups["P"].Enqueue(p)
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
				o := s.do(t, h)
				if o.text != fullAnswer || (o.terminal != "response.completed" && o.terminal != "done") {
					t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
				}
				if b := h.ups["B"].RequestCount(); b != 1 {
					t.Fatalf("B called %d times, want 1", b)
				}
			})
		}
	}
}
