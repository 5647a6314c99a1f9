package hostabi

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/sluice-gw/sluice/internal/jsonx"
)

// This file holds the wire encodings of hook inputs and outputs (ABI.md §3,
// §4). Encoders write compact JSON (no insignificant whitespace) with the
// members in the order of the struct fields and the json tags' omitempty
// rules; decoders accept any JSON object, in any member order, ignore unknown
// members and treat null as the zero value. They use no reflection so that
// guests stay small and fast.

// RewriteContext is the input of the rewrite_request hook: everything about
// the request except its body, which stays in the host (doc_* functions).
type RewriteContext struct {
	Surface   string            `json:"surface"`
	Endpoint  string            `json:"endpoint"`
	Model     string            `json:"model,omitempty"` // the body's top-level "model" when it is a string
	Stream    bool              `json:"stream"`          // the body's top-level "stream" is true
	BodyBytes int               `json:"body_bytes"`      // the body's size when the hook starts
	Headers   map[string]string `json:"headers,omitempty"`
}

func appendKey(dst []byte, first bool, key string) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

func appendStrField(dst []byte, first bool, key, v string) []byte {
	return jsonx.AppendQuote(appendKey(dst, first, key), v)
}

func appendIntField(dst []byte, first bool, key string, v int64) []byte {
	return strconv.AppendInt(appendKey(dst, first, key), v, 10)
}

func appendBoolField(dst []byte, first bool, key string, v bool) []byte {
	return strconv.AppendBool(appendKey(dst, first, key), v)
}

// AppendRecoverInput appends the JSON encoding of in for a module of the
// current ABIVersion.
func AppendRecoverInput(dst []byte, in RecoverInput) []byte {
	return AppendRecoverInputVersion(dst, in, ABIVersion)
}

// AppendRecoverInputVersion appends the JSON encoding of in for a module
// declaring ABI version v: before version 3 the version-3 members are left
// out whatever their values; from version 3 each is left out when zero.
func AppendRecoverInputVersion(dst []byte, in RecoverInput, v int32) []byte {
	dst = append(dst, '{')
	dst = appendStrField(dst, true, "surface", in.Surface)
	dst = appendStrField(dst, false, "upstream", in.Upstream)
	if in.HTTPStatus != 0 {
		dst = appendIntField(dst, false, "http_status", int64(in.HTTPStatus))
	}
	if in.EventType != "" {
		dst = appendStrField(dst, false, "event_type", in.EventType)
	}
	if in.Code != "" {
		dst = appendStrField(dst, false, "code", in.Code)
	}
	if in.Type != "" {
		dst = appendStrField(dst, false, "type", in.Type)
	}
	if in.Param != "" {
		dst = appendStrField(dst, false, "param", in.Param)
	}
	if in.Message != "" {
		dst = appendStrField(dst, false, "message", in.Message)
	}
	if in.Transport {
		dst = appendBoolField(dst, false, "transport", true)
	}
	if v < 3 {
		return append(dst, '}')
	}
	if in.OwnerRemoved {
		dst = appendBoolField(dst, false, "owner_removed", true)
	}
	if in.OwnerDownMillis != 0 {
		dst = appendIntField(dst, false, "owner_down_ms", in.OwnerDownMillis)
	}
	if in.RehydrateAfterMillis != 0 {
		dst = appendIntField(dst, false, "rehydrate_after_ms", in.RehydrateAfterMillis)
	}
	if in.Portable {
		dst = appendBoolField(dst, false, "portable", true)
	}
	return append(dst, '}')
}

// decoder decodes one flat JSON object. String values without escapes are
// substrings of one copy of the input, so decoding allocates once (this
// matters in guests, where every allocation is expensive).
type decoder struct {
	b   []byte
	src string // string(b), made on the first string value
}

