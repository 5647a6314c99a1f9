package gateway

import (
	"math"
	"testing"

	"github.com/tidwall/gjson"
)

func TestParseUsage(t *testing.T) {
	cases := []struct {
		name, usage string
		want        usage
		ok          bool
		bad         string
	}{
		{"responses", `{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":3}}`,
			usage{input: 5, output: 7, cached: 2, reasoning: 3, known: true}, true, ""},
		{"chat", `{"prompt_tokens":5,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":null}}`, usage{input: 5, output: 7, known: true}, true, ""},
		{"empty object", `{}`, usage{}, false, ""},
		{"at the bound", `{"input_tokens":1000000000000,"output_tokens":0}`, usage{input: 1e12, known: true}, true, ""},
		{"integral float", `{"input_tokens":5.0,"output_tokens":1e3}`, usage{input: 5, output: 1000, known: true}, true, ""},
		{"negative", `{"input_tokens":-5,"output_tokens":7}`, usage{}, false, "input_tokens"},
		{"over the bound", `{"input_tokens":5,"output_tokens":1000000000001}`, usage{}, false, "output_tokens"},
		{"saturating", `{"input_tokens":5,"output_tokens":100000000000000000000}`, usage{}, false, "output_tokens"},
		{"fraction", `{"prompt_tokens":2.5,"completion_tokens":1}`, usage{}, false, "prompt_tokens"},
		{"string", `{"input_tokens":"5","output_tokens":1}`, usage{}, false, "input_tokens"},
		{"bad detail", `{"input_tokens":5,"output_tokens":1,"output_tokens_details":{"reasoning_tokens":-1}}`, usage{}, false, "output_tokens_details.reasoning_tokens"},
		{"not an object", `[1]`, usage{}, false, ""},
		{"null", `null`, usage{}, false, ""},
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

func TestAddTokensSaturates(t *testing.T) {
	cases := []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{-5, 3, -2},
	}
	for _, c := range cases {
		if got := addTokens(c.a, c.b); got != c.want {
			t.Errorf("addTokens(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
