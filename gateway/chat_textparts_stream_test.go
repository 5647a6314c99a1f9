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
