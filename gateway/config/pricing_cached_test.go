package config

import (
	"strings"
	"testing"
)

// TestCachedInputPrice: cached_input left out (or null) prices cached
// input as input (README "Keys, limits and usage"); set, 0 included, it is
// the price of cached input, so free cache hits can be priced.
func TestCachedInputPrice(t *testing.T) {
	for _, tt := range []struct {
		name, line string
		want       float64
	}{
		{"absent", "", 3},
		{"null", "\n    cached_input: null", 3},
		{"zero", "\n    cached_input: 0", 0},
		{"set", "\n    cached_input: 0.25", 0.25},
		{"above input", "\n    cached_input: 5", 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte("pricing:\n  m:\n    input: 3\n    output: 9"+tt.line+"\n"), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Pricing["m"].CachedInputPrice(); got != tt.want {
				t.Fatalf("cached input price %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCachedInputPriceBounds: a cached_input that is set is held to the
// bounds of any price, at its own line; one left out is input's and is
// not reported a second time under cached_input.
func TestCachedInputPriceBounds(t *testing.T) {
	_, err := Parse([]byte("pricing:\n  m:\n    input: 1\n    output: 1\n    cached_input: -1\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "line 5: pricing.m.cached_input: prices must not be negative") {
		t.Errorf("cached_input -1: %v", err)
	}
	_, err = Parse([]byte("pricing:\n  m:\n    input: -1\n    output: 1\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "pricing.m.input: prices must not be negative") || strings.Contains(err.Error(), "cached_input") {
		t.Errorf("input -1 without cached_input: %v", err)
	}
}
