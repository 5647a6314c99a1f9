package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A Chat upstream that streams delta.content as an array of text parts
// (as some OpenAI-compatible servers do) reaches a Chat Completions client
// with delta.content a string, the parts' text joined, as OpenAI's
// ChatCompletionChunk has it: the SDKs' typed accessors read nothing else.
// Chunks whose content is a string pass as they were.
func TestChatStreamTextPartsReachTheClientAsAString(t *testing.T) {
	h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
	chunk := func(choice string) upstreamtest.Frame {
		return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-parts","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[` + choice + `]}`))
	}
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chunk(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`),
		chunk(`{"index":0,"delta":{"content":[{"type":"text","text":"Hel"},{"type":"text","text":"lo"}]},"finish_reason":null}`),
		chunk(`{"index":0,"delta":{"content" : [ {"type":"text","text":", "} ]},"finish_reason":null}`), // blanks around the colon
		chunk(`{"index":0,"delta":{"content":"world"},"finish_reason":null}`),
		chunk(`{"index":0,"delta":{"content":[{"type":"text","text":"!"}]},"finish_reason":"stop"}`),
		upstreamtest.SSEData([]byte("[DONE]")),
	}})
	resp, evs := postWith(t, h, "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var text string
	for _, ev := range evs {
		if ev.Done {
			continue
		}
		c := gjson.GetBytes(ev.Data, "choices.0.delta.content")
		if c.Exists() && c.Type != gjson.String && c.Type != gjson.Null {
			t.Errorf("a chunk's delta.content is not a string: %s", ev.Data)
		}
		text += c.Str
	}
	if text != "Hello, world!" {
		t.Fatalf("the client read %q, want %q", text, "Hello, world!")
	}
	if last := evs[len(evs)-1]; !last.Done {
		t.Fatalf("the stream did not end with [DONE]: %s", last.Data)
	}
}

// A refusal part among a Chat upstream's content parts is the message's
// refusal, never dropped: a Chat client gets it as delta.refusal, and a
// Responses client (the translation) as the message's refusal part, beside
// the text.
func TestChatStreamRefusalPartIsTheRefusal(t *testing.T) {
	frames := func() []upstreamtest.Frame {
		chunk := func(choice string) upstreamtest.Frame {
			return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-parts","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[` + choice + `]}`))
		}
		return []upstreamtest.Frame{
			chunk(`{"index":0,"delta":{"role":"assistant","content":[{"type":"refusal","refusal":"I can't"},{"type":"text","text":"D4"}]},"finish_reason":null}`),
			chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`),
			upstreamtest.SSEData([]byte("[DONE]")),
		}
	}
	t.Run("chat client", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames()})
		_, evs := postWith(t, h, "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
		var text, refusal string
		for _, ev := range evs {
			text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
			refusal += gjson.GetBytes(ev.Data, "choices.0.delta.refusal").Str
		}
		if text != "D4" || refusal != "I can't" {
			t.Fatalf("the client read text %q and refusal %q, want %q and %q", text, refusal, "D4", "I can't")
		}
	})
	t.Run("responses client", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames()})
		_, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","stream":true,"input":"hi"}`, nil)
		last := evs[len(evs)-1]
		var text, refusal string
		gjson.GetBytes(last.Data, "response.output.0.content").ForEach(func(_, p gjson.Result) bool {
			text += p.Get("text").Str
			refusal += p.Get("refusal").Str
			return true
		})
		if text != "D4" || refusal != "I can't" {
			t.Fatalf("the Response holds text %q and refusal %q, want %q and %q: %s", text, refusal, "D4", "I can't", last.Data)
		}
	})
}
