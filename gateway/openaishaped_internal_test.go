package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestOpenAIShapedBody: an upstream's error body reaches the client in
// OpenAI's shape (README "Endpoints"); one already in it is relayed byte
// for byte; any other becomes an OpenAI error, its status kept, never
// relayed as it came (an HTML page, a body cut at maxUpstreamErrorBody).
func TestOpenAIShapedBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		cut    string
		want   string
	}{
		{"openai shaped", 400, `{"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": "invalid_value"}}`, "",
			`{"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": "invalid_value"}}`},
		{"openai shaped, nulls", 400, `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`, "",
			`{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
		{"llama.cpp integer code, no param", 400, `{"error": {"code": 400, "message": "m", "type": "invalid_request_error"}}`, "",
			`{"error":{"code":null,"message":"m","param":null,"type":"invalid_request_error"}}`},
		// A status sent as the code is none, a 429's rate_limit_exceeded,
		// in OpenAI's shape too; llama.cpp's context overflow is OpenAI's
		// context_length_exceeded (README "Chat-Completions-only upstreams").
		{"status as a string code, 429", 429, `{"error":{"message":"m","type":"rate_limit_error","param":null,"code":"429"}}`, "",
			`{"error":{"code":"rate_limit_exceeded","message":"m","param":null,"type":"rate_limit_error"}}`},
		{"llama.cpp integer code, 429", 429, `{"error":{"code":429,"message":"m","type":"rate_limit_error"}}`, "",
			`{"error":{"code":"rate_limit_exceeded","message":"m","param":null,"type":"rate_limit_error"}}`},
		{"llama.cpp context overflow", 400, `{"error":{"code":400,"message":"m","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`, "",
			`{"error":{"code":"context_length_exceeded","message":"m","param":null,"type":"invalid_request_error"}}`},
		{"integer code beside another status", 404, `{"error":{"code":400,"message":"m","type":"not_found_error"}}`, "",
			`{"error":{"code":"400","message":"m","param":null,"type":"not_found_error"}}`},
		{"no type", http.StatusNotFound, `{"error":{"message":"no such model","code":"model_not_found"}}`, "",
			`{"error":{"code":"model_not_found","message":"no such model","param":null,"type":"invalid_request_error"}}`},
		{"vLLM's bare error object", 400, `{"object":"error","message":"m","type":"BadRequestError","param":null,"code":400}`, "",
			`{"error":{"code":null,"message":"m","param":null,"type":"BadRequestError"}}`},
		{"a string error (Ollama)", 404, `{"error":"model \"x\" not found"}`, "",
			`{"error":{"code":null,"message":"model \"x\" not found","param":null,"type":"invalid_request_error"}}`},
		{"text", 400, "bad\n  request\n", "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 400 Bad Request: bad request","param":null,"type":"invalid_request_error"}}`},
		{"HTML", 403, `<html><body>denied</body></html>`, "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 403 Forbidden: \u003chtml\u003e\u003cbody\u003edenied\u003c/body\u003e\u003c/html\u003e","param":null,"type":"invalid_request_error"}}`},
		{"JSON with no error", 422, `{"detail":"x"}`, "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 422 Unprocessable Entity: {\"detail\":\"x\"}","param":null,"type":"invalid_request_error"}}`},
		{"invalid JSON", 400, `{"error":{"m`, "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 400 Bad Request: {\"error\":{\"m","param":null,"type":"invalid_request_error"}}`},
		{"valid JSON, cut at the bound", 400, `{"error":{"message":"m","type":"t","param":null,"code":null}}`, "over 1048576 bytes",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 400 Bad Request with an error body over 1048576 bytes, not relayed: {\"error\":{\"message\":\"m\",\"type\":\"t\",\"param\":null,\"code\":null}} …","param":null,"type":"invalid_request_error"}}`},
		{"not text", 400, "\x00\x01\xff\xfe", "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 400 Bad Request with an error body that is not text (4 bytes)","param":null,"type":"invalid_request_error"}}`},
		{"empty", 404, "", "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 404 Not Found without an error message","param":null,"type":"invalid_request_error"}}`},
		// The excerpt ends before a word the bound would cut: a key there
		// would show its beginning, which the scrubber never saw whole.
		{"excerpt cut before a word", 400, strings.Repeat("a ", 97) + "sk-SECRETKEY-0123456789 tail", "",
			`{"error":{"code":"upstream_error","message":"the upstream answered HTTP 400 Bad Request: ` + strings.TrimSpace(strings.Repeat("a ", 97)) + ` …","param":null,"type":"invalid_request_error"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(openAIShapedBody(tc.status, []byte(tc.body), tc.cut)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
