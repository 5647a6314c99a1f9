package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestPolicyConfigProblemsNameFileAndLine: a policy that refuses its
// policies.NAME config stops the start as a config error does, with the
// file and the line policies.NAME (or its sluice_fail_closed key) is written
// on, each policy's problem on its own line (README "Running it").
func TestPolicyConfigProblemsNameFileAndLine(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	path, code, out := serveWithPolicies(t, up.URL, "  recover: {sluice_fail_closed: true}\n  rewrite:\n    bogus: 1\n")
	for _, want := range []string{
		"config " + path + ": 2 problems:",
		"line 6: policies.recover.sluice_fail_closed: only a policy that rewrites requests can fail closed",
		"line 7: policies.rewrite: the policy refused its config: ",
		`unknown key \"bogus\"`,
	} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("exit %d, want %q in:\n%s", code, want, out)
		}
	}
}

// serveWithPolicies runs sluice serve on a config of one upstream (url) and
// the policies: block policies (its lines, indented; policies: is line 5)
// and returns the config's path, the exit code and what went to stderr.
func serveWithPolicies(t *testing.T, url, policies string) (path string, code int, stderr string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: A\n    base_url: %s\npolicies:\n%s", url, policies)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errs strings.Builder
	code = run(context.Background(), []string{"serve", "--config", path, "--data-dir", t.TempDir()}, &out, &errs)
	return path, code, errs.String()
}
