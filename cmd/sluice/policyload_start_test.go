package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestStartWithAPolicyFileThatCannotLoad: a configured policy whose file
// cannot load (a wrong ABI version, not Wasm) does not stop the start, as
// the same file without its policies.NAME key does not: the file is
// rejected and reported (ABI.md §10), the embedded default of its name
// serves, and a sluice_fail_closed policy with nothing serving refuses
// requests and readiness with 503 (README "Policies"). Only a policy that
// refuses its config stops the start (TestPolicyConfigProblemsAtStart).
func TestStartWithAPolicyFileThatCannotLoad(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies.d")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	badABI, err := os.ReadFile(filepath.Join("..", "..", "plugins", "testdata", "badabi.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"20-x.wasm":    badABI,
		"20-fc.wasm":   []byte("#!/bin/sh\necho not wasm\n"),
		"rewrite.wasm": badABI,
	} {
		if err := os.WriteFile(filepath.Join(policyDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
data_dir: %q
log: {level: warn}
policy_dir: %q
policies:
  20-x: {a: 1}
  20-fc: {sluice_fail_closed: true}
  rewrite: {model_aliases: {fast: m}}
upstreams:
  - {name: A, base_url: %q}
`, filepath.Join(dir, "data"), policyDir, up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg)
	t.Cleanup(func() { _, _ = stop() })

	var got struct {
		Policies []struct {
			Name, State, Source, LastError string
			SHA256                         string `json:"sha256"`
			RejectedError                  string `json:"rejected_error"`
		} `json:"policies"`
	}
	getJSONInto(t, base+"/admin/policies", &got)
	states := map[string]string{}
	for _, p := range got.Policies {
		states[p.Name] = p.State + "/" + p.Source
		if p.Name == "rewrite" && !strings.Contains(p.RejectedError, "ABI version 99") {
			t.Errorf("rewrite: the rejection is not reported: %+v", p)
		}
	}
	for name, want := range map[string]string{"20-x": "rejected/dir", "20-fc": "rejected/dir", "rewrite": "active/embedded"} {
		if states[name] != want {
			t.Errorf("%s: %q, want %q (all: %v)", name, states[name], want, states)
		}
	}

	if code, body := getBody(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a fail-closed policy that cannot load: %d %s", code, body)
	}
	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(`{"model":"fast","input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), `"code":"policy_unavailable"`) {
		t.Fatalf("client got %d %s; want 503 policy_unavailable", resp.StatusCode, raw)
	}
}
