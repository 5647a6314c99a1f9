// Package sdk is the Go guest SDK for Sluice policies. A policy is a small
// `package main` built with the standard Go toolchain for GOOS=wasip1
// GOARCH=wasm -buildmode=c-shared. It registers its handlers from init:
//
//	package main
//
//	import "github.com/sluice-gw/sluice/sdk"
//
//	func init() {
//		sdk.Register(sdk.Policy{
//			Recover: func(in sdk.RecoverInput) (sdk.RecoverOutput, error) {
//				if in.Code == "vendor_lost_context" {
//					return sdk.RecoverOutput{Verdict: sdk.Recover}, nil
//				}
//				return sdk.RecoverOutput{}, sdk.ErrDefer // let the next policy decide
//			},
//		})
//	}
//
//	func main() {}
//
// Importing the package links the ABI exports (hostabi/ABI.md): the version
// marker, sluice_alloc, every hook and sluice_hooks, which tells the host
// which handlers are registered. The SDK hides pointers and encodings.
//
// The same package builds natively, where Harness runs the registered
// handlers with the host's semantics so that policies are unit-tested with
// plain `go test`. The SDK uses no third-party packages and no reflection
// (no encoding/json) on the hook path, so guests stay small and fast.
package sdk

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// Hook inputs and outputs are the host's own types (hostabi/hooks.go); their
// JSON encodings are in ABI.md §3.
type (
	RecoverInput   = hostabi.RecoverInput
	RecoverOutput  = hostabi.RecoverOutput
	RecoverVerdict = hostabi.RecoverVerdict
	ReplayInput    = hostabi.ReplayInput
	ReplayOutput   = hostabi.ReplayOutput
	ReplayVerdict  = hostabi.ReplayVerdict
	RewriteContext = hostabi.RewriteContext
	RejectError    = hostabi.RejectError
	// RewriteInput and RewriteOutput are what Harness.Rewrite takes and
	// returns, so a policy's tests need not import hostabi.
	RewriteInput  = hostabi.RewriteInput
	RewriteOutput = hostabi.RewriteOutput
)

// Surfaces (Request.Surface, RewriteInput.Surface).
const (
	SurfaceResponsesStream = hostabi.SurfaceResponsesStream
	SurfaceResponsesJSON   = hostabi.SurfaceResponsesJSON
	SurfaceChatStream      = hostabi.SurfaceChatStream
	SurfaceChatJSON        = hostabi.SurfaceChatJSON
	SurfaceWebSocket       = hostabi.SurfaceWebSocket
)

// Verdicts.
const (
	Pass       = hostabi.RecoverPass
	Recover    = hostabi.RecoverRecover
	FailClosed = hostabi.RecoverFailClosed
	// ABI 3, for an owner_unavailable question (RecoverInput.OwnerQuestion):
	// send the conversation's kept items to the normal targets.
	Rehydrate = hostabi.RecoverRehydrate

	ReplayNo            = hostabi.ReplayNo            // fail: the client gets the failure
	ReplayOtherUpstream = hostabi.ReplayOtherUpstream // the next target
	ReplaySameUpstream  = hostabi.ReplaySameUpstream  // the same target again, after Retry-After or a short backoff
	// ABI 2, after content: continue on the next target, the text sent as a
	// trailing assistant message (prefill) or the request again with the
	// output suppressed until it passes what was sent (restart).
	ReplayContinuePrefill = hostabi.ReplayContinuePrefill
	ReplayContinueRestart = hostabi.ReplayContinueRestart
)

// ABIVersion is the ABI version a policy built with this SDK declares.
const ABIVersion = hostabi.ABIVersion

// Phases of a failure (ReplayInput.Phase, ABI 2): what the client had seen.
// "" means a version-1 style input (a failure before response.created).
const (
	PhaseBeforeHeaders = hostabi.PhaseBeforeHeaders // no usable upstream answer: connect error, non-2xx status, first-byte timeout
	PhaseBeforeContent = hostabi.PhaseBeforeContent // a 2xx answer that failed before the client saw anything
	PhaseAfterContent  = hostabi.PhaseAfterContent  // the client has content: only a continuation rescues it
)

