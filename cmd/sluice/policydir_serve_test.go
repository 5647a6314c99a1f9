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

// readPolicyFixture is one of the Wasm modules in plugins/testdata.
func readPolicyFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "plugins", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// serveWithPolicyDir starts `sluice serve` (HOME in a temp dir) in front of
// a fake upstream A, with files (name: content) in its policy_dir and
// policies (the indented lines under `policies:`) in its config file.
func serveWithPolicyDir(t *testing.T, files map[string][]byte, policies string) (base string, up *upstreamtest.Server) {
	t.Helper()
	up = upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies.d")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
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
%supstreams:
  - {name: A, base_url: %q}
`, filepath.Join(dir, "data"), policyDir, policies, up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg)
	t.Cleanup(func() { _, _ = stop() })
	return base, up
}

// wantPolicyUnavailable posts body to /v1/responses and fails the test
// unless the client gets 503 policy_unavailable.
func wantPolicyUnavailable(t *testing.T, base, body string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), `"code":"policy_unavailable"`) {
		t.Fatalf("client got %d %s; want 503 policy_unavailable", resp.StatusCode, raw)
	}
}
