package gateway

import (
	"net/http"
	"testing"
)

// TestOpenAIShapedBody: an upstream's error body reaches the client in
// OpenAI's shape (README "Endpoints"); one already in it is relayed byte
// for byte, and a body with no error envelope is left alone.
func TestOpenAIShapedBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"openai shaped", 400, `{"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": "invalid_value"}}`,
			`{"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": "invalid_value"}}`},
		{"openai shaped, nulls", 400, `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`,
			`{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
		{"llama.cpp integer code, no param", 400, `{"error": {"code": 400, "message": "m", "type": "invalid_request_error"}}`,
			`{"error":{"code":null,"message":"m","param":null,"type":"invalid_request_error"}}`},
		{"integer code beside another status", 404, `{"error":{"code":400,"message":"m","type":"not_found_error"}}`,
			`{"error":{"code":"400","message":"m","param":null,"type":"not_found_error"}}`},
		{"no type", http.StatusNotFound, `{"error":{"message":"no such model","code":"model_not_found"}}`,
			`{"error":{"code":"model_not_found","message":"no such model","param":null,"type":"invalid_request_error"}}`},
		{"no envelope", 400, `bad request`, `bad request`},
		{"cut short", 400, `{"error":{"m`, `{"error":{"m`},
		{"a string error", 400, `{"error":"bad"}`, `{"error":"bad"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(openAIShapedBody(tc.status, []byte(tc.body))); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestClientCode: a code that only repeats the status gives way to
// rate_limit_exceeded for a 429 and to none otherwise.
func TestClientCode(t *testing.T) {
	for _, tc := range []struct {
		code   string
		status int
		want   string
	}{
		{"429", 429, "rate_limit_exceeded"},
		{"", 429, "rate_limit_exceeded"},
		{"insufficient_quota", 429, "insufficient_quota"},
		{"400", 400, ""},
		{"invalid_value", 400, "invalid_value"},
		{"400", 404, "400"},
		{"", 0, ""},
	} {
		if got := clientCode(tc.code, tc.status); got != tc.want {
			t.Errorf("clientCode(%q, %d) = %q, want %q", tc.code, tc.status, got, tc.want)
		}
	}
}
