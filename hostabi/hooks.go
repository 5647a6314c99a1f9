// Package hostabi is the contract between the Sluice host and its WebAssembly
// policies: hook inputs and verdicts as Go types, their wire encodings, and the
// built-in default decisions the host falls back to when no policy answers or a
// policy faults. The document for policy authors is ABI.md in this folder.
//
// This package imports only the standard library so that guests (GOOS=wasip1)
// and the host share one definition.
package hostabi

// Surface names the client-facing protocol a hook call is made for.
const (
	SurfaceResponsesStream = "responses_stream" // POST /v1/responses with stream:true (SSE)
	SurfaceResponsesJSON   = "responses_json"   // POST /v1/responses without stream
	SurfaceChatStream      = "chat_stream"      // POST /v1/chat/completions with stream:true
	SurfaceChatJSON        = "chat_json"        // POST /v1/chat/completions without stream
	SurfaceWebSocket       = "websocket"        // GET /v1/responses upgraded to WebSocket
)

// RecoverInput describes one upstream error-shaped answer: an `error` event, a
// `response.failed` event, a non-2xx HTTP answer or a transport fault. Since
// ABI version 3 it may also describe a conversation whose owner is gone
// (Code CodeOwnerUnavailable, ABI.md §3.1): the owner upstream of
// previous_response_id is no longer configured or is unusable, and the
// gateway kept the conversation's items, so it could rehydrate it on
// another upstream.
type RecoverInput struct {
	Surface    string `json:"surface"`
	Upstream   string `json:"upstream"`              // the upstream's configured name
	HTTPStatus int    `json:"http_status,omitempty"` // the upstream's HTTP status (or an error event's "status"), 0 if none
	EventType  string `json:"event_type,omitempty"`  // "error", "response.failed", or "" for a status/transport fault
	Code       string `json:"code,omitempty"`
	Type       string `json:"type,omitempty"`
	Param      string `json:"param,omitempty"`
	Message    string `json:"message,omitempty"`
	Transport  bool   `json:"transport,omitempty"` // a connection-level fault, no error body

	// ABI 3: the facts of an owner_unavailable question. They are never sent
	// to a module older than version 3, which is never asked it.
	OwnerRemoved         bool  `json:"owner_removed,omitempty"`      // the owner is no longer in the config
	OwnerDownMillis      int64 `json:"owner_down_ms,omitempty"`      // how long the owner has been down (0: not down, e.g. cooling down)
	RehydrateAfterMillis int64 `json:"rehydrate_after_ms,omitempty"` // continuity.rehydrate_after
	Portable             bool  `json:"portable,omitempty"`           // the conversation's items are kept: rehydrate is possible
}

// CodeOwnerUnavailable is RecoverInput.Code when the host asks whether a
// conversation whose owner is gone is rehydrated elsewhere (ABI 3).
const CodeOwnerUnavailable = "owner_unavailable"

// FailClosedKey is the member of a policy's config (policies.NAME) that
// is the gateway's, not the policy's: a rewrite policy whose config sets it
// true is held to its edits (ABI.md §7). The policy never gets it, from the
// gateway or from `sluice policy check|test -config`.
const FailClosedKey = "sluice_fail_closed"

// OwnerQuestion reports whether in asks about an unavailable owner (ABI 3):
// modules older than version 3 are not asked it.
func (in RecoverInput) OwnerQuestion() bool {
	return in.Code == CodeOwnerUnavailable && in.EventType == "" && in.HTTPStatus == 0 && !in.Transport
}

// RecoverVerdict is what the host does with an upstream error.
type RecoverVerdict uint32

// Recover verdicts. The numeric values are part of the ABI.
const (
	RecoverPass       RecoverVerdict = 0 // forward the error to the client as it is
	RecoverRecover    RecoverVerdict = 1 // rewrite to the retryable stream_incomplete contract, drop the upstream connection
	RecoverFailClosed RecoverVerdict = 2 // answer the retryable upstream_unavailable error
	// ABI 3, for an owner_unavailable question only: send the conversation's
	// kept items, with the request's own input, to the normal targets
	// (anywhere else it means fail_closed; see EffectiveRecover).
	RecoverRehydrate RecoverVerdict = 3
)

