package gateway_test

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestContinuationExtendsTheClientsPrefill: a request that already ends with
// an assistant message (the client's own prefill, "The quick") is continued
// by extending that message with what the client was streamed, never by a
// second assistant message (a chat template closes the first as a finished
// turn; templates that require alternating roles refuse two in a row). The
// client is streamed only what follows its prefill, as OpenAI-style servers
// answer one (the prefill is not echoed back): nothing twice, nothing
// missing. Chat clients (string content and text parts) on a Chat upstream,
// Responses clients on a Chat upstream (translated) and on a Responses
// upstream.
func TestContinuationExtendsTheClientsPrefill(t *testing.T) {
	const (
		prefill = "The quick"
		sent    = " brown fox" // what P streams before it is cut: two of the seven words after the prefill
		rest    = " brown fox jumps over the lazy dog"
	)
	cases := []struct {
		name     string
		protocol string // of P and B
		path     string
		body     string
		list     string // where B's request holds the conversation
		want     string // B's last entry
	}{
		{"chat client string content", "chat", "/v1/chat/completions",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"go on"},{"role":"assistant","content":"The quick"}]}`,
			"messages", `{"role":"assistant","content":"The quick brown fox"}`},
		{"chat client text parts", "chat", "/v1/chat/completions",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"go on"},{"role":"assistant","content":[{"type":"text","text":"The "},{"type":"text","text":"quick"}]}]}`,
			"messages", `{"role":"assistant","content":[{"type":"text","text":"The "},{"type":"text","text":"quick brown fox"}]}`},
		{"responses client on a chat upstream", "chat", "/v1/responses",
			`{"model":"m","stream":true,"input":[{"role":"user","content":"go on"},{"role":"assistant","content":"The quick"}]}`,
			"messages", `{"role":"assistant","content":"The quick brown fox"}`},
		{"responses client on a responses upstream", "", "/v1/responses",
			`{"model":"m","stream":true,"input":[{"role":"user","content":"go on"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"The quick"}]}]}`,
			"input", `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"The quick brown fox"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": tc.protocol, "B": tc.protocol}})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 7).CutAfterDeltas(2))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 5))
			_, evs := h.streamEvents(tc.path, tc.body)
			var text string
			var raw []string
			for _, ev := range evs {
				raw = append(raw, string(ev.Data))
				if tc.path == "/v1/chat/completions" {
					text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
				} else if gjson.GetBytes(ev.Data, "type").Str == "response.output_text.delta" {
					text += gjson.GetBytes(ev.Data, "delta").Str
				}
			}
			if text != rest {
				t.Fatalf("client got %q, want %q (what follows its prefill, once): %v", text, rest, raw)
			}
			if tc.path == "/v1/responses" {
				data := make([][]byte, len(evs))
				for i, ev := range evs {
					data[i] = ev.Data
				}
				if o := checkResponsesEvents(t, data); o.terminal != "response.completed" {
					t.Fatalf("terminal %s %s", o.terminal, o.code)
				}
			}
			if n := h.ups["B"].RequestCount(); n != 1 {
				t.Fatalf("B called %d times", n)
			}
			list := gjson.GetBytes(h.ups["B"].Requests()[0].Body, tc.list).Array()
			if len(list) != 2 || list[0].Get("role").Str != "user" || list[1].Raw != tc.want {
				t.Fatalf("B got %s %s, want the user message then %s", tc.list, gjson.GetBytes(h.ups["B"].Requests()[0].Body, tc.list).Raw, tc.want)
			}
		})
	}
}
