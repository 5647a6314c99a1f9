package config_test

// Mutants judged equivalent (no input tells them apart), so not tested:
//
//	gateway/config/config.go:327:19 < -> <=: expandNode walks a mapping's key/value pairs; a parsed mapping always holds an even number of nodes, so i+1 <= len never admits another pair.
//	gateway/config/keys.go:81:19 < -> <=: the same pair walk over a map's mapping.
//	gateway/config/keys.go:107:18 < -> <=: the same pair walk over a struct's mapping.
//	gateway/config/keys.go:22:51 > -> >=: a document without content is all defaults and Parse returns before checkTree, so the document node always has content there.
//	gateway/config/keys.go:185:16 < -> <=: no config field is unsigned, so `t.Kind() >= reflect.Uint` is false for every number field and the condition stays false.
//	gateway/config/keys.go:185:16 < -> >=: as above, the && with a false `t.Kind() >= reflect.Uint` keeps it false.
//	gateway/config/keys.go:185:32 >= -> >: `t.Kind() > reflect.Uint` is false for every (signed) number field as well.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/config"
)

// noEnv is a lookup with no variables set.
func noEnv(string) (string, bool) { return "", false }

// TestGaps3BodyMemoryZeroIsOneProblem: limits.body_memory_bytes of 0 (or
// less) is reported once, as not positive; it is not also compared with
// limits.max_body_bytes, which would add a second, misleading problem.
func TestGaps3BodyMemoryZeroIsOneProblem(t *testing.T) {
	for _, v := range []string{"0", "-1"} {
		_, err := config.Parse([]byte("limits: {body_memory_bytes: "+v+"}\n"), noEnv)
		if want := "line 1: limits.body_memory_bytes: must be positive"; err == nil || err.Error() != want {
			t.Errorf("body_memory_bytes %s: error %v, want only %q", v, err, want)
		}
	}
}

// TestGaps3NumberOutOfRangeBelow: a whole number below what a signed
// field holds, quoted or from a variable, is refused as out of range (too
// large in size), like one above it; "must not be negative" is only for
// unsigned fields, and every number field here is signed.
func TestGaps3NumberOutOfRangeBelow(t *testing.T) {
	lookup := func(k string) (string, bool) {
		if k == "HUGE_NEGATIVE" {
			return "-99999999999999999999", true
		}
		return "", false
	}
	for _, tt := range []struct{ yaml, want string }{
		{"limits: {max_body_bytes: \"-99999999999999999999\"}\n", `line 1: limits.max_body_bytes: "-99999999999999999999" is too large`},
		{"limits:\n  upstream_sockets: ${HUGE_NEGATIVE}\n", `line 2: limits.upstream_sockets: the value of ${HUGE_NEGATIVE} is too large`},
		{"keys: [{name: k, key: 0123456789abcdef, limits: {rpm: \"-99999999999999999999\"}}]\n",
			`line 1: keys[0].limits.rpm: "-99999999999999999999" is too large`},
	} {
		_, err := config.Parse([]byte(tt.yaml), lookup)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: error %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

// mergeChain is a list of n upstreams where each one merges the one before
// it (<<: *previous), so the last one resolves n-1 nested aliases.
func mergeChain(n int) string {
	var b strings.Builder
	b.WriteString("upstreams:\n  - &u0 {name: u0, base_url: \"http://127.0.0.1:1/v1\", weight: 3}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  - &u%d {<<: *u%d, name: u%d}\n", i, i-1, i)
	}
	return b.String()
}

// mergeSiblings is a list of n upstreams that all merge the same base.
func mergeSiblings(n int) string {
	var b strings.Builder
	b.WriteString("upstreams:\n  - &base {name: u0, base_url: \"http://127.0.0.1:1/v1\", weight: 3}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  - {<<: *base, name: u%d}\n", i)
	}
	return b.String()
}

// TestGaps3MergeAliasesAccepted: shared settings through merge keys work
// however many entries use them, and through a chain of up to 65 nested
// aliases (the guard against alias cycles starts beyond that).
func TestGaps3MergeAliasesAccepted(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		n    int
	}{
		{"80 upstreams merge one base", mergeSiblings(80), 80},
		{"each upstream merges the previous, 65 aliases deep", mergeChain(66), 66},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml), noEnv)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(c.Upstreams) != tt.n {
				t.Fatalf("%d upstreams, want %d", len(c.Upstreams), tt.n)
			}
			last := c.Upstreams[tt.n-1]
			if last.Name != fmt.Sprintf("u%d", tt.n-1) || last.BaseURL != "http://127.0.0.1:1/v1" || last.Weight != 3 {
				t.Fatalf("last upstream %+v, want the merged base_url and weight", last)
			}
		})
	}
}

// TestGaps3MergeAliasCycleRefused: a mapping that merges itself is an
// error naming the key and the alias, not endless recursion.
func TestGaps3MergeAliasCycleRefused(t *testing.T) {
	_, err := config.Parse([]byte("timeouts: &t {<<: *t}\n"), noEnv)
	if want := "line 1: timeouts: the alias *t cannot be resolved"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestGaps3ExpandedValueKeptVerbatim: a variable's value lands in its key
// exactly as set, even when it starts or ends with a line break or holds
// YAML syntax (a secret read from a file often does), in a mapping and in
// a list.
func TestGaps3ExpandedValueKeptVerbatim(t *testing.T) {
	for _, v := range []string{"\nsk-from-file", "sk-from-file\n", "line1\nline2", "  padded  ", "sk: x #y", "10.0.0.1, 10.0.0.2"} {
		lookup := func(k string) (string, bool) { return v, k == "SECRET" }
		// (An api_key with a control character is refused by Validate:
		// TestUpstreamNameAndKeyControlCharacters.)
		c, err := config.Parse([]byte("admin_token: ${SECRET}\nupstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n"+
			"policies:\n  p:\n    - ${SECRET}\n"), lookup)
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		if c.AdminToken != v {
			t.Errorf("%q: admin_token %q", v, c.AdminToken)
		}
		if l, ok := c.Policies["p"].([]any); !ok || len(l) != 1 || l[0] != v {
			t.Errorf("%q: policies.p %#v", v, c.Policies["p"])
		}
	}
}
