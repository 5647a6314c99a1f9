package config

import (
	"strings"
	"testing"
	"time"
)

// Boundaries and defaults that the config tests did not pin (README,
// "Mutation testing"). The survivors judged equivalent are listed in
// mutation_gaps3_test.go.

const gapsUp = "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n"

// TestDefaultDurations: the documented defaults that are products.
func TestDefaultDurations(t *testing.T) {
	d := Defaults()
	for _, tt := range []struct {
		name      string
		got, want time.Duration
	}{
		{"continuity.anchor_ttl", d.Continuity.AnchorTTL.D(), 7 * 24 * time.Hour},
		{"retry.max_wait", d.Retry.MaxWait.D(), 5 * time.Second},
		{"streams.detach_grace", d.Streams.DetachGrace.D(), 10 * time.Second},
	} {
		if tt.got != tt.want {
			t.Errorf("%s default %s, want %s", tt.name, tt.got, tt.want)
		}
	}
}

// TestValidationBoundaries: each limit accepts its smallest (or largest)
// allowed value and refuses the next one, naming the key.
func TestValidationBoundaries(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, wantErr string // wantErr "": accepted
	}{
		{"resume_max_bytes 1", "streams: {resume_max_bytes: 1}\n", ""},
		{"resume_max_bytes 0", "streams: {resume_max_bytes: 0}\n", "streams.resume_max_bytes: must be positive"},
		{"resume memory equal to max", "streams: {resume_max_bytes: 1000, resume_memory_bytes: 1000}\n", ""},
		{"resume memory below max", "streams: {resume_max_bytes: 1000, resume_memory_bytes: 999}\n", "streams.resume_memory_bytes: must be at least"},
		{"max_body_bytes 1", "limits: {max_body_bytes: 1}\n", ""},
		{"max_body_bytes 0", "limits: {max_body_bytes: 0}\n", "limits.max_body_bytes: must be positive"},
		{"max_event_bytes 1", "limits: {max_event_bytes: 1}\n", ""},
		{"max_event_bytes 0", "limits: {max_event_bytes: 0}\n", "limits.max_event_bytes: must be positive"},
		{"max_ws_frame_bytes 1", "limits: {max_ws_frame_bytes: 1}\n", ""},
		{"max_ws_frame_bytes 0", "limits: {max_ws_frame_bytes: 0}\n", "limits.max_ws_frame_bytes: must be positive"},
		{"upstream_sockets 1", "limits: {upstream_sockets: 1}\n", ""},
		{"upstream_sockets 0", "limits: {upstream_sockets: 0}\n", "limits.upstream_sockets: must be positive"},
		{"body memory equal to max body", "limits: {max_body_bytes: 5000, body_memory_bytes: 5000}\n", ""},
		{"body memory below max body", "limits: {max_body_bytes: 5000, body_memory_bytes: 4999}\n", "limits.body_memory_bytes: must be at least"},
		{"retry.max_wait at its cap", "retry: {max_wait: 10m}\n", ""},
		{"retry.max_wait over its cap", "retry: {max_wait: 10m1s}\n", "retry.max_wait: must be at most 10m0s"},
		{"sample_ratio 0", "tracing: {sample_ratio: 0}\n", ""},
		{"sample_ratio 1", "tracing: {sample_ratio: 1}\n", ""},
		{"sample_ratio above 1", "tracing: {sample_ratio: 1.001}\n", "tracing.sample_ratio: 1.001 is not between 0 and 1"},
		{"sample_ratio below 0", "tracing: {sample_ratio: -0.001}\n", "tracing.sample_ratio: -0.001 is not between 0 and 1"},
		{"sample_ratio from a variable", "tracing: {sample_ratio: \"${RATIO}\"}\n", ""},
		{"redis timeout 0", "store: {backend: redis, redis: {url: redis://127.0.0.1:1/0, timeout: 0s}}\n", "store.redis.timeout: must be positive"},
		{"redis timeout 1ms", "store: {backend: redis, redis: {url: redis://127.0.0.1:1/0, timeout: 1ms}}\n", ""},
		{"a null number is the default", "limits: {max_body_bytes: ~}\n", ""},
		{"an empty section is the defaults", "timeouts:\n", ""},
		{"a trusted proxy by address", "trusted_proxies: [10.0.0.1, \"::1\", 10.0.0.0/8]\n", ""},
		{"a trusted proxy that is neither", "trusted_proxies: [10.0.0.300]\n", `trusted_proxies[0]: "10.0.0.300" is not an IP address or CIDR`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) {
				if k == "RATIO" {
					return "0.25", true
				}
				return "", false
			}
			cfg, err := Parse([]byte(gapsUp+tt.yaml), lookup)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if tt.name == "sample_ratio from a variable" && (cfg.Tracing.SampleRatio == nil || *cfg.Tracing.SampleRatio != 0.25) {
				t.Fatalf("sample_ratio %v, want 0.25 from $RATIO", cfg.Tracing.SampleRatio)
			}
			if tt.name == "a null number is the default" && cfg.Limits.MaxBodyBytes != Defaults().Limits.MaxBodyBytes {
				t.Fatalf("max_body_bytes %d, want the default", cfg.Limits.MaxBodyBytes)
			}
		})
	}
}

// TestSuggestions: a typo gets the nearest key only when it is close for
// its length; equally close keys resolve to the first known one; a small
// struct (up to ten keys) lists them when nothing is close.
func TestSuggestions(t *testing.T) {
	for _, tt := range []struct {
		key   string
		names []string
		want  string
	}{
		{"idel", []string{"idle"}, "idle"}, // a transposition: 1
		{"ixlx", []string{"idle"}, ""},     // 2 is too far for 4 letters
		{"connnect", []string{"connect"}, "connect"},
		{"abcdefghi", []string{"abcdefxyz"}, ""},             // 3 is too far for 9 letters
		{"abcdefghij", []string{"abcdefgxyz"}, "abcdefgxyz"}, // 3 is close enough for 10
		{"cat", []string{"bat", "hat"}, "bat"},               // a tie: the first
	} {
		if got := suggest(tt.key, tt.names); got != tt.want {
			t.Errorf("suggest(%q, %v) = %q, want %q", tt.key, tt.names, got, tt.want)
		}
	}
	ten := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10"}
	if got := hint("zzzzzz", ten); !strings.Contains(got, "known keys: a1, a2") {
		t.Errorf("hint over ten keys = %q, want them listed", got)
	}
	if got := hint("zzzzzz", append(ten, "a11")); got != "" {
		t.Errorf("hint over eleven keys = %q, want none", got)
	}
}

// TestEditDistance: insertions, deletions, substitutions and swaps of
// neighbours each cost one.
func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0},
		{"abc", "abd", 1}, {"abc", "abcd", 1}, {"abcd", "abc", 1}, {"abc", "acb", 1},
		{"kitten", "sitting", 3}, {"ca", "abc", 3},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
