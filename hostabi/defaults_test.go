package hostabi

import (
	"fmt"
	"testing"
)

// tableInput is a failure of class c in phase p on the first target of
// three, nothing tried again yet, a next target (of the same model) ready,
// retry.max_wait 5 s, a route with continuation auto whose next target
// accepts a prefill.
func tableInput(p, c string) ReplayInput {
	in := ReplayInput{Surface: SurfaceResponsesStream, Upstream: "p", Code: c, Phase: p, FailureClass: c,
		TargetIndex: 0, TargetCount: 3, HasNextTarget: true, MaxWaitMillis: 5000, Continuation: "auto", PrefillAllowed: true}
	switch c {
	case FailureServerError:
		in.HTTPStatus, in.Code = 500, "server_error"
	case FailureOverloaded:
		in.HTTPStatus, in.Code = 503, "server_is_overloaded"
	case FailureRateLimit:
		in.HTTPStatus, in.Code = 429, "rate_limit_exceeded"
	case FailureQuota:
		in.HTTPStatus, in.Code = 429, "insufficient_quota"
	case FailureContextLength:
		in.HTTPStatus, in.Code = 400, "context_length_exceeded"
	case FailureClientError:
		in.HTTPStatus, in.Code = 400, "content_filter"
	case FailureAuth:
		in.HTTPStatus, in.Code = 401, "invalid_api_key"
	case FailureErrorEvent:
		in.Code = "vendor_specific"
	case FailureCut, FailureTransport:
		in.Code = "transport"
	}
	return in
}

