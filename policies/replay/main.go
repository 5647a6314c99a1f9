// Command replay is Sluice's default replay policy, embedded as replay.wasm.
// It applies hostabi.DefaultReplay (the host's built-in fallback: replay once,
// on another upstream, only before anything was committed, for transport
// faults, capacity codes and 5xx) and adds a cooldown for the failed upstream
// on capacity codes: the upstream's retry-after hint when there is one, else
// penalty_ms from the policy config (default 30000).
//
// Config: {"penalty_ms": 30000}
package main

import (
	"errors"
	"strconv"

	"github.com/sluice-gw/sluice/hostabi"
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
	out := hostabi.DefaultReplay(in)
	if out.Verdict == sdk.ReplayOtherUpstream && hostabi.IsReplayableCode(in.Code) {
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
	return nil
}

func main() {}
