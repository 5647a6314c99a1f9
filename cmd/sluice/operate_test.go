package main

// Tests of what an operator meets running the binary: config errors,
// an unwritable HOME or data dir, drop-in mode and the startup summary.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// startWithEnv runs the binary with env (the test's environment without
// HOME, XDG_CACHE_HOME and SLUICE_*, plus env) and waits until it listens.
// stop sends SIGTERM, waits for the exit and returns all of stderr and the
// exit error.
func startWithEnv(t *testing.T, env []string, args ...string) (base string, stop func() (string, error)) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "XDG_CACHE_HOME" || strings.HasPrefix(k, "SLUICE_") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewReader(stdout)
	for base == "" {
		line, err := out.ReadString('\n')
		if m := listening.FindStringSubmatch(line); m != nil {
			base = m[1]
		}
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("process ended before listening: %v\n%s", err, stderr.String())
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return base, func() (string, error) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return stderr.String(), err
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("no exit after SIGTERM")
			return "", nil
		}
	}
}

// streamTurn posts a streaming Responses request and returns the text of
// the completed response.
func streamTurn(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Post(base+"/v1/responses", "application/json",
		strings.NewReader(`{"model":"gpt-fake-1","input":"Say hello","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var text strings.Builder
	for {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("stream ended without response.completed: %v", err)
		}
		switch ev.Name {
		case "response.output_text.delta":
			var d struct{ Delta string }
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			text.WriteString(d.Delta)
		case "response.completed":
			return text.String()
		case "response.failed", "response.incomplete":
			t.Fatalf("%s: %s", ev.Name, ev.Data)
		}
	}
}

// TestHomeUnwritableFallsBackToTheDataDir: with HOME read-only or unset
// (systemd, containers), the Wasm compilation cache moves to
// <data_dir>/wasm-cache with one WARN naming wasm_cache_dir, and the
// gateway serves.
func TestHomeUnwritableFallsBackToTheDataDir(t *testing.T) {
	readOnly := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // root writes anywhere: use a directory nobody can create in
		readOnly = "/proc"
	}
	for _, tt := range []struct {
		name string
		env  []string
	}{
		{"read-only HOME", []string{"HOME=" + readOnly}},
		{"HOME unset", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
			defer up.Close()
			dataDir := filepath.Join(t.TempDir(), "data")
			base, stop := startWithEnv(t, tt.env, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir,
				"--upstream", up.URL, "--log-level", "warn")
			if got := streamTurn(t, base); !strings.Contains(got, "Hello from A") {
				t.Fatalf("answer %q", got)
			}
			stderr, err := stop()
			if err != nil {
				t.Fatalf("exit: %v\n%s", err, stderr)
			}
			var warns []string
			for _, line := range strings.Split(stderr, "\n") {
				if strings.Contains(line, "wasm_cache_dir") {
					warns = append(warns, line)
				}
			}
			want := "wasm_cache_dir=" + filepath.Join(dataDir, "wasm-cache")
			if len(warns) != 1 || !strings.Contains(warns[0], "[WARN]") || !strings.Contains(warns[0], want) {
				t.Fatalf("want one WARN with %s, got %q\nstderr:\n%s", want, warns, stderr)
			}
			entries, err := os.ReadDir(filepath.Join(dataDir, "wasm-cache"))
			if err != nil || len(entries) == 0 {
				t.Fatalf("the compilation cache was not written to the data dir: %v %v", entries, err)
			}
		})
	}
}

// TestHomeWritableNoWarning: with a usable HOME nothing is said about it.
func TestHomeWritableNoWarning(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	home := t.TempDir()
	_, stop := startWithEnv(t, []string{"HOME=" + home}, "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--upstream", up.URL, "--log-level", "warn")
	stderr, err := stop()
	if err != nil || strings.Contains(stderr, "wasm_cache_dir") {
		t.Fatalf("exit %v, stderr:\n%s", err, stderr)
	}
	if _, err := os.Stat(filepath.Join(home, ".cache", "sluice", "wasm")); err != nil {
		t.Fatalf("the user cache dir was not used: %v", err)
	}
}

// TestDropInChatOnlyUpstream: one flag puts /v1/responses in front of a
// server that speaks only Chat Completions (llama.cpp's), with the key from
// SLUICE_UPSTREAM_API_KEY.
func TestDropInChatOnlyUpstream(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "llama", APIKey: "sk-llama-0123456789"})
	defer up.Close()
	base, stop := startWithEnv(t, []string{"SLUICE_UPSTREAM_API_KEY=sk-llama-0123456789", "SLUICE_ADMIN_TOKEN=admin-0123456789", "HOME=" + t.TempDir()},
		"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--upstream", "chat+"+up.URL, "--log-level", "info")
	if got := streamTurn(t, base); !strings.Contains(got, "Hello from llama") {
		t.Fatalf("answer %q", got)
	}
	// SLUICE_ADMIN_TOKEN guards /admin/* when the config sets no admin_token.
	for token, want := range map[string]int{"": http.StatusUnauthorized, "admin-0123456789": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/upstreams", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("/admin/upstreams with token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
	reqs := up.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/chat/completions" {
		var paths []string
		for _, r := range reqs {
			paths = append(paths, r.Path)
		}
		t.Fatalf("the upstream saw %v, want one /v1/chat/completions", paths)
	}
	stderr, err := stop()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "protocol=chat") || !strings.Contains(stderr, `admin="token required"`) ||
		strings.Contains(stderr, "sk-llama") || strings.Contains(stderr, "admin-0123456789") {
		t.Fatalf("summary without protocol=chat, or with the key:\n%s", stderr)
	}
}

// TestStartupSummary: the first lines say what runs where, credentials
// never appear, and routes are listed when configured.
func TestStartupSummary(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A", APIKey: "sk-summary-secret-1"})
	defer up.Close()
	chat := upstreamtest.NewServer(upstreamtest.Options{Name: "C"})
	defer chat.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	policyDir := filepath.Join(dir, "policies.d")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
policy_dir: %s
upstreams:
  - {name: primary, base_url: "%s", api_key: sk-summary-secret-1, transport: auto}
  - {name: local, base_url: "%s?key=sk-query-secret", protocol: chat}
routes:
  - models: ["gpt-5*", fast]
    targets: [{upstream: primary}, {upstream: local, model: qwen}]
`, policyDir, up.URL, chat.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	base, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg, "--data-dir", dataDir)
	addr := strings.TrimPrefix(base, "http://")
	stderr, err := stop()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		"sluice: starting: version=",
		"sluice: config: file=" + cfg,
		"sluice: config: data_dir=" + dataDir,
		"sluice: config: policy_dir=" + policyDir,
		"sluice: config: listen=" + addr + " admin=open",
		"sluice: upstream: name=primary url=" + up.URL + " protocol=responses transport=auto credentials=api_key",
		"sluice: upstream: name=local url=\"" + chat.URL + "?…\" protocol=chat transport=http credentials=\"the client's\"",
		"sluice: route: index=0 models=\"gpt-5*, fast\" targets=\"primary → local (model qwen)\"",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(stderr, "secret") {
		t.Errorf("a credential reached the log")
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}

	// Without a config file or routes, the summary says so.
	_, stop = startWithEnv(t, []string{"HOME=" + dir}, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir,
		"--upstream", "https://sk-userinfo-secret@127.0.0.1:1/v1")
	stderr, _ = stop()
	for _, want := range []string{
		`config: file="none (flags and built-in defaults)"`,
		`policy_dir="none (embedded policies only)"`,
		"url=https://127.0.0.1:1/v1 protocol=responses transport=http credentials=api_key",
		`routes: routes="none: every upstream serves every model"`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("summary lacks %q\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "secret") {
		t.Errorf("a credential reached the log:\n%s", stderr)
	}
}

// TestConfigErrorsThroughTheCLI: every problem of a file at once, the bad
// keys and the bad values that parsed alike, each on its own line of the
// report with the file's line, exit 1, before anything starts.
func TestConfigErrorsThroughTheCLI(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(cfg, []byte("listn: 127.0.0.1:0\nlimits:\n  max_body_bytes: abc\nupstreams:\n  - name: a\n    base_ur: http://127.0.0.1:1/v1\n"+
		"timeouts: {drain_grace: 0s}\n"), 0o600)
	code, stdout, stderr := runCLI("serve", "--config", cfg)
	want := "sluice: config " + cfg + ": 4 problems:\n" +
		"  line 1: unknown key \"listn\" (did you mean \"listen\"?)\n" +
		"  line 3: limits.max_body_bytes: \"abc\" is not a number\n" +
		"  line 6: upstreams[0]: unknown key \"base_ur\" (did you mean \"base_url\"?)\n" +
		"  line 7: timeouts.drain_grace: must be positive\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant:\n%s", code, stdout, stderr, want)
	}

}

