package config

import (
	"strings"
	"testing"
)

// TestKeyLimitsAboveTheBoundAreRefused: a limit above MaxKeyLimit (one the
// limiters' float64 arithmetic cannot hold exactly) is refused at load,
// naming the field; the bound itself is accepted.
func TestKeyLimitsAboveTheBoundAreRefused(t *testing.T) {
	for _, tt := range []struct{ limits, want string }{
		{`{rpm: 9223372036854775807}`, `keys[0].limits.rpm: must be at most 1000000000000000 (0: unlimited)`},
		{`{tpm: 1000000000000001}`, `keys[0].limits.tpm: must be at most 1000000000000000 (0: unlimited)`},
		{`{tokens_per_month: 1000000000000001}`, `keys[0].limits.tokens_per_month: must be at most 1000000000000000 (0: unlimited)`},
		{`{rpm: 1000000000000000, tpm: 1000000000000000, concurrent: 1000000000000000, tokens_per_day: 1000000000000000, tokens_per_month: 1000000000000000}`, ""},
	} {
		_, err := Parse([]byte("keys: [{name: k, key: 0123456789abcdef, limits: "+tt.limits+"}]\n"), env(nil))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.limits, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v\nwant %q", tt.limits, err, tt.want)
		}
	}
}
