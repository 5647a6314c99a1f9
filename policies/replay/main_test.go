//go:build !wasip1

package main

import (
	"testing"

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
		{sdk.ReplayInput{Code: "usage_limit_reached"}, sdk.ReplayOtherUpstream, 30000},
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
