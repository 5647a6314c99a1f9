package gateway_test

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestFailedAfterMalformedItemEvents: an upstream's output_item.done
// without an item, or a content_part.added whose part is not an object, is
// relayed but changes nothing the gateway recorded: the response.failed it
// writes when the stream is then cut is valid JSON whose output holds each
// item as it was streamed, closed as incomplete (docs/ARCHITECTURE.md §5).
func TestFailedAfterMalformedItemEvents(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var frames []upstreamtest.Frame
	for _, ev := range []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"resp_m","object":"response","created_at":1767225600,"status":"in_progress","model":"gpt-fake-1","output":[]}}`,
		`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_a","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_a","output_index":0,"content_index":0,"part":"not a part"}`,
		`{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_a","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}`,
		`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_a","output_index":0,"content_index":0,"delta":"Hi"}`,
		`{"type":"response.output_item.done","sequence_number":5,"output_index":0}`,
		`{"type":"response.output_item.added","sequence_number":6,"output_index":1,"item":{"id":"msg_b","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
	} {
		frames = append(frames, upstreamtest.SSEEvent([]byte(ev)))
	}
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames, End: upstreamtest.EndCut})
	_, evs := h.responsesStream(respBody)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.failed" || !gjson.ValidBytes(last.data) {
		t.Fatalf("terminal %s, valid JSON %v: %s", last.typ, gjson.ValidBytes(last.data), last.data)
	}
	want := `[{"id":"msg_a","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"text":"Hi","logprobs":[]}],"role":"assistant"},` +
		`{"id":"msg_b","type":"message","status":"incomplete","content":[],"role":"assistant"}]`
	if got := gjson.GetBytes(last.data, "response.output").Raw; got != want {
		t.Fatalf("output %s\nwant %s", got, want)
	}
}
