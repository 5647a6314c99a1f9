package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// twoChatUpstreams is a gateway in front of two Chat-only upstreams, so a
// request that is replayed shows as a second upstream request.
func twoChatUpstreams(t *testing.T) *harness {
	st := openStore(t, t.TempDir())
	return newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st},
		protocol:  map[string]string{"C": "chat", "D": "chat"},
		upstreams: []upstreamtest.Options{{Name: "C"}, {Name: "D"}}})
}

func (h *harness) upstreamRequests() int {
	n := 0
	for _, up := range h.ups {
		n += up.RequestCount()
	}
	return n
}

// chatErrorFirst is a Chat stream whose first chunk is err, then [DONE].
func chatErrorFirst(err string) upstreamtest.Script {
	return upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		upstreamtest.SSEData([]byte(err)), upstreamtest.SSEData([]byte("[DONE]"))}}
}

// TestChatUpstreamErrorBeforeContent: a Chat upstream's error before any
// content is judged as a Responses upstream's error event is. A client error
// (by its type, or by the HTTP status llama.cpp sends as its code) is not
// replayed on the other upstream, and reaches the client with the upstream's
// message and code — not as a retryable upstream_unavailable. A server error
// is replayed as before.
func TestChatUpstreamErrorBeforeContent(t *testing.T) {
	const stream = `{"model":"gpt-fake-1","input":"hi","stream":true}`
	llamaErr := `{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}`
	tests := []struct {
		name     string
		script   upstreamtest.Script
		requests int    // upstream requests the gateway made
		message  string // "": a server error, replayed on the other upstream, which failed too
		code     string // the upstream's code, when the error type names one the client sees
	}{
		{"invalid_request_error chunk", chatErrorFirst(`{"error":{"code":"invalid_value","message":"temperature too high","type":"invalid_request_error","param":"temperature"}}`),
			1, "temperature too high", "invalid_value"},
		{"llama.cpp error chunk", chatErrorFirst(`{"error":` + llamaErr + `}`), 1, "the request exceeds the available context size", ""},
		{"llama.cpp SSE error field", upstreamtest.ErrorField([]byte(llamaErr), 0), 1, "the request exceeds the available context size", ""},
		{"server error", upstreamtest.ErrorField(nil, 0), 2, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := twoChatUpstreams(t)
			for _, up := range h.ups {
				up.Enqueue(tt.script)
			}
			resp := h.post("/v1/responses", stream)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if n := h.upstreamRequests(); n != tt.requests {
				t.Fatalf("%d upstream requests, want %d:\n%s", n, tt.requests, raw)
			}
			if resp.StatusCode != http.StatusOK { // the upstream's error answered as its status
				e := gjson.GetBytes(raw, "error")
				if tt.message == "" || resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Get("message").Str, tt.message) ||
					tt.code != "" && e.Get("code").Str != tt.code {
					t.Fatalf("%d %s", resp.StatusCode, raw)
				}
				return
			}
			_, evs := eventsOf(t, raw)
			last := assertOneTerminal(t, evs)
			msg := gjson.GetBytes(last.data, "response.error.message").Str
			switch {
			case tt.message == "":
				// Its code, the status 500, is none (README "Chat-Completions-only
				// upstreams"): the gateway's upstream_error, a server_error on the wire.
				if last.typ != "response.failed" || last.code != "upstream_error" || !strings.Contains(msg, "Internal server error") {
					t.Fatalf("server error: %s", last.data)
				}
			case last.typ != "response.failed" || !strings.Contains(msg, tt.message) || strings.Contains(msg, "upstream_unavailable") ||
				tt.code != "" && last.code != tt.code:
				t.Fatalf("client error: %s", last.data)
			}
		})
	}
	t.Run("WebSocket", func(t *testing.T) {
		h := twoChatUpstreams(t)
		for _, up := range h.ups {
			up.Enqueue(chatErrorFirst(`{"error":{"code":"invalid_value","message":"temperature too high","type":"invalid_request_error","param":"temperature"}}`))
		}
		evs := h.dialWS(nil).turn(createFrame(""))
		last := evs[len(evs)-1]
		if n := h.upstreamRequests(); n != 1 || last.code != "invalid_value" || !strings.Contains(string(last.data), "temperature too high") ||
			last.typ == "error" && errorStatus(last) != http.StatusBadRequest {
			t.Fatalf("%d upstream requests; %s", n, last.data)
		}
	})
}