// object walks the top-level object, calling set for each member with the
// raw key (escapes are decoded only when present) and the value's span.
func (d *decoder) object(set func(key []byte, vs, ve int) error) error {
	b := d.b
	i := jsonx.SkipSpace(b, 0)
	var ferr error
	end, err := jsonx.WalkMembers(b, i, func(key []byte, _, vs, ve int) bool {
		if jsonx.HasBackslash(key) {
			k, ok := jsonx.Unescape(key)
			if !ok {
				ferr = jsonx.ErrSyntax
				return false
			}
			key = []byte(k)
		}
		if e := set(key, vs, ve); e != nil {
			ferr = fmt.Errorf("member %q: %w", key, e)
			return false
		}
		return true
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	if jsonx.SkipSpace(b, end) != len(b) {
		return jsonx.ErrSyntax
	}
	return nil
}

// typeError is the fault for a member whose well-formed value raw is not
// of the kind the ABI gives it (want): what it must be and what it is, so
// that an author is not sent looking for a syntax error (ABI.md §4).
func typeError(want string, raw []byte) error {
	got := jsonx.Kind(raw)
	if got == "a number" && len(raw) <= maxQuotedNumber {
		got = string(raw) // 1.5, 1e30: as written
	}
	return fmt.Errorf("must be %s, got %s", want, got)
}

// maxQuotedNumber is the longest number typeError quotes; a longer one is
// only called a number.
const maxQuotedNumber = 32

func (d *decoder) str(p *string, vs, ve int) error {
	raw := d.b[vs:ve]
	if string(raw) == "null" {
		*p = ""
		return nil
	}
	if len(raw) < 2 || raw[0] != '"' {
		return typeError("a string", raw)
	}
	inner := raw[1 : len(raw)-1]
	if jsonx.HasBackslash(inner) {
		s, ok := jsonx.Unescape(inner)
		if !ok {
			return jsonx.ErrSyntax
		}
		*p = s
		return nil
	}
	if d.src == "" {
		d.src = string(d.b)
	}
	*p = d.src[vs+1 : ve-1]
	return nil
}

func (d *decoder) int(p *int, vs, ve int) error {
	n, err := jsonx.ParseInt(d.b[vs:ve])
	if err != nil || int64(int(n)) != n {
		return typeError("an integer", d.b[vs:ve])
	}
	*p = int(n)
	return nil
}

func (d *decoder) int64(p *int64, vs, ve int) error {
	n, err := jsonx.ParseInt(d.b[vs:ve])
	if err != nil {
		return typeError("an integer", d.b[vs:ve])
	}
	*p = n
	return nil
}

func (d *decoder) bool(p *bool, vs, ve int) error {
	v, err := jsonx.ParseBool(d.b[vs:ve])
	if err != nil {
		return typeError("a boolean", d.b[vs:ve])
	}
	*p = v
	return nil
}

// DecodeRecoverInput decodes a recover hook input.
func DecodeRecoverInput(b []byte) (RecoverInput, error) {
	var in RecoverInput
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "surface":
			return d.str(&in.Surface, vs, ve)
		case "upstream":
			return d.str(&in.Upstream, vs, ve)
		case "http_status":
			return d.int(&in.HTTPStatus, vs, ve)
		case "event_type":
			return d.str(&in.EventType, vs, ve)
		case "code":
			return d.str(&in.Code, vs, ve)
		case "type":
			return d.str(&in.Type, vs, ve)
		case "param":
			return d.str(&in.Param, vs, ve)
		case "message":
			return d.str(&in.Message, vs, ve)
		case "transport":
			return d.bool(&in.Transport, vs, ve)
		case "owner_removed":
			return d.bool(&in.OwnerRemoved, vs, ve)
		case "owner_down_ms":
			return d.int64(&in.OwnerDownMillis, vs, ve)
		case "rehydrate_after_ms":
			return d.int64(&in.RehydrateAfterMillis, vs, ve)
		case "portable":
			return d.bool(&in.Portable, vs, ve)
		}
		return nil
	})
	return in, err
}

// AppendReplayInput appends the JSON encoding of in for a module of the
// current ABIVersion.
func AppendReplayInput(dst []byte, in ReplayInput) []byte {
	return AppendReplayInputVersion(dst, in, ABIVersion)
}

