package gateway_test

// A refusal the client was sent is the model's last word on its answer: a
// stream cut after it is not continued (README, "Continuation"), so no
// text comes after the refusal, and on a continued stream no content part
// opens while another part of the same item is still open.

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// refusalChunk is one Chat chunk of choice 0 with the given delta.
func refusalChunk(delta string) upstreamtest.Frame {
	return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-r","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}`))
}

// checkPartsInOrder fails when a Responses client's stream opens a content
// part of an item while another part of that item is open, or writes to a
// part that is not open.
func checkPartsInOrder(t *testing.T, evs []eventLike) {
	t.Helper()
	open := map[string]int64{} // item id → its open part's content_index
	for _, ev := range evs {
		e := gjson.ParseBytes(ev.data)
		item, idx := e.Get("item_id").Str, e.Get("content_index")
		if !idx.Exists() || item == "" || strings.HasPrefix(ev.typ, "response.reasoning_summary") {
			continue
		}
		cur, isOpen := open[item]
		switch {
		case ev.typ == "response.content_part.added":
			if isOpen {
				t.Fatalf("part %d of %s opened while part %d is open: %s", idx.Int(), item, cur, ev.data)
			}
			open[item] = idx.Int()
		case !isOpen || cur != idx.Int():
			t.Fatalf("an event for part %d of %s, which is not open: %s", idx.Int(), item, ev.data)
		case ev.typ == "response.content_part.done":
			delete(open, item)
		}
	}
}

// TestStreamCutAfterARefusalIsNotContinued: a Chat upstream streams a text
// part and then a refusal (a refusal part among its content parts, or
// delta.refusal) and is cut. The client, who has the text and the refusal,
// gets the stream's end as it stood (a Responses client response.failed
// stream_incomplete, its parts each closed before the next opened; a Chat
// client the error chunk), never more text after the refusal: the next
// target is not asked.
func TestStreamCutAfterARefusalIsNotContinued(t *testing.T) {
	for _, refusal := range []struct{ name, delta string }{
		{"refusal part", `{"content":[{"type":"refusal","refusal":"I cannot "}]}`},
		{"delta.refusal", `{"refusal":"I cannot "}`},
	} {
		primary := func() upstreamtest.Script {
			return upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
				refusalChunk(`{"role":"assistant","content":""}`),
				refusalChunk(`{"content":[{"type":"text","text":"one two "}]}`),
				refusalChunk(refusal.delta),
			}, End: upstreamtest.EndCut}
		}
		for _, mode := range []string{gateway.ContinuationAuto, gateway.ContinuationRestart} {
			hc := func() harnessConfig { return harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"}} }
			t.Run(refusal.name+"/"+mode+"/responses client", func(t *testing.T) {
				h := contHarness(t, mode, hc())
				h.ups["P"].Enqueue(primary())
				h.ups["B"].Enqueue(upstreamtest.Answer("one two three four five", 5))
				_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
				checkPartsInOrder(t, evs)
				last := evs[len(evs)-1]
				if last.typ != "response.failed" || last.code != "stream_incomplete" {
					t.Fatalf("the stream ended %s %s, want response.failed stream_incomplete: %s", last.typ, last.code, last.data)
				}
				content := gjson.GetBytes(last.data, "response.output.0.content")
				if n := len(content.Array()); n != 2 || content.Get("0.text").Str != "one two " || content.Get("1.refusal").Str != "I cannot " {
					t.Fatalf("the terminal's content, want the text and the refusal only: %s", content.Raw)
				}
				if n := h.ups["B"].RequestCount(); n != 0 {
					t.Fatalf("the next target was asked %d times", n)
				}
			})
			t.Run(refusal.name+"/"+mode+"/chat client", func(t *testing.T) {
				h := contHarness(t, mode, hc())
				h.ups["P"].Enqueue(primary())
				h.ups["B"].Enqueue(upstreamtest.Answer("one two three four five", 5))
				o := chatErrorOutcome(t, h)
				if o.text != "one two " || o.terminal != "error" {
					t.Fatalf("the client read %q ending %q, want the text before the refusal and the error chunk", o.text, o.terminal)
				}
				if n := h.ups["B"].RequestCount(); n != 0 {
					t.Fatalf("the next target was asked %d times", n)
				}
			})
		}
	}
}

// TestPrefillThatRefusesClosesTheOpenPartFirst: a stream cut in the middle
// of its text is continued by a prefill whose target refuses (a refusal
// part, or delta.refusal, from a Chat upstream): the client's text part
// is closed before the refusal part opens, and the stream completes with
// the text and the refusal, in that order.
func TestPrefillThatRefusesClosesTheOpenPartFirst(t *testing.T) {
	for _, refusal := range []struct{ name, delta string }{
		{"refusal part", `{"content":[{"type":"refusal","refusal":"I cannot go on."}]}`},
		{"delta.refusal", `{"refusal":"I cannot go on."}`},
	} {
		t.Run(refusal.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"B": "chat"}})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
				refusalChunk(`{"role":"assistant","content":""}`),
				refusalChunk(refusal.delta),
				upstreamtest.SSEData([]byte(`{"id":"chatcmpl-r","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)),
				upstreamtest.SSEData([]byte("[DONE]")),
			}})
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			checkPartsInOrder(t, evs)
			last := evs[len(evs)-1]
			content := gjson.GetBytes(last.data, "response.output.0.content")
			if last.typ != "response.completed" || len(content.Array()) != 2 || content.Get("0.type").Str != "output_text" ||
				content.Get("1.refusal").Str != "I cannot go on." {
				t.Fatalf("the stream ended %s with content %s, want completed with the text, then the refusal", last.typ, content.Raw)
			}
		})
	}
}
