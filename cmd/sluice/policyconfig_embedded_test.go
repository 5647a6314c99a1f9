package main

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestEmbeddedReplayRecoverRefuseBadConfig: the embedded replay and recover
// policies judge their policies.NAME config as the rewrite policy does: a
// misspelt key, a key the policy does not read or a penalty_ms that is not
// a whole number of milliseconds stops the start at its line, instead of
// being dropped (README "Running it"). It exercises the committed
// policies/*.wasm, so it needs them rebuilt from policies/*/main.go.
func TestEmbeddedReplayRecoverRefuseBadConfig(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	for _, c := range []struct{ policies, want string }{
		{"  replay: {penalty_msec: 30000}\n", `line 6: policies.replay: the policy refused its config: `},
		{"  replay: {penalty_ms: \"30s\"}\n", `penalty_ms must be a whole number of milliseconds, not a string`},
		{"  replay: {penalty_ms: -5}\n", `penalty_ms must be a whole number of milliseconds, 0 or more, not -5`},
		{"  replay: {penalty_ms: 1.5}\n", `not 1.5`},
		{"  recover: {whatever: [1, 2]}\n", `line 6: policies.recover: the policy refused its config: `},
	} {
		if _, code, out := serveWithPolicies(t, up.URL, c.policies); code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want %q in:\n%s", strings.TrimSpace(c.policies), code, c.want, out)
		}
	}
}