// AppendReplayInputVersion appends the JSON encoding of in for a module
// declaring ABI version v. Version 1 gets exactly the version-1 members
// (the version-2 members are left out whatever their values); version 2 gets
// them and then the version-2 members, each left out when zero.
func AppendReplayInputVersion(dst []byte, in ReplayInput, v int32) []byte {
	dst = append(dst, '{')
	dst = appendStrField(dst, true, "surface", in.Surface)
	dst = appendStrField(dst, false, "upstream", in.Upstream)
	dst = appendStrField(dst, false, "code", in.Code)
	if in.HTTPStatus != 0 {
		dst = appendIntField(dst, false, "http_status", int64(in.HTTPStatus))
	}
	dst = appendIntField(dst, false, "replay_count", int64(in.ReplayCount))
	dst = appendBoolField(dst, false, "response_created_seen", in.ResponseCreatedSeen)
	dst = appendBoolField(dst, false, "response_id_assigned", in.ResponseIDAssigned)
	dst = appendIntField(dst, false, "pending_requests", int64(in.PendingRequests))
	dst = appendBoolField(dst, false, "has_previous_response_id", in.HasPreviousResponseID)
	if in.PinnedOwner != "" {
		dst = appendStrField(dst, false, "pinned_owner", in.PinnedOwner)
	}
	if in.RetryAfterMillis != 0 {
		dst = appendIntField(dst, false, "retry_after_ms", in.RetryAfterMillis)
	}
	if v < 2 {
		return append(dst, '}')
	}
	if in.Phase != "" {
		dst = appendStrField(dst, false, "phase", in.Phase)
	}
	if in.FailureClass != "" {
		dst = appendStrField(dst, false, "failure_class", in.FailureClass)
	}
	if in.BytesSent != 0 {
		dst = appendIntField(dst, false, "bytes_sent", in.BytesSent)
	}
	if in.ItemsSent != 0 {
		dst = appendIntField(dst, false, "items_sent", int64(in.ItemsSent))
	}
	if in.ToolCallInFlight {
		dst = appendBoolField(dst, false, "tool_call_in_flight", true)
	}
	if in.HasTools {
		dst = appendBoolField(dst, false, "has_tools", true)
	}
	if in.TargetIndex != 0 {
		dst = appendIntField(dst, false, "target_index", int64(in.TargetIndex))
	}
	if in.TargetCount != 0 {
		dst = appendIntField(dst, false, "target_count", int64(in.TargetCount))
	}
	if in.HasNextTarget {
		dst = appendBoolField(dst, false, "has_next_target", true)
	}
	if in.NextModelDiffers {
		dst = appendBoolField(dst, false, "next_model_differs", true)
	}
	if in.SameTargetRetries != 0 {
		dst = appendIntField(dst, false, "same_target_retries", int64(in.SameTargetRetries))
	}
	if in.MaxWaitMillis != 0 {
		dst = appendIntField(dst, false, "max_wait_ms", in.MaxWaitMillis)
	}
	if in.Continuation != "" {
		dst = appendStrField(dst, false, "continuation", in.Continuation)
	}
	if in.PrefillAllowed {
		dst = appendBoolField(dst, false, "prefill_allowed", true)
	}
	return append(dst, '}')
}

// DecodeReplayInput decodes a replay hook input.
func DecodeReplayInput(b []byte) (ReplayInput, error) {
	var in ReplayInput
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "surface":
			return d.str(&in.Surface, vs, ve)
		case "upstream":
			return d.str(&in.Upstream, vs, ve)
		case "code":
			return d.str(&in.Code, vs, ve)
		case "http_status":
			return d.int(&in.HTTPStatus, vs, ve)
		case "replay_count":
			return d.int(&in.ReplayCount, vs, ve)
		case "response_created_seen":
			return d.bool(&in.ResponseCreatedSeen, vs, ve)
		case "response_id_assigned":
			return d.bool(&in.ResponseIDAssigned, vs, ve)
		case "pending_requests":
			return d.int(&in.PendingRequests, vs, ve)
		case "has_previous_response_id":
			return d.bool(&in.HasPreviousResponseID, vs, ve)
		case "pinned_owner":
			return d.str(&in.PinnedOwner, vs, ve)
		case "retry_after_ms":
			return d.int64(&in.RetryAfterMillis, vs, ve)
		case "phase":
			return d.str(&in.Phase, vs, ve)
		case "failure_class":
			return d.str(&in.FailureClass, vs, ve)
		case "bytes_sent":
			return d.int64(&in.BytesSent, vs, ve)
		case "items_sent":
			return d.int(&in.ItemsSent, vs, ve)
		case "tool_call_in_flight":
			return d.bool(&in.ToolCallInFlight, vs, ve)
		case "has_tools":
			return d.bool(&in.HasTools, vs, ve)
		case "target_index":
			return d.int(&in.TargetIndex, vs, ve)
		case "target_count":
			return d.int(&in.TargetCount, vs, ve)
		case "has_next_target":
			return d.bool(&in.HasNextTarget, vs, ve)
		case "next_model_differs":
			return d.bool(&in.NextModelDiffers, vs, ve)
		case "same_target_retries":
			return d.int(&in.SameTargetRetries, vs, ve)
		case "max_wait_ms":
			return d.int64(&in.MaxWaitMillis, vs, ve)
		case "continuation":
			return d.str(&in.Continuation, vs, ve)
		case "prefill_allowed":
			return d.bool(&in.PrefillAllowed, vs, ve)
		}
		return nil
	})
	return in, err
}

