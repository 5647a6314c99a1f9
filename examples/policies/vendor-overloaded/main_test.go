//go:build !wasip1

package main

import (
	"testing"

	"github.com/sluice-gw/sluice/sdk"
)

func TestVendorOverloaded(t *testing.T) {
	h := &sdk.Harness{}
	if err := h.SelfTest(); err != nil {
		t.Fatal(err)
	}
	h.Logs = nil
	out, deferred, err := h.Replay(sdk.ReplayInput{Code: VendorCode, Upstream: "a"})
	if err != nil || deferred || out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis != 10000 {
		t.Fatalf("%+v %v %v", out, deferred, err)
	}
	if len(h.Logs) != 1 || h.Logs[0].Level != sdk.LevelInfo {
		t.Fatalf("logs %+v", h.Logs)
	}
	// Same safety rules as the default: not after response.created.
	if out, _, _ := h.Replay(sdk.ReplayInput{Code: VendorCode, ResponseCreatedSeen: true}); out.Verdict != sdk.ReplayNo {
		t.Fatalf("%+v", out)
	}
	if _, deferred, _ := h.Replay(sdk.ReplayInput{Code: "rate_limit_exceeded"}); !deferred {
		t.Fatal("other codes must defer")
	}
	// ABI 2: the table's overload row, whatever class the host saw.
	v2 := sdk.ReplayInput{Code: VendorCode, Phase: sdk.PhaseBeforeHeaders, FailureClass: sdk.FailureServerError, HTTPStatus: 500, HasNextTarget: true}
	if out, _, _ := h.Replay(v2); out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis != 10000 {
		t.Fatalf("before headers: %+v", out)
	}
	v2.Phase, v2.FailureClass, v2.PrefillAllowed = sdk.PhaseAfterContent, sdk.FailureErrorEvent, true
	if out, _, _ := h.Replay(v2); out.Verdict != sdk.ReplayContinuePrefill {
		t.Fatalf("after content: %+v", out)
	}
	h.Config = `{"penalty_ms":2500}`
	if out, _, _ := h.Replay(sdk.ReplayInput{Code: VendorCode}); out.PenaltyMillis != 2500 {
		t.Fatalf("%+v", out)
	}
}
