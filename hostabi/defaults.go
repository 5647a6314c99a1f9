package hostabi

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-gw/sluice/internal/jsonx"
)

// IsReplayableCode reports whether code is one of the capacity codes the
// default replay policy replays once on another upstream (README, "What it promises").
func IsReplayableCode(code string) bool {
	switch code {
	case "rate_limit_exceeded", "usage_limit_reached", "insufficient_quota", "usage_not_included",
		"quota_exceeded", "server_is_overloaded", "overloaded_error":
		return true
	}
	return false
}

// IsPreviousResponseNotFound is the default recoverable predicate (README, "What it promises"):
// code previous_response_not_found, or an invalid_request_error on param
// previous_response_id whose message says "previous response … not found".
func IsPreviousResponseNotFound(code, errType, param, message string) bool {
	if code == "previous_response_not_found" {
		return true
	}
	if code != "invalid_request_error" && errType != "invalid_request_error" {
		return false
	}
	if param != "previous_response_id" {
		return false
	}
	msg := strings.Join(strings.Fields(strings.ToLower(message)), " ")
	return strings.Contains(msg, "previous response") && strings.Contains(msg, "not found")
}

// DefaultRecover is the built-in recover decision: recover a lost
// previous response, pass everything else through unchanged. Asked about an
// unavailable owner (ABI 3, RecoverInput.OwnerQuestion), it rehydrates a
// portable conversation only when its owner is no longer configured or has
// been down longer than rehydrate_after, and fails closed otherwise (a
// cooling or briefly down owner is waited for: it still has the
// conversation, encrypted reasoning included).
func DefaultRecover(in RecoverInput) RecoverOutput {
	if in.OwnerQuestion() {
		if in.Portable && (in.OwnerRemoved || (in.RehydrateAfterMillis > 0 && in.OwnerDownMillis > in.RehydrateAfterMillis)) {
			return RecoverOutput{Verdict: RecoverRehydrate}
		}
		return RecoverOutput{Verdict: RecoverFailClosed}
	}
	if IsPreviousResponseNotFound(in.Code, in.Type, in.Param, in.Message) {
		return RecoverOutput{Verdict: RecoverRecover}
	}
	return RecoverOutput{Verdict: RecoverPass}
}

// DefaultReplay is the built-in replay decision. With a Phase (ABI 2) it is
// the failure table (ABI.md §3.2): what each failure class does in each
// phase. Without one, the version-1 rule: replay once, on another upstream,
// only before anything was committed and only for the retryable capacity
// codes, a transport fault or a 5xx. A pinned follow-up is never replayed
// elsewhere; a lost previous response may be retried once on its owner.
func DefaultReplay(in ReplayInput) ReplayOutput {
	if in.Phase != "" {
		return ReplayOutput{Verdict: defaultRescue(in)}
	}
	if in.ReplayCount >= 1 || in.ResponseCreatedSeen || in.ResponseIDAssigned || in.PendingRequests > 0 {
		return ReplayOutput{Verdict: ReplayNo}
	}
	if in.Code == "previous_response_not_found" && in.PinnedOwner != "" {
		return ReplayOutput{Verdict: ReplaySameUpstream}
	}
	if in.PinnedOwner != "" {
		return ReplayOutput{Verdict: ReplayNo}
	}
	if in.Code == "transport" || IsReplayableCode(in.Code) || in.HTTPStatus >= 500 {
		return ReplayOutput{Verdict: ReplayOtherUpstream}
	}
	return ReplayOutput{Verdict: ReplayNo}
}

// defaultRescue is the failure table (ABI.md §3.2, "The failure table").
func defaultRescue(in ReplayInput) ReplayVerdict {
	switch in.Phase {
	case PhaseBeforeHeaders:
		return beforeHeaders(in)
	case PhaseBeforeContent:
		return beforeContent(in)
	case PhaseAfterContent:
		return continuation(in)
	}
	return ReplayNo // a phase this version does not know
}

// next is the next target when there is one, else fail.
func next(in ReplayInput) ReplayVerdict {
	if in.HasNextTarget {
		return ReplayOtherUpstream
	}
	return ReplayNo
}

// beforeHeaders: the upstream gave no usable answer (a connect failure, a
// non-2xx status, no headers in time). has_next_target already excludes
// what a pinned request may not use, so no pinned rule is needed here.
func beforeHeaders(in ReplayInput) ReplayVerdict {
	first := in.SameTargetRetries == 0
	switch in.FailureClass {
	case FailureRateLimit, FailureQuota:
		// A short Retry-After is waited out on the same target, once;
		// otherwise the host cools the target down and we move on.
		if first && in.RetryAfterMillis > 0 && in.RetryAfterMillis <= in.MaxWaitMillis {
			return ReplaySameUpstream
		}
		return next(in)
	case FailureServerError:
		// 500 and 502 are retried once after a short backoff, unless the
		// upstream asked for a longer wait than retry.max_wait; other 5xx
		// (504, …) move on.
		if first && (in.HTTPStatus == 500 || in.HTTPStatus == 502) && in.RetryAfterMillis <= in.MaxWaitMillis {
			return ReplaySameUpstream
		}
		return next(in)
	case FailureTransport:
		if first {
			return ReplaySameUpstream
		}
		return next(in)
	case FailureOverloaded, FailureFirstByte, FailureFirstToken, FailureAuth, FailureCut, FailureStall:
		return next(in) // never the silent or overloaded target again
	case FailureContextLength:
		if in.NextModelDiffers {
			return next(in) // a larger context may serve it; never the same model
		}
		return ReplayNo
	case FailureErrorEvent:
		if retryableEvent(in) {
			return next(in)
		}
	}
	return ReplayNo // client errors (content filters, other 4xx) and unknown classes pass through
}

