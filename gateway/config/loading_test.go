package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// aliasBomb is a config of a few hundred bytes whose anchors each merge the
// one before ten times, levels deep, each a key indented by indent; then
// names the key that stands for 10^levels mappings.
func aliasBomb(levels int, indent, then string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sl0: &l0 {level: info}\n", indent)
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "%sl%d: &l%d {<<: [%s]}\n", indent, i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	return b.String() + then
}

// TestAliasGrowthBounded: a config whose aliases expand past the bound is
// refused at the line of the alias that goes past it, before anything walks
// the expanded tree (which took seconds per level); the aliases past the
// bound are left out, so the file's other problems are reported in the same
// run (README "Running it"). Anchors and merge keys used the ordinary way,
// even many times over, still load.
func TestAliasGrowthBounded(t *testing.T) {
	const growth = "with the alias *l4, aliases and merge keys expand the config by more than 100000 nodes" +
		" (it and the 18 aliases after it that go past the bound are left out)"
	listBomb := "policies:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
		"  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n" +
		"  e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"merge bomb", aliasBomb(7, "", "log: *l7\n"), "line 6: l5: " + growth + "\n" +
			"line 1: unknown key \"l0\"\nline 2: unknown key \"l1\"\nline 3: unknown key \"l2\"\nline 4: unknown key \"l3\"\n" +
			"line 5: unknown key \"l4\"\nline 6: unknown key \"l5\"\nline 7: unknown key \"l6\"\nline 8: unknown key \"l7\""},
		{"merge bomb under policies, never named by a key", "policies:\n" + aliasBomb(7, "  ", ""), "line 7: policies.l5: " + growth},
		{"alias bomb in lists", listBomb,
			"line 6: policies.e[7]: with the alias *d, aliases and merge keys expand the config by more than 100000 nodes" +
				" (it and the 2 aliases after it that go past the bound are left out)"},
		{"the file's other problems in the same run", listBomb + "upstreams:\n  - {name: a, base_ur: \"http://127.0.0.1:1/v1\"}\nlimits: {max_body_bytes: abc}\n",
			"line 6: policies.e[7]: with the alias *d, aliases and merge keys expand the config by more than 100000 nodes" +
				" (it and the 2 aliases after it that go past the bound are left out)\n" +
				"line 8: upstreams[0]: unknown key \"base_ur\" (did you mean \"base_url\"?)\n" +
				"line 9: limits.max_body_bytes: \"abc\" is not a number"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(nil))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
		})
	}

	var many strings.Builder // 5,300 upstreams merging a base of 17 nodes: 90,100 nodes added
	many.WriteString("x-base: &base {base_url: \"http://127.0.0.1:1/v1\", weight: 3, protocol: responses, transport: http, prefill: true," +
		" forward_headers: [X-Api-Key, Api-Key, OpenAI-Organization, OpenAI-Project]}\n")
	many.WriteString("timeouts: &t {connect: 2s, idle: 1m}\nupstreams:\n")
	for i := range 5300 {
		fmt.Fprintf(&many, "  - {<<: *base, name: u%d}\n", i)
	}
	yaml := strings.Replace(many.String(), "x-base:", "policies: {x-base:", 1)
	yaml = strings.Replace(yaml, "]}\n", "]}}\n", 1)
	c, err := Parse([]byte(yaml), env(nil))
	if err != nil {
		t.Fatalf("ordinary merges refused: %v", err)
	}
	last := c.Upstreams[len(c.Upstreams)-1]
	if len(c.Upstreams) != 5300 || last.Name != "u5299" || last.Weight != 3 || len(last.ForwardHeaders) != 4 || c.Timeouts.Idle.D() != time.Minute {
		t.Fatalf("merged %d upstreams, last %+v, idle %s", len(c.Upstreams), last, c.Timeouts.Idle.D())
	}
}

// TestSingleDocument: keys after a "---" would be ignored, so a second
// document is refused at its line; a leading or trailing marker with no
// keys after it is not a second document.
// TestBareMarkerIsTheDefaults: a file holding only --- is empty, as an
// empty file is (not a bare EOF error).
func TestBareMarkerIsTheDefaults(t *testing.T) {
	c, err := Parse([]byte("---\n"), env(nil))
	if err != nil || c.Listen != Defaults().Listen {
		t.Fatalf("error %v, listen %q", err, c.Listen)
	}
}

