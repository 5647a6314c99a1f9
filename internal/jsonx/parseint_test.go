package jsonx

import "testing"

// TestParseInt: numbers are read exactly up to ±2^62; a fraction or
// exponent is accepted when the value is integral.
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
		{"1E+2", 100, true},
		{"10e-1", 1, true},
		{"-0.0", 0, true},
		{"0e999999999999", 0, true},
		{"4611686018427387904.000", 1 << 62, true},
		{"46116860184273879.04e2", 1 << 62, true},
		{"4611686018427387905.0", 0, false}, // 2^62+1 by its value
		{"4.611686018427387905e18", 0, false},
		{"1.0000000000000001", 0, false}, // not an integer, though float64 says 1
		{"1e-1", 0, false},
		{"1e999999999999", 0, false},
		{"1.e2", 0, false},
		{"01.0", 0, false},
		{"1.0x", 0, false},
		{"1e", 0, false},
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

// ParseInt allocates nothing: it decodes every guest's output.
func TestParseIntAllocatesNothing(t *testing.T) {
	for _, raw := range []string{"42", "1.0e3", "4611686018427387905.0"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = ParseInt([]byte(raw)) }); n != 0 {
			t.Errorf("ParseInt(%q): %v allocations", raw, n)
		}
	}
}
