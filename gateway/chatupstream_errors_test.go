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

// llamaStreamError is a Chat upstream's error sent as the first chunk of a
// 200 stream, in llama.cpp's shape (the HTTP status as an integer code).
func llamaStreamError(status int, typ, message string) upstreamtest.Script {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": message, "type": typ}})
	return upstreamtest.Failure(upstreamtest.ShapeErrorEvent, status, body)
}

// singleChatUpstream is one Chat-only upstream A answering script.
func singleChatUpstream(t *testing.T, protocol string, script upstreamtest.Script) *harness {
	t.Helper()
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}}, protocol: map[string]string{"A": protocol}})
	h.ups["A"].SetDefault(script)
	return h
}

const respStreamBody = `{"model":"gpt-fake-1","input":"hi","stream":true}`

// readAll posts body to path and returns the status, headers and body.
func readAll(t *testing.T, h *harness, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp := h.post(path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// A Chat upstream's rate limit sent as its stream's first event, with the
// status as the code (llama.cpp), is the 429 it stands for from either
// client protocol (README "Chat-Completions-only upstreams": judged alike):
// a Responses stream's response.failed carries rate_limit_exceeded, the
// code a client that retries on rate limits looks for, never server_error,
// with the cooldown it started as the wait in its message;
// a Chat stream gets the 429 with that code, not the bare number that only
// repeats the status.
func TestChatUpstreamRateLimitEventIsRateLimitExceeded(t *testing.T) {
	limited := llamaStreamError(http.StatusTooManyRequests, "rate_limit_exceeded", "busy")

	_, evs := postWith(t, singleChatUpstream(t, "chat", limited), "/v1/responses", respStreamBody, nil)
	if len(evs) < 2 || eventType(evs[0]) != "response.created" {
		t.Fatalf("Responses stream: %d events, want response.created first", len(evs))
	}
	last := evs[len(evs)-1].Data
	if gjson.GetBytes(last, "type").Str != "response.failed" || gjson.GetBytes(last, "response.error.code").Str != "rate_limit_exceeded" ||
		!strings.HasPrefix(gjson.GetBytes(last, "response.error.message").Str, "busy; please try again in ") {
		// The wait is the cooldown the rate limit started (README "Failover and replay").
		t.Fatalf("Responses stream ended with %s, want response.failed rate_limit_exceeded with the upstream's message and the wait", last)
	}

	resp, b := readAll(t, singleChatUpstream(t, "chat", limited), "/v1/chat/completions", chatStreamBody)
	if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != "rate_limit_exceeded" ||
		gjson.GetBytes(b, "error.type").Str != "rate_limit_exceeded" || gjson.GetBytes(b, "error.message").Str != "busy" {
		t.Fatalf("Chat stream: %d %s, want 429 rate_limit_exceeded", resp.StatusCode, b)
	}
}

// A client error sent as a stream's first event (llama.cpp's 400 for a
// prompt over the context, inside a 200 stream) is answered as that 400
// while nothing went out (README "Failover and replay": only a Chat stream
// whose headers already went out gets an error chunk): a Chat client gets
// the HTTP 400 and OpenAI's error, through a Chat upstream and a Responses
// one alike; a Responses stream opens with response.created and fails with
// the error's type, which a client does not retry, not server_error.
func TestUpstreamClientErrorEventBeforeAnythingIsTheStatus(t *testing.T) {
	const msg = "the request exceeds the available context size"
	overflow := llamaStreamError(http.StatusBadRequest, "invalid_request_error", msg)
	for _, protocol := range []string{"chat", "responses"} {
		t.Run("chat client/"+protocol, func(t *testing.T) {
			resp, b := readAll(t, singleChatUpstream(t, protocol, overflow), "/v1/chat/completions", chatStreamBody)
			e := gjson.GetBytes(b, "error")
			if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
				e.Get("type").Str != "invalid_request_error" || e.Get("message").Str != msg ||
				e.Get("code").Type != gjson.Null || !e.Get("param").Exists() {
				t.Fatalf("%d %v %s, want HTTP 400 with the upstream's invalid_request_error (code and param null)", resp.StatusCode, resp.Header, b)
			}
		})
	}
	// A Responses stream's code is one of the spec's a client does not
	// retry: invalid_prompt, or context_length_exceeded for llama.cpp's own
	// context-overflow type (OpenAI's code, which says it all).
	for _, tt := range []struct{ typ, code, message string }{
		{"invalid_request_error", "invalid_prompt", msg},
		{"exceed_context_size_error", "context_length_exceeded", msg},
	} {
		t.Run("responses client/"+tt.typ, func(t *testing.T) {
			up := llamaStreamError(http.StatusBadRequest, tt.typ, msg)
			resp, evs := postWith(t, singleChatUpstream(t, "chat", up), "/v1/responses", respStreamBody, nil)
			if resp.StatusCode != http.StatusOK || len(evs) != 2 || eventType(evs[0]) != "response.created" {
				t.Fatalf("%d, %d events; want 200 with response.created then response.failed", resp.StatusCode, len(evs))
			}
			e := gjson.GetBytes(evs[1].Data, "response.error")
			if eventType(evs[1]) != "response.failed" || e.Get("code").Str != tt.code || e.Get("message").Str != tt.message {
				t.Fatalf("stream ended with %s, want response.failed %s with %q", evs[1].Data, tt.code, tt.message)
			}
		})
	}
}

// An upstream's 4xx answer whose error body is not OpenAI-shaped
// (llama.cpp's integer code and no param) reaches the client in OpenAI's
// shape (README "Endpoints"), message and type kept, on either endpoint,
// streamed or not, and without the upstream's Server header.
func TestUpstreamErrorBodyIsOpenAIShaped(t *testing.T) {
	llama := upstreamtest.Script{Status: http.StatusBadRequest, Header: http.Header{"Server": {"llama.cpp"}},
		Body: []byte(`{"error": {"code": 400, "message": "bad thing from upstream", "type": "invalid_request_error"}}`)}
	for _, ep := range []struct{ name, path, body string }{
		{"responses stream", "/v1/responses", respStreamBody},
		{"responses json", "/v1/responses", respJSONBody},
		{"chat stream", "/v1/chat/completions", chatStreamBody},
		{"chat json", "/v1/chat/completions", chatJSONBody},
	} {
		t.Run(ep.name, func(t *testing.T) {
			resp, b := readAll(t, singleChatUpstream(t, "chat", llama), ep.path, ep.body)
			e := gjson.GetBytes(b, "error")
			if resp.StatusCode != http.StatusBadRequest || e.Get("message").Str != "bad thing from upstream" ||
				e.Get("type").Str != "invalid_request_error" || e.Get("code").Type != gjson.Null ||
				e.Get("param").Type != gjson.Null || !e.Get("param").Exists() {
				t.Fatalf("%d %s, want 400 with OpenAI's error shape (string or null code, param present)", resp.StatusCode, b)
			}
			if s := resp.Header.Get("Server"); s != "" {
				t.Fatalf("the upstream's Server header %q was relayed", s)
			}
		})
	}
}

// A Chat client's stream answered with a whole chat.completion gets chunks
// whose every choice has finish_reason and logprobs, null until they have a
// value, as OpenAI's chunks and a relayed stream's have (the schema's
// ChatCompletionChunk choice requires finish_reason).
func TestChatChunksFromJSONCarryNullFinishReason(t *testing.T) {
	h := routedPairHarness(t, map[string]string{"A": "chat", "B": "chat"}, gateway.Options{})
	h.ups["A"].Enqueue(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
		ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(chatCompletionAnswer))}})
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	var finishes []string
	for _, ev := range evs {
		if ev.Done {
			continue
		}
		gjson.GetBytes(ev.Data, "choices").ForEach(func(_, ch gjson.Result) bool {
			f, lp := ch.Get("finish_reason"), ch.Get("logprobs")
			if !f.Exists() || !lp.Exists() {
				t.Fatalf("chunk without finish_reason or logprobs: %s", ev.Data)
			}
			finishes = append(finishes, f.Raw)
			return true
		})
	}
	if len(finishes) < 3 || finishes[len(finishes)-1] != `"tool_calls"` {
		t.Fatalf("finish_reason per chunk %v, want null on each and tool_calls last", finishes)
	}
	for _, f := range finishes[:len(finishes)-1] {
		if f != "null" {
			t.Fatalf("finish_reason per chunk %v, want null before the last", finishes)
		}
	}
}

