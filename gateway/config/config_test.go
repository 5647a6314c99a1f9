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
    protocol: chat
    transport: auto
timeouts:
  idle: 45s
`, check: func(t *testing.T, c Config) {
			u := c.Upstreams[0]
			if u.APIKey != "sk-123" || u.Protocol != "chat" || u.Transport != "auto" || c.Timeouts.Idle.D() != 45*time.Second {
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
			wantErr: "upstreams[0].api_key: environment variable NOPE is not set"},
		{name: "unknown key", yaml: "listen: 127.0.0.1:1\nlistn: x\n", wantErr: "field listn not found"},
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
}
