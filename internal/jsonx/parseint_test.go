package jsonx

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

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

// FuzzParseInt checks ParseInt against exact rational arithmetic on every
// JSON number: it accepts exactly the integers of magnitude at most 2^62,
// with their value.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "42", "1.0", "1e3", "-2.5e1", "4611686018427387904", "4611686018427387905.0",
		"46116860184273879.04e2", "1.0000000000000001", "0e999", "1e-1", "10e-1", "9223372036854775808"} {
		f.Add(s)
	}
	limit := new(big.Rat).SetInt64(1 << 62)
	f.Fuzz(func(t *testing.T, s string) {
		raw := []byte(s)
		if !json.Valid(raw) || len(raw) == 0 || strings.TrimSpace(s) != s || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
			return // not a number: the decoder's grammar refuses it before ParseInt
		}
		if e := strings.IndexAny(s, "eE"); e >= 0 {
			if exp, err := strconv.Atoi(strings.TrimPrefix(s[e+1:], "+")); err != nil || exp > 400 || exp < -400 {
				return // too large for the reference to build; covered by the table
			}
		}
		want, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat cannot read the JSON number %q", s)
		}
		abs := new(big.Rat).Abs(want)
		wantOK := want.IsInt() && abs.Cmp(limit) <= 0
		got, err := ParseInt(raw)
		if (err == nil) != wantOK {
			t.Fatalf("ParseInt(%q) = %d, %v; want ok=%v", s, got, err, wantOK)
		}
		if wantOK && want.Num().Int64() != got {
			t.Fatalf("ParseInt(%q) = %d, want %s", s, got, want.Num())
		}
	})
}