// Logprobs asked of a Chat upstream by a Responses client are refused with
// a 400 naming the field (README "Chat-Completions-only upstreams"), not
// answered with empty logprobs arrays; the upstream is not called.
func TestLogprobsOnChatUpstreamAreRefused(t *testing.T) {
	for _, tc := range []struct{ extra, param string }{
		{`"include":["message.output_text.logprobs"]`, "include[0]"},
		{`"include":["reasoning.encrypted_content","message.output_text.logprobs"]`, "include[1]"},
		{`"top_logprobs":2`, "top_logprobs"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			h := singleChatUpstream(t, "chat", upstreamtest.Script{})
			resp, b := readAll(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,`+tc.extra+`}`)
			e := gjson.GetBytes(b, "error")
			if resp.StatusCode != http.StatusBadRequest || e.Get("code").Str != "unsupported_parameter" || e.Get("param").Str != tc.param {
				t.Fatalf("%d %s, want 400 unsupported_parameter naming %s", resp.StatusCode, b, tc.param)
			}
			if n := h.ups["A"].RequestCount(); n != 0 {
				t.Fatalf("the upstream was called %d times", n)
			}
		})
	}
	// Asking for none is no request for them.
	h := singleChatUpstream(t, "chat", upstreamtest.Script{})
	if resp, b := readAll(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","top_logprobs":0,"include":[]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("top_logprobs 0: %d %s", resp.StatusCode, b)
	}
}

// An upstream client error whose code is not among the spec's
// ResponseErrorCode values (invalid_value, sent as a stream's first event)
// reaches a Responses stream as invalid_prompt, a code a client does not
// retry, with the upstream's code leading the message; never as the
// server_error a client retries. From a Responses and a Chat upstream alike.
func TestUpstreamClientErrorCodeOutsideTheSpecIsInvalidPrompt(t *testing.T) {
	const msg = "Invalid value for 'temperature': must be at most 2."
	body := upstreamtest.ErrorBody(msg, "invalid_request_error", "invalid_value", "temperature")
	for _, protocol := range []string{"responses", "chat"} {
		t.Run(protocol, func(t *testing.T) {
			up := upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusBadRequest, body)
			resp, evs := postWith(t, singleChatUpstream(t, protocol, up), "/v1/responses", respStreamBody, nil)
			if resp.StatusCode != http.StatusOK || len(evs) != 2 || eventType(evs[1]) != "response.failed" {
				t.Fatalf("%d, %d events; want 200 with response.created then response.failed", resp.StatusCode, len(evs))
			}
			e := gjson.GetBytes(evs[1].Data, "response.error")
			if e.Get("code").Str != "invalid_prompt" || e.Get("message").Str != "invalid_value: "+msg {
				t.Fatalf("stream ended with %s, want invalid_prompt with %q", evs[1].Data, "invalid_value: "+msg)
			}
		})
	}
}
