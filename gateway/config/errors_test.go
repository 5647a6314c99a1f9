package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goTypeName matches what yaml.v3 and reflect print for Go types; no config
// error may contain one.
var goTypeName = regexp.MustCompile(`\bu?int(8|16|32|64)?\b|\bfloat(32|64)\b|\*bool|map\[|\[\]|interface \{|config\.[A-Z]|time\.Duration|!!|cannot unmarshal|not found in type|into (string|bool)`)

// TestConfigErrorMessages pins the exact messages an operator sees: every
// bad key with its path (and the key it most likely meant), wrong types in
// words, bad durations, several problems at once.
func TestConfigErrorMessages(t *testing.T) {
	const up = "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n"
	for _, tt := range []struct{ name, yaml, want string }{
		// Unknown keys, at several depths.
		{"top-level typo", "listn: 127.0.0.1:1\n", `unknown key "listn" (did you mean "listen"?)`},
		{"top-level case", "Timeouts: {idle: 5s}\n", `unknown key "Timeouts" (did you mean "timeouts"?)`},
		{"top-level singular", "upstream: []\n", `unknown key "upstream" (did you mean "upstreams"?)`},
		{"top-level nothing close", "bogus_key: 1\n", `unknown key "bogus_key"`},
		{"nested typo", "timeouts:\n  idel: 5s\n", `timeouts: unknown key "idel" (did you mean "idle"?)`},
		{"nested other spelling", "limits:\n  max-body-bytes: 10\n", `limits: unknown key "max-body-bytes" (did you mean "max_body_bytes"?)`},
		{"nested camelCase", "data_dir: x\ncontinuity: {anchorTTL: 1h}\n", `continuity: unknown key "anchorTTL" (did you mean "anchor_ttl"?)`},
		{"in a list", "upstreams:\n  - name: a\n    base_ur: http://127.0.0.1:1/v1\n", `upstreams[0]: unknown key "base_ur" (did you mean "base_url"?)`},
		{"second list item", up + "  - name: b\n    base_url: http://127.0.0.1:2/v1\n    protocl: chat\n", `upstreams[1]: unknown key "protocl" (did you mean "protocol"?)`},
		{"three deep, small struct lists its keys", up + "routes:\n  - models: [x]\n    targets: [{upstream: a, weight: 2}]\n",
			`routes[0].targets[0]: unknown key "weight" (known keys: upstream, model)`},
		{"route timeouts", up + "routes:\n  - models: [x]\n    targets: [{upstream: a}]\n    timeouts: {first_bite: 1s}\n",
			`routes[0].timeouts: unknown key "first_bite" (did you mean "first_byte"?)`},
		{"a key repeated", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", `key "listen" appears twice`},
		{"in a merged mapping", "timeouts: {<<: {idle: 5s, bogus: 1s}}\n", `timeouts: unknown key "bogus"`},
		{"in a map's value", "pricing:\n  gpt-x: {input: 1, outptu: 2}\n", `pricing.gpt-x: unknown key "outptu" (did you mean "output"?)`},
		{"wait_replicas without wait_timeout", "store: {backend: redis, redis: {url: redis://127.0.0.1:1/0, wait_replicas: 1, wait_timeout: 0s}}\n",
			"store.redis.wait_timeout: must be positive with wait_replicas"},

		// Wrong types, in words.
		{"string for a number", "limits:\n  max_body_bytes: abc\n", `limits.max_body_bytes: "abc" is not a number`},
		{"fraction for a number", "limits:\n  max_event_bytes: 1.5\n", `limits.max_event_bytes: "1.5" is not a whole number`},
		{"number too large", "limits:\n  upstream_sockets: 99999999999999999999\n", `limits.upstream_sockets: "99999999999999999999" is too large`},
		{"list for a number", "limits:\n  max_body_bytes: [1]\n", `limits.max_body_bytes: expected a number, not a list`},
		{"not a bool", "log:\n  json: maybe\n", `log.json: "maybe" is not true or false`},
		{"optional bool", up + "    prefill: nope\n", `upstreams[0].prefill: "nope" is not true or false`},
		{"list for a string", "listen: [127.0.0.1:1]\n", `listen: expected a string, not a list`},
		{"mapping for a string", up + "    api_key: {k: v}\n", `upstreams[0].api_key: expected a string, not a mapping`},
		{"scalar for a section", "timeouts: 30s\n", `timeouts: expected keys (a mapping), not "30s"`},
		{"scalar for a list", "trusted_proxies: 10.0.0.0/8\n", `trusted_proxies: expected a list, not "10.0.0.0/8"`},
		{"mapping for a list", "upstreams: {name: a}\n", `upstreams: expected a list, not a mapping`},
		{"scalar for policies", "policies: 3\n", `policies: expected a mapping, not "3"`},
		{"not a mapping at all", "- listen\n", `expected keys like "listen: 127.0.0.1:8080" at the top, not a list`},

		// Durations.
		{"bad duration", "timeouts:\n  idle: soon\n", `timeouts.idle: "soon" is not a duration (like 30s or 5m)`},
		{"duration without unit", "timeouts:\n  connect: 5\n", `timeouts.connect: "5" is not a duration (like 30s or 5m)`},
		{"negative duration", "continuity:\n  anchor_ttl: -1h\n", `continuity.anchor_ttl: "-1h" is negative`},
		{"zero rehydrate_after", "continuity: {portable: true, rehydrate_after: 0s}\n", `continuity.rehydrate_after: must be positive`},
		{"portable without continuity", "continuity: {disabled: true, portable: true}\n", `continuity.portable: needs continuity (continuity.disabled is true)`},
		{"portable typo", "continuity: {portabel: true}\n", `continuity: unknown key "portabel" (did you mean "portable"?)`},
		{"list for a duration", "timeouts:\n  idle: [5s]\n", `timeouts.idle: expected a duration (like 30s or 5m), not a list`},
		{"route duration", up + "routes:\n  - models: [x]\n    targets: [{upstream: a}]\n    timeouts: {stall: later}\n",
			`routes[0].timeouts.stall: "later" is not a duration (like 30s or 5m)`},
		{"duration past time.Duration", "timeouts:\n  idle: 9999999h\n", `timeouts.idle: "9999999h" is too large: must be at most 876000h0m0s (100 years)`},
		{"route duration past time.Duration", up + "routes:\n  - models: [x]\n    targets: [{upstream: a}]\n    timeouts: {first_token: 9999999h}\n",
			`routes[0].timeouts.first_token: "9999999h" is too large: must be at most 876000h0m0s (100 years)`},
		{"negative duration past time.Duration", "timeouts:\n  idle: -9999999h\n", `timeouts.idle: "-9999999h" is negative`},
		{"two dots in a duration", "timeouts:\n  idle: 1.5.5s\n", `timeouts.idle: "1.5.5s" is not a duration (like 30s or 5m)`},

		// Empty list items: decoding would drop them without a word.
		{"dangling upstream", up + "  -\n", `upstreams[1]: is empty`},
		{"null upstream first", "upstreams: [~, {name: a, base_url: \"http://127.0.0.1:1/v1\"}]\n", `upstreams[0]: is empty`},
		{"dangling route", up + "routes:\n  -\n", `routes[0]: is empty`},
		{"null target", up + "routes:\n  - models: [x]\n    targets: [~, {upstream: a}]\n", `routes[0].targets[0]: is empty`},
		{"null model", up + "routes:\n  - models: [x, null]\n    targets: [{upstream: a}]\n", `routes[0].models[1]: is empty`},
		{"alias of a null", "trusted_proxies: [10.0.0.1, &none ~, *none]\n", "trusted_proxies[1]: is empty\ntrusted_proxies[2]: is empty"},

		// A route that can never match.
		{"route shadowed", up + "routes:\n  - models: [x, y]\n    targets: [{upstream: a}]\n  - models: [x]\n    targets: [{upstream: a, model: z}]\n",
			`routes[1].models: every model is matched first by routes[0], so this route is never used`},
		{"route shadowed by two", up + "routes:\n  - models: [x]\n    targets: [{upstream: a}]\n  - models: [\"y*\"]\n    targets: [{upstream: a}]\n" +
			"  - models: [\"y*\", x, x]\n    targets: [{upstream: a, model: z}]\n",
			`routes[2].models: every model is matched first by routes[0], routes[1], so this route is never used`},

		// Several at once, in file order.
		{"several at once", "listn: x\ntimeouts:\n  idle: soon\n  conect: 1s\nlimits:\n  max_body_bytes: abc\nupstreams:\n  - name: a\n    base_ur: http://x/v1\n",
			`unknown key "listn" (did you mean "listen"?)` + "\n" +
				`timeouts.idle: "soon" is not a duration (like 30s or 5m)` + "\n" +
				`timeouts: unknown key "conect" (did you mean "connect"?)` + "\n" +
				`limits.max_body_bytes: "abc" is not a number` + "\n" +
				`upstreams[0]: unknown key "base_ur" (did you mean "base_url"?)`},
		{"several unset variables", "admin_token: ${NOPE_A}\nupstreams:\n  - name: a\n    base_url: http://x/v1\n    api_key: ${NOPE_B}\n",
			"admin_token: environment variable NOPE_A is empty or not set\nupstreams[0].api_key: environment variable NOPE_B is empty or not set"},
		{"several values", "listen: nope\nlog: {level: loud}\n",
			"listen: \"nope\" is not host:port\nlog.level: \"loud\" is not one of trace, debug, info, warn, error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(nil))
			if err == nil {
				t.Fatalf("accepted; want %q", tt.want)
			}
			if withoutLines(err) != tt.want {
				t.Fatalf("error\n got %q\nwant %q", err, tt.want)
			}
			if m := goTypeName.FindString(err.Error()); m != "" {
				t.Fatalf("error %q names a Go type (%q)", err, m)
			}
		})
	}
}