// Failure classes (ReplayInput.FailureClass, ABI 2). Treat a class you do
// not know like FailureOther: classes may be added without a version change.
const (
	FailureTransport     = hostabi.FailureTransport     // connect refused or reset before headers
	FailureServerError   = hostabi.FailureServerError   // HTTP 5xx but 503, a server_error event
	FailureOverloaded    = hostabi.FailureOverloaded    // HTTP 503/529 or an overloaded code
	FailureRateLimit     = hostabi.FailureRateLimit     // HTTP 429 or rate_limit_exceeded
	FailureQuota         = hostabi.FailureQuota         // insufficient_quota and the other quota codes
	FailureFirstByte     = hostabi.FailureFirstByte     // no response headers within first_byte
	FailureFirstToken    = hostabi.FailureFirstToken    // no content event within first_token
	FailureContextLength = hostabi.FailureContextLength // context_length_exceeded
	FailureClientError   = hostabi.FailureClientError   // any other 4xx, content filters included
	FailureAuth          = hostabi.FailureAuth          // the upstream refused the gateway's credentials
	FailureCut           = hostabi.FailureCut           // the stream broke without a terminal event
	FailureStall         = hostabi.FailureStall         // no event within the route's stall timeout
	FailureErrorEvent    = hostabi.FailureErrorEvent    // an error event with another code (or none)
	FailureOther         = hostabi.FailureOther
)

// DefaultReplay is the host's built-in replay decision: with a Phase the
// failure table (hostabi/ABI.md §3.2), without one the version-1 rule. A
// policy that changes one rule can answer everything else with it.
func DefaultReplay(in ReplayInput) ReplayOutput { return hostabi.DefaultReplay(in) }

// DefaultRecover is the host's built-in recover decision.
func DefaultRecover(in RecoverInput) RecoverOutput { return hostabi.DefaultRecover(in) }

// CodeOwnerUnavailable is RecoverInput.Code when the host asks (ABI 3)
// whether a conversation whose owner upstream is gone is rehydrated on
// another upstream: OwnerRemoved, OwnerDownMillis, RehydrateAfterMillis and
// Portable say why and whether it can be. Answer Rehydrate or FailClosed.
const CodeOwnerUnavailable = hostabi.CodeOwnerUnavailable

// EffectiveRecover is what the host does with recover verdict v for in:
// Rehydrate only for an owner_unavailable question about a portable
// conversation (fail_closed elsewhere).
func EffectiveRecover(in RecoverInput, v RecoverVerdict) RecoverVerdict {
	return hostabi.EffectiveRecover(in, v)
}

// EffectiveReplay is what the host does with verdict v for the failure in
// (for example, before content a continue verdict means ReplayOtherUpstream).
func EffectiveReplay(in ReplayInput, v ReplayVerdict) ReplayVerdict {
	return hostabi.EffectiveReplay(in, v)
}

// IsReplayableCode reports whether code is one of the capacity codes
// (rate_limit_exceeded, insufficient_quota, …) the defaults replay.
func IsReplayableCode(code string) bool { return hostabi.IsReplayableCode(code) }

// ErrDefer, returned by a handler, means "no opinion": the host asks the next
// policy that implements the hook and finally uses its built-in default.
var ErrDefer = errors.New("sdk: defer to the next policy")

