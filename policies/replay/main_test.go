//go:build !wasip1

package main

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"

	"github.com/sluice-gw/sluice/sdk"
)

func TestReplay(t *testing.T) {
	h := &sdk.Harness{}
	if err := h.SelfTest(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in      sdk.ReplayInput
		want    sdk.ReplayVerdict
		penalty int64
	}{
		{sdk.ReplayInput{Code: "usage_limit_reached"}, sdk.ReplayOtherUpstream, 0},
		{sdk.ReplayInput{Code: "rate_limit_exceeded", RetryAfterMillis: 7000}, sdk.ReplayOtherUpstream, 7000},
		{sdk.ReplayInput{Code: "transport"}, sdk.ReplayOtherUpstream, 0},
		{sdk.ReplayInput{Code: "server_error", HTTPStatus: 502}, sdk.ReplayOtherUpstream, 0},
		{sdk.ReplayInput{Code: "rate_limit_exceeded", ReplayCount: 1}, sdk.ReplayNo, 0},
		{sdk.ReplayInput{Code: "rate_limit_exceeded", PendingRequests: 1}, sdk.ReplayNo, 0},
		{sdk.ReplayInput{Code: "rate_limit_exceeded", HasPreviousResponseID: true, PinnedOwner: "a"}, sdk.ReplayNo, 0},
		{sdk.ReplayInput{Code: "previous_response_not_found", PinnedOwner: "a"}, sdk.ReplaySameUpstream, 0},
		{sdk.ReplayInput{Code: "invalid_request_error", HTTPStatus: 400}, sdk.ReplayNo, 0},
	}
	for _, c := range cases {
		out, deferred, err := h.Replay(c.in)
		if err != nil || deferred || out.Verdict != c.want || out.PenaltyMillis != c.penalty {
			t.Errorf("%+v: %+v %v %v", c.in, out, deferred, err)
		}
	}
	h.Config = `{"penalty_ms": 1500}`
	if out, _, _ := h.Replay(sdk.ReplayInput{Code: "quota_exceeded"}); out.PenaltyMillis != 1500 {
		t.Fatalf("config penalty: %+v", out)
	}
}

// TestReplayTable: with a phase the policy answers the failure table
// (hostabi.DefaultReplay) for every class and phase, through the ABI
// encoding; only capacity codes replayed before content get a penalty.
func TestReplayTable(t *testing.T) {
	h := &sdk.Harness{}
	classes := []string{sdk.FailureTransport, sdk.FailureServerError, sdk.FailureOverloaded, sdk.FailureRateLimit, sdk.FailureQuota,
		sdk.FailureFirstByte, sdk.FailureFirstToken, sdk.FailureContextLength, sdk.FailureClientError, sdk.FailureAuth,
		sdk.FailureCut, sdk.FailureStall, sdk.FailureErrorEvent, sdk.FailureOther}
	codes := map[string]string{sdk.FailureRateLimit: "rate_limit_exceeded", sdk.FailureQuota: "insufficient_quota",
		sdk.FailureServerError: "server_error", sdk.FailureContextLength: "context_length_exceeded", sdk.FailureOverloaded: "server_is_overloaded"}
	n := 0
	for _, p := range []string{sdk.PhaseBeforeHeaders, sdk.PhaseBeforeContent, sdk.PhaseAfterContent} {
		for _, c := range classes {
			for _, next := range []bool{false, true} {
				in := sdk.ReplayInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "p", Code: codes[c], HTTPStatus: 500,
					Phase: p, FailureClass: c, HasNextTarget: next, TargetCount: 2, MaxWaitMillis: 5000, PrefillAllowed: true}
				want := hostabi.DefaultReplay(in)
				out, deferred, err := h.Replay(in)
				if err != nil || deferred || out != want {
					t.Errorf("%s × %s (next %v): %+v, want %+v", c, p, next, out, want)
				}
				if out.Verdict != sdk.ReplayNo {
					n++
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the table never rescues anything")
	}
	// 429 before the headers: the host's cooldown (Retry-After or backoff), no flat penalty.
	out, _, _ := h.Replay(sdk.ReplayInput{Phase: sdk.PhaseBeforeHeaders, FailureClass: sdk.FailureRateLimit, Code: "rate_limit_exceeded",
		HTTPStatus: 429, HasNextTarget: true})
	if out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis != 0 {
		t.Fatalf("429 before headers: %+v", out)
	}
	out, _, _ = h.Replay(sdk.ReplayInput{Phase: sdk.PhaseBeforeContent, FailureClass: sdk.FailureQuota, Code: "insufficient_quota", RetryAfterMillis: 2500})
	if out.Verdict != sdk.ReplayOtherUpstream || out.PenaltyMillis != 2500 {
		t.Fatalf("quota event before content: %+v", out)
	}
}

// TestReplayRefusesBadConfig: the self-test (what the gateway runs at load)
// refuses a misspelt key and a penalty_ms that is not a whole number of
// milliseconds, 0 or more, naming the key, as the rewrite policy does.
func TestReplayRefusesBadConfig(t *testing.T) {
	for config, want := range map[string]string{
		`{"penalty_msec": 30000}`: `unknown key "penalty_msec"`,
		`{"penalty_ms": "30s"}`:   "penalty_ms must be a whole number of milliseconds, not a string",
		`{"penalty_ms": -1}`:      "penalty_ms must be",
		`{"penalty_ms": 2.5}`:     "penalty_ms must be",
	} {
		h := &sdk.Harness{Config: config}
		if err := h.SelfTest(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %s: self-test %v, want an error with %q", config, err, want)
		}
	}
	for _, config := range []string{``, `{}`, `{"penalty_ms": 30000}`} {
		if err := (&sdk.Harness{Config: config}).SelfTest(); err != nil {
			t.Errorf("config %q refused: %v", config, err)
		}
	}
}