func TestSingleDocument(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"second document", "listen: 127.0.0.1:1\n---\nlog: {level: debug}\n",
			"line 2: a second YAML document starts here; the config must be a single document"},
		{"third document", "---\nlisten: 127.0.0.1:1\n---\n---\nlog: {level: debug}\n",
			"line 4: a second YAML document starts here; the config must be a single document"},
		{"an empty first document", "---\n---\nlog: {level: debug}\n",
			"line 2: a second YAML document starts here; the config must be a single document"},
		{"invalid YAML in a second document", "listen: 127.0.0.1:1\n---\nlog: [\n",
			"invalid YAML: yaml: line 3: did not find expected node content"},
		{"leading marker", "---\nlisten: 127.0.0.1:1\n", ""},
		{"trailing marker", "listen: 127.0.0.1:1\n---\n", ""},
		{"document end marker", "listen: 127.0.0.1:1\n...\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), env(nil))
			if tt.want == "" {
				if err != nil || c.Listen != "127.0.0.1:1" {
					t.Fatalf("error %v, listen %q", err, c.Listen)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
		})
	}
}

// TestValidateBounds: written zeros are refused where the gateway would
// otherwise swap in a default, and byte limits and durations are bounded
// where the gateway's arithmetic on them would overflow; each bound itself
// is accepted.
func TestValidateBounds(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{ // want "": accepted
		{"drain_grace 0", "timeouts: {drain_grace: 0s}\n", "timeouts.drain_grace: must be positive"},
		{"anchor_ttl 0", "continuity: {anchor_ttl: 0s}\n", "continuity.anchor_ttl: must be positive"},
		{"drain_grace null keeps the default", "timeouts: {drain_grace: ~}\n", ""},
		{"anchor_ttl 1ns", "continuity: {anchor_ttl: 1ns}\n", ""},

		{"max_body_bytes at the bound", "limits: {max_body_bytes: 1099511627776, body_memory_bytes: 1099511627776}\n", ""},
		{"max_body_bytes largest int64", "limits: {max_body_bytes: 9223372036854775807, body_memory_bytes: 9223372036854775807}\n",
			"limits.max_body_bytes: must be at most 1099511627776 (1 TiB)\nlimits.body_memory_bytes: must be at most 1099511627776 (1 TiB)"},
		{"max_event_bytes 2^61", "limits: {max_event_bytes: 2305843009213693952}\n", "limits.max_event_bytes: must be at most 1099511627776 (1 TiB)"},
		{"max_event_bytes at the bound", "limits: {max_event_bytes: 1099511627776}\n", ""},
		{"max_ws_frame_bytes past the bound", "limits: {max_ws_frame_bytes: 1099511627777}\n", "limits.max_ws_frame_bytes: must be at most 1099511627776 (1 TiB)"},
		{"input_session_bytes past the bound", "limits: {input_session_bytes: 1099511627777}\n", "limits.input_session_bytes: must be at most 1099511627776 (1 TiB)"},
		{"resume bytes past the bound", "streams: {resume_max_bytes: 1099511627777, resume_memory_bytes: 1099511627777}\n",
			"streams.resume_max_bytes: must be at most 1099511627776 (1 TiB)\nstreams.resume_memory_bytes: must be at most 1099511627776 (1 TiB)"},
		{"counts have no upper bound", "limits: {max_connections: 9223372036854775807}\n", ""},

		{"anchor_ttl past year 2262", "continuity: {anchor_ttl: 2100000h}\n", "continuity.anchor_ttl: must be at most 876000h0m0s (100 years)"},
		{"anchor_ttl at the bound", "continuity: {anchor_ttl: 876000h}\n", ""},
		{"rehydrate_after past the bound", "continuity: {rehydrate_after: 876001h}\n", "continuity.rehydrate_after: must be at most 876000h0m0s (100 years)"},
		{"drain_grace past the bound", "timeouts: {drain_grace: 2562047h}\n", "timeouts.drain_grace: must be at most 876000h0m0s (100 years)"},
		{"resume_window past the bound", "streams: {resume_window: 876001h}\n", "streams.resume_window: must be at most 876000h0m0s (100 years)"},
		{"detach_grace past the bound", "streams: {detach_grace: 876001h}\n", "streams.detach_grace: must be at most 876000h0m0s (100 years)"},
		{"resume_window 0 still turns resume off", "streams: {resume_window: 0s}\n", ""},

		{"route timeouts 0", routeWith("timeouts: {first_byte: 0s, first_token: 0, stall: 0s}"),
			"routes[0].timeouts.first_byte: must be positive\nroutes[0].timeouts.first_token: must be positive\nroutes[0].timeouts.stall: must be positive"},
		{"route timeout 0 through a merge key", routeWith("timeouts: {<<: {first_byte: 0s}, stall: 1s}"), "routes[0].timeouts.first_byte: must be positive"},
		{"route timeouts past the bound", routeWith("timeouts: {first_byte: 2000000h, stall: 876001h}"),
			"routes[0].timeouts.first_byte: must be at most 876000h0m0s (100 years)\nroutes[0].timeouts.stall: must be at most 876000h0m0s (100 years)"},
		{"route timeouts at the bound", routeWith("timeouts: {first_byte: 876000h, first_token: 1ns, stall: 876000h}"), ""},
		{"route timeouts omitted: no bound", routeWith("timeouts: {first_byte: ~}"), ""},
		{"probe_interval below 1s", "timeouts: {probe_interval: 999ms}\n", "timeouts.probe_interval: must be at least 1s (every upstream is probed this often)"},
		{"probe_interval 1ns", "timeouts: {probe_interval: 1ns}\n", "timeouts.probe_interval: must be at least 1s (every upstream is probed this often)"},
		{"probe_interval 1s", "timeouts: {probe_interval: 1s}\n", ""},
		{"weight at the bound", "upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\", weight: 1000000}]\n", ""},
		{"weight past the bound", "upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\", weight: 4611686018427387904}]\n",
			"upstreams[0].weight: must be at most 1000000"},

		{"a later route with a model of its own", routeWith("") + "  - models: [x, y]\n    targets: [{upstream: a}]\n", ""},
		{"glob containment is not decided", "upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\"}]\n" +
			"routes: [{models: [\"*\"], targets: [{upstream: a}]}, {models: [x], targets: [{upstream: a}]}]\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || withoutLines(err) != tt.want):
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
			if tt.name == "drain_grace null keeps the default" && c.Timeouts.DrainGrace != Defaults().Timeouts.DrainGrace {
				t.Fatalf("drain_grace %s, want the default", c.Timeouts.DrainGrace.D())
			}
			if tt.name == "route timeouts omitted: no bound" && c.Routes[0].Timeouts != (RouteTimeouts{}) {
				t.Fatalf("route timeouts %+v, want none", c.Routes[0].Timeouts)
			}
		})
	}
}