// Policy is a set of handlers; nil handlers are not implemented (the host is
// told so and never calls them). A handler error other than ErrDefer is
// logged and makes the host use its built-in default for this call.
type Policy struct {
	Recover  func(in RecoverInput) (RecoverOutput, error)
	Replay   func(in ReplayInput) (ReplayOutput, error)
	Rewrite  func(req *Request) error
	SelfTest func() error
	// StreamEvent, when set, is the optional per-event stream hook
	// (ABI.md §3.5): it sees each text-bearing Responses event the client
	// is about to get (deltas and *.done text events) and may pass, drop
	// or replace it. It runs once per such event, so keep it short.
	StreamEvent func(ev StreamEvent) (StreamVerdict, error)
	// Active, when set, is asked once at load (after init, with the
	// policy's config readable through Config): false tells the host the
	// policy has nothing to do, so it is loaded but never called, and
	// requests do not pay for a call that would change nothing.
	Active func() bool
}

var registered Policy

// Register installs the policy's handlers. Call it from init. Later calls
// replace only the handlers they set.
func Register(p Policy) {
	if p.Recover != nil {
		registered.Recover = p.Recover
	}
	if p.Replay != nil {
		registered.Replay = p.Replay
	}
	if p.Rewrite != nil {
		registered.Rewrite = p.Rewrite
	}
	if p.Active != nil {
		registered.Active = p.Active
	}
	if p.SelfTest != nil {
		registered.SelfTest = p.SelfTest
	}
	if p.StreamEvent != nil {
		registered.StreamEvent = p.StreamEvent
	}
}

// HandleStreamEvent registers the stream_event handler.
func HandleStreamEvent(f func(ev StreamEvent) (StreamVerdict, error)) {
	Register(Policy{StreamEvent: f})
}

// StreamEvent is one Responses event as the stream_event hook sees it:
// Type, the client's SequenceNumber, OutputIndex and ContentIndex (-1 when
// absent), ItemID, and Delta (HasDelta: a *.delta event) or Text (HasText:
// a *.done text event).
type StreamEvent = hostabi.StreamEventInput

// StreamVerdict is a stream_event handler's answer; the zero value passes
// the event. Use PassEvent, DropEvent, ReplaceDelta or ReplaceText.
type StreamVerdict = hostabi.StreamEventOutput

// PassEvent sends the event as it is.
func PassEvent() StreamVerdict { return StreamVerdict{} }

// DropEvent leaves a delta out of the client's stream (the host keeps the
// sequence numbers contiguous and the recorded text consistent). On a
// *.done event it passes.
func DropEvent() StreamVerdict { return StreamVerdict{Verdict: hostabi.StreamDrop} }

// ReplaceDelta sends a delta event with delta d instead of its own.
func ReplaceDelta(d string) StreamVerdict {
	return StreamVerdict{Verdict: hostabi.StreamReplace, Delta: d, HasDelta: true}
}

// ReplaceText sends a *.done text event with text t instead of its own.
func ReplaceText(t string) StreamVerdict {
	return StreamVerdict{Verdict: hostabi.StreamReplace, Text: t, HasText: true}
}

// HandleRecover registers the recover handler.
func HandleRecover(f func(in RecoverInput) (RecoverOutput, error)) { Register(Policy{Recover: f}) }

// HandleReplay registers the replay handler.
func HandleReplay(f func(in ReplayInput) (ReplayOutput, error)) { Register(Policy{Replay: f}) }

// HandleRewrite registers the rewrite_request handler.
func HandleRewrite(f func(req *Request) error) { Register(Policy{Rewrite: f}) }

// HandleSelfTest registers the self-test, run by the host before the policy
// serves; a non-nil error rejects the module.
func HandleSelfTest(f func() error) { Register(Policy{SelfTest: f}) }

// Registered returns the registered handlers.
func Registered() Policy { return registered }

// hooks is the sluice_hooks bit set for p.
//
//lint:ignore U1000 used by the sluice_hooks export on wasip1
func (p Policy) hooks() hostabi.Hook {
	var h hostabi.Hook
	if p.Active != nil && !p.Active() {
		// Nothing to do with this config: only the self-test runs.
		if p.SelfTest != nil {
			h |= hostabi.HookSelfTest
		}
		return h
	}
	if p.Recover != nil {
		h |= hostabi.HookRecover
	}
	if p.Replay != nil {
		h |= hostabi.HookReplay
	}
	if p.Rewrite != nil {
		h |= hostabi.HookRewrite
	}
	if p.SelfTest != nil {
		h |= hostabi.HookSelfTest
	}
	if p.StreamEvent != nil {
		h |= hostabi.HookStreamEvent
	}
	return h
}

