// Package apierr is the OpenAI-shaped error every surface of the gateway emits.
//
// The wire shape is {"error":{"message":…,"type":…,"code":…,"param":…}}; Status
// is the HTTP status the error is sent with (or carried in a WebSocket error
// frame's "status").
package apierr

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Error types used by the gateway.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
)

// Codes the gateway itself emits (README, "Endpoints"; SECURITY.md for the limits).
const (
	CodeStreamIncomplete    = "stream_incomplete"
	CodeUpstreamUnavailable = "upstream_unavailable"
	CodePayloadTooLarge     = "payload_too_large"
	CodeInvalidJSON         = "invalid_json"
	CodeMissingField        = "missing_required_parameter"
	CodeInvalidType         = "invalid_type"
	CodeNotFound            = "not_found"
	CodeNestingTooDeep      = "nesting_too_deep"  // 400: JSON deeper than limits.max_json_depth
	CodeServerOverloaded    = "server_overloaded" // 503: a gateway-wide budget is spent; retry after Retry-After
	CodeRequestTimeout      = "request_timeout"   // 408: the body did not arrive within timeouts.read_body
	CodeDuplicateKey        = "duplicate_key"     // 400: a top-level key appears twice
	CodeUnknownParameter    = "unknown_parameter" // 400: a top-level key the gateway refuses (a field it reads, in another case)

	CodeInvalidValue             = "invalid_value"                // 400: a parameter has a value the gateway does not accept
	CodeInvalidBody              = "invalid_body"                 // 400: the body could not be read or decompressed
	CodeUnsupportedEncoding      = "unsupported_content_encoding" // 415: Content-Encoding is not identity, gzip or zstd
	CodeMethodNotAllowed         = "method_not_allowed"           // 405
	CodeInternalError            = "internal_error"               // 500: a gateway bug (a handler panic)
	CodeWebSocketRequired        = "websocket_required"           // 426: GET /v1/responses without an upgrade
	CodeUnsupportedFrame         = "unsupported_frame"            // a WebSocket frame that is not response.create JSON
	CodeInvalidInputChunk        = "invalid_input_chunk"          // a streaming-input chunk frame was rejected
	CodeInvalidTemplate          = "invalid_template"             // streaming input: the chunks do not merge into the template
	CodeInvalidBase64            = "invalid_base64"               // streaming input: a binary chunk's payload
	CodeStoreUnavailable         = "store_unavailable"            // 503: the session store does not answer
	CodePolicyUnavailable        = "policy_unavailable"           // 503: a fail-closed rewrite policy could not run (README "Policies")
	CodeClientClosedRequest      = "client_closed_request"        // 499: the client went away
	CodeUpstreamError            = "upstream_error"               // an upstream error without a code of its own
	CodeWebSocketRefused         = "websocket_refused"            // the upstream refused the WebSocket upgrade
	CodeContextLengthExceeded    = "context_length_exceeded"      // the chat bridge's history is longer than it keeps; llama.cpp's context overflow (FromUpstream)
	CodePreviousResponseNotFound = "previous_response_not_found"  // the chat bridge does not know previous_response_id

	// Sluice keys and limits (gateway/auth.go).
	CodeInvalidAPIKey     = "invalid_api_key"
	CodeModelNotAllowed   = "model_not_allowed"
	CodeRateLimitExceeded = "rate_limit_exceeded"
	CodeInsufficientQuota = "insufficient_quota"

	// The operator's endpoints (/admin/…).
	CodeInvalidAdminToken = "invalid_admin_token" // 401
	CodeInvalidLimit      = "invalid_limit"
	CodeInvalidName       = "invalid_name"
	CodeKeysNotStored     = "keys_not_stored"
	CodeKeyConflict       = "key_conflict"
	CodeUsageNotRecorded  = "usage_not_recorded"
	CodeContinuityOff     = "continuity_disabled" // 501: /admin/continuity with continuity.disabled
	CodeInvalidDate       = "invalid_date"
)