// String names the verdict as ABI.md does.
func (v RecoverVerdict) String() string {
	switch v {
	case RecoverPass:
		return "pass"
	case RecoverRecover:
		return "recover"
	case RecoverFailClosed:
		return "fail_closed"
	case RecoverRehydrate:
		return "rehydrate"
	}
	return "unknown"
}

// RecoverOutput is a recover hook's answer. Code and Message, when set,
// replace the gateway's default code/message for the rewritten error.
type RecoverOutput struct {
	Verdict RecoverVerdict `json:"verdict"`
	Code    string         `json:"code,omitempty"`
	Message string         `json:"message,omitempty"`
}

// ReplayInput is the context of a failed upstream attempt. In ABI version 1
// it described only failures before the response was committed to the
// client (the version-1 members); ABI version 2 adds the phase, the failure
// class and the target list, and asks about every failure the gateway could
// rescue (ABI.md §3.2).
type ReplayInput struct {
	Surface               string `json:"surface"`
	Upstream              string `json:"upstream"`
	Code                  string `json:"code"`                  // the failure code; "transport" for a connect/send/close fault
	HTTPStatus            int    `json:"http_status,omitempty"` // upstream status when there was one
	ReplayCount           int    `json:"replay_count"`          // replays already made for this request
	ResponseCreatedSeen   bool   `json:"response_created_seen"` // the client was sent the response's start (ABI.md §3.2: never before content)
	ResponseIDAssigned    bool   `json:"response_id_assigned"`  // the client was sent a response id (ABI.md §3.2: never before content)
	PendingRequests       int    `json:"pending_requests"`      // other requests pending on the same upstream connection
	HasPreviousResponseID bool   `json:"has_previous_response_id"`
	PinnedOwner           string `json:"pinned_owner,omitempty"` // the owner upstream of previous_response_id, if known
	RetryAfterMillis      int64  `json:"retry_after_ms,omitempty"`

	// ABI 2: the facts of the failure table (ABI.md §3.2). They are never
	// sent to a version-1 module; Phase "" means the version-1 meaning (a
	// failure before response.created, DefaultReplay's version-1 rule).
	Phase            string `json:"phase,omitempty"`         // PhaseBeforeHeaders, PhaseBeforeContent or PhaseAfterContent
	FailureClass     string `json:"failure_class,omitempty"` // one of the Failure* constants
	BytesSent        int64  `json:"bytes_sent,omitempty"`    // bytes of output text and arguments the client already has
	ItemsSent        int    `json:"items_sent,omitempty"`    // output items the client already saw added
	ToolCallInFlight bool   `json:"tool_call_in_flight,omitempty"`
	HasTools         bool   `json:"has_tools,omitempty"`       // the request carries tools (after content)
	TargetIndex      int    `json:"target_index,omitempty"`    // 0-based position of the failed target in the route
	TargetCount      int    `json:"target_count,omitempty"`    // targets in the route (upstreams, without routes)
	HasNextTarget    bool   `json:"has_next_target,omitempty"` // an untried, usable target remains, within the attempt budget
	// NextModelDiffers: a remaining usable target serves a different model
	// (a larger context may help after context_length_exceeded).
	NextModelDiffers  bool   `json:"next_model_differs,omitempty"`
	SameTargetRetries int    `json:"same_target_retries,omitempty"` // retries already made on the failed target
	MaxWaitMillis     int64  `json:"max_wait_ms,omitempty"`         // retry.max_wait: the longest Retry-After worth waiting
	Continuation      string `json:"continuation,omitempty"`        // the route's continuation: auto, restart or off
	PrefillAllowed    bool   `json:"prefill_allowed,omitempty"`     // the next target accepts a trailing assistant message
}

