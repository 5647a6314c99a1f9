package config

import (
	"strings"
	"testing"
)

// A policy config JSON cannot hold is a config error naming the spot:
// rendered for the guest, it would be dropped whole and the policy would
// run without its config.
func TestPolicyConfigMustBeJSON(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"number key", "policies:\n  rewrite:\n    model_aliases: {fast: m}\n    2024: note\n", "policies.rewrite.2024: the key 2024 is a number"},
		{"nested bool key", "policies:\n  p:\n    a:\n      - {true: 1}\n", "policies.p.a[0].true: the key true is a boolean"},
		{"null key", "policies:\n  p:\n    ~: 1\n", "policies.p.null: the key null is a null"},
		{"infinity", "policies:\n  p:\n    limit: .inf\n", "policies.p.limit: +Inf cannot be handed to a policy"},
		{"nan in a list", "policies:\n  p: [1, .nan]\n", "policies.p[1]: NaN cannot be handed to a policy"},
		{"fine", "policies:\n  p:\n    \"2024\": note\n    n: 1.5\n    l: [a, {b: null}]\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\"}]\n"+tc.yaml), func(string) (string, bool) { return "", false })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// policy_limits: the defaults are the runtime's (50 ms, 64 MiB, 5 faults);
// set values reach the Config, and out-of-range ones are config errors.
func TestPolicyLimits(t *testing.T) {
	parse := func(yaml string) (Config, error) {
		return Parse([]byte("upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\"}]\n"+yaml), func(string) (string, bool) { return "", false })
	}
	c, err := parse("")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.PolicyLimits; l.CallTimeout.D().Milliseconds() != 50 || l.MemoryPages() != 1024 || l.FaultsBeforeRollback != 5 {
		t.Fatalf("defaults %+v (pages %d)", l, l.MemoryPages())
	}
	c, err = parse("policy_limits: {call_timeout: 200ms, memory_mib: 16, faults_before_rollback: 2}\n")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.PolicyLimits; l.CallTimeout.D().Milliseconds() != 200 || l.MemoryPages() != 256 || l.FaultsBeforeRollback != 2 {
		t.Fatalf("set %+v", l)
	}
	for yaml, want := range map[string]string{
		"policy_limits: {call_timeout: 0s}\n":          "policy_limits.call_timeout: must be positive",
		"policy_limits: {call_timeout: 2m}\n":          "policy_limits.call_timeout: must be at most 1m0s",
		"policy_limits: {memory_mib: 0}\n":             "policy_limits.memory_mib: must be between 1 and 4096",
		"policy_limits: {memory_mib: 4097}\n":          "policy_limits.memory_mib: must be between 1 and 4096",
		"policy_limits: {faults_before_rollback: 0}\n": "policy_limits.faults_before_rollback: must be positive",
		"policy_limits: {call_timout: 1s}\n":           "call_timout",
	} {
		if _, err := parse(yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", yaml, err, want)
		}
	}
}

// sluice_fail_closed in a policy's config is the gateway's: true lists the
// policy in FailClosedRewrites, the policy's own config (PolicyConfigs)
// does not carry it, and a value other than a boolean is a config error.
func TestPolicyFailClosed(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string       // FailClosedRewrites
		configs    map[string]int // members each policy gets
		problem    string
	}{
		{"none", "policies:\n  rewrite: {model_aliases: {fast: m}}\n", nil, map[string]int{"rewrite": 1}, ""},
		{"true", "policies:\n  guard: {sluice_fail_closed: true, words: [a]}\n  rewrite: {model_aliases: {}}\n", []string{"guard"}, map[string]int{"guard": 1, "rewrite": 1}, ""},
		{"only the key", "policies:\n  guard: {sluice_fail_closed: true}\n", []string{"guard"}, map[string]int{"guard": 0}, ""},
		{"false", "policies:\n  guard: {sluice_fail_closed: false}\n", nil, map[string]int{"guard": 0}, ""},
		{"not a boolean", "policies:\n  guard: {sluice_fail_closed: \"yes\"}\n", nil, nil, "policies.guard.sluice_fail_closed: must be true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\"}]\n"+tc.yaml), func(string) (string, bool) { return "", false })
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("error %v, want it to contain %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.FailClosedRewrites(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("FailClosedRewrites = %q, want %q", got, tc.want)
			}
			for name, n := range tc.configs {
				m, _ := c.PolicyConfigs()[name].(map[string]any)
				if _, has := m[FailClosedKey]; has || len(m) != n {
					t.Errorf("policy %s gets %v, want %d members and no %s", name, m, n, FailClosedKey)
				}
				if _, kept := policyMember(c.Policies[name], FailClosedKey); !kept && strings.Contains(tc.yaml, name+": {sluice") {
					t.Errorf("PolicyConfigs changed c.Policies[%s]", name)
				}
			}
		})
	}
}
