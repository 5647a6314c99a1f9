package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// isJSONLines says whether every non-empty line of s is a JSON object.
func isJSONLines(s string) bool {
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		lines++
		if !strings.HasPrefix(l, "{") {
			return false
		}
	}
	return lines > 0
}

// --log-json given on the command line wins over log.json in the file,
// whichever value it gives (README "Flags given override the file"); not
// given, the file's value stands. Both for a gateway that runs and for a
// config error that stops it.
func TestLogJSONFlagOverridesTheFileEitherWay(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		fileJSON bool
		flag     []string
		wantJSON bool
	}{
		{"file json, flag false", true, []string{"--log-json=false"}, false},
		{"file json, no flag", true, nil, true},
		{"file text, flag true", false, []string{"--log-json"}, true},
		{"file text, no flag", false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := filepath.Join(dir, "good.yaml")
			if err := os.WriteFile(good, fmt.Appendf(nil, "log: {json: %v}\nlisten: 127.0.0.1:0\nupstreams: [{name: a, base_url: %q}]\n",
				tc.fileJSON, up.URL), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"serve", "--config", good, "--data-dir", t.TempDir()}, tc.flag...)
			_, stop := startWithEnv(t, []string{"HOME=" + t.TempDir()}, args...)
			stderr, err := stop()
			if err != nil {
				t.Fatalf("exit: %v\n%s", err, stderr)
			}
			if got := isJSONLines(stderr); got != tc.wantJSON {
				t.Errorf("running: logs are JSON: %v, want %v:\n%s", got, tc.wantJSON, stderr)
			}

			bad := filepath.Join(dir, "bad.yaml")
			if err := os.WriteFile(bad, fmt.Appendf(nil, "log: {json: %v}\nupstreams: [{name: a, base_url: nope}]\n", tc.fileJSON), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runCLI(append([]string{"serve", "--config", bad}, tc.flag...)...)
			if code != 1 || isJSONLines(stderr) != tc.wantJSON || !strings.Contains(stderr, "config") {
				t.Errorf("config error: exit %d, JSON: %v, want exit 1, JSON %v:\n%s", code, isJSONLines(stderr), tc.wantJSON, stderr)
			}
		})
	}
}
