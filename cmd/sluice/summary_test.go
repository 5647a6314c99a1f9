package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// startupSummary writes yaml as the config in dir, runs serve with dir as
// its HOME until it is up, stops it, and returns what it wrote to stderr.
func startupSummary(t *testing.T, dir, yaml string) string {
	t.Helper()
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	stderr, err := stop()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr)
	}
	return stderr
}

// TestStartupSummaryTellsWhatRuns: with auth.required an upstream without
// api_key is summarised as getting no credential (README: a Sluice key is
// never forwarded), the Wasm cache line names the directory in use, and an
// admin API without a token that Sluice keys rely on is a WARN that says
// how to close it.
func TestStartupSummaryTellsWhatRuns(t *testing.T) {
	keyed := upstreamtest.NewServer(upstreamtest.Options{Name: "A", APIKey: "sk-summary-secret-1"})
	defer keyed.Close()
	bare := upstreamtest.NewServer(upstreamtest.Options{Name: "B"})
	defer bare.Close()
	dir := t.TempDir()
	stderr := startupSummary(t, dir, fmt.Sprintf(`listen: 127.0.0.1:0
auth: {required: true}
upstreams:
  - {name: primary, base_url: "%s", api_key: sk-summary-secret-1}
  - {name: backup, base_url: "%s"}
`, keyed.URL, bare.URL))
	for _, want := range []string{
		"name=primary url=" + keyed.URL + " protocol=responses transport=http credentials=api_key",
		"name=backup url=" + bare.URL + ` protocol=responses transport=http credentials="none (auth.required: client keys are not forwarded)"`,
		"config: wasm_cache_dir=" + filepath.Join(dir, ".cache", "sluice", "wasm") + "\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if warns := adminWarnings(stderr); len(warns) != 1 || !strings.Contains(warns[0], "POST /admin/keys") ||
		!strings.Contains(warns[0], "SLUICE_ADMIN_TOKEN") || !strings.Contains(warns[0], `because="auth.required is on"`) {
		t.Errorf("want one WARN about the open admin API because of auth.required, got %q", warns)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// TestStartupSummaryListenAsConfigured: --listen 0.0.0.0:0 is summarised
// as 0.0.0.0 with the port it got, not as the listener's [::], and an
// admin API without a token on it is a WARN; with SLUICE_ADMIN_TOKEN there
// is none.
func TestStartupSummaryListenAsConfigured(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	for _, token := range []string{"", "admin-0123456789"} {
		dir := t.TempDir()
		base, stop := startWithEnv(t, []string{"HOME=" + dir, "SLUICE_ADMIN_TOKEN=" + token},
			"serve", "--listen", "0.0.0.0:0", "--data-dir", filepath.Join(dir, "data"), "--upstream", up.URL)
		stderr, err := stop()
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr)
		}
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		want := "config: listen=" + net.JoinHostPort("0.0.0.0", u.Port())
		if !strings.Contains(stderr, want) {
			t.Errorf("token %q: summary lacks %q:\n%s", token, want, stderr)
		}
		warns := adminWarnings(stderr)
		switch {
		case token == "" && (len(warns) != 1 || !strings.Contains(warns[0], `because="listen is not a loopback address"`)):
			t.Errorf("no token: want one WARN about the open admin API on a non-loopback listener, got %q", warns)
		case token != "" && len(warns) != 0:
			t.Errorf("with a token: %q", warns)
		}
	}
}

func adminWarnings(stderr string) []string {
	var warns []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "[WARN]") && strings.Contains(line, "admin API is open") {
			warns = append(warns, line)
		}
	}
	return warns
}
