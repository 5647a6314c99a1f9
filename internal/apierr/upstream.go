package apierr

import (
	"net/http"
	"strconv"
)

// llamaContextOverflowType is the error type llama.cpp's server gives a
// prompt longer than its context (its code is the bare status, 400).
const llamaContextOverflowType = "exceed_context_size_error"

// CodeBesideStatus is an upstream error's code as a failure reason shows it
// next to the status: "" when the code only repeats the status, as
// llama.cpp's numeric "code": 401 does, so the reason reads "HTTP 401",
// not "HTTP 401 401".
func CodeBesideStatus(code string, status int) string {
	if code == strconv.Itoa(status) {
		return ""
	}
	return code
}

// ClientCode is an upstream error's code as the client gets it beside
// status: a code that only repeats the status (llama.cpp's numeric
// "code": 429, CodeBesideStatus) says nothing a client acts on, so a 429
// gets the code OpenAI's rate limits carry, rate_limit_exceeded (what a
// client that retries on rate limits looks for, from a Responses stream's
// response.failed too), and any other status none (README
// "Chat-Completions-only upstreams").
func ClientCode(code string, status int) string {
	if code != "" && CodeBesideStatus(code, status) != "" {
		return code
	}
	if status == http.StatusTooManyRequests {
		return CodeRateLimitExceeded
	}
	return ""
}

// FromUpstream is e, an upstream's error that came with status (0 when
// none is known), as a client gets it, whatever path it takes (an HTTP
// status, a 200 error envelope, a stream's error event): its code as
// ClientCode gives it, and llama.cpp's context overflow, whose code only
// repeats its 400, as OpenAI says it, invalid_request_error with
// context_length_exceeded, the code clients compact or truncate the
// conversation on (README "Chat-Completions-only upstreams"). An error that
// names no type gets the one its 4xx status stands for, invalid_request_error
// (OpenAI's own stream error events carry no type), so that it reaches a
// Responses client as a client error, not as a server_error it would retry
// (README "The terminal-event rule"); a 429 keeps none, its code says what it
// is. Its message, param and status are kept.
func FromUpstream(e Error, status int) Error {
	e.Code = ClientCode(e.Code, status)
	if e.Code == "" && e.Type == llamaContextOverflowType {
		e.Type, e.Code = TypeInvalidRequest, CodeContextLengthExceeded
	}
	if e.Type == "" && status >= 400 && status < 500 && status != http.StatusTooManyRequests {
		e.Type = TypeInvalidRequest
	}
	return e
}
