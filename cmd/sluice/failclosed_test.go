package main

import "testing"

// TestServeFailClosedRewrite: policies.NAME.sluice_fail_closed in the
// config file reaches the gateway: a rewrite policy so marked that traps
// answers 503 policy_unavailable and the upstream gets nothing, and the key
// is not the policy's config (a policy would see it, and one that refuses
// unknown keys would be rejected at start).
func TestServeFailClosedRewrite(t *testing.T) {
	base, up := serveWithPolicyDir(t, map[string][]byte{
		"10-guard.wasm": readPolicyFixture(t, "rewrite_trap.wasm"),
	}, `  10-guard: {sluice_fail_closed: true}
  rewrite: {sluice_fail_closed: false, model_aliases: {fast: m}}
`)
	wantPolicyUnavailable(t, base, `{"model":"m","input":"x"}`)
	for _, r := range up.Requests() {
		if r.Path == "/v1/responses" {
			t.Fatalf("the upstream got the request a fail-closed rewrite could not run on: %+v", r)
		}
	}
}
