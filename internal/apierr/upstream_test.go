package apierr

import "testing"

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
		if got := ClientCode(tc.code, tc.status); got != tc.want {
			t.Errorf("ClientCode(%q, %d) = %q, want %q", tc.code, tc.status, got, tc.want)
		}
	}
}

// TestFromUpstream: an upstream's error as a client gets it: the code
// through ClientCode, and llama.cpp's context overflow (its code only the
// status) as OpenAI's invalid_request_error context_length_exceeded; an
// error without a type that came with a 4xx (not a 429) as
// invalid_request_error; message, param and status kept.
func TestFromUpstream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     Error
		status int
		want   Error
	}{
		{"llama.cpp rate limit", Error{Type: "rate_limit_error", Code: "429", Message: "m"}, 429,
			Error{Type: "rate_limit_error", Code: "rate_limit_exceeded", Message: "m"}},
		{"llama.cpp context overflow", Error{Status: 400, Type: "exceed_context_size_error", Code: "400", Message: "m"}, 400,
			Error{Status: 400, Type: TypeInvalidRequest, Code: CodeContextLengthExceeded, Message: "m"}},
		{"context overflow without a code", Error{Type: "exceed_context_size_error", Message: "m"}, 400,
			Error{Type: TypeInvalidRequest, Code: CodeContextLengthExceeded, Message: "m"}},
		{"context overflow with a code of its own", Error{Type: "exceed_context_size_error", Code: "too_long"}, 400,
			Error{Type: "exceed_context_size_error", Code: "too_long"}},
		{"status as code, another status", Error{Type: TypeInvalidRequest, Code: "400", Param: "p"}, 400,
			Error{Type: TypeInvalidRequest, Param: "p"}},
		{"a code of its own", Error{Type: TypeInvalidRequest, Code: "invalid_value"}, 400,
			Error{Type: TypeInvalidRequest, Code: "invalid_value"}},
		{"no type, a 4xx", Error{Code: "invalid_value", Param: "temperature", Message: "m"}, 400,
			Error{Type: TypeInvalidRequest, Code: "invalid_value", Param: "temperature", Message: "m"}},
		{"no type, a 429", Error{Code: "rate_limit_exceeded"}, 429, Error{Code: "rate_limit_exceeded"}},
		{"no type, a 5xx", Error{Code: "boom"}, 502, Error{Code: "boom"}},
		{"no type, no status", Error{Code: "boom"}, 0, Error{Code: "boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromUpstream(tc.in, tc.status); got != tc.want {
				t.Fatalf("FromUpstream(%+v, %d) = %+v, want %+v", tc.in, tc.status, got, tc.want)
			}
		})
	}
}

// TestCapacityExhaustedCode: the capacity 429 carries a status sent as the
// code as rate_limit_exceeded (README "Failover and replay").
func TestCapacityExhaustedCode(t *testing.T) {
	for _, tc := range []struct{ code, typ, wantCode, wantType string }{
		{"429", "rate_limit_error", "rate_limit_exceeded", "rate_limit_error"},
		{"429", "", "rate_limit_exceeded", "rate_limit_exceeded"},
		{"insufficient_quota", "", "insufficient_quota", "insufficient_quota"},
	} {
		e := CapacityExhausted(tc.code, tc.typ, 0, "m")
		if e.Code != tc.wantCode || e.Type != tc.wantType || e.Status != 429 {
			t.Errorf("CapacityExhausted(%q, %q) = %d %s/%s, want 429 %s/%s", tc.code, tc.typ, e.Status, e.Code, e.Type, tc.wantCode, tc.wantType)
		}
	}
}
