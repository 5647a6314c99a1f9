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

// TestServeFailClosedRewrite: policies.NAME.sluice_fail_closed in the
// config file reaches the gateway: a rewrite policy so marked that traps
// answers 503 policy_unavailable and the upstream gets nothing, and the key
// is not the policy's config (a policy would see it, and one that refuses
// unknown keys would be rejected at start).
func TestServeFailClosedRewrite(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies.d")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(filepath.Join("..", "..", "plugins", "testdata", "rewrite_trap.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policyDir, "10-guard.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
data_dir: %q
log: {level: warn}
policy_dir: %q
policies:
  10-guard: {sluice_fail_closed: true}
  rewrite: {sluice_fail_closed: false, model_aliases: {fast: m}}
upstreams:
  - {name: A, base_url: %q}
`, filepath.Join(dir, "data"), policyDir, up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg)
	t.Cleanup(func() { _, _ = stop() })

	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), `"code":"policy_unavailable"`) {
		t.Fatalf("client got %d %s; want 503 policy_unavailable", resp.StatusCode, raw)
	}
	for _, r := range up.Requests() {
		if r.Path == "/v1/responses" {
			t.Fatalf("the upstream got the request a fail-closed rewrite could not run on: %+v", r)
		}
	}
}
