package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// abortedChat is a Chat stream vLLM or SGLang ends mid-answer: some text,
// then finish_reason abort (or error) and [DONE].
func abortedChat(reason string) upstreamtest.Script {
	return upstreamtest.Script{ChatFrames: upstreamtest.ChatSpec{ID: "chatcmpl-a", Model: "gpt-fake-1",
		Text: "Once upon", Deltas: 2, FinishReason: reason, Usage: true}.Frames()}
}

// A Chat upstream's finish_reason abort or error says the answer was cut
// short: a Responses client is never shown it as completed. Alone, the
// stream ends response.failed naming the reason, and a JSON request gets a
// 502 once its replay fails alike; on a route, the next target continues the stream as after a cut and
// serves the JSON request (README "Chat-only upstreams").
func TestChatFinishAbortIsNotCompleted(t *testing.T) {
	for _, reason := range []string{"abort", "error"} {
		t.Run(reason+"/stream alone", func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
			h.ups["A"].Enqueue(abortedChat(reason))
			resp, evs := h.streamEvents("/v1/responses", `{"model":"m","stream":true,"input":"hi"}`)
			if resp.StatusCode != http.StatusOK || len(evs) == 0 {
				t.Fatalf("status %d, %d events", resp.StatusCode, len(evs))
			}
			last := evs[len(evs)-1]
			r := gjson.GetBytes(last.Data, "response")
			if eventType(last) != "response.failed" || r.Get("status").Str != "failed" ||
				!strings.Contains(r.Get("error.message").Str, `finish_reason "`+reason+`"`) || r.Get("output.0.status").Str != "incomplete" {
				t.Fatalf("terminal %s: %s", eventType(last), last.Data)
			}
		})
		t.Run(reason+"/JSON alone", func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
			script := abortedChat(reason)
			script.Body = []byte(`{"id":"chatcmpl-a","object":"chat.completion","model":"gpt-fake-1",
				"choices":[{"index":0,"finish_reason":"` + reason + `","message":{"role":"assistant","content":"Once upon"}}]}`)
			h.ups["A"].Enqueue(script)
			h.ups["A"].Enqueue(script) // the replay a 5xx before content gets
			resp := h.post("/v1/responses", `{"model":"m","input":"hi"}`)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(gjson.GetBytes(body, "error.message").Str, "stream_incomplete") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
		t.Run(reason+"/stream on a route", func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"}})
			h.ups["P"].Enqueue(abortedChat(reason))
			h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: upstreamtest.ChatStream("chatcmpl-b", "gpt-fake-1", "Once upon a time.", 3)})
			resp, evs := h.streamEvents("/v1/responses", `{"model":"m","stream":true,"input":"hi"}`)
			if resp.StatusCode != http.StatusOK || len(evs) == 0 {
				t.Fatalf("status %d, %d events", resp.StatusCode, len(evs))
			}
			last := evs[len(evs)-1]
			if eventType(last) != "response.completed" || gjson.GetBytes(last.Data, "response.output.0.content.0.text").Str != "Once upon a time." {
				t.Fatalf("terminal %s: %s", eventType(last), last.Data)
			}
			if n := h.ups["B"].RequestCount(); n != 1 {
				t.Fatalf("B got %d requests, want 1 (the continuation)", n)
			}
		})
	}
}
