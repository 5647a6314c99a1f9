package gateway_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A Chat upstream's non-streamed answer whose message.content is an array
// of parts reaches a Chat client as OpenAI's ChatCompletionMessage has it:
// content the parts' text, joined, and a refusal part the message's
// refusal (README "Chat-Completions-only upstreams"), for every choice, as
// the client's streamed chunks would have had it. A message whose content
// is a string is left as it came.
func TestChatJSONContentPartsReachTheClientAsStrings(t *testing.T) {
	completion := func(choices string) []byte {
		return []byte(`{"id":"chatcmpl-parts","object":"chat.completion","created":1,"model":"gpt-fake-1","choices":[` + choices +
			`],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
	}
	type message struct{ content, refusal string }
	for _, tc := range []struct {
		name    string
		choices string
		want    []message
	}{
		{"text parts", `{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"Hello "},{"type":"text","text":"world"}]},"finish_reason":"stop"}`,
			[]message{{"Hello world", ""}}},
		{"a refusal part", `{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"Hello "},{"type":"refusal","refusal":"I cannot do that."}]},"finish_reason":"stop"}`,
			[]message{{"Hello ", "I cannot do that."}}},
		{"a refusal part after a refusal", `{"index":0,"message":{"role":"assistant","refusal":"No. ","content" : [{"type":"refusal","refusal":"Really."}]},"finish_reason":"stop"}`,
			[]message{{"", "No. Really."}}},
		{"n=2", `{"index":0,"message":{"role":"assistant","content":"as a string"},"finish_reason":"stop"},` +
			`{"index":1,"message":{"role":"assistant","content":[{"type":"text","text":"as "},{"type":"text","text":"parts"}]},"finish_reason":"stop"}`,
			[]message{{"as a string", ""}, {"as parts", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
			h.ups["A"].Enqueue(upstreamtest.Script{Body: completion(tc.choices)})
			c := h.client()
			got, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model:    "gpt-fake-1",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Choices) != len(tc.want) {
				t.Fatalf("%d choices, want %d: %s", len(got.Choices), len(tc.want), got.RawJSON())
			}
			for i, ch := range got.Choices {
				if raw := gjson.Get(ch.RawJSON(), "message.content"); raw.Type != gjson.String {
					t.Errorf("choice %d: message.content is %s, not a string", i, raw.Raw)
				}
				if ch.Message.Content != tc.want[i].content || ch.Message.Refusal != tc.want[i].refusal {
					t.Errorf("choice %d: content %q, refusal %q; want %q, %q: %s", i, ch.Message.Content, ch.Message.Refusal,
						tc.want[i].content, tc.want[i].refusal, ch.RawJSON())
				}
			}
			if got.Usage.TotalTokens != 7 || got.ID != "chatcmpl-parts" {
				t.Errorf("the rest of the completion changed: %s", got.RawJSON())
			}
		})
	}

	t.Run("string content passes byte for byte", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		body := completion(`{"index":0,"message":{"role":"assistant","content" : "a [bracket]","refusal":null},"finish_reason":"stop"},` +
			`{"index":1,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}`)
		h.ups["A"].Enqueue(upstreamtest.Script{Body: body})
		resp := h.post("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != string(body) {
			t.Fatalf("%d %s\nwant the upstream's answer as it came: %s", resp.StatusCode, got, body)
		}
	})
}

// A Chat client that asked for a stream, answered with a whole
// chat.completion (an upstream that ignored stream:true), reads the same
// message from its chunks as a JSON client reads: the content parts'
// text, and its refusal followed by the refusal parts'.
func TestChatCompletionPartsAreOneRuleStreamedOrNot(t *testing.T) {
	completion := []byte(`{"id":"chatcmpl-p","object":"chat.completion","created":1,"model":"gpt-fake-1","choices":[` +
		`{"index":0,"message":{"role":"assistant","refusal":"No. ","content":[{"type":"text","text":"p1"},{"type":"refusal","refusal":"Really."},{"type":"text","text":"p2"}]},"finish_reason":"stop"}]}`)
	h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
	h.ups["A"].Enqueue(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
		ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame(completion)}})
	h.ups["A"].Enqueue(upstreamtest.Script{Body: completion})

	resp, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("%d, %d events", resp.StatusCode, len(evs))
	}
	var content, refusal string
	for _, ev := range evs[:len(evs)-1] {
		content += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
		refusal += gjson.GetBytes(ev.Data, "choices.0.delta.refusal").Str
	}
	resp = h.post("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	msg := gjson.GetBytes(body, "choices.0.message")
	if content != "p1p2" || refusal != "No. Really." || msg.Get("content").Raw != `"p1p2"` || msg.Get("refusal").Raw != `"No. Really."` {
		t.Fatalf("streamed: content %q, refusal %q; JSON: %s; want content p1p2, refusal %q in both", content, refusal, msg.Raw, "No. Really.")
	}
}
