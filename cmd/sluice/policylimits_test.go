package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestPolicyCheckAsTheGateway: `sluice policy check` refuses exactly the
// modules a gateway with the same policy_limits refuses, with the reason
// the gateway shows in /admin/policies: with -memory-mib N as with
// memory_mib: N, and without the flag as a gateway without policy_limits.
func TestPolicyCheckAsTheGateway(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	fixtures := filepath.Join("..", "..", "plugins", "policycli", "testdata")
	modules := map[string]string{ // policy name: fixture
		"10-mem300":  filepath.Join(fixtures, "memory_300_pages.wasm"),
		"11-mem1025": filepath.Join(fixtures, "memory_1025_pages.wasm"),
	}
	for _, tc := range []struct {
		name         string
		policyLimits string   // the gateway's policy_limits line
		flags        []string // check's
		rejected     []string // the policies the gateway refuses
	}{
		{"memory_mib 16", "policy_limits: {memory_mib: 16}", []string{"-memory-mib", "16"}, []string{"10-mem300", "11-mem1025"}},
		{"defaults", "", nil, []string{"11-mem1025"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			policyDir := filepath.Join(dir, "policies.d")
			if err := os.MkdirAll(policyDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, fixture := range modules {
				b, err := os.ReadFile(fixture)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(policyDir, name+".wasm"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg := filepath.Join(dir, "sluice.yaml")
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
data_dir: %q
log: {level: warn}
policy_dir: %q
upstreams:
  - {name: A, base_url: %q}
%s
`, filepath.Join(dir, "data"), policyDir, up.URL, tc.policyLimits)), 0o600); err != nil {
				t.Fatal(err)
			}
			base, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg)
			t.Cleanup(func() { _, _ = stop() })
			var got struct {
				Policies []struct {
					Name      string `json:"name"`
					State     string `json:"state"`
					LastError string `json:"last_error"`
				} `json:"policies"`
			}
			getJSONInto(t, base+"/admin/policies", &got)
			gateway := map[string]string{} // policy name: its last_error when rejected
			for _, p := range got.Policies {
				if _, ok := modules[p.Name]; ok && p.State == "rejected" {
					gateway[p.Name] = p.LastError
				}
			}
			if len(gateway) != len(tc.rejected) {
				t.Fatalf("the gateway rejected %v, want %v", gateway, tc.rejected)
			}
			for name, fixture := range modules {
				code, stdout, stderr := runCLI(append([]string{"policy", "check", fixture}, tc.flags...)...)
				reason, rejected := gateway[name]
				switch {
				case rejected && (code != 1 || stderr != fixture+": rejected: "+reason+"\n"):
					t.Errorf("check %s %v: exit %d\n%s%s\nwant exit 1 and the gateway's reason %q", name, tc.flags, code, stdout, stderr, reason)
				case !rejected && (code != 0 || !strings.Contains(stdout, ": ok\n")):
					t.Errorf("check %s %v: exit %d\n%s%s\nwant ok, as the gateway loaded it", name, tc.flags, code, stdout, stderr)
				}
			}
		})
	}

	// test's -call-timeout defaults to the gateway's call_timeout too (its
	// effect is TestCallTimeoutFlag's, plugins/policycli).
	_, help, _ := runCLI("policy", "test", "-h")
	want := fmt.Sprintf("(default %s, the gateway's)", config.Defaults().PolicyLimits.CallTimeout.D())
	if !strings.Contains(help, want) {
		t.Errorf("policy test -h does not give the gateway's call_timeout default (%q):\n%s", want, help)
	}
}
