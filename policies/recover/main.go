// Command recover is Sluice's default recover policy, embedded in the gateway
// as recover.wasm. It applies hostabi.EmbeddedRecover (DefaultRecover), the
// same function the host falls back to and answers with while this module is
// parked, so the Wasm default and the built-in answers share one definition: a lost previous response (previous_response_not_found, or an
// invalid_request_error on previous_response_id saying "previous response …
// not found") is recovered; every other error passes through; and (ABI 3)
// a portable conversation whose owner was removed or has been down longer
// than continuity.rehydrate_after is rehydrated, any other owner_unavailable
// question fails closed. It takes no config: a non-empty one is refused at
// load (CheckRecoverConfig).
package main

import (
	"fmt"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/sdk"
)

func init() {
	sdk.Register(sdk.Policy{Recover: recoverHook, SelfTest: selfTest})
}

func recoverHook(in sdk.RecoverInput) (sdk.RecoverOutput, error) {
	return hostabi.EmbeddedRecover(in, nil), nil
}

// selfTest refuses any config (the policy reads none: a key meant for it
// would otherwise be ignored without a word), then checks the predicate on
// known inputs after a round trip through the wire encoding.
func selfTest() error {
	if err := hostabi.CheckRecoverConfig([]byte(sdk.Config())); err != nil {
		return err
	}
	cases := []struct {
		in   sdk.RecoverInput
		want sdk.RecoverVerdict
	}{
		{sdk.RecoverInput{Code: "previous_response_not_found"}, sdk.Recover},
		{sdk.RecoverInput{Code: "invalid_request_error", Param: "previous_response_id", Message: "Previous  response with id 'x' NOT found."}, sdk.Recover},
		{sdk.RecoverInput{Type: "invalid_request_error", Param: "previous_response_id", Message: "Previous response not found"}, sdk.Recover},
		{sdk.RecoverInput{Code: "invalid_request_error", Param: "input", Message: "previous response not found"}, sdk.Pass},
		{sdk.RecoverInput{Code: "rate_limit_exceeded", HTTPStatus: 429}, sdk.Pass},
		// ABI 3: an owner_unavailable question about a portable conversation.
		{sdk.RecoverInput{Code: sdk.CodeOwnerUnavailable, OwnerRemoved: true, Portable: true}, sdk.Rehydrate},
		{sdk.RecoverInput{Code: sdk.CodeOwnerUnavailable, OwnerDownMillis: 1000, RehydrateAfterMillis: 300000, Portable: true}, sdk.FailClosed},
	}
	for i, c := range cases {
		in, err := hostabi.DecodeRecoverInput(hostabi.AppendRecoverInput(nil, c.in))
		if err != nil {
			return err
		}
		out, err := recoverHook(in)
		if err != nil {
			return err
		}
		if out.Verdict != c.want {
			return fmt.Errorf("case %d: verdict %v, want %v", i, out.Verdict, c.want)
		}
	}
	return nil
}

func main() {}