// beforeContent: the upstream answered 2xx but failed before the client saw
// anything (the lifecycle events are held back), so a replay is invisible.
// As in version 1 there is one replay per request, and it is answered even
// when no next target is known: the host then fails the request with the
// retryable upstream_unavailable instead of the first upstream's error.
func beforeContent(in ReplayInput) ReplayVerdict {
	switch in.FailureClass {
	case FailureContextLength:
		if in.NextModelDiffers {
			return next(in)
		}
		return ReplayNo
	case FailureFirstToken, FailureFirstByte:
		return next(in) // the silent target is left, not retried
	}
	if in.PendingRequests > 0 {
		return ReplayNo // another request shares the upstream connection: not ours to retry
	}
	if in.PinnedOwner != "" {
		// A pinned follow-up never leaves its owner; a lost previous
		// response is retried there once.
		if in.Code == "previous_response_not_found" && in.ReplayCount == 0 {
			return ReplaySameUpstream
		}
		return ReplayNo
	}
	if in.ReplayCount >= 1 {
		return ReplayNo
	}
	switch in.FailureClass {
	case FailureRateLimit, FailureQuota, FailureOverloaded, FailureServerError, FailureTransport, FailureCut, FailureStall:
		return ReplayOtherUpstream
	case FailureErrorEvent:
		if retryableEvent(in) {
			return ReplayOtherUpstream
		}
	}
	return ReplayNo
}

// retryableEvent reports whether an error event of no known class is worth
// another target (RetryableEvent).
func retryableEvent(in ReplayInput) bool { return RetryableEvent(in.Code, in.HTTPStatus) }

// RetryableEvent reports whether an error event of no known class, with
// code and status, is the upstream's failure, worth another target and
// charged to this one: no code at all, a capacity code, server_error or a
// 5xx. Any other code (invalid_prompt, a content policy's) is about the
// request, which another target would refuse the same way.
func RetryableEvent(code string, status int) bool {
	return code == "" || code == "server_error" || IsReplayableCode(code) || status >= 500
}

// continuation decides how content already sent is rescued: by a prefill
// (the text sent goes as a trailing assistant message) where the route and
// the next target allow it and no tool is involved, else by a restart.
func continuation(in ReplayInput) ReplayVerdict {
	if in.Continuation == "off" || !in.HasNextTarget || in.PinnedOwner != "" || in.PendingRequests > 0 {
		return ReplayNo
	}
	switch in.FailureClass {
	case FailureCut, FailureStall, FailureTransport, FailureServerError, FailureOverloaded, FailureRateLimit, FailureQuota:
	case FailureErrorEvent:
		if !retryableEvent(in) {
			return ReplayNo
		}
	default:
		return ReplayNo // client errors, context length: another target would fail the same way
	}
	// A request with tools is never continued by a text prefill: the next
	// target would answer in prose instead of calling the tool.
	if in.Continuation == "restart" || !in.PrefillAllowed || in.ToolCallInFlight || in.HasTools {
		return ReplayContinueRestart
	}
	return ReplayContinuePrefill
}

// EffectiveReplay is what the host does with a policy's verdict v for the
// failure in (ABI.md §3.2, "What the host does with a verdict"):
//
//   - before content (and without a phase) the continue verdicts mean
//     ReplayOtherUpstream: the client has seen nothing to continue;
//   - after content only the continue verdicts continue: ReplayOtherUpstream,
//     ReplaySameUpstream and unknown verdicts mean ReplayNo (sending the
//     request again as if nothing had been sent would give the client the
//     answer twice), as does any verdict when the route's continuation is
//     off; and a prefill becomes a restart when the route's continuation is
//     restart, the next target takes no prefill, the request has tools or a
//     tool call was in flight (the next target would answer in prose).
func EffectiveReplay(in ReplayInput, v ReplayVerdict) ReplayVerdict {
	if in.Phase != PhaseAfterContent {
		switch v {
		case ReplayContinuePrefill, ReplayContinueRestart:
			return ReplayOtherUpstream
		case ReplayNo, ReplayOtherUpstream, ReplaySameUpstream:
			return v
		}
		return ReplayNo
	}
	if in.Continuation == "off" || (v != ReplayContinuePrefill && v != ReplayContinueRestart) {
		return ReplayNo
	}
	if v == ReplayContinuePrefill && (in.Continuation == "restart" || !in.PrefillAllowed || in.ToolCallInFlight || in.HasTools) {
		return ReplayContinueRestart
	}
	return v
}