// TestDefaultReplayTable is the failure table, every class × phase, with
// the defaults of tableInput; the rows after it vary one fact each.
func TestDefaultReplayTable(t *testing.T) {
	const (
		no      = ReplayNo
		other   = ReplayOtherUpstream
		same    = ReplaySameUpstream
		prefill = ReplayContinuePrefill
	)
	phases := []string{PhaseBeforeHeaders, PhaseBeforeContent, PhaseAfterContent}
	table := map[string][3]ReplayVerdict{
		//                      before_headers  before_content  after_content
		FailureTransport:     {same, other, prefill},
		FailureServerError:   {same, other, prefill},
		FailureOverloaded:    {other, other, prefill},
		FailureRateLimit:     {other, other, prefill},
		FailureQuota:         {other, other, prefill},
		FailureFirstByte:     {other, other, no},
		FailureFirstToken:    {other, other, no},
		FailureContextLength: {no, no, no},
		FailureClientError:   {no, no, no},
		FailureAuth:          {other, no, no},
		FailureCut:           {other, other, prefill},
		FailureStall:         {other, other, prefill},
		FailureErrorEvent:    {no, no, no},
		FailureOther:         {no, no, no},
		"a_future_class":     {no, no, no},
	}
	for class, want := range table {
		for i, p := range phases {
			if got := DefaultReplay(tableInput(p, class)).Verdict; got != want[i] {
				t.Errorf("%s × %s: %s, want %s", class, p, got, want[i])
			}
		}
	}
	if got := DefaultReplay(tableInput("a_future_phase", FailureTransport)).Verdict; got != no {
		t.Errorf("unknown phase: %s", got)
	}

	bh := func(c string, edit func(*ReplayInput)) func() ReplayInput {
		return func() ReplayInput { in := tableInput(PhaseBeforeHeaders, c); edit(&in); return in }
	}
	bc := func(c string, edit func(*ReplayInput)) func() ReplayInput {
		return func() ReplayInput { in := tableInput(PhaseBeforeContent, c); edit(&in); return in }
	}
	ac := func(c string, edit func(*ReplayInput)) func() ReplayInput {
		return func() ReplayInput { in := tableInput(PhaseAfterContent, c); edit(&in); return in }
	}
	rows := []struct {
		name string
		in   func() ReplayInput
		want ReplayVerdict
	}{
		// 429 / quota: a Retry-After ≤ max_wait is waited out on the same target, once.
		{"429 Retry-After 1s", bh(FailureRateLimit, func(in *ReplayInput) { in.RetryAfterMillis = 1000 }), same},
		{"quota Retry-After 5s (= max_wait)", bh(FailureQuota, func(in *ReplayInput) { in.RetryAfterMillis = 5000 }), same},
		{"429 Retry-After 30s", bh(FailureRateLimit, func(in *ReplayInput) { in.RetryAfterMillis = 30000 }), other},
		{"429 Retry-After 1s, already retried", bh(FailureRateLimit, func(in *ReplayInput) { in.RetryAfterMillis, in.SameTargetRetries = 1000, 1 }), other},
		{"429, no next target", bh(FailureRateLimit, func(in *ReplayInput) { in.HasNextTarget = false }), no},
		// 500/502/connect: one retry on the same target, then the next.
		{"502", bh(FailureServerError, func(in *ReplayInput) { in.HTTPStatus = 502 }), same},
		{"500 retried", bh(FailureServerError, func(in *ReplayInput) { in.SameTargetRetries = 1 }), other},
		{"500 retried, no next target", bh(FailureServerError, func(in *ReplayInput) { in.SameTargetRetries, in.HasNextTarget = 1, false }), no},
		{"500 with Retry-After beyond max_wait", bh(FailureServerError, func(in *ReplayInput) { in.RetryAfterMillis = 30000 }), other},
		{"500 with a short Retry-After", bh(FailureServerError, func(in *ReplayInput) { in.RetryAfterMillis = 1000 }), same},
		{"504: next, no retry", bh(FailureServerError, func(in *ReplayInput) { in.HTTPStatus = 504 }), other},
		{"connect failure retried", bh(FailureTransport, func(in *ReplayInput) { in.SameTargetRetries = 1 }), other},
		{"connect failure, pinned (the owner is retried)", bh(FailureTransport, func(in *ReplayInput) { in.PinnedOwner, in.HasNextTarget = "p", false }), same},
		{"503, last target", bh(FailureOverloaded, func(in *ReplayInput) { in.HasNextTarget = false }), no},
		{"first_byte, last target", bh(FailureFirstByte, func(in *ReplayInput) { in.HasNextTarget = false }), no},
		// context_length_exceeded: only to another model.
		{"context length, next model differs", bh(FailureContextLength, func(in *ReplayInput) { in.NextModelDiffers = true }), other},
		{"context length event, next model differs", bc(FailureContextLength, func(in *ReplayInput) { in.NextModelDiffers = true }), other},
		// Error events before content: one invisible replay.
		{"error event without a code", bc(FailureErrorEvent, func(in *ReplayInput) { in.Code = "" }), other},
		{"error event server_error", bc(FailureErrorEvent, func(in *ReplayInput) { in.Code = "server_error" }), other},
		{"error event with status 502", bc(FailureErrorEvent, func(in *ReplayInput) { in.HTTPStatus = 502 }), other},
		{"quota event, no next target known", bc(FailureQuota, func(in *ReplayInput) { in.HasNextTarget = false }), other},
		{"quota event after a replay", bc(FailureQuota, func(in *ReplayInput) { in.ReplayCount = 1 }), no},
		{"quota event, shared connection", bc(FailureQuota, func(in *ReplayInput) { in.PendingRequests = 1 }), no},
		{"quota event, pinned", bc(FailureQuota, func(in *ReplayInput) { in.PinnedOwner = "p" }), no},
		{"lost previous response, pinned", bc(FailureClientError, func(in *ReplayInput) { in.PinnedOwner, in.Code = "p", "previous_response_not_found" }), same},
		{"lost previous response, pinned, replayed", bc(FailureClientError, func(in *ReplayInput) {
			in.PinnedOwner, in.Code, in.ReplayCount = "p", "previous_response_not_found", 1
		}), no},
		{"lost previous response before headers (recover decides)", bh(FailureClientError, func(in *ReplayInput) { in.PinnedOwner, in.Code = "p", "previous_response_not_found" }), no},
		{"first_token, last target", bc(FailureFirstToken, func(in *ReplayInput) { in.HasNextTarget = false }), no},
		// After content: continue unless continuation is off.
		{"cut, continuation off", ac(FailureCut, func(in *ReplayInput) { in.Continuation = "off" }), no},
		{"cut, continuation restart", ac(FailureCut, func(in *ReplayInput) { in.Continuation = "restart" }), ReplayContinueRestart},
		{"cut, no prefill on the next target", ac(FailureCut, func(in *ReplayInput) { in.PrefillAllowed = false }), ReplayContinueRestart},
		{"cut, tool call in flight", ac(FailureCut, func(in *ReplayInput) { in.ToolCallInFlight = true }), ReplayContinueRestart},
		{"cut, request with tools", ac(FailureCut, func(in *ReplayInput) { in.HasTools = true }), ReplayContinueRestart},
		{"cut, no next target", ac(FailureCut, func(in *ReplayInput) { in.HasNextTarget = false }), no},
		{"cut, pinned", ac(FailureCut, func(in *ReplayInput) { in.PinnedOwner = "p" }), no},
		{"stall, continuation empty (auto)", ac(FailureStall, func(in *ReplayInput) { in.Continuation = "" }), prefill},
		{"error event server_error", ac(FailureErrorEvent, func(in *ReplayInput) { in.Code = "server_error" }), prefill},
		{"error event 4xx", ac(FailureErrorEvent, func(in *ReplayInput) { in.Code, in.HTTPStatus = "invalid_value", 400 }), no},
	}
	for _, r := range rows {
		if got := DefaultReplay(r.in()).Verdict; got != r.want {
			t.Errorf("%s: %s, want %s", r.name, got, r.want)
		}
	}
}

