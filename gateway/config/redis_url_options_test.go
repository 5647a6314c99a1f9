package config

import (
	"strings"
	"testing"
)

// TestRedisURLQueryOptions: the options in store.redis.url's query are
// checked at load, with the call the store opens Redis with: a bad one is
// a store.redis.url problem with its line, reported with the file's other
// problems, and never shows the password.
func TestRedisURLQueryOptions(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"redis://h:1/0?dial_timeout=5s&read_timeout=2&pool_size=4", ""},
		{"rediss://h:1/0?skip_verify=true", ""},
		{"redis://h:1/0?", ""},
		{"redis://:hunter2@h:1/0?foo=bar", `line 3: store.redis.url: "redis://[redacted]@h:1/0?…": unexpected option: foo`},
		{"redis://h:1/0?dial_timeout=abc", `line 3: store.redis.url: "redis://h:1/0?…": invalid dial_timeout duration: time: invalid duration "abc"`},
		{"rediss://h:1/0?skip_verify=yes", `line 3: store.redis.url: "rediss://h:1/0?…": invalid skip_verify boolean`},
		{"redis://h:1/0?pool_size=many", `line 3: store.redis.url: "redis://h:1/0?…": invalid pool_size number`},
		// Every bad option in one run, in the order written.
		{"redis://h:1/0?pool_sise=10&dial_timeout=abc&pool_size=4&max_retries=x", `line 3: store.redis.url: "redis://h:1/0?…": unexpected option: pool_sise` + "\n" +
			`line 3: store.redis.url: "redis://h:1/0?…": invalid dial_timeout duration: time: invalid duration "abc"` + "\n" +
			`line 3: store.redis.url: "redis://h:1/0?…": invalid max_retries number`},
	} {
		yaml := "store:\n  backend: redis\n  redis: {url: \"" + tt.url + "\"}\n" +
			"keys:\n  - {name: a, key: short}\n"
		_, err := Parse([]byte(yaml), env(nil))
		const other = "line 5: keys[0].key: is shorter than 16 characters"
		switch {
		case err == nil || !strings.Contains(err.Error(), other):
			t.Errorf("%s: %v, want the file's other problem too", tt.url, err)
		case tt.want == "" && strings.Contains(err.Error(), "store.redis"):
			t.Errorf("%s: refused: %v", tt.url, err)
		case tt.want != "" && !strings.Contains(err.Error(), tt.want):
			t.Errorf("%s: %v, want %q", tt.url, err, tt.want)
		case strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%s: the error shows the password: %v", tt.url, err)
		}
	}
}
