// Command replay is Sluice's default replay policy, embedded as replay.wasm
// (ABI version 2). It answers with hostabi.EmbeddedReplay: the failure table of
// hostabi/ABI.md §3.2 (what each failure class does before the headers,
// before content and after content) plus a cooldown on capacity codes
// replayed before content (the upstream's retry-after hint, else penalty_ms
// from the policy config; without either the gateway's own cooldown
// applies). The gateway answers with the same
// function while this module is parked, so there is one definition; this
// policy is where an operator's copy starts.
//
// Config (optional): {"penalty_ms": 30000}, a whole number of milliseconds, 0
// or more; any other key or value is refused at load (CheckReplayConfig).
package main

import (
	"errors"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/sdk"
)

func init() {
	sdk.Register(sdk.Policy{Replay: replayHook, SelfTest: selfTest})
}

func replayHook(in sdk.ReplayInput) (sdk.ReplayOutput, error) {
	return hostabi.EmbeddedReplay(in, []byte(sdk.Config())), nil
}

// selfTest refuses a config the policy would not read as written (the
// gateway then refuses to start at its line, as for the rewrite policy),
// then checks the decisions on known inputs.
func selfTest() error {
	if err := hostabi.CheckReplayConfig([]byte(sdk.Config())); err != nil {
		return err
	}
	out, _ := replayHook(sdk.ReplayInput{Code: "rate_limit_exceeded", RetryAfterMillis: 1500})
	if out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis != 1500 {
		return errors.New("capacity code not replayed with the upstream's hint as its penalty")
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
