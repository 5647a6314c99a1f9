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

// DefaultReplay is the built-in replay decision (DESIGN.md §5): replay once,
// on another upstream, only before anything was committed and only for the
// retryable capacity codes or a transport fault. A pinned follow-up is never
// replayed elsewhere; a lost previous response may be retried once on its owner.
func DefaultReplay(in ReplayInput) ReplayOutput {
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
