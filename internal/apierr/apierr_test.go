package apierr

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Error
		ok   bool
	}{
		{"envelope", `{"error":{"message":"m","type":"t","code":"c","param":"p"}}`, Error{Message: "m", Type: "t", Code: "c", Param: "p"}, true},
		{"bare object", `{"message":"m","code":"c"}`, Error{Message: "m", Code: "c"}, true},
		{"numeric code (llama.cpp)", `{"error":{"code":500,"message":"boom","type":"server_error"}}`, Error{Message: "boom", Type: "server_error", Code: "500"}, true},
		{"null fields", `{"error":{"message":"m","type":"t","code":null,"param":null}}`, Error{Message: "m", Type: "t"}, true},
		{"string error is not an object", `{"error":"nope"}`, Error{}, false},
		{"not json", `<html>`, Error{}, false},
		{"no error fields", `{"id":"x"}`, Error{}, false},
		{"bare Responses error event", `{"type":"error","code":"c","message":"m","sequence_number":3}`, Error{Message: "m", Code: "c"}, true},
		{"event type alone is no error", `{"type":"error"}`, Error{}, false},
		{"nested type is the error's", `{"type":"error","error":{"type":"invalid_request_error","message":"m"}}`, Error{Message: "m", Type: "invalid_request_error"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse([]byte(tt.in))
			if ok != tt.ok || got != tt.want {
				t.Fatalf("Parse = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestWireShape(t *testing.T) {
	rec := httptest.NewRecorder()
	TooLarge(1024).Write(rec)
	if rec.Code != 413 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	var v map[string]map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	e := v["error"]
	if e["code"] != "payload_too_large" || e["param"] != "input" || e["type"] != "invalid_request_error" || e["message"] == "" {
		t.Fatalf("%s", rec.Body)
	}
	// Empty code and param are JSON null, as the OpenAI API sends them.
	b, _ := json.Marshal(&Error{Message: "m", Type: "server_error"})
	if string(b) != `{"error":{"code":null,"message":"m","param":null,"type":"server_error"}}` {
		t.Fatalf("%s", b)
	}
	if !StreamIncomplete("x").Retryable() || Invalid("p", "c", "x").Retryable() {
		t.Fatal("retryable classification")
	}
}

// RetryAfter goes out in whole seconds, rounded up, and in milliseconds
// (retry-after-ms, which the OpenAI SDKs read first).
func TestRetryAfterHeaders(t *testing.T) {
	for _, c := range []struct {
		wait    time.Duration
		sec, ms string
	}{
		{wait: 29986 * time.Millisecond, sec: "30", ms: "29986"},
		{wait: 20 * time.Millisecond, sec: "1", ms: "20"},
		{wait: 1500 * time.Microsecond, sec: "1", ms: "2"},
		{}, // no wait: no header
	} {
		rec := httptest.NewRecorder()
		CapacityExhausted("rate_limit_exceeded", "requests", c.wait, "m").Write(rec)
		if rec.Code != 429 || rec.Header().Get("Retry-After") != c.sec || rec.Header().Get("Retry-After-Ms") != c.ms {
			t.Fatalf("RetryAfter %v: %d, Retry-After %q, Retry-After-Ms %q; want 429, %q, %q",
				c.wait, rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("Retry-After-Ms"), c.sec, c.ms)
		}
	}
}

// TestStoreUnavailable: the store's 503 says to retry, with Retry-After,
// only when the store gives a wait; without one (a store damaged for
// good) it says an operator must act, and sends no Retry-After.
func TestStoreUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name           string
		retryAfter     time.Duration
		wantMessage    string
		wantRetryAfter string
	}{
		{"out for the moment", 2 * time.Second, "reading x failed; retry the request", "2"},
		{"damaged for good", 0, "reading x failed: the gateway's store is damaged and stays unavailable until an operator restores it and restarts the gateway", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := StoreUnavailable(CodeStoreUnavailable, tt.retryAfter, "reading %s failed", "x")
			rec := httptest.NewRecorder()
			e.Write(rec)
			if rec.Code != 503 || e.Code != CodeStoreUnavailable || e.Type != TypeServer || e.Message != tt.wantMessage ||
				rec.Header().Get("Retry-After") != tt.wantRetryAfter {
				t.Errorf("%d %+v Retry-After %q; want 503 %s %q Retry-After %q", rec.Code, e, rec.Header().Get("Retry-After"),
					CodeStoreUnavailable, tt.wantMessage, tt.wantRetryAfter)
			}
		})
	}
}

// NoRetry goes out as x-should-retry: false, which the OpenAI SDKs honour
// before the status; an error without it says nothing of the kind.
func TestNoRetryHeader(t *testing.T) {
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{&Error{Status: http.StatusBadGateway, Type: TypeServer, NoRetry: true}, "false"},
		{&Error{Status: http.StatusBadGateway, Type: TypeServer}, ""},
	} {
		h := http.Header{}
		c.e.SetRetryHeaders(h)
		if got := h.Get("X-Should-Retry"); got != c.want {
			t.Errorf("NoRetry %v: X-Should-Retry %q, want %q", c.e.NoRetry, got, c.want)
		}
		if c.e.Retryable() == c.e.NoRetry {
			t.Errorf("NoRetry %v: Retryable %v", c.e.NoRetry, c.e.Retryable())
		}
	}
}