// TestBadFlagValuesExitLikeConfigErrors: a flag's value the gateway refuses
// is judged as the config key it replaces, so it exits 1 whichever flag it
// is (README "Running it"); only the command line's form (an unknown flag, a
// missing value, a stray argument, a non-boolean for a boolean flag) is a
// usage error, exit 2.
func TestBadFlagValuesExitLikeConfigErrors(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	up := "http://127.0.0.1:1/v1"
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--upstream", "grpc+http://127.0.0.1:1/v1"}, 1, `"grpc" is not a protocol`},
		{[]string{"serve", "--upstream", "ftp://x/v1"}, 1, "ftp"},
		{[]string{"serve", "--upstream", up, "--log-level", "bogus"}, 1, "log.level"},
		{[]string{"serve", "--upstream", up, "--data-dir", filepath.Join(notADir, "sub")}, 1, "data_dir"},
		// The demo has no config file: its problems name its flags.
		{[]string{"demo", "--upstream-protocol", "grpc", "--listen", "127.0.0.1:0"}, 1, "sluice demo: --upstream-protocol: \"grpc\" is not responses or chat\n"},
		{[]string{"demo", "--log-level", "bogus", "--listen", "127.0.0.1:0"}, 1, "sluice demo: --log-level: \"bogus\" is not one of"},
		{[]string{"demo", "--listen", "127.0.0.1:99999"}, 1, "sluice demo: --listen: \"127.0.0.1:99999\": the port is not a number"},
		{[]string{"serve", "--upstream", up, "--listen", "127.0.0.1:99999"}, 1, "listen: \"127.0.0.1:99999\": the port is not a number"},
		{[]string{"serve", "--pprof=maybe"}, 2, "invalid boolean value"},
		{[]string{"serve", "--upstream"}, 2, "flag needs an argument"},
	} {
		code, _, stderr := runCLI(tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sluice %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}
}