// eventsOf parses an SSE body into the events a client reads.
func eventsOf(t *testing.T, raw []byte) (string, []eventLike) {
	t.Helper()
	var evs []eventLike
	for _, block := range strings.Split(string(raw), "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			ev := []byte(data)
			var v struct{ Type string }
			if json.Unmarshal(ev, &v) != nil {
				t.Fatalf("event is not JSON: %s", data)
			}
			evs = append(evs, eventLike{typ: v.Type, data: ev,
				code: gatewayCode(gjson.Get(data, "response.error.code").Str, gjson.Get(data, "response.error.message").Str)})
		}
	}
	return string(raw), evs
}

// TestChatUpstreamAnswersJSONToAStream: a Chat upstream that ignores
// stream:true. The converted stream keeps tool calls without ids apart, and
// its response is remembered, so a follow-up chains on it.
func TestChatUpstreamAnswersJSONToAStream(t *testing.T) {
	h := chatHarness(t)
	completion := `{"object":"chat.completion","model":"llama-x","choices":[{"index":0,"message":{"role":"assistant","content":"Checking.",` +
		`"tool_calls":[{"type":"function","function":{"name":"f0","arguments":"{\"a\":1}"}},{"type":"function","function":{"name":"f1","arguments":"{\"b\":2}"}}]},` +
		`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	h.ups["C"].Enqueue(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
		ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(completion))}})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if evs[0].typ != "response.created" || last.typ != "response.completed" {
		t.Fatalf("first %s, last %s", evs[0].typ, last.data)
	}
	resp := gjson.GetBytes(last.data, "response")
	var calls []string
	var outputs []string
	resp.Get("output").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "function_call" {
			calls = append(calls, it.Get("name").Str+" "+it.Get("arguments").Str)
			outputs = append(outputs, `{"type":"function_call_output","call_id":"`+it.Get("call_id").Str+`","output":"ok"}`)
		}
		return true
	})
	if strings.Join(calls, "; ") != `f0 {"a":1}; f1 {"b":2}` || resp.Get("usage.total_tokens").Int() != 7 {
		t.Fatalf("output %s", resp.Raw)
	}
	follow := h.post("/v1/responses", `{"model":"gpt-fake-1","previous_response_id":"`+resp.Get("id").Str+`","input":[`+strings.Join(outputs, ",")+`]}`)
	raw, _ := io.ReadAll(follow.Body)
	follow.Body.Close()
	if follow.StatusCode != http.StatusOK {
		t.Fatalf("follow-up: %d %s", follow.StatusCode, raw)
	}
	second := h.ups["C"].Requests()[1].Body
	messages := gjson.GetBytes(second, "messages")
	var names []string
	messages.Get("#.tool_calls|@flatten").ForEach(func(_, tc gjson.Result) bool {
		names = append(names, tc.Get("function.name").Str+" "+tc.Get("function.arguments").Str)
		return true
	})
	if strings.Join(names, "; ") != `f0 {"a":1}; f1 {"b":2}` || !strings.Contains(messages.Raw, "Checking.") || !strings.Contains(messages.Raw, `"hi"`) {
		t.Fatalf("the follow-up's Chat request lacks the first turn: %s", second)
	}
}

// A Chat upstream that answers a JSON request with 200 and an error
// envelope has answered with its error: a client error reaches the client
// with its status, message and code; a server error is replayed on the
// next upstream.
func TestChatUpstreamErrorEnvelopeIn200IsItsError(t *testing.T) {
	t.Run("client error", func(t *testing.T) {
		h := chatHarness(t)
		h.ups["C"].Enqueue(upstreamtest.Script{Body: []byte(`{"error":{"message":"bad prompt","type":"invalid_request_error","code":"invalid_prompt"}}`)})
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
		e := readError(t, resp)
		if resp.StatusCode != http.StatusBadRequest || deref(e.Error.Code) != "invalid_prompt" || e.Error.Message != "bad prompt" {
			t.Fatalf("%d %+v", resp.StatusCode, e.Error)
		}
	})
	t.Run("server error", func(t *testing.T) {
		st := openStore(t, t.TempDir())
		h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st},
			protocol: map[string]string{"C": "chat", "D": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}, {Name: "D"}}})
		body := []byte(`{"error":{"message":"boom","type":"server_error","code":500}}`)
		h.ups["C"].Enqueue(upstreamtest.Script{Body: body})
		h.ups["D"].Enqueue(upstreamtest.Script{Body: body})
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if h.ups["C"].RequestCount()+h.ups["D"].RequestCount() != 2 {
			t.Fatalf("a server error in a 200 was not replayed: C=%d D=%d; %d %s", h.ups["C"].RequestCount(), h.ups["D"].RequestCount(), resp.StatusCode, raw)
		}
	})
}