// Level is a log level.
type Level uint32

// Log levels.
const (
	LevelTrace = Level(hostabi.LevelTrace)
	LevelDebug = Level(hostabi.LevelDebug)
	LevelInfo  = Level(hostabi.LevelInfo)
	LevelWarn  = Level(hostabi.LevelWarn)
	LevelError = Level(hostabi.LevelError)
)

// Log writes a message to the host's log, tagged with the policy and hook.
func Log(level Level, msg string) { platform.log(level, msg) }

// Logf formats and logs a message (it links fmt into the module).
func Logf(level Level, format string, args ...any) { Log(level, fmt.Sprintf(format, args...)) }

// Config returns the policy's configuration JSON given by the operator, or
// "" when there is none. Use Lookup, EachElement and EachMember to read it.
func Config() string { return platform.config() }

// Now is the host's wall clock (the WASI clock inside a policy is fake).
func Now() time.Time { return time.UnixMilli(platform.nowMillis()) }

// HostError is a failed host-function call.
type HostError struct {
	Op   string
	Code int32 // see hostabi.Code*
}

func (e *HostError) Error() string {
	return "sdk: " + e.Op + ": " + hostabi.CodeText(e.Code)
}

// IsNotFound reports whether err is a HostError for a missing path.
func IsNotFound(err error) bool {
	var he *HostError
	return errors.As(err, &he) && he.Code == hostabi.CodeNotFound
}

func hostErr(op string, code int32) error {
	if code >= 0 {
		return nil
	}
	return &HostError{Op: op, Code: code}
}

// backend is the host side of a Request: host functions in Wasm, an
// in-memory document natively.
type backend interface {
	get(path string) (string, int32)
	set(path, raw string) int32
	del(path string) int32
	setHeader(name, value string) int32
	removeHeader(name string) int32
	useUpstream(name string) int32
	reject(raw []byte) int32
}

// Request is the request a rewrite handler edits. The body stays in the
// host: Get copies only the value asked for, and edits are applied by the
// host. Paths follow ABI.md §6, e.g. "model", "tools.3", "reasoning.effort",
// `tools.#(type=="web_search")`, "tools.#" (length).
type Request struct {
	ctx        RewriteContext
	rawHeaders []byte // decoded on first use
	b          backend
}

func (r *Request) headers() map[string]string {
	if r.rawHeaders != nil {
		r.ctx.Headers, _ = hostabi.DecodeHeaders(r.rawHeaders)
		r.rawHeaders = nil
	}
	return r.ctx.Headers
}

// Context is the request's context (surface, endpoint, model, stream, size,
// readable headers) as it was when the hook started.
func (r *Request) Context() RewriteContext {
	r.headers()
	return r.ctx
}

// Surface is the client-facing protocol (hostabi.Surface*).
func (r *Request) Surface() string { return r.ctx.Surface }

// Endpoint is "/v1/responses" or "/v1/chat/completions".
func (r *Request) Endpoint() string { return r.ctx.Endpoint }

// Model is the body's top-level "model" when the hook started.
func (r *Request) Model() string { return r.ctx.Model }

// Stream reports whether the body asked for streaming.
func (r *Request) Stream() bool { return r.ctx.Stream }

// Header returns a client header (lower-case name); credentials are never
// visible.
func (r *Request) Header(name string) string { return r.headers()[name] }

// Get returns the raw JSON at path (a string value comes with its quotes).
func (r *Request) Get(path string) (string, bool) {
	v, code := r.b.get(path)
	return v, code >= 0
}

// GetString returns the string at path, unquoted; false when absent or not
// a string.
func (r *Request) GetString(path string) (string, bool) {
	raw, ok := r.Get(path)
	if !ok {
		return "", false
	}
	return jsonx.Unquote([]byte(raw))
}