// TestConfigDataDirUnusableFailsBeforeStart: a data dir that cannot be
// created is reported, naming data_dir, before the upstreams are probed (no
// misleading "upstream down … context canceled") or anything listens.
func TestConfigDataDirUnusableFailsBeforeStart(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(file, "data") // under a regular file: fails even for root
	var stdout, stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--upstream", up.URL}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stderr.String(), fmt.Sprintf("sluice: data_dir %q cannot be used: ", dataDir)) {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if strings.Count(stderr.String(), "\n") != 1 || up.ModelsRequests() != 0 || stdout.String() != "" {
		t.Fatalf("more than the one error (probes: %d):\n%s%s", up.ModelsRequests(), stdout.String(), stderr.String())
	}
	// An empty data_dir says so, rather than "mkdir : no such file or directory".
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: \"\"\nupstreams: [{name: a, base_url: \""+up.URL+"\"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	code = run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--config", cfg}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stderr.String(), `sluice: data_dir "" cannot be used: it is empty`) {
		t.Fatalf("empty data_dir: exit %d, stderr:\n%s", code, stderr.String())
	}
	// An explicit wasm_cache_dir is checked up front too, before the store
	// opens or an upstream is probed.
	stderr.Reset()
	code = run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--wasm-cache-dir", dataDir, "--upstream", up.URL}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stderr.String(), fmt.Sprintf("sluice: wasm_cache_dir %q cannot be used: ", dataDir)) ||
		strings.Count(stderr.String(), "\n") != 1 || up.ModelsRequests() != 0 {
		t.Fatalf("unusable wasm_cache_dir: exit %d (probes: %d), stderr:\n%s", code, up.ModelsRequests(), stderr.String())
	}
}

// --upstream replaces the config's upstreams; when the config's routes then
// name an upstream that is gone, the error says why and what the flag's
// upstreams are called.
func TestUpstreamFlagReplacingRoutedUpstreamsIsExplained(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams: [{name: primary, base_url: \"http://127.0.0.1:1/v1\"}]\nroutes: [{models: [fast], targets: [{upstream: primary}]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"serve", "--config", cfg, "--upstream", "http://127.0.0.1:2/v1", "--listen", "127.0.0.1:0"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `"primary" is not a configured upstream`) ||
		!strings.Contains(stderr.String(), `--upstream replaces the config's upstreams; its upstreams are named "127.0.0.1-1"`) {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// With JSON logs (--log-json, or log.json in the config), a reason the
// gateway cannot start is a JSON log line too, so a log pipeline sees it.
func TestStartErrorsAreJSONWithJSONLogs(t *testing.T) {
	dir := t.TempDir()
	jsonCfg := filepath.Join(dir, "json.yaml")
	if err := os.WriteFile(jsonCfg, []byte("log: {json: true}\nupstreams: [{name: a, base_url: nope}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve", "--log-json", "--config", filepath.Join(dir, "missing.yaml")},
		{"serve", "--config", jsonCfg},
	} {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr.String())
		}
		var line struct {
			Level   string `json:"@level"`
			Message string `json:"@message"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(stderr.String())), &line); err != nil || line.Level != "error" || !strings.HasPrefix(line.Message, "config") {
			t.Fatalf("%v: stderr is not one JSON error line (%v):\n%s", args, err, stderr.String())
		}
	}
}