// AppendRewriteContext appends the JSON encoding of c. Headers are written
// in sorted order.
func AppendRewriteContext(dst []byte, c RewriteContext) []byte {
	dst = append(dst, '{')
	dst = appendStrField(dst, true, "surface", c.Surface)
	dst = appendStrField(dst, false, "endpoint", c.Endpoint)
	if c.Model != "" {
		dst = appendStrField(dst, false, "model", c.Model)
	}
	dst = appendBoolField(dst, false, "stream", c.Stream)
	dst = appendIntField(dst, false, "body_bytes", int64(c.BodyBytes))
	if len(c.Headers) > 0 {
		dst = appendKey(dst, false, "headers")
		dst = append(dst, '{')
		keys := make([]string, 0, len(c.Headers))
		for k := range c.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonx.AppendQuote(dst, k)
			dst = append(dst, ':')
			dst = jsonx.AppendQuote(dst, c.Headers[k])
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// DecodeRewriteContext decodes a rewrite_request hook input.
func DecodeRewriteContext(b []byte) (RewriteContext, error) {
	c, raw, err := DecodeRewriteContextLazy(b)
	if err == nil && raw != nil {
		c.Headers, err = DecodeHeaders(raw)
	}
	return c, err
}

// DecodeRewriteContextLazy decodes a rewrite_request hook input except its
// headers, whose raw JSON object it returns (nil when absent) for
// DecodeHeaders; guests that never read a header skip that work.
func DecodeRewriteContextLazy(b []byte) (RewriteContext, []byte, error) {
	var c RewriteContext
	var headers []byte
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "surface":
			return d.str(&c.Surface, vs, ve)
		case "endpoint":
			return d.str(&c.Endpoint, vs, ve)
		case "model":
			return d.str(&c.Model, vs, ve)
		case "stream":
			return d.bool(&c.Stream, vs, ve)
		case "body_bytes":
			return d.int(&c.BodyBytes, vs, ve)
		case "headers":
			if string(d.b[vs:ve]) != "null" {
				headers = d.b[vs:ve]
			}
		}
		return nil
	})
	return c, headers, err
}

// DecodeHeaders decodes the "headers" object of a rewrite context.
func DecodeHeaders(raw []byte) (map[string]string, error) {
	h := map[string]string{}
	d := decoder{b: raw}
	err := d.object(func(k []byte, vs, ve int) error {
		var v string
		err := d.str(&v, vs, ve)
		h[string(k)] = v
		return err
	})
	return h, err
}

// AppendRecoverOutput appends the JSON encoding of out.
func AppendRecoverOutput(dst []byte, out RecoverOutput) []byte {
	dst = append(dst, '{')
	dst = appendIntField(dst, true, "verdict", int64(out.Verdict))
	if out.Code != "" {
		dst = appendStrField(dst, false, "code", out.Code)
	}
	if out.Message != "" {
		dst = appendStrField(dst, false, "message", out.Message)
	}
	return append(dst, '}')
}

// ErrBadVerdict reports a verdict number the ABI does not define.
var ErrBadVerdict = errors.New("hostabi: unknown verdict")

// verdictField parses a verdict number from 0 to max.
func verdictField(raw []byte, max int64) (int64, error) {
	n, err := jsonx.ParseInt(raw)
	if err != nil {
		return 0, typeError("an integer", raw)
	}
	if n < 0 || n > max {
		return 0, ErrBadVerdict
	}
	return n, nil
}

// DecodeRecoverOutput decodes and validates a recover hook output of the
// current ABIVersion.
func DecodeRecoverOutput(b []byte) (RecoverOutput, error) {
	return DecodeRecoverOutputVersion(b, ABIVersion)
}

// DecodeRecoverOutputVersion decodes and validates a recover hook output of
// a module declaring ABI version v: versions 1 and 2 define the verdicts 0
// to 2, version 3 adds 3 (rehydrate).
func DecodeRecoverOutputVersion(b []byte, v int32) (RecoverOutput, error) {
	var out RecoverOutput
	seen := false
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "verdict":
			n, err := verdictField(d.b[vs:ve], int64(maxRecoverVerdict(v)))
			if err != nil {
				return err
			}
			seen = true
			out.Verdict = RecoverVerdict(n)
		case "code":
			return d.str(&out.Code, vs, ve)
		case "message":
			return d.str(&out.Message, vs, ve)
		}
		return nil
	})
	if err == nil && !seen {
		err = errors.New("hostabi: output has no verdict")
	}
	return out, err
}

