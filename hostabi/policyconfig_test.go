package hostabi

import (
	"strings"
	"testing"
)

// TestEmbeddedPolicyConfigChecks: the embedded replay and recover policies
// refuse, naming the key, a config they would not read as written (README
// "Running it": a policy's refusal stops the start at its line).
func TestEmbeddedPolicyConfigChecks(t *testing.T) {
	cases := []struct {
		name, config string
		check        func([]byte) error
		want         string // "" = accepted
	}{
		{"replay none", ``, CheckReplayConfig, ""},
		{"replay empty object", `{}`, CheckReplayConfig, ""},
		{"replay penalty", `{"penalty_ms": 30000}`, CheckReplayConfig, ""},
		{"replay penalty zero", `{"penalty_ms": 0}`, CheckReplayConfig, ""},
		{"replay penalty integral by value", `{"penalty_ms": 3e4}`, CheckReplayConfig, ""},
		{"replay misspelt key", `{"penalty_msec": 30000}`, CheckReplayConfig, `unknown key "penalty_msec": the only key is penalty_ms`},
		{"replay extra key", `{"penalty_ms": 1, "x": 1}`, CheckReplayConfig, `unknown key "x"`},
		{"replay string", `{"penalty_ms": "30s"}`, CheckReplayConfig, "penalty_ms must be a whole number of milliseconds, not a string"},
		{"replay null", `{"penalty_ms": null}`, CheckReplayConfig, "not null"},
		{"replay negative", `{"penalty_ms": -5}`, CheckReplayConfig, "0 or more, not -5"},
		{"replay fractional", `{"penalty_ms": 1.5}`, CheckReplayConfig, "0 or more, not 1.5"},
		{"replay not an object", `[1]`, CheckReplayConfig, "config is not a JSON object"},
		{"recover none", ``, CheckRecoverConfig, ""},
		{"recover empty object", `{}`, CheckRecoverConfig, ""},
		{"recover any key", `{"whatever": [1, 2]}`, CheckRecoverConfig, `unknown key "whatever": the recover policy takes no config`},
		{"recover not an object", `5`, CheckRecoverConfig, "config is not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.check([]byte(c.config))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestEmbeddedReplayPenaltyFromConfig: the penalty the check accepts is the
// one the decision uses.
func TestEmbeddedReplayPenaltyFromConfig(t *testing.T) {
	in := ReplayInput{Code: "rate_limit_exceeded"}
	for config, want := range map[string]int64{``: 0, `{}`: 0, `{"penalty_ms": 30000}`: 30000, `{"penalty_ms": 3e4}`: 30000} {
		if out := EmbeddedReplay(in, []byte(config)); out.Verdict != ReplayOtherUpstream || out.PenaltyMillis != want {
			t.Errorf("config %s: %+v, want penalty %d", config, out, want)
		}
	}
}
