package gateway_test

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestItemsNumberedAlikeKeepTheirOwnText: an upstream that numbers two
// message items output_index 0 and is cut in the second one. The
// response.failed the client gets lists both items, each with the text the
// client was streamed for it: the second item's deltas are filed under the
// item their item_id names, not under the first item at that index.
func TestItemsNumberedAlikeKeepTheirOwnText(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_1", "in_progress", "[]") + `}`}
	evs = append(evs, g6Message("msg_a", 0, []string{"Hel", "lo"}, true)...)
	evs = append(evs, g6Message("msg_b", 0, []string{"Wor", "ld"}, false)...)
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...), End: upstreamtest.EndCut})

	s := g6Post(t, h, `{"model":"m","stream":true,"input":"hi"}`)
	if s.terminal.typ != "response.failed" {
		t.Fatalf("terminal %s: %s", s.terminal.typ, s.terminal.data)
	}
	if s.text != "HelloWorld" {
		t.Fatalf("client streamed %q, want HelloWorld", s.text)
	}
	out := gjson.GetBytes(s.terminal.data, "response.output").Array()
	got := map[string]string{}
	for _, it := range out {
		got[it.Get("id").Str] = it.Get("content.0.text").Str
	}
	if len(out) != 2 || got["msg_a"] != "Hello" || got["msg_b"] != "World" {
		t.Fatalf("response.failed output %v (want msg_a Hello, msg_b World): %s", got, s.terminal.data)
	}
}
