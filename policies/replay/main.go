// Command replay is Sluice's default replay policy, embedded as replay.wasm
// (ABI version 2). It answers with the host's built-in decision,
// sdk.DefaultReplay, which is the failure table of hostabi/ABI.md §3.2: what
// each failure class does before the headers, before content and after
// content. There is one definition of the table; this policy is where an
// operator's copy starts.
//
// On top of it, as before ABI 2, a failure before content with a capacity
// code (rate_limit_exceeded, insufficient_quota, …) that is replayed on
// another target cools the failed target down: for the upstream's
// retry-after hint when there is one, else penalty_ms from the policy config
// (default 30000). Before the headers the host's own cooldown applies (the
// Retry-After header, else a jittered exponential backoff), and after content
// the continuation's bookkeeping does.
//
// Config: {"penalty_ms": 30000}
package main

import (
	"errors"
	"strconv"

	"github.com/sluice-gw/sluice/sdk"
)

// defaultPenaltyMillis is the cooldown on capacity codes without config.
const defaultPenaltyMillis = 30000

func init() {
	sdk.Register(sdk.Policy{Replay: replayHook, SelfTest: selfTest})
}

func penalty() int64 {
	if raw, ok := sdk.Lookup(sdk.Config(), "penalty_ms"); ok {
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return defaultPenaltyMillis
}

func replayHook(in sdk.ReplayInput) (sdk.ReplayOutput, error) {
	out := sdk.DefaultReplay(in)
	beforeContent := in.Phase == "" || in.Phase == sdk.PhaseBeforeContent
	if beforeContent && out.Verdict == sdk.ReplayOtherUpstream && sdk.IsReplayableCode(in.Code) {
		out.PenaltyMillis = in.RetryAfterMillis
		if out.PenaltyMillis <= 0 {
			out.PenaltyMillis = penalty()
		}
	}
	return out, nil
}

func selfTest() error {
	out, _ := replayHook(sdk.ReplayInput{Code: "rate_limit_exceeded"})
	if out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis <= 0 {
		return errors.New("capacity code not replayed with a penalty")
	}
	out, _ = replayHook(sdk.ReplayInput{Code: "rate_limit_exceeded", ResponseCreatedSeen: true})
	if out.Verdict != sdk.ReplayNo {
		return errors.New("replayed after response.created")
	}
	out, _ = replayHook(sdk.ReplayInput{Code: "transport"})
	if out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis != 0 {
		return errors.New("transport fault handled wrong")
	}
	out, _ = replayHook(sdk.ReplayInput{Phase: sdk.PhaseBeforeHeaders, FailureClass: sdk.FailureServerError, HTTPStatus: 500, HasNextTarget: true})
	if out.Verdict != sdk.ReplaySameUpstream {
		return errors.New("a 500 is not retried once on the same target")
	}
	out, _ = replayHook(sdk.ReplayInput{Phase: sdk.PhaseAfterContent, FailureClass: sdk.FailureCut, HasNextTarget: true, PrefillAllowed: true})
	if out.Verdict != sdk.ReplayContinuePrefill {
		return errors.New("a cut after content is not continued")
	}
	return nil
}

func main() {}
