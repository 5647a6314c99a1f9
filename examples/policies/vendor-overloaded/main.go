// Command vendor-overloaded is an example custom policy: an upstream vendor
// signals overload with its own error code, vendor_overloaded, which the
// built-in replay policy does not know. This policy replays such failures
// on another upstream — under the same safety rules as the default (nothing
// committed yet, no earlier replay, no pinned follow-up) — with a 10 s
// cooldown (config: {"penalty_ms": N}), and defers every other failure to the
// next policy and the built-in default.
//
// With policy ABI version 2 (hostabi/ABI.md §3.2) the input also says in
// which phase the failure came and its class; the policy then answers as the
// table does for an overload (the next target before content, a
// continuation after it). The committed 10-vendor-overloaded.wasm was built
// for ABI version 1 and is kept that way: the host asks it only about
// failures before content, with the version-1 input (ABI.md §12).
//
// Built to examples/policies/10-vendor-overloaded.wasm (build.sh); copy it
// into policy_dir. The "10-" prefix makes it run before the embedded
// replay.wasm.
package main

import (
	"errors"
	"strconv"

	"github.com/sluice-gw/sluice/sdk"
)

// VendorCode is the vendor's overload code.
const VendorCode = "vendor_overloaded"

func init() {
	sdk.Register(sdk.Policy{Replay: replay, SelfTest: selfTest})
}

func replay(in sdk.ReplayInput) (sdk.ReplayOutput, error) {
	if in.Code != VendorCode {
		return sdk.ReplayOutput{}, sdk.ErrDefer
	}
	// Decide as the default would for a known capacity code.
	as := in
	as.Code = "server_is_overloaded"
	if in.Phase != "" {
		as.FailureClass = sdk.FailureOverloaded // ABI 2: the table's overload row
	}
	out := sdk.DefaultReplay(as)
	if out.Verdict == sdk.ReplayOtherUpstream {
		out.PenaltyMillis = 10000
		if raw, ok := sdk.Lookup(sdk.Config(), "penalty_ms"); ok {
			if n, err := strconv.ParseInt(raw, 10, 64); err == nil && n >= 0 {
				out.PenaltyMillis = n
			}
		}
		sdk.Log(sdk.LevelInfo, "replaying vendor_overloaded from "+in.Upstream)
	}
	return out, nil
}

func selfTest() error {
	out, err := replay(sdk.ReplayInput{Code: VendorCode})
	if err != nil || out.Verdict != sdk.ReplayOtherUpstream {
		return errors.New("vendor_overloaded is not replayed")
	}
	if _, err := replay(sdk.ReplayInput{Code: "rate_limit_exceeded"}); !errors.Is(err, sdk.ErrDefer) {
		return errors.New("other codes are not deferred")
	}
	return nil
}

func main() {}
