package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		env     map[string]string
		wantErr string // substring; "" means success
		check   func(t *testing.T, c Config)
	}{
		{name: "empty file is all defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.Listen != "127.0.0.1:8080" || c.Limits.MaxBodyBytes != 32<<20 || c.Timeouts.DrainGrace.D() != 30*time.Second {
				t.Fatalf("defaults not applied: %+v", c)
			}
		}},
		{name: "full upstream with env expansion", env: map[string]string{"KEY": "sk-123"}, yaml: `
listen: 127.0.0.1:9000
upstreams:
  - name: primary
    base_url: http://127.0.0.1:9001/v1
    api_key: ${KEY}
    protocol: responses
    transport: auto
timeouts:
  idle: 45s
`, check: func(t *testing.T, c Config) {
			u := c.Upstreams[0]
			if u.APIKey != "sk-123" || u.Protocol != "responses" || u.Transport != "auto" || c.Timeouts.Idle.D() != 45*time.Second {
				t.Fatalf("got %+v idle=%v", u, c.Timeouts.Idle.D())
			}
		}},
		{name: "default for unset variable", yaml: "upstreams:\n  - name: a\n    base_url: ${BASE:-http://127.0.0.1:1/v1}\n", check: func(t *testing.T, c Config) {
			if c.Upstreams[0].BaseURL != "http://127.0.0.1:1/v1" {
				t.Fatalf("got %q", c.Upstreams[0].BaseURL)
			}
		}},
		{name: "expanded value stays a string even if it looks like YAML", env: map[string]string{"K": "{a: 1}"},
			yaml: "upstreams:\n  - name: a\n    base_url: http://x/v1\n    api_key: ${K}\n", check: func(t *testing.T, c Config) {
				if c.Upstreams[0].APIKey != "{a: 1}" {
					t.Fatalf("got %q", c.Upstreams[0].APIKey)
				}
			}},
		{name: "unset variable names the key", yaml: "upstreams:\n  - name: a\n    base_url: http://x/v1\n    api_key: ${NOPE}\n",
			wantErr: "upstreams[0].api_key: environment variable NOPE is empty or not set"},
		{name: "unknown key", yaml: "listen: 127.0.0.1:1\nlistn: x\n", wantErr: `unknown key "listn" (did you mean "listen"?)`},
		{name: "bad duration", yaml: "timeouts:\n  idle: soon\n", wantErr: `"soon" is not a duration`},
		{name: "bad protocol", yaml: "upstreams:\n  - name: a\n    base_url: http://x/v1\n    protocol: grpc\n", wantErr: "upstreams[0].protocol"},
		{name: "trailing slash", yaml: "upstreams:\n  - name: a\n    base_url: http://x/v1/\n", wantErr: "upstreams[0].base_url"},
		{name: "not a URL", yaml: "upstreams:\n  - name: a\n    base_url: x\n", wantErr: "upstreams[0].base_url"},
		{name: "duplicate names", yaml: "upstreams:\n  - name: a\n    base_url: http://x/v1\n  - name: a\n    base_url: http://y/v1\n", wantErr: "upstreams[1].name"},
		{name: "missing name", yaml: "upstreams:\n  - base_url: http://x/v1\n", wantErr: "upstreams[0].name: is required"},
		{name: "bad listen", yaml: "listen: nope\n", wantErr: "listen:"},
		{name: "bad log level", yaml: "log:\n  level: loud\n", wantErr: "log.level"},
		{name: "negative limit", yaml: "limits:\n  max_body_bytes: -1\n", wantErr: "limits.max_body_bytes"},
		{name: "invalid yaml", yaml: "listen: [\n", wantErr: "invalid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestUpstreamFromURL(t *testing.T) {
	u, err := UpstreamFromURL("https://key@api.example.com/v1/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if u.BaseURL != "https://api.example.com/v1" || u.APIKey != "key" || u.Name != "api.example.com-1" {
		t.Fatalf("got %+v", u)
	}
	if _, err := UpstreamFromURL("ftp://x", 0); err == nil {
		t.Fatal("ftp URL accepted")
	}
}

// TestREADMEConfigParses keeps the README's sample config valid.
func TestREADMEConfigParses(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "```yaml\n")
	if start < 0 {
		t.Fatal("no yaml block in the README")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	c, err := Parse([]byte(block), env(map[string]string{"OPENAI_API_KEY": "sk-x"}))
	if err != nil {
		t.Fatalf("README config: %v", err)
	}
	if len(c.Upstreams) != 1 || c.Upstreams[0].APIKey != "sk-x" || c.Timeouts.ClientWrite.D() != 60*time.Second || c.Policies["rewrite"] == nil {
		t.Fatalf("README config parsed to %+v", c)
	}
	if c.Continuity.Portable || c.Continuity.RehydrateAfter.D() != 5*time.Minute {
		t.Fatalf("README continuity %+v", c.Continuity)
	}
	if d := Defaults().Continuity; d.Portable || d.RehydrateAfter.D() != 5*time.Minute {
		t.Fatalf("continuity defaults %+v", d)
	}
}

