package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestWebSocketFrameOfNoKindTheSocketTakes: a frame that is none the socket
// takes gets a 400 error frame that says which it was (not an object,
// without a type, another type) and what the socket takes, and the socket
// keeps serving.
func TestWebSocketFrameOfNoKindTheSocketTakes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ws := h.dialWS(nil)
	for _, tc := range []struct{ frame, param, says string }{
		{`[1,2]`, "", "the frame must be a JSON object"},
		{`"hello"`, "", "the frame must be a JSON object"},
		{`{"model":"gpt-fake-1","input":"hi"}`, "type", "the frame has no type"},
		{`{"type":"response.cancel","response_id":"resp_x"}`, "type", `unsupported frame type "response.cancel"`},
	} {
		evs := ws.turn(tc.frame)
		last := evs[len(evs)-1]
		e := gjson.GetBytes(last.data, "error")
		if last.typ != "error" || errorStatus(last) != 400 || e.Get("code").Str != "unsupported_frame" ||
			e.Get("param").Str != tc.param || !strings.Contains(e.Get("message").Str, tc.says) ||
			!strings.Contains(e.Get("message").Str, "response.create, response.resume or input_chunk") {
			t.Fatalf("%s: %s", tc.frame, last.data)
		}
	}
	if evs := ws.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("after the refused frames: %s", evs[len(evs)-1].data)
	}
}