// TestValidateOrderIsStable: several problems come out in the keys'
// declaration order, the same on every run.
func TestValidateOrderIsStable(t *testing.T) {
	const yaml = "limits: {max_body_bytes: 0, max_event_bytes: 0, max_ws_frame_bytes: 0, upstream_sockets: 0, max_json_depth: 0,\n" +
		"  body_memory_bytes: 0, max_connections: 0, input_sessions: 0, input_session_bytes: 0,\n" +
		"  ws_session_memory_bytes: 0, ws_session_memory_total_bytes: 0}\n" +
		"timeouts: {connect: 0s, header: 0s, idle: 0s, read_header: 0s, drain_grace: 0s, probe_interval: 0s,\n" +
		"  upstream_socket_idle: 0s, client_write: 0s, read_body: 0s, ws_idle: 0s, keepalive: 0s}\n" +
		"keys: [{name: k, key: 0123456789abcdef, limits: {rpm: -1, tpm: -1, concurrent: -1, tokens_per_day: -1, tokens_per_month: -1}}]\n" +
		"pricing: {m-a: {input: -1}, m-b: {input: -1}, m-c: {input: -1}, m-d: {input: -1}}\n"
	var want []string
	for _, k := range []string{"max_body_bytes", "max_event_bytes", "max_ws_frame_bytes", "upstream_sockets", "max_json_depth",
		"body_memory_bytes", "max_connections", "input_sessions", "input_session_bytes", "ws_session_memory_bytes",
		"ws_session_memory_total_bytes"} {
		want = append(want, "limits."+k+": must be positive")
	}
	for _, k := range []string{"connect", "header", "idle", "read_header", "drain_grace", "probe_interval",
		"upstream_socket_idle", "client_write", "read_body", "ws_idle", "keepalive"} {
		want = append(want, "timeouts."+k+": must be positive")
	}
	for _, k := range []string{"rpm", "tpm", "concurrent", "tokens_per_day", "tokens_per_month"} {
		want = append(want, "keys[0].limits."+k+": must not be negative")
	}
	for _, m := range []string{"m-a", "m-b", "m-c", "m-d"} {
		want = append(want, "pricing."+m+".input: prices must not be negative")
	}
	for range 10 {
		_, err := Parse([]byte(yaml), env(nil))
		if err == nil || withoutLines(err) != strings.Join(want, "\n") {
			t.Fatalf("error\n%v\nwant\n%s", err, strings.Join(want, "\n"))
		}
	}
}