// TestDefaultReplayVersion1 keeps the rule version-1 callers (no phase) got.
func TestDefaultReplayVersion1(t *testing.T) {
	cases := []struct {
		in   ReplayInput
		want ReplayVerdict
	}{
		{ReplayInput{Code: "usage_limit_reached"}, ReplayOtherUpstream},
		{ReplayInput{Code: "transport"}, ReplayOtherUpstream},
		{ReplayInput{Code: "x", HTTPStatus: 502}, ReplayOtherUpstream},
		{ReplayInput{Code: "x", HTTPStatus: 400}, ReplayNo},
		{ReplayInput{Code: "rate_limit_exceeded", ReplayCount: 1}, ReplayNo},
		{ReplayInput{Code: "rate_limit_exceeded", ResponseCreatedSeen: true}, ReplayNo},
		{ReplayInput{Code: "rate_limit_exceeded", PendingRequests: 1}, ReplayNo},
		{ReplayInput{Code: "rate_limit_exceeded", PinnedOwner: "a"}, ReplayNo},
		{ReplayInput{Code: "previous_response_not_found", PinnedOwner: "a"}, ReplaySameUpstream},
	}
	for _, c := range cases {
		if got := DefaultReplay(c.in).Verdict; got != c.want {
			t.Errorf("%+v: %s, want %s", c.in, got, c.want)
		}
	}
}

func TestEffectiveReplay(t *testing.T) {
	all := []ReplayVerdict{ReplayNo, ReplayOtherUpstream, ReplaySameUpstream, ReplayContinuePrefill, ReplayContinueRestart, 9}
	before := []ReplayVerdict{ReplayNo, ReplayOtherUpstream, ReplaySameUpstream, ReplayOtherUpstream, ReplayOtherUpstream, ReplayNo}
	for _, p := range []string{"", PhaseBeforeHeaders, PhaseBeforeContent} {
		for i, v := range all {
			if got := EffectiveReplay(ReplayInput{Phase: p}, v); got != before[i] {
				t.Errorf("%q %s: %s, want %s", p, v, got, before[i])
			}
		}
	}
	after := func(cont string, prefill, tool, tools bool) ReplayInput {
		return ReplayInput{Phase: PhaseAfterContent, Continuation: cont, PrefillAllowed: prefill, ToolCallInFlight: tool, HasTools: tools}
	}
	const (
		no      = ReplayNo
		prefill = ReplayContinuePrefill
		restart = ReplayContinueRestart
	)
	cases := []struct {
		in   ReplayInput
		want []ReplayVerdict // for all
	}{
		{after("auto", true, false, false), []ReplayVerdict{no, no, no, prefill, restart, no}},
		{after("", true, false, false), []ReplayVerdict{no, no, no, prefill, restart, no}},
		{after("off", true, false, false), []ReplayVerdict{no, no, no, no, no, no}},
		{after("restart", true, false, false), []ReplayVerdict{no, no, no, restart, restart, no}},
		{after("auto", false, false, false), []ReplayVerdict{no, no, no, restart, restart, no}},
		{after("auto", true, true, false), []ReplayVerdict{no, no, no, restart, restart, no}},
		{after("auto", true, false, true), []ReplayVerdict{no, no, no, restart, restart, no}},
	}
	for _, c := range cases {
		for i, v := range all {
			if got := EffectiveReplay(c.in, v); got != c.want[i] {
				t.Errorf("%s: %s → %s, want %s", fmt.Sprintf("%+v", c.in), v, got, c.want[i])
			}
		}
	}
}

