//go:build !wasip1

package main

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/sdk"
)

func TestRecover(t *testing.T) {
	h := &sdk.Harness{}
	if err := h.SelfTest(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   sdk.RecoverInput
		want sdk.RecoverVerdict
	}{
		{sdk.RecoverInput{Surface: "responses_stream", EventType: "error", Code: "previous_response_not_found"}, sdk.Recover},
		{sdk.RecoverInput{Code: "invalid_request_error", Param: "previous_response_id", Message: "Previous response with id 'resp_1' not found."}, sdk.Recover},
		{sdk.RecoverInput{Code: "invalid_request_error", Param: "model", Message: "model not found"}, sdk.Pass},
		{sdk.RecoverInput{Transport: true}, sdk.Pass},
		{sdk.RecoverInput{Code: "usage_limit_reached", HTTPStatus: 429}, sdk.Pass},
	}
	for _, c := range cases {
		out, deferred, err := h.Recover(c.in)
		if err != nil || deferred || out.Verdict != c.want {
			t.Errorf("%+v: %+v deferred=%v err=%v, want %v", c.in, out, deferred, err, c.want)
		}
	}
	if _, deferred, _ := h.Replay(sdk.ReplayInput{}); !deferred {
		t.Fatal("recover policy answers replay")
	}
}

// TestRecoverRefusesConfig: the policy reads no config, so its self-test
// (what the gateway runs at load) refuses any key instead of ignoring it.
func TestRecoverRefusesConfig(t *testing.T) {
	h := &sdk.Harness{Config: `{"whatever": [1, 2]}`}
	if err := h.SelfTest(); err == nil || !strings.Contains(err.Error(), `unknown key "whatever"`) {
		t.Fatalf("self-test: %v", err)
	}
	for _, config := range []string{``, `{}`} {
		if err := (&sdk.Harness{Config: config}).SelfTest(); err != nil {
			t.Errorf("config %q refused: %v", config, err)
		}
	}
}
