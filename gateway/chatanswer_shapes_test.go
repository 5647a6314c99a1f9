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

// TestChatUpstreamGetsSamplingFields: a Responses request's sampling fields
// that Chat Completions, llama.cpp or vLLM read (seed, stop, top_k, min_p, …)
// reach a Chat upstream unchanged, not dropped; max_tool_calls, a bound on
// OpenAI's built-in tools that a Chat upstream never calls, is accepted and
// not sent (README "Chat-Completions-only upstreams").
func TestChatUpstreamGetsSamplingFields(t *testing.T) {
	h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","seed":5,"top_k":40,"min_p":0.1,"frequency_penalty":0.5,`+
		`"presence_penalty":0.25,"stop":["x"],"logit_bias":{"7":-100},"repetition_penalty":1.1,"frobnicate":1}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	reqs := h.ups["A"].Requests()
	if resp.StatusCode != http.StatusOK || len(reqs) != 1 {
		t.Fatalf("%d %s; %d upstream requests", resp.StatusCode, raw, len(reqs))
	}
	up := gjson.ParseBytes(reqs[0].Body)
	for field, want := range map[string]string{"seed": "5", "top_k": "40", "min_p": "0.1", "frequency_penalty": "0.5", "presence_penalty": "0.25",
		"stop": `["x"]`, "logit_bias": `{"7":-100}`, "repetition_penalty": "1.1", "frobnicate": ""} {
		if got := up.Get(field).Raw; got != want {
			t.Errorf("upstream %s = %q, want %q: %s", field, got, want, reqs[0].Body)
		}
	}

	for k, stream := range []string{"false", "true"} {
		resp = h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":`+stream+`,"tools":[{"type":"function","name":"f"}],"max_tool_calls":2}`)
		raw, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		reqs = h.ups["A"].Requests()
		if resp.StatusCode != http.StatusOK || len(reqs) != 2+k {
			t.Fatalf("stream %s: %d %s; %d upstream requests", stream, resp.StatusCode, raw, len(reqs))
		}
		if got := gjson.GetBytes(reqs[len(reqs)-1].Body, "max_tool_calls"); got.Exists() {
			t.Fatalf("stream %s: max_tool_calls %s sent upstream", stream, got.Raw)
		}
	}
}

// TestChatStreamCompletionWithContentParts: a whole chat.completion whose
// content is an array of text parts, answering a Chat client's stream, gives
// a delta whose content is the parts' text as one string — what clients
// append — as a Responses client gets it.
func TestChatStreamCompletionWithContentParts(t *testing.T) {
	h := routedPairHarness(t, map[string]string{"A": "chat", "B": "chat"}, gateway.Options{})
	h.ups["A"].Enqueue(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
		ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(`{"id":"chatcmpl-p","object":"chat.completion","created":1,"model":"llama-x",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"p1"},{"type":"text","text":"p2"}]},"finish_reason":"stop"}]}`))}})
	resp, evs := h.streamEvents("/v1/chat/completions", `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("%d, %d events", resp.StatusCode, len(evs))
	}
	content := ""
	for _, ev := range evs[:len(evs)-1] {
		gjson.GetBytes(ev.Data, "choices.#.delta.content").ForEach(func(_, c gjson.Result) bool {
			if c.Type != gjson.String {
				t.Fatalf("delta.content %s in %s", c.Raw, ev.Data)
			}
			content += c.Str
			return true
		})
	}
	if content != "p1p2" {
		t.Fatalf("content %q, want p1p2", content)
	}
}

// TestChatUpstreamLegacyFunctionCall: a legacy function_call (streamed, or
// in a whole chat.completion) reaches a Responses client as the
// function_call item it is, with a call id, not as an empty completion.
func TestChatUpstreamLegacyFunctionCall(t *testing.T) {
	h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":""}},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"function_call":{"arguments":"{\"city\":\"Paris\"}"}},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"function_call"}]`),
		chatDone,
	}})
	tools := `"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"weather?",` + tools + `}`)
	last := assertOneTerminal(t, evs)
	out := gjson.GetBytes(last.data, "response.output")
	call := out.Get("0")
	if last.typ != "response.completed" || len(out.Array()) != 1 || call.Get("type").Str != "function_call" || call.Get("name").Str != "get_weather" ||
		call.Get("arguments").Str != `{"city":"Paris"}` || !strings.HasPrefix(call.Get("call_id").Str, "call_") {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}

	h.ups["A"].Enqueue(upstreamtest.Script{Body: []byte(`{"id":"chatcmpl-j","object":"chat.completion","created":1,"model":"llama-x","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}},"finish_reason":"function_call"}]}`)})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"weather?",`+tools+`}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	call = gjson.GetBytes(raw, "output.0")
	if resp.StatusCode != http.StatusOK || call.Get("name").Str != "get_weather" || call.Get("arguments").Str != `{"city":"Rome"}` || call.Get("call_id").Str == "" {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
}

// TestChatUpstreamNamelessToolCall: a tool call that never got a name is an
// unusable answer, not a function_call named "" that would be stored and
// sent back upstream: the request goes to the next target, and with none
// left the request fails (a JSON client gets the reason).
func TestChatUpstreamNamelessToolCall(t *testing.T) {
	nameless := []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"arguments":"{\"a\":1}"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
		chatDone,
	}
	namelessJSON := []byte(`{"id":"chatcmpl-j","object":"chat.completion","created":1,"model":"llama-x","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_x","type":"function","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "json"}[stream]
		t.Run(name+"/next target", func(t *testing.T) {
			h := routedPairHarness(t, map[string]string{"A": "chat", "B": "chat"}, gateway.Options{})
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: nameless, Body: namelessJSON})
			resp := h.post("/v1/responses", `{"model":"cm","input":"hi","stream":`+map[bool]string{true: "true", false: "false"}[stream]+`}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), `"name":""`) || !strings.Contains(string(raw), "Hello from B") ||
				h.ups["B"].RequestCount() != 1 {
				t.Fatalf("%d %s; want B's answer", resp.StatusCode, raw)
			}
		})
		t.Run(name+"/no target left", func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
			h.ups["A"].SetDefault(upstreamtest.Script{ChatFrames: nameless, Body: namelessJSON})
			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":`+map[bool]string{true: "true", false: "false"}[stream]+`}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			failed := resp.StatusCode >= 500 && strings.Contains(string(raw), "without a function name") ||
				stream && resp.StatusCode == http.StatusOK && strings.Contains(string(raw), "event: response.failed")
			if !failed || strings.Contains(string(raw), "function_call") {
				t.Fatalf("%d %s; want the upstream's answer refused", resp.StatusCode, raw)
			}
		})
	}
}