// TestConfigValuesThatMustStillParse: quoted numbers, ${VAR} in number and
// bool keys, yes/no bools, anchors and aliases.
func TestConfigValuesThatMustStillParse(t *testing.T) {
	c, err := Parse([]byte(`
limits:
  max_body_bytes: "1048576"
  max_event_bytes: ${EVENT}
  upstream_sockets: 0x10
log:
  json: ${JSON}
metrics_public: "true"
timeouts: {connect: 2s, idle: 1m}
upstreams:
  - &a {name: a, base_url: "http://127.0.0.1:1/v1", weight: 2}
  - <<: *a
    name: b
`), env(map[string]string{"EVENT": "4096", "JSON": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxBodyBytes != 1<<20 || c.Limits.MaxEventBytes != 4096 || c.Limits.UpstreamSockets != 16 || !c.Log.JSON ||
		!c.MetricsPublic || c.Timeouts.Connect.D().Seconds() != 2 || c.Upstreams[0].Weight != 2 || c.Upstreams[1].Name != "b" || c.Upstreams[1].Weight != 2 {
		t.Fatalf("parsed %+v", c)
	}
	// wait_timeout only matters with wait_replicas.
	if _, err := Parse([]byte("store: {backend: redis, redis: {url: redis://127.0.0.1:1/0, wait_timeout: 0s}}\n"), env(nil)); err != nil {
		t.Fatalf("wait_timeout 0 without wait_replicas: %v", err)
	}
	if _, err := Parse([]byte("limits:\n  max_body_bytes: ${BIG}\n"), env(map[string]string{"BIG": "lots"})); err == nil ||
		withoutLines(err) != `limits.max_body_bytes: the value of ${BIG} is not a number` {
		t.Fatalf("expanded non-number: %v", err)
	}
}

func TestLoadFormatsSeveralProblems(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("listn: x\nlimits: {max_body_bytes: abc}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := "config " + path + ": 2 problems:\n" +
		`  line 1: unknown key "listn" (did you mean "listen"?)` + "\n" +
		`  line 2: limits.max_body_bytes: "abc" is not a number`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != path {
		t.Fatalf("not a FileError: %T", err)
	}
	if err := os.WriteFile(path, []byte("listn: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || err.Error() != "config "+path+`: line 1: unknown key "listn" (did you mean "listen"?)` {
		t.Fatalf("one problem: %v", err)
	}
}

func TestUpstreamFromURLProtocolScheme(t *testing.T) {
	for _, tt := range []struct{ raw, base, protocol, key string }{
		{"http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1", "", ""},
		{"chat+http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1", "chat", ""},
		{"chat+https://sk-1@llm.example/v1/", "https://llm.example/v1", "chat", "sk-1"},
		{"CHAT+HTTP://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1", "chat", ""},
		{"responses+https://:sk-2@api.example.com/v1", "https://api.example.com/v1", "responses", "sk-2"},
	} {
		u, err := UpstreamFromURL(tt.raw, 0)
		if err != nil {
			t.Fatalf("%s: %v", tt.raw, err)
		}
		if u.BaseURL != tt.base || u.Protocol != tt.protocol || u.APIKey != tt.key {
			t.Fatalf("%s: got %+v", tt.raw, u)
		}
	}
	for raw, want := range map[string]string{
		"grpc+http://x/v1":           `--upstream "grpc+http://x/v1": "grpc" is not a protocol (chat+http(s)://… or responses+http(s)://…)`,
		"chat+ftp://sk-secret@x/v1":  `--upstream "chat+ftp://[redacted]@x/v1": not an http(s) URL (optionally chat+ or responses+ before the scheme)`,
		"chat://x/v1":                `--upstream "chat://x/v1": not an http(s) URL (optionally chat+ or responses+ before the scheme)`,
		"127.0.0.1:8080":             `--upstream "127.0.0.1:8080": not an http(s) URL`,
		"sk-secret@x/v1":             `--upstream "[redacted]@x/v1": not an http(s) URL (optionally chat+ or responses+ before the scheme)`,
		"sk-secret:y@x:1/v1?k=v":     `--upstream "[redacted]@x:1/v1?…": not an http(s) URL (optionally chat+ or responses+ before the scheme)`,
		"https://sk-secret@/v1":      `--upstream "https://[redacted]@/v1": not an http(s) URL (optionally chat+ or responses+ before the scheme)`,
		"https://sk-secret@x/v1\x7f": `--upstream "https://[redacted]@x/v1\x7f": not an http(s) URL`,
	} {
		_, err := UpstreamFromURL(raw, 0)
		if err == nil || err.Error() != want {
			t.Errorf("%q: got %v\nwant %s", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the key is in the error: %v", raw, err)
		}
	}
}

// TestEnvValueNeverQuoted: a value that took text from the environment and
// does not parse, or parses but is wrong, is not quoted in the problem (a
// secret read from the wrong variable would reach the log): the problem
// names the variables instead. A default written in the file is the file's
// own text and is quoted as usual.
func TestEnvValueNeverQuoted(t *testing.T) {
	const secret = "sk-abcdefghijkl1234"
	vars := map[string]string{"K": secret, "A": "sk-abcdef", "B": "ghijkl1234", "L": "127.0.0.1:" + secret}
	for _, tt := range []struct{ yaml, want string }{
		{"upstreams:\n  - {name: a, base_url: \"http://h:1/v1\", weight: \"${K}\"}\n",
			"line 2: upstreams[0].weight: the value of ${K} is not a number"},
		{"listen: ${L}\n", `line 1: listen: the value of ${L}: the port is not a number from 0 to 65535 (0 picks a free port)`},
		{"timeouts:\n  idle: ${K}\n", "line 2: timeouts.idle: the value of ${K} is not a duration (like 30s or 5m)"},
		{"log: {json: \"${K}\"}\n", "line 1: log.json: the value of ${K} is not true or false"},
		{"log: {level: \"${K}\"}\n", "line 1: log.level: the value of ${K} is not one of trace, debug, info, warn, error"},
		{"limits: {max_body_bytes: \"1${A}${B}\"}\n", "line 1: limits.max_body_bytes: the value expanded from ${A} and ${B} is not a number"},
		{"timeouts: {idle: &i \"${K}\", header: *i}\n", "line 1: timeouts.idle: the value of ${K} is not a duration (like 30s or 5m)\n" +
			"line 1: timeouts.header: the value of ${K} is not a duration (like 30s or 5m)"},
		{"limits: {max_body_bytes: \"${UNSET:-lots}\"}\n", `line 1: limits.max_body_bytes: "lots" is not a number`},
	} {
		_, err := Parse([]byte(tt.yaml), env(vars))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: error %v\nwant %s", tt.yaml, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "abcdef") {
			t.Errorf("%q: the error shows the value: %v", tt.yaml, err)
		}
	}
}