// Error is an OpenAI-style error with the HTTP status it travels with.
type Error struct {
	Status int `json:"-"`
	// RetryAfter, when positive, is sent as the Retry-After header (whole
	// seconds, rounded up) and as retry-after-ms, which the OpenAI SDKs
	// read first.
	RetryAfter time.Duration `json:"-"`
	// NoRetry is sent as x-should-retry: false, the header OpenAI's API
	// sends on an answer no retry of the same request can change and its
	// SDKs honour before the status: a client SDK then does not retry.
	NoRetry bool   `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Param   string `json:"param"`
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%s (%s, param %s): %s", e.Code, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%s (%s): %s", e.Code, e.Type, e.Message)
}

// Retryable reports whether a client may retry the same request unchanged.
func (e *Error) Retryable() bool {
	return !e.NoRetry && (e.Type == TypeServer || e.Status == http.StatusTooManyRequests || e.Status >= 500)
}

// MarshalJSON renders the error as the OpenAI envelope {"error":{…}}, with a
// JSON null for an empty param or code, as the OpenAI API does.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(e.Envelope())
}

// Envelope is the {"error":{…}} value for embedding in other JSON documents.
func (e *Error) Envelope() map[string]any {
	return map[string]any{"error": e.Object()}
}

// Object is the inner error object (message, type, code, param).
func (e *Error) Object() map[string]any {
	obj := map[string]any{"message": e.Message, "type": e.Type, "code": nullable(e.Code), "param": nullable(e.Param)}
	return obj
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// SetRetryHeaders sets Retry-After (whole seconds, rounded up) and
// Retry-After-Ms (the header the OpenAI SDKs read first) from RetryAfter,
// when it is positive, and X-Should-Retry: false when NoRetry.
func (e *Error) SetRetryHeaders(h http.Header) {
	if e.NoRetry {
		h.Set("X-Should-Retry", "false")
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(int64((e.RetryAfter+time.Second-1)/time.Second)))
		h.Set("Retry-After-Ms", fmt.Sprint(int64((e.RetryAfter+time.Millisecond-1)/time.Millisecond)))
	}
}

// Write sends the error as a JSON response with its status.
func (e *Error) Write(w http.ResponseWriter) {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	body, _ := e.MarshalJSON()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	e.SetRetryHeaders(w.Header())
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", challenge)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// challenge is the WWW-Authenticate value Write sends with every 401 the
// gateway answers itself (an invalid Sluice key, a missing admin token):
// RFC 9110 §15.5.2 requires one on a 401, and both credentials are bearer
// tokens (RFC 6750), sent as Authorization: Bearer.
const challenge = `Bearer realm="sluice"`

// Invalid is a 400 invalid_request_error naming the offending parameter.
func Invalid(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// TooLarge is the 413 payload_too_large error.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: CodePayloadTooLarge, Param: "input",
		Message: fmt.Sprintf("request body exceeds the gateway limit of %d bytes", limit)}
}

// TooDeep is the 400 for a JSON document nested deeper than limit.
func TooDeep(limit int, what string) *Error {
	return Invalid("", CodeNestingTooDeep, "%s nests objects or arrays deeper than the gateway limit of %d levels", what, limit)
}

// Overloaded is the retryable 503 for a gateway-wide budget that is spent.
func Overloaded(retryAfter time.Duration, format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeServerOverloaded, RetryAfter: retryAfter,
		Message: fmt.Sprintf(format, args...)}
}

// RequestTimeout is the 408 for a request body that did not arrive in time.
func RequestTimeout(limit time.Duration) *Error {
	return &Error{Status: http.StatusRequestTimeout, Type: TypeInvalidRequest, Code: CodeRequestTimeout,
		Message: fmt.Sprintf("the request body did not arrive within %s", limit)}
}

// PastLastEvent is the resume refusal for a starting_after beyond the last
// event of a stream that ended (README "Resuming a stream"; the gateway's
// resume and a streaming-input session's result answer alike).
func PastLastEvent(responseID string, after int64) *Error {
	return Invalid("starting_after", CodeInvalidValue, "starting_after is %d, past the last event of response '%s'.", after, responseID)
}

// StreamIncomplete is the retryable error for a stream the upstream cut or lost.
func StreamIncomplete(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: CodeStreamIncomplete, Message: fmt.Sprintf(format, args...)}
}

// CapacityExhausted is the 429 for a request whose every target cools down
// for its capacity: code and typ are the upstream's (rate_limit_exceeded
// and requests, insufficient_quota, …), as a client that acts on them got
// them from the request that started the cooldown, the code as ClientCode
// gives it beside the 429 (llama.cpp's "429" is rate_limit_exceeded, README
// "Failover and replay"); without a type, the code stands for it (as
// OpenAI's insufficient_quota does), never server_error for a 429.
func CapacityExhausted(code, typ string, retryAfter time.Duration, format string, args ...any) *Error {
	code = ClientCode(code, http.StatusTooManyRequests)
	if typ == "" || typ == TypeServer {
		typ = code
	}
	return &Error{Status: http.StatusTooManyRequests, Type: typ, Code: code, RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

// UpstreamUnavailable is the retryable error for no usable upstream or an unusable pinned owner.
func UpstreamUnavailable(status int, format string, args ...any) *Error {
	return &Error{Status: status, Type: TypeServer, Code: CodeUpstreamUnavailable, Message: fmt.Sprintf(format, args...)}
}

// StoreUnavailable is the 503 for a request the gateway's own store failed
// for, the message saying what failed (format, args); code is the
// surface's (upstream_unavailable, or streaming input's store_unavailable).
// retryAfter is the store's wait (store.ClientRetryAfter): positive, the
// store is out for the moment and the client is told to retry after it;
// zero, the store stays failed until an operator restores it and restarts
// the gateway, which the message says, with no Retry-After and no "retry"
// that no wait would honour (README "Continuity").
func StoreUnavailable(code string, retryAfter time.Duration, format string, args ...any) *Error {
	what := fmt.Sprintf(format, args...)
	e := &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: code}
	if retryAfter <= 0 {
		e.Message = what + ": the gateway's store is damaged and stays unavailable until an operator restores it and restarts the gateway"
		return e
	}
	e.Message, e.RetryAfter = what+"; retry the request", retryAfter
	return e
}

// Parse reads an OpenAI-style error from an error body or event. It accepts
// {"error":{…}}, a bare {"message","type","code","param"} object, and
// {"type":"error","error":{…}} / response.failed shapes are handled by callers.
// ok is false when the bytes carry no recognisable error.
//
// In a bare object, a type of "error" is the Responses error event's own
// type ({"type":"error","code",…}), not the error's: Type is left empty
// then, so that a reader (the recover policy, hostabi/ABI.md §3.1) never
// takes "error" for an error type.
func Parse(b []byte) (e Error, ok bool) {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && len(env.Error) > 0 && env.Error[0] == '{' {
		return parseObject(env.Error)
	}
	e, ok = parseObject(b)
	if e.Type == "error" {
		e.Type = ""
		ok = e.Message != "" || e.Code != ""
	}
	return e, ok
}

func parseObject(b []byte) (Error, bool) {
	var raw struct {
		Message any `json:"message"`
		Type    any `json:"type"`
		Code    any `json:"code"`
		Param   any `json:"param"`
	}
	if json.Unmarshal(b, &raw) != nil {
		return Error{}, false
	}
	e := Error{Message: str(raw.Message), Type: str(raw.Type), Code: str(raw.Code), Param: str(raw.Param)}
	if e.Message == "" && e.Code == "" && e.Type == "" {
		return Error{}, false
	}
	return e, true
}

// str renders a loosely typed JSON scalar (codes are sometimes numbers) as a string.
func str(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case float64:
		return fmt.Sprint(t)
	default:
		b, _ := json.Marshal(t)
		return string(b)
	}
}