// EffectiveRecover is what the host does with a policy's recover verdict v
// for in (ABI.md §3.1): rehydrate is obeyed only for an owner_unavailable
// question about a portable conversation and means fail_closed anywhere
// else; an owner_unavailable question answered with pass or recover fails
// closed too (there is no upstream error to pass or recover: the owner was
// never called); unknown verdicts mean pass for an upstream error.
func EffectiveRecover(in RecoverInput, v RecoverVerdict) RecoverVerdict {
	if in.OwnerQuestion() {
		if v == RecoverRehydrate && in.Portable {
			return RecoverRehydrate
		}
		return RecoverFailClosed
	}
	switch v {
	case RecoverPass, RecoverRecover, RecoverFailClosed:
		return v
	case RecoverRehydrate:
		return RecoverFailClosed
	}
	return RecoverPass
}

// The embedded policies' decisions. The modules in policies/ call these, and
// the gateway answers with the same functions while an embedded module is
// parked (docs/ARCHITECTURE.md, "Memory at idle"): one definition, so the two
// cannot disagree.

// EmbeddedRecover is the embedded recover policy's decision
// (policies/recover): DefaultRecover. The config is not read.
func EmbeddedRecover(in RecoverInput, _ []byte) RecoverOutput {
	return DefaultRecover(in)
}

// EmbeddedReplay is the embedded replay policy's decision (policies/replay):
// the failure table (DefaultReplay) and, on top of it, a capacity failure before content that is replayed on
// another target cools the failed target down for the upstream's
// retry-after hint, else for penalty_ms from config. Without either it adds
// no penalty, so the host's own cooldown applies, as it does before the
// headers (README "Failover and replay": 5 s for a rate limit and 60 s for
// quota, doubling, jittered). After content the continuation's bookkeeping
// does.
func EmbeddedReplay(in ReplayInput, config []byte) ReplayOutput {
	out := DefaultReplay(in)
	beforeContent := in.Phase == "" || in.Phase == PhaseBeforeContent
	if beforeContent && out.Verdict == ReplayOtherUpstream && IsReplayableCode(in.Code) {
		out.PenaltyMillis = in.RetryAfterMillis
		if out.PenaltyMillis <= 0 {
			out.PenaltyMillis = penaltyMillis(config)
		}
	}
	return out
}

// penaltyMillis is config's penalty_ms, else 0 (no penalty: the host's
// cooldown). A config the policy's self-test refused never gets here
// (CheckReplayConfig), so a bad value is also 0.
func penaltyMillis(config []byte) int64 {
	n, _ := replayPenalty(config)
	return n
}

// replayPenalty reads penalty_ms from the replay policy's config: absent
// is 0; anything but a whole number of milliseconds, 0 or more, is an
// error naming the key. A number is read by its value (ABI.md §4), so
// 30000.0 is 30000 and 1.5 is refused.
func replayPenalty(config []byte) (int64, error) {
	if len(config) == 0 {
		return 0, nil
	}
	raw, err := jsonx.Lookup(config, "penalty_ms")
	if err != nil {
		if errors.Is(err, jsonx.ErrPathNotFound) {
			return 0, nil
		}
		return 0, fmt.Errorf("penalty_ms: %w", err)
	}
	if jsonx.Kind(raw) != "a number" {
		return 0, fmt.Errorf("penalty_ms must be a whole number of milliseconds, not %s", jsonx.Kind(raw))
	}
	n, err := jsonx.ParseInt(raw)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("penalty_ms must be a whole number of milliseconds, 0 or more, not %s", raw)
	}
	return n, nil
}

// CheckReplayConfig is the embedded replay policy's check of its config
// (policies/replay runs it in its self-test, so a bad config refuses the
// start at its line, as the rewrite policy's does: README "Running it"):
// none, or an object whose only key is penalty_ms, a whole number of
// milliseconds, 0 or more. A misspelt key or a value of the wrong kind
// would otherwise leave the host's default cooldown in force without a word.
func CheckReplayConfig(config []byte) error {
	if err := checkConfigKeys(config, "the only key is penalty_ms", "penalty_ms"); err != nil {
		return err
	}
	_, err := replayPenalty(config)
	return err
}

// CheckRecoverConfig is the embedded recover policy's check of its config
// (policies/recover runs it in its self-test): it reads none, so anything
// but an empty object is refused rather than ignored.
func CheckRecoverConfig(config []byte) error {
	return checkConfigKeys(config, "the recover policy takes no config")
}

// checkConfigKeys refuses a config that is not a JSON object or has a key
// other than keys; hint says which keys there are.
func checkConfigKeys(config []byte, hint string, keys ...string) error {
	if len(config) == 0 {
		return nil
	}
	unknown := ""
	if !jsonx.ForEachMember(config, func(k string, _ []byte) bool {
		if !slices.Contains(keys, k) {
			unknown = k
			return false
		}
		return true
	}) && unknown == "" {
		return errors.New("config is not a JSON object")
	}
	if unknown != "" {
		return fmt.Errorf("unknown key %q: %s", unknown, hint)
	}
	return nil
}