// TestBaseURLQueryOrFragment: a query in base_url (Azure's api-version)
// is kept and follows every path (gateway/upstream's URL), a fragment is
// refused. The message shows neither, as either may hold a key.
func TestBaseURLQueryOrFragment(t *testing.T) {
	for _, tt := range []struct{ base, want string }{
		{"http://h/v1#x", `upstreams[0].base_url: "http://h/v1#…" must not have a fragment (#…)`},
		{"https://sk-secret@h/v1?key=sk-query-secret#f", `upstreams[0].base_url: "https://[redacted]@h/v1?…" must not have a fragment (#…)`},
		{"http://h/v1/?x=/", `upstreams[0].base_url: "http://h/v1/?…" must not end with a slash (the probe is GET {base_url}/models)`},
		{"http://h/v1?api-version=2024", ""},
		{"http://h/v1?", ""},
		{"http://h/v1", ""},
	} {
		_, err := Parse([]byte("upstreams: [{name: a, base_url: \""+tt.base+"\"}]\n"), env(nil))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.base, err)
		case tt.want != "" && (err == nil || withoutLines(err) != tt.want):
			t.Errorf("%s: error %v\nwant %q", tt.base, err, tt.want)
		}
	}
}

// TestEnvValueProblems: an empty variable counts as unset and the message
// says both; a value that is not UTF-8 text is reported against its key and
// variable, not as a YAML encoding failure.
func TestEnvValueProblems(t *testing.T) {
	lookup := env(map[string]string{"EMPTY": "", "BADU": "sk-\xff\xfe-key", "GOOD": "sk-ok"})
	for _, tt := range []struct{ name, yaml, want string }{
		{"empty", "admin_token: ${EMPTY}\n", "admin_token: environment variable EMPTY is empty or not set"},
		{"empty with a default", "admin_token: ${EMPTY:-dflt}\n", ""},
		{"not UTF-8", "upstreams: [{name: a, base_url: \"http://h/v1\", api_key: \"${BADU}\"}]\n",
			"upstreams[0].api_key: environment variable BADU is not valid UTF-8 text"},
		{"not UTF-8 after a good one", "admin_token: ${GOOD}-${BADU}\n", "admin_token: environment variable BADU is not valid UTF-8 text"},
		{"a nested default", "admin_token: ${EMPTY:-${GOOD:-x}}\n", "admin_token: the default of ${EMPTY:-…} holds a ${…}; defaults cannot nest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), lookup)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || withoutLines(err) != tt.want):
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "sk-") {
				t.Fatalf("the value is in the error: %v", err)
			}
		})
	}
}

// TestUpstreamNameAndKeyControlCharacters: a control character in an
// upstream's name (it lands in log lines and metric labels) or api_key (a
// mounted secret's trailing newline: the upstream would only be marked down
// for an invalid header) is a config error; the key is never echoed, nor is
// a key in a base_url that is no URL.
func TestUpstreamNameAndKeyControlCharacters(t *testing.T) {
	for _, tt := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"N": "a\nb", "K": "sk-ok"}, `upstreams[0].name: the value of ${N} has a control character (a line break, a tab…)`},
		{map[string]string{"N": "a", "K": "sk-secret-0123\n"}, `upstreams[0].api_key: has a control character (a line break, a tab…; a mounted secret's trailing newline?)`},
	} {
		_, err := Parse([]byte("upstreams: [{name: \"${N}\", base_url: \"http://h/v1\", api_key: \"${K}\"}]\n"), env(tt.vars))
		if err == nil || withoutLines(err) != tt.want {
			t.Errorf("%q: error %v\nwant %s", tt.vars, err, tt.want)
		}
	}
	_, err := Parse([]byte("upstreams: [{name: a, base_url: \"ftp://sk-secret@h/v1\"}]\n"), env(nil))
	if err == nil || strings.Contains(err.Error(), "sk-secret") || !strings.Contains(err.Error(), "is not an http(s) URL") {
		t.Errorf("a base_url that is no URL: %v", err)
	}
}

// routeWith is a config with one upstream, a, and one route for model x
// with the given extra line.
func routeWith(line string) string {
	return "upstreams: [{name: a, base_url: \"http://127.0.0.1:1/v1\"}]\nroutes:\n  - models: [x]\n    targets: [{upstream: a}]\n    " + line + "\n"
}
