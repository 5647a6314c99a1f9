package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
)

// TestSpliceRefusesTextAfterTheItemWentDone: a restart reproduces a
// message the first attempt left open, adds to it, closes it (the client
// gets the item's done events), and then sends more text for it. That text
// would contradict the done item the client has: the stream ends as
// diverged instead, and nothing after the item's done reaches the client
// but the terminal event.
func TestSpliceRefusesTextAfterTheItemWentDone(t *testing.T) {
	s := streamHookServer(t, nil)
	sink := &recordSink{}
	cs := s.newClientStream(context.Background(), recordResponder{sink}, hookReq(), time.Now())
	defer cs.close()
	cs.hold = 0
	cs.arm()
	events := func(lines ...string) []sse.Event {
		evs := make([]sse.Event, len(lines))
		for k, l := range lines {
			evs[k] = sse.Event{Data: []byte(l)}
		}
		return evs
	}
	run := func(evs []sse.Event, cont bool) pumpEnd {
		p := &pump{s: s, cs: cs, ctx: context.Background(), upCtx: context.Background(), req: cs.req, u: s.pool.Get("A"),
			src: &sliceSource{evs: evs}, surface: cs.surface, replayable: true, armed: true, cont: cont}
		ev, err := p.src.Next()
		return p.run(ev, err)
	}
	const created = `{"type":"response.created","response":{"id":"resp_%s","object":"response","status":"in_progress","output":[]}}`
	first := events(strings.ReplaceAll(created, "%s", "a"),
		`{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_a","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.content_part.added","item_id":"msg_a","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`,
		`{"type":"response.output_text.delta","item_id":"msg_a","output_index":0,"content_index":0,"delta":"Hel"}`)
	if end := run(first, false); end.after == nil {
		t.Fatalf("the cut first attempt ended %+v, want a failure after content", end)
	}
	cs.beginSplice(kindRestart, nil)
	restart := events(strings.ReplaceAll(created, "%s", "b"),
		`{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_b","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.content_part.added","item_id":"msg_b","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`,
		`{"type":"response.output_text.delta","item_id":"msg_b","output_index":0,"content_index":0,"delta":"Hello"}`,
		`{"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_b","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hello","annotations":[]}]}}`,
		`{"type":"response.output_text.delta","item_id":"msg_b","output_index":0,"content_index":0,"delta":" more"}`,
		`{"type":"response.completed","response":{"id":"resp_b","object":"response","status":"completed","output":[]}}`)
	end := run(restart, true)
	cs.finish(end.reason)
	if end.reason != reasonDiverged {
		t.Fatalf("ended %q, want %q", end.reason, reasonDiverged)
	}
	var types []string
	for _, e := range sink.evs {
		if strings.Contains(gjson.GetBytes(e, "delta").Str, "more") {
			t.Fatalf("the client got text after the item's done: %s", e)
		}
		types = append(types, gjson.GetBytes(e, "type").Str)
	}
	last := gjson.ParseBytes(sink.evs[len(sink.evs)-1])
	if last.Get("type").Str != "response.failed" || !strings.Contains(last.Get("response.error.message").Str, "saw complete") {
		t.Fatalf("last event %s, want response.failed naming the part the client saw complete; events %v", last.Raw, types)
	}
	if got := last.Get("response.output.0.content.0.text").Str; got != "Hello" {
		t.Fatalf("the terminal's text %q, want what the client has: Hello", got)
	}
}
