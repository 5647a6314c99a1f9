package gateway

import (
	"errors"
	"testing"
)

// TestErrorEnvelopeAnswer: which complete 2xx bodies are an upstream's
// error (sendHTTP judges them as their status) and which are answers.
func TestErrorEnvelopeAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		readErr    error
		status     int // 0: not an error envelope
		code       string
	}{
		{"OpenAI envelope, client error", `{"error":{"message":"too long","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`, nil, 400, "context_length_exceeded"},
		{"OpenAI envelope, server error", `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`, nil, 502, ""},
		{"status as the code", `{"error":{"message":"slow down","code":429}}`, nil, 429, "rate_limit_exceeded"}, // apierr.FromUpstream: a status sent as the code is no code
		{"vLLM bare error object", `{"object":"error","message":"bad","type":"BadRequestError","code":400}`, nil, 400, ""},
		{"a Response, error null", `{"id":"resp_1","object":"response","status":"completed","error":null,"output":[]}`, nil, 0, ""},
		{"a failed Response", `{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"x"},"output":[]}`, nil, 0, ""},
		{"a chat.completion", `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`, nil, 0, ""},
		{"not JSON", `<html>oops</html>`, nil, 0, ""},
		{"cut short", `{"error":{"message":"too long","type":"invalid_request_error"}}`, errors.New("cut"), 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := errorEnvelopeAnswer([]byte(tc.body), tc.readErr)
			switch {
			case tc.status == 0 && e != nil:
				t.Fatalf("got %+v; want no error envelope", e)
			case tc.status != 0 && (e == nil || e.Status != tc.status || e.Code != tc.code):
				t.Fatalf("got %+v; want status %d code %q", e, tc.status, tc.code)
			}
		})
	}
}