// AppendReplayOutput appends the JSON encoding of out.
func AppendReplayOutput(dst []byte, out ReplayOutput) []byte {
	dst = append(dst, '{')
	dst = appendIntField(dst, true, "verdict", int64(out.Verdict))
	if out.PenaltyMillis != 0 {
		dst = appendIntField(dst, false, "penalty_ms", out.PenaltyMillis)
	}
	return append(dst, '}')
}

// DecodeReplayOutput decodes and validates a replay hook output of the
// current ABIVersion.
func DecodeReplayOutput(b []byte) (ReplayOutput, error) {
	return DecodeReplayOutputVersion(b, ABIVersion)
}

// DecodeReplayOutputVersion decodes and validates a replay hook output of a
// module declaring ABI version v: version 1 defines the verdicts 0 to 2,
// version 2 adds 3 and 4.
func DecodeReplayOutputVersion(b []byte, v int32) (ReplayOutput, error) {
	var out ReplayOutput
	seen := false
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "verdict":
			n, err := verdictField(d.b[vs:ve], int64(maxReplayVerdict(v)))
			if err != nil {
				return err
			}
			seen = true
			out.Verdict = ReplayVerdict(n)
		case "penalty_ms":
			n, err := jsonx.ParseInt(d.b[vs:ve])
			if err != nil || n < 0 {
				return typeError("a non-negative integer (at most 2^62 ms)", d.b[vs:ve])
			}
			out.PenaltyMillis = n
		}
		return nil
	})
	if err == nil && !seen {
		err = errors.New("hostabi: output has no verdict")
	}
	return out, err
}

// ValidRecoverVerdict reports whether v is a recover verdict the current
// ABIVersion defines.
func ValidRecoverVerdict(v uint32) bool { return ValidRecoverVerdictVersion(v, ABIVersion) }

// ValidRecoverVerdictVersion reports whether v is a recover verdict ABI
// version abi defines.
func ValidRecoverVerdictVersion(v uint32, abi int32) bool { return v <= uint32(maxRecoverVerdict(abi)) }

// maxRecoverVerdict is the highest recover verdict of an ABI version.
func maxRecoverVerdict(abi int32) RecoverVerdict {
	if abi < 3 {
		return RecoverFailClosed
	}
	return RecoverRehydrate
}

// ValidReplayVerdict reports whether v is a replay verdict the current
// ABIVersion defines.
func ValidReplayVerdict(v uint32) bool { return ValidReplayVerdictVersion(v, ABIVersion) }

// ValidReplayVerdictVersion reports whether v is a replay verdict ABI
// version abi defines.
func ValidReplayVerdictVersion(v uint32, abi int32) bool { return v <= uint32(maxReplayVerdict(abi)) }

// maxReplayVerdict is the highest replay verdict of an ABI version.
func maxReplayVerdict(abi int32) ReplayVerdict {
	if abi < 2 {
		return ReplaySameUpstream
	}
	return ReplayContinueRestart
}

// AppendRejectError appends the JSON encoding of e (the reject host
// function's argument).
func AppendRejectError(dst []byte, e RejectError) []byte {
	dst = append(dst, '{')
	dst = appendIntField(dst, true, "status", int64(e.Status))
	dst = appendStrField(dst, false, "message", e.Message)
	dst = appendStrField(dst, false, "type", e.Type)
	dst = appendStrField(dst, false, "code", e.Code)
	if e.Param != "" {
		dst = appendStrField(dst, false, "param", e.Param)
	}
	return append(dst, '}')
}

// DecodeRejectError decodes the reject host function's argument and applies
// the defaults: status 0 becomes 400, an empty type "invalid_request_error",
// an empty code "rejected_by_policy". A status outside 400–599 is an error.
func DecodeRejectError(b []byte) (RejectError, error) {
	var e RejectError
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "status":
			return d.int(&e.Status, vs, ve)
		case "message":
			return d.str(&e.Message, vs, ve)
		case "type":
			return d.str(&e.Type, vs, ve)
		case "code":
			return d.str(&e.Code, vs, ve)
		case "param":
			return d.str(&e.Param, vs, ve)
		}
		return nil
	})
	if err != nil {
		return e, err
	}
	if e.Status == 0 {
		e.Status = 400
	}
	if e.Status < 400 || e.Status > 599 {
		return e, fmt.Errorf("hostabi: reject status %d outside 400-599", e.Status)
	}
	if e.Type == "" {
		e.Type = "invalid_request_error"
	}
	if e.Code == "" {
		e.Code = "rejected_by_policy"
	}
	if e.Message == "" {
		e.Message = "request rejected by policy"
	}
	return e, nil
}