// Len returns the length of the array at path.
func (r *Request) Len(path string) (int, bool) {
	p := "#"
	if path != "" {
		p = path + ".#"
	}
	raw, ok := r.Get(p)
	if !ok {
		return 0, false
	}
	n := 0
	for _, c := range raw {
		n = n*10 + int(c-'0')
	}
	return n, true
}

// Set stores the raw JSON value at path (ABI.md §6: replaces, appends with
// "-1", adds members and missing intermediate objects).
func (r *Request) Set(path, rawJSON string) error {
	return hostErr("doc_set "+path, r.b.set(path, rawJSON))
}

// SetString stores s as a JSON string at path.
func (r *Request) SetString(path, s string) error { return r.Set(path, jsonx.Quote(s)) }

// Delete removes the member or element at path; it reports false (and no
// error) when nothing is there.
func (r *Request) Delete(path string) (bool, error) {
	code := r.b.del(path)
	if code == hostabi.CodeNotFound {
		return false, nil
	}
	return code >= 0, hostErr("doc_delete "+path, code)
}

// SetHeader sets an upstream request header.
func (r *Request) SetHeader(name, value string) error {
	return hostErr("header_set "+name, r.b.setHeader(name, value))
}

// RemoveHeader drops an upstream request header.
func (r *Request) RemoveHeader(name string) error {
	return hostErr("header_remove "+name, r.b.removeHeader(name))
}

// UseUpstream sends the request to the named upstream.
func (r *Request) UseUpstream(name string) error {
	return hostErr("use_upstream "+name, r.b.useUpstream(name))
}

// Reject answers the client with an OpenAI-style error (type
// invalid_request_error) and calls no upstream; return nil from the handler
// afterwards. status 0 means 400.
func (r *Request) Reject(status int, code, param, message string) error {
	raw := hostabi.AppendRejectError(nil, RejectError{Status: status, Code: code, Param: param, Message: message, Type: "invalid_request_error"})
	return hostErr("reject", r.b.reject(raw))
}

// Config is the policy's configuration JSON (same as the package-level Config).
func (r *Request) Config() string { return Config() }

// Quote returns s as a JSON string literal.
func Quote(s string) string { return jsonx.Quote(s) }

// Unquote decodes a raw JSON string (with quotes).
func Unquote(raw string) (string, bool) { return jsonx.Unquote([]byte(raw)) }

// EscapeKey escapes an object key for use as one path segment.
func EscapeKey(key string) string { return jsonx.EscapeKey(key) }

// Lookup returns the raw JSON at path inside the JSON text raw (the same path
// syntax as Request.Get), e.g. Lookup(Config(), "model_aliases."+EscapeKey(m)).
func Lookup(raw, path string) (string, bool) {
	if raw == "" {
		return "", false
	}
	v, err := jsonx.Lookup([]byte(raw), path)
	if err != nil {
		return "", false
	}
	return string(v), true
}

// LookupString is Lookup for a string value, unquoted.
func LookupString(raw, path string) (string, bool) {
	v, ok := Lookup(raw, path)
	if !ok {
		return "", false
	}
	return Unquote(v)
}

// EachElement calls fn with each element (raw JSON) of the array raw; it
// reports whether raw is an array.
func EachElement(raw string, fn func(i int, elem string) bool) bool {
	return jsonx.ForEachElement([]byte(raw), func(i int, e []byte) bool { return fn(i, string(e)) })
}

// EachMember calls fn with each member of the object raw (decoded key, raw
// JSON value); it reports whether raw is an object.
func EachMember(raw string, fn func(key, value string) bool) bool {
	return jsonx.ForEachMember([]byte(raw), func(k string, v []byte) bool { return fn(k, string(v)) })
}

// platformAPI is what differs between Wasm and native builds.
type platformAPI interface {
	log(level Level, msg string)
	config() string
	nowMillis() int64
}
