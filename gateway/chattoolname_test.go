package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestChatToolNameAfterItsArgumentsIsCounted: a Chat upstream that sends
// more of a tool call's name after the call's arguments began cannot change
// the name a Responses client was shown with the call; the call keeps it,
// whole and the same everywhere, and the piece left out is counted, never
// dropped silently (README, "What it promises").
func TestChatToolNameAfterItsArgumentsIsCounted(t *testing.T) {
	h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_A","type":"function","function":{"name":"get_"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"weather","arguments":"\"Paris\"}"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
		chatDone,
	}})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"weather?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`)
	last := assertOneTerminal(t, evs)
	call := gjson.GetBytes(last.data, "response.output.0")
	if last.typ != "response.completed" || call.Get("name").Str != "get_" || call.Get("arguments").Str != `{"city":"Paris"}` {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	for _, ev := range evs {
		if n := gjson.GetBytes(ev.data, "item.name"); n.Exists() && n.Str != "get_" {
			t.Fatalf("%s names the call %q, the client was shown get_", ev.typ, n.Str)
		}
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="late_tool_name",surface="responses_stream"} 1`) {
		t.Fatalf("the late piece of the name is not counted:\n%s", grep(m, "skipped_events"))
	}
}