func TestRoutesConfig(t *testing.T) {
	const ups = "upstreams:\n  - {name: primary, base_url: http://127.0.0.1:1/v1}\n  - {name: backup, base_url: http://127.0.0.1:2/v1, prefill: false}\n"
	c, err := Parse([]byte(ups+`
routes:
  - models: ["gpt-5*", "fast"]
    targets:
      - {upstream: primary}
      - {upstream: backup, model: gpt-4.1}
    timeouts: {first_byte: 30s, first_token: 60s, stall: 45s}
    continuation: restart
  - models: ["*"]
    targets: [{upstream: backup}]
timeouts: {keepalive: 20s}
retry: {max_wait: 2s}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	if len(c.Routes) != 2 || r.Models[1] != "fast" || r.Targets[1] != (Target{Upstream: "backup", Model: "gpt-4.1"}) ||
		r.Timeouts.FirstByte.D() != 30*time.Second || r.Timeouts.FirstToken.D() != time.Minute || r.Timeouts.Stall.D() != 45*time.Second ||
		r.Continuation != "restart" || c.Routes[1].Continuation != "" {
		t.Fatalf("routes %+v", c.Routes)
	}
	if c.Timeouts.KeepAlive.D() != 20*time.Second || c.Retry.MaxWait.D() != 2*time.Second {
		t.Fatalf("keepalive %v max_wait %v", c.Timeouts.KeepAlive.D(), c.Retry.MaxWait.D())
	}
	if c.Upstreams[0].Prefill != nil || c.Upstreams[1].Prefill == nil || *c.Upstreams[1].Prefill {
		t.Fatal("prefill: absent must stay nil, false must be false")
	}
	d, err := Parse([]byte(ups), env(nil))
	if err != nil || d.Timeouts.KeepAlive.D() != 15*time.Second || d.Retry.MaxWait.D() != 5*time.Second || d.Routes != nil {
		t.Fatalf("defaults: %v keepalive %v max_wait %v", err, d.Timeouts.KeepAlive.D(), d.Retry.MaxWait.D())
	}

	for _, tt := range []struct{ name, yaml, want string }{
		{"unknown upstream", "routes:\n  - models: [fast]\n    targets: [{upstream: primary}, {upstream: bakup}]\n",
			`routes[0].targets[1].upstream: "bakup" is not a configured upstream`},
		{"missing upstream", "routes:\n  - models: [fast]\n    targets: [{model: x}]\n",
			`routes[0].targets[0].upstream: is required`},
		{"no targets", "routes:\n  - models: [fast]\n", `routes[0].targets: is required`},
		{"no models", "routes:\n  - targets: [{upstream: primary}]\n", `routes[0].models: is required`},
		{"bad glob", "routes:\n  - models: [ok, \"gpt-[\"]\n    targets: [{upstream: primary}]\n",
			`routes[0].models[1]: "gpt-[" is not a valid pattern (syntax error in pattern)`},
		{"empty model", "routes:\n  - models: [\" \"]\n    targets: [{upstream: primary}]\n", `routes[0].models[0]: must not be empty`},
		{"repeated target", "routes:\n  - models: [a]\n    targets: [{upstream: primary}]\n  - models: [b]\n    targets: [{upstream: backup, model: m}, {upstream: backup, model: m}]\n",
			`routes[1].targets[1]: repeats routes[1].targets[0]`},
		{"bad continuation", "routes:\n  - models: [a]\n    targets: [{upstream: primary}]\n    continuation: sometimes\n",
			`routes[0].continuation: "sometimes" is not one of auto, restart, off`},
		{"bad route timeout", "routes:\n  - models: [a]\n    targets: [{upstream: primary}]\n    timeouts: {first_byte: soon}\n",
			`"soon" is not a duration (like 30s or 5m)`},
		{"unknown route key", "routes:\n  - models: [a]\n    targets: [{upstream: primary, weight: 2}]\n", `routes[0].targets[0]: unknown key "weight" (known keys: upstream, model)`},
		{"max_wait too long", "retry: {max_wait: 1h}\n", `retry.max_wait: must be at most 10m0s`},
		{"keepalive zero", "timeouts: {keepalive: 0s}\n", `timeouts.keepalive: must be positive`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(ups+tt.yaml), env(nil))
			if err == nil {
				t.Fatalf("accepted; want %q", tt.want)
			}
			if strings.HasPrefix(tt.want, "line ") || strings.HasPrefix(tt.want, `"soon"`) {
				if !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %q, want it to contain %q", err, tt.want)
				}
				return
			}
			if withoutLines(err) != tt.want {
				t.Fatalf("error\n got %q\nwant %q", err, tt.want)
			}
		})
	}

	// Routes may name upstreams that --upstream flags add later: with no
	// upstreams yet, names are checked by the final Validate.
	if _, err := Parse([]byte("routes:\n  - models: [a]\n    targets: [{upstream: later}]\n"), env(nil)); err != nil {
		t.Fatalf("routes before upstreams: %v", err)
	}
}

// TestREADMERoutesConfigParses keeps the "Routes and fallbacks" sample valid.
func TestREADMERoutesConfigParses(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i := strings.Index(text, "## Routes and fallbacks")
	if i < 0 {
		t.Fatal("no Routes and fallbacks section in the README")
	}
	text = text[i:]
	start := strings.Index(text, "```yaml\n")
	if start < 0 {
		t.Fatal("no yaml block in the section")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	c, err := Parse([]byte(block), env(nil))
	if err != nil {
		t.Fatalf("README routes config: %v", err)
	}
	if len(c.Routes) != 1 || len(c.Routes[0].Targets) != 2 || c.Routes[0].Targets[1].Model != "gpt-4.1" || c.Upstreams[1].Prefill == nil {
		t.Fatalf("README routes config parsed to %+v", c)
	}
}
