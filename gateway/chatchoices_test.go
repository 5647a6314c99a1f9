package gateway_test

// Chat streams with several choices, and choices after their finish: the
// stream is complete only when every choice it showed finished, and a
// finished choice gets nothing more (README, "What it promises").

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// chatChunk is an upstream Chat chunk frame with these choices (and extra
// members, e.g. usage, when given).
func chatChunk(choices string, extra ...string) upstreamtest.Frame {
	body := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":` + choices
	for _, e := range extra {
		body += "," + e
	}
	return upstreamtest.SSEData([]byte(body + "}"))
}

var chatDone = upstreamtest.SSEData([]byte("[DONE]"))

// chatChoicesSeen is what a Chat client got per choice index: its text and
// its finish reasons, in order; and the error code of an error chunk.
type chatChoicesSeen struct {
	text    map[int64]string
	finish  map[int64][]string
	errCode string
	usage   int // chunks carrying usage
}

// readChatChoices checks that evs end with exactly one [DONE] and sums
// what each choice got.
func readChatChoices(t *testing.T, evs []sse.Event) chatChoicesSeen {
	t.Helper()
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("the stream does not end with [DONE] (%d events)", len(evs))
	}
	seen := chatChoicesSeen{text: map[int64]string{}, finish: map[int64][]string{}}
	for _, ev := range evs[:len(evs)-1] {
		if ev.Done {
			t.Fatal("a second [DONE]")
		}
		if e := gjson.GetBytes(ev.Data, "error.code"); e.Exists() {
			seen.errCode = e.Str
			continue
		}
		if gjson.GetBytes(ev.Data, "usage").IsObject() {
			seen.usage++
		}
		gjson.GetBytes(ev.Data, "choices").ForEach(func(_, ch gjson.Result) bool {
			i := ch.Get("index").Int()
			seen.text[i] += ch.Get("delta.content").Str
			if fr := ch.Get("finish_reason"); fr.Str != "" {
				seen.finish[i] = append(seen.finish[i], fr.Str)
			}
			return true
		})
	}
	return seen
}

const chatN2Body = `{"model":"gpt-fake-1","n":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestChatStreamWithAChoiceOpenIsIncomplete: with n=2, a stream that ends
// (cut, or [DONE]) after choice 0 finished but before choice 1 did ends
// with a stream_incomplete error chunk, not a plain [DONE] that would pass
// choice 1's truncated text off as an answer.
func TestChatStreamWithAChoiceOpenIsIncomplete(t *testing.T) {
	opening := []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`),
		chatChunk(`[{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"content":"A"},"finish_reason":null}]`),
		chatChunk(`[{"index":1,"delta":{"content":"B"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`),
		chatChunk(`[{"index":1,"delta":{"content":"B2"},"finish_reason":null}]`),
	}
	for _, tt := range []struct {
		name   string
		script upstreamtest.Script
	}{
		{"cut", upstreamtest.Script{ChatFrames: opening, End: upstreamtest.EndCut}},
		{"[DONE]", upstreamtest.Script{ChatFrames: append(append([]upstreamtest.Frame{}, opening...), chatDone)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(tt.script)
			_, evs := h.streamEvents("/v1/chat/completions", chatN2Body)
			seen := readChatChoices(t, evs)
			if seen.errCode != "stream_incomplete" {
				t.Fatalf("error chunk code %q, want stream_incomplete: choice 1 never finished", seen.errCode)
			}
			if seen.text[1] != "BB2" || len(seen.finish[1]) != 0 {
				t.Fatalf("choice 1 got %q and finish reasons %v", seen.text[1], seen.finish[1])
			}
		})
	}
}

// TestChatStreamEveryChoiceFinishedIsComplete: once every choice shown has
// its finish_reason, a cut without [DONE] still ends cleanly, also when a
// choice first appears after another finished.
func TestChatStreamEveryChoiceFinishedIsComplete(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Script{End: upstreamtest.EndCut, ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","content":"A"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`),
		chatChunk(`[{"index":1,"delta":{"role":"assistant","content":"B"},"finish_reason":null}]`),
		chatChunk(`[{"index":1,"delta":{},"finish_reason":"length"}]`),
	}})
	_, evs := h.streamEvents("/v1/chat/completions", chatN2Body)
	seen := readChatChoices(t, evs)
	if seen.errCode != "" {
		t.Fatalf("error chunk %q after every choice finished", seen.errCode)
	}
	if seen.text[0] != "A" || seen.text[1] != "B" || strings.Join(seen.finish[0], ",") != "stop" || strings.Join(seen.finish[1], ",") != "length" {
		t.Fatalf("the client got %v / %v", seen.text, seen.finish)
	}
}

// TestChatChoiceGetsNothingAfterItsFinish: after a choice's finish_reason,
// later text and finish reasons for it are skipped and counted; a usage
// chunk still passes, and a chunk that also carries another, unfinished
// choice keeps that one.
func TestChatChoiceGetsNothingAfterItsFinish(t *testing.T) {
	usage := `"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":"Yo"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`),
		chatChunk(`[{"index":0,"delta":{"content":" MORE"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"content":" AGAIN"},"finish_reason":null},{"index":1,"delta":{"content":"!"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"length"},{"index":1,"delta":{},"finish_reason":"stop"}]`),
		chatChunk(`[{"index":1,"delta":{"content":" late"},"finish_reason":"length"}]`),
		chatChunk(`[]`, usage),
		chatDone,
	}})
	_, evs := h.streamEvents("/v1/chat/completions",
		`{"model":"gpt-fake-1","n":2,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	seen := readChatChoices(t, evs)
	if seen.errCode != "" {
		t.Fatalf("error chunk %q", seen.errCode)
	}
	if seen.text[0] != "Hi" || seen.text[1] != "Yo!" {
		t.Fatalf("texts %q, %q: want text after a finish dropped", seen.text[0], seen.text[1])
	}
	if strings.Join(seen.finish[0], ",") != "stop" || strings.Join(seen.finish[1], ",") != "stop" {
		t.Fatalf("finish reasons %v, want one per choice", seen.finish)
	}
	if seen.usage != 1 {
		t.Fatalf("%d usage chunks, want the upstream's one", seen.usage)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="after_finish",surface="chat_stream"} 4`) {
		t.Fatalf("skipped chunks not counted:\n%s", m)
	}
}
