package jsonx

import "testing"

// TestParseInt: integer literals are read exactly up to ±2^62; a fraction
// or exponent is accepted when the value is integral.
func TestParseInt(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int64
		ok   bool
	}{
		{"null", 0, true},
		{"0", 0, true},
		{"-0", 0, true},
		{"42", 42, true},
		{"-42", -42, true},
		{"999999999999999999", 999999999999999999, true}, // 18 digits
		{"1000000000000000000", 1000000000000000000, true},
		{"4611686018427387903", 1<<62 - 1, true}, // float64 would round it to 2^62
		{"4611686018427387904", 1 << 62, true},
		{"-4611686018427387904", -(1 << 62), true},
		{"4611686018427387905", 0, false}, // 2^62+1: within float64 rounding of 2^62
		{"4611686018427388000", 0, false},
		{"-4611686018427387905", 0, false},
		{"9223372036854775807", 0, false},
		{"9223372036854775808", 0, false}, // overflows int64
		{"123456789012345678901234567890", 0, false},
		{"1e3", 1000, true},
		{"1.0", 1, true},
		{"-2.5e1", -25, true},
		{"1.5", 0, false},
		{"1e19", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"true", 0, false},
	} {
		got, err := ParseInt([]byte(c.raw))
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, ok=%v", c.raw, got, err, c.want, c.ok)
		}
	}
}
