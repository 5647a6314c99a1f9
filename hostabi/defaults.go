package hostabi

import "strings"

// IsReplayableCode reports whether code is one of the capacity codes the
// default replay policy replays once on another upstream (DESIGN.md §5).
func IsReplayableCode(code string) bool {
	switch code {
	case "rate_limit_exceeded", "usage_limit_reached", "insufficient_quota", "usage_not_included",
		"quota_exceeded", "server_is_overloaded", "overloaded_error":
		return true
	}
	return false
}

// IsPreviousResponseNotFound is the default recoverable predicate (DESIGN.md §4):
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
// previous response, pass everything else through unchanged.
func DefaultRecover(in RecoverInput) RecoverOutput {
	if IsPreviousResponseNotFound(in.Code, in.Type, in.Param, in.Message) {
		return RecoverOutput{Verdict: RecoverRecover}
	}
	return RecoverOutput{Verdict: RecoverPass}
}

// DefaultReplay is the built-in replay decision. With a Phase (ABI 2) it is
// the failure table of docs/ARCHITECTURE.md; without one, the version-1
// rule: replay once, on another upstream, only before anything was committed
// and only for the retryable capacity codes or a transport fault. A pinned
// follow-up is never replayed elsewhere; a lost previous response may be
// retried once on its owner.
func DefaultReplay(in ReplayInput) ReplayOutput {
	if in.Phase != "" {
		return defaultRescue(in)
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

// defaultRescue is the failure table (docs/ARCHITECTURE.md, "The failure
// table"): what each failure class does in each phase.
func defaultRescue(in ReplayInput) ReplayOutput {
	no := ReplayOutput{Verdict: ReplayNo}
	if in.PinnedOwner != "" {
		// A pinned follow-up never leaves its owner; a lost previous
		// response is retried once there.
		if in.Code == "previous_response_not_found" && in.SameTargetRetries == 0 && in.Phase != PhaseAfterContent {
			return ReplayOutput{Verdict: ReplaySameUpstream}
		}
		return no
	}
	if in.PendingRequests > 0 {
		return no // another request shares the upstream connection: not ours to retry
	}
	if in.Phase == PhaseAfterContent {
		return continuation(in)
	}
	next := ReplayOutput{Verdict: ReplayOtherUpstream}
	if !in.HasNextTarget {
		next = no
	}
	same := ReplayOutput{Verdict: ReplaySameUpstream}
	switch in.FailureClass {
	case FailureRateLimit, FailureQuota:
		if in.RetryAfterMillis > 0 && in.RetryAfterMillis <= in.MaxWaitMillis && in.SameTargetRetries == 0 {
			return same
		}
		return next
	case FailureServerError, FailureTransport:
		if in.SameTargetRetries == 0 {
			return same
		}
		return next
	case FailureOverloaded, FailureFirstByte, FailureFirstToken:
		return next
	case FailureContextLength:
		if in.NextModelDiffers {
			return next
		}
		return no
	case FailureCut, FailureStall:
		return next
	case FailureErrorEvent:
		if in.Code == "" || IsReplayableCode(in.Code) || in.HTTPStatus >= 500 {
			return next
		}
		return no
	}
	return no
}

// continuation decides how content already sent is rescued: by a prefill
// (the text sent goes as a trailing assistant message) where the route and
// the next target allow it and no tool call is involved, else by a restart.
func continuation(in ReplayInput) ReplayOutput {
	if in.Continuation == "off" || !in.HasNextTarget {
		return ReplayOutput{Verdict: ReplayNo}
	}
	switch in.FailureClass {
	case FailureCut, FailureStall, FailureTransport, FailureServerError, FailureOverloaded, FailureRateLimit, FailureQuota:
	case FailureErrorEvent:
		if in.Code != "" && !IsReplayableCode(in.Code) && in.HTTPStatus < 500 && in.Code != "server_error" {
			return ReplayOutput{Verdict: ReplayNo}
		}
	default:
		return ReplayOutput{Verdict: ReplayNo}
	}
	// A request with tools is never continued by a text prefill: the next
	// target would answer in prose instead of calling the tool.
	if in.Continuation == "restart" || !in.PrefillAllowed || in.ToolCallInFlight || in.HasTools {
		return ReplayOutput{Verdict: ReplayContinueRestart}
	}
	return ReplayOutput{Verdict: ReplayContinuePrefill}
}