// TestDefaultRecoverOwner: an owner_unavailable question rehydrates a
// portable conversation only when its owner is removed or down longer than
// rehydrate_after; EffectiveRecover obeys rehydrate only there.
func TestDefaultRecoverOwner(t *testing.T) {
	base := RecoverInput{Surface: SurfaceResponsesStream, Upstream: "a", Code: CodeOwnerUnavailable, RehydrateAfterMillis: 300000, Portable: true}
	cases := []struct {
		name string
		edit func(*RecoverInput)
		want RecoverVerdict
	}{
		{"removed", func(in *RecoverInput) { in.OwnerRemoved = true }, RecoverRehydrate},
		{"down longer", func(in *RecoverInput) { in.OwnerDownMillis = 300001 }, RecoverRehydrate},
		{"down shorter", func(in *RecoverInput) { in.OwnerDownMillis = 299999 }, RecoverFailClosed},
		{"cooling (not down)", func(in *RecoverInput) {}, RecoverFailClosed},
		{"removed, not portable", func(in *RecoverInput) { in.OwnerRemoved, in.Portable = true, false }, RecoverFailClosed},
		{"an upstream's own error with that code", func(in *RecoverInput) { in.OwnerRemoved, in.HTTPStatus = true, 400 }, RecoverPass},
	}
	for _, c := range cases {
		in := base
		c.edit(&in)
		if got := DefaultRecover(in).Verdict; got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	owner := base
	for v, want := range map[RecoverVerdict]RecoverVerdict{RecoverPass: RecoverFailClosed, RecoverRecover: RecoverFailClosed,
		RecoverFailClosed: RecoverFailClosed, RecoverRehydrate: RecoverRehydrate} {
		if got := EffectiveRecover(owner, v); got != want {
			t.Errorf("owner question, %v: %v", v, got)
		}
	}
	owner.Portable = false
	if got := EffectiveRecover(owner, RecoverRehydrate); got != RecoverFailClosed {
		t.Errorf("rehydrate without the items: %v", got)
	}
	upstreamErr := RecoverInput{Code: "previous_response_not_found", HTTPStatus: 400}
	for v, want := range map[RecoverVerdict]RecoverVerdict{RecoverPass: RecoverPass, RecoverRecover: RecoverRecover,
		RecoverFailClosed: RecoverFailClosed, RecoverRehydrate: RecoverFailClosed, 9: RecoverPass} {
		if got := EffectiveRecover(upstreamErr, v); got != want {
			t.Errorf("upstream error, %v: %v", v, got)
		}
	}
}

// TestEmbeddedReplayPenalty: the embedded replay policy's cooldown on a
// capacity failure before content, from the hint or the config; none without
// either (the host's cooldown applies), after content, or for codes that are
// not capacity codes.
func TestEmbeddedReplayPenalty(t *testing.T) {
	cases := []struct {
		name   string
		in     ReplayInput
		config string
		want   int64
	}{
		{"hint wins", ReplayInput{Code: "rate_limit_exceeded", RetryAfterMillis: 1500}, `{"penalty_ms": 7}`, 1500},
		{"config", ReplayInput{Code: "rate_limit_exceeded"}, `{"penalty_ms": 7}`, 7},
		{"config zero", ReplayInput{Code: "insufficient_quota"}, `{"penalty_ms": 0}`, 0},
		{"no config", ReplayInput{Code: "rate_limit_exceeded"}, ``, 0},
		{"negative config", ReplayInput{Code: "rate_limit_exceeded"}, `{"penalty_ms": -1}`, 0},
		{"string config", ReplayInput{Code: "rate_limit_exceeded"}, `{"penalty_ms": "7"}`, 0},
		{"before content", ReplayInput{Code: "rate_limit_exceeded", Phase: PhaseBeforeContent, FailureClass: FailureRateLimit, HasNextTarget: true}, `{"penalty_ms": 9}`, 9},
		{"not a capacity code", ReplayInput{Code: "transport"}, `{"penalty_ms": 7}`, 0},
		{"after content", ReplayInput{Code: "rate_limit_exceeded", Phase: PhaseAfterContent, FailureClass: FailureRateLimit, HasNextTarget: true, PrefillAllowed: true}, `{"penalty_ms": 7}`, 0},
		{"not replayed", ReplayInput{Code: "rate_limit_exceeded", ResponseCreatedSeen: true}, `{"penalty_ms": 7}`, 0},
	}
	for _, c := range cases {
		out := EmbeddedReplay(c.in, []byte(c.config))
		if out.PenaltyMillis != c.want {
			t.Errorf("%s: penalty %d, want %d (%+v)", c.name, out.PenaltyMillis, c.want, out)
		}
		if want := DefaultReplay(c.in).Verdict; out.Verdict != want {
			t.Errorf("%s: verdict %v, the table's is %v", c.name, out.Verdict, want)
		}
	}
}