// Phases of a failure, by what the client had seen (ABI 2).
const (
	PhaseBeforeHeaders = "before_headers" // no usable answer: a connect error, a non-2xx status, a first-byte timeout
	PhaseBeforeContent = "before_content" // the upstream answered 2xx, the client has seen nothing (held-back lifecycle at most)
	PhaseAfterContent  = "after_content"  // content reached the client: only a continuation can rescue it
)

// Failure classes (ABI 2). A policy should treat an unknown class like
// FailureOther: new classes may be added without a version change.
const (
	FailureTransport     = "transport"      // connect refused or reset before headers
	FailureServerError   = "server_error"   // HTTP 5xx other than 503/529, or a server_error event
	FailureOverloaded    = "overloaded"     // HTTP 503/529, or an overloaded code
	FailureRateLimit     = "rate_limit"     // HTTP 429 or rate_limit_exceeded
	FailureQuota         = "quota"          // insufficient_quota and the other quota codes
	FailureFirstByte     = "first_byte"     // no response headers within the route's first_byte timeout
	FailureFirstToken    = "first_token"    // no content event within the route's first_token timeout
	FailureContextLength = "context_length" // context_length_exceeded
	FailureClientError   = "client_error"   // any other 4xx, content filters included
	FailureAuth          = "auth"           // the upstream refused the gateway's own credentials (401/403 or an auth code): it is parked
	FailureCut           = "cut"            // the stream closed or broke without a terminal event
	FailureStall         = "stall"          // no event within the route's stall timeout
	FailureErrorEvent    = "error_event"    // an error event or response.failed with another code (or none)
	FailureOther         = "other"
)

// ReplayVerdict is whether and where a failed request is sent again.
type ReplayVerdict uint32

// Replay verdicts. The numeric values are part of the ABI.
const (
	ReplayNo            ReplayVerdict = 0 // fail: the client gets the failure
	ReplayOtherUpstream ReplayVerdict = 1 // send the request to the next target
	ReplaySameUpstream  ReplayVerdict = 2 // retry the same target (after Retry-After or a short backoff)
	// ABI 2, after content: continue on the next target and splice its
	// output into the client's stream (before content they mean
	// ReplayOtherUpstream: there is nothing to continue; see EffectiveReplay).
	ReplayContinuePrefill ReplayVerdict = 3 // the text already sent goes as a trailing assistant message
	ReplayContinueRestart ReplayVerdict = 4 // the original request again; output suppressed until it matches what was sent
)

// String names the verdict as ABI.md does.
func (v ReplayVerdict) String() string {
	switch v {
	case ReplayNo:
		return "no"
	case ReplayOtherUpstream:
		return "replay_other_upstream"
	case ReplaySameUpstream:
		return "replay_same_upstream"
	case ReplayContinuePrefill:
		return "continue_prefill"
	case ReplayContinueRestart:
		return "continue_restart"
	}
	return "unknown"
}

// ReplayOutput is a replay hook's answer; PenaltyMillis puts the failed
// upstream in cooldown for that long (0: the host's own cooldown rules apply).
type ReplayOutput struct {
	Verdict       ReplayVerdict `json:"verdict"`
	PenaltyMillis int64         `json:"penalty_ms,omitempty"`
}

// RewriteInput is a request before an upstream is chosen. Body is the raw
// client body; it stays in the host and guests edit it by path.
type RewriteInput struct {
	Surface  string
	Endpoint string // "/v1/responses" or "/v1/chat/completions"
	Body     []byte
	Headers  map[string]string // lower-cased client headers a policy may read (never Authorization)
}

// RewriteOutput is the result of the rewrite hooks. A nil Reject means go on.
type RewriteOutput struct {
	Body          []byte            // the (possibly edited) body; nil means unchanged
	SetHeaders    map[string]string // extra or replaced upstream request headers
	RemoveHeaders []string          // upstream request headers to drop
	Upstream      string            // a named upstream to use, "" for normal selection
	Reject        *RejectError      // answer the client with this error and call no upstream
}

// RejectError is an OpenAI-style error a rewrite policy answers with.
type RejectError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Param   string `json:"param,omitempty"`
}
