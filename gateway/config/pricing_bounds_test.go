package config

import (
	"strings"
	"testing"
)

// TestPriceBounds: a price is a number from 0 to MaxPrice per 1M tokens.
// One that is not a number, infinite or absurdly large would make every
// cost computed from it +Inf or NaN, which /admin/usage's JSON and the cost
// metric cannot carry: it is refused at load, with its line and key path,
// beside the file's other problems.
func TestPriceBounds(t *testing.T) {
	for _, tt := range []struct{ price, want string }{
		{"1.25", ""},
		{"0", ""},
		{"1e6", ""},
		{"-1", "line 3: pricing.m.input: prices must not be negative"},
		{".inf", "line 3: pricing.m.input: must be a number from 0 to 1e+06 (USD per 1M tokens)"},
		{"-.inf", "line 3: pricing.m.input: prices must not be negative"},
		{".nan", "line 3: pricing.m.input: must be a number from 0 to 1e+06 (USD per 1M tokens)"},
		{"1e300", "line 3: pricing.m.input: must be a number from 0 to 1e+06 (USD per 1M tokens)"},
		{"1000000.5", "line 3: pricing.m.input: must be a number from 0 to 1e+06 (USD per 1M tokens)"},
	} {
		yaml := "pricing:\n  m:\n    input: " + tt.price + "\n    output: 1e308\n"
		_, err := Parse([]byte(yaml), env(nil))
		want := "line 4: pricing.m.output: must be a number from 0 to 1e+06 (USD per 1M tokens)"
		if tt.want != "" {
			want = tt.want + "\n" + want
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("input %s: %v, want %q", tt.price, err, want)
		}
	}
}
