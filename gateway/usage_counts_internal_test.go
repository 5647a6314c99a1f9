package gateway

import (
	"math"
	"testing"

	"github.com/tidwall/gjson"
)

// TestParseUsageCountsAndDetails: a usage is known only with both of its
// counts, and its details are held within them (withinCounts).
func TestParseUsageCountsAndDetails(t *testing.T) {
	cases := []struct {
		name, usage string
		want        usage
		ok          bool
		bad         string
	}{
		{"chat, no counts", `{}`, usage{}, false, ""},
		{"chat, input only", `{"prompt_tokens":10}`, usage{}, false, ""},
		{"chat, output only", `{"completion_tokens":10}`, usage{}, false, ""},
		{"chat, null output", `{"prompt_tokens":10,"completion_tokens":null}`, usage{}, false, ""},
		{"chat, details only", `{"prompt_tokens_details":{"cached_tokens":3},"total_tokens":9}`, usage{}, false, ""},
		{"responses, input only", `{"input_tokens":10}`, usage{}, false, ""},
		{"responses, output only", `{"output_tokens":10}`, usage{}, false, ""},
		{"responses, null input", `{"input_tokens":null,"output_tokens":10}`, usage{}, false, ""},
		{"a bad count is still bad", `{"prompt_tokens":-1}`, usage{}, false, "prompt_tokens"},
		{"zero counts are counts", `{"prompt_tokens":0,"completion_tokens":0}`, usage{known: true}, true, ""},
		{"chat, cached above input", `{"prompt_tokens":10,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":50}}`,
			usage{input: 10, cached: 10, known: true}, true, ""},
		{"chat, reasoning above output", `{"prompt_tokens":1,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":999}}`,
			usage{input: 1, output: 5, reasoning: 5, known: true}, true, ""},
		{"responses, details above counts", `{"input_tokens":4,"output_tokens":2,"input_tokens_details":{"cached_tokens":7},"output_tokens_details":{"reasoning_tokens":3}}`,
			usage{input: 4, output: 2, cached: 4, reasoning: 2, known: true}, true, ""},
		{"details within counts", `{"input_tokens":4,"output_tokens":2,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":1}}`,
			usage{input: 4, output: 2, cached: 4, reasoning: 1, known: true}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, ok, bad := parseUsage(gjson.Parse(c.usage))
			if u != c.want || ok != c.ok || bad != c.bad {
				t.Fatalf("parseUsage(%s) = %+v, %v, %q; want %+v, %v, %q", c.usage, u, ok, bad, c.want, c.ok, c.bad)
			}
		})
	}
}

// TestPriceOfNeverNegative: usage with more cached than input tokens (as
// totals stored before parseUsage held them) prices its input as cached,
// never below zero; a cached price of 0 prices cache hits at 0.
func TestPriceOfNeverNegative(t *testing.T) {
	a := &accounts{opts: AccountsOptions{Pricing: map[string]Price{
		"dear-input": {Input: 1_000_000, Output: 2, CachedInput: 1},
		"free-cache": {Input: 1_000_000, Output: 2, CachedInput: 0},
	}}}
	cases := []struct {
		name, model string
		u           usage
		want        float64
	}{
		{"cached above input", "dear-input", usage{input: 10, cached: 50}, 10 * 1e-6},
		{"cached above input, with output", "dear-input", usage{input: 10, cached: 50, output: 1_000_000}, 10*1e-6 + 2},
		{"cached within input", "dear-input", usage{input: 10, cached: 4}, 6 + 4*1e-6},
		{"free cache hits", "free-cache", usage{input: 1000, cached: 1000}, 0},
		{"free cache hits, the rest at input", "free-cache", usage{input: 1000, cached: 400}, 600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := a.priceOf(c.model, c.u)
			if !ok || got < 0 || math.Abs(got-c.want) > 1e-9*math.Max(1, c.want) {
				t.Fatalf("priceOf(%s, %+v) = %v, %v; want %v", c.model, c.u, got, ok, c.want)
			}
		})
	}
}
