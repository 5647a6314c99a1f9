package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestKeysThroughTheBinary: with auth required, a missing key is 401 on
// every surface (streaming-input sessions included), a config key given as
// ${VAR} works, a key created at run time survives a restart, usage is kept,
// and no secret appears in any log line.
func TestKeysThroughTheBinary(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	const cfgSecret = "sk-config-key-0123456789abcdef"
	sum := sha256.Sum256([]byte("sk-hashed-key-0123456789abcdef"))
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\nadmin_token: adm-token-123\nauth: {required: true}\nupstreams:\n  - {name: A, base_url: " + up.URL + "}\n" +
		"keys:\n  - {name: team-a, key: \"${TEAM_A_KEY}\", models: [\"gpt-fake-*\"]}\n  - {name: team-h, key_sha256: " + hex.EncodeToString(sum[:]) + "}\n" +
		"pricing: {gpt-fake-1: {input: 1.25, output: 10}}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"TEAM_A_KEY=" + cfgSecret}
	args := []string{"serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data")}

	do := func(base, method, path, cred, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const body = `{"model":"gpt-fake-1","input":"hi"}`

	base, stop := startWithEnv(t, env, args...)
	for _, path := range []string{"/v1/responses", "/v1/chat/completions", "/v1/streaming_input/sessions"} {
		if code, b := do(base, "POST", path, "", body); code != 401 || !strings.Contains(b, "invalid_api_key") {
			t.Fatalf("%s without a key: %d %s", path, code, b)
		}
	}
	if code, b := do(base, "POST", "/v1/responses", cfgSecret, `{"model":"other","input":"hi"}`); code != 403 || !strings.Contains(b, "model_not_allowed") {
		t.Fatalf("wrong model: %d %s", code, b)
	}
	if code, b := do(base, "POST", "/v1/responses", cfgSecret, body); code != 200 {
		t.Fatalf("config key: %d %s", code, b)
	}
	if code, b := do(base, "POST", "/v1/responses", "sk-hashed-key-0123456789abcdef", body); code != 200 {
		t.Fatalf("hashed config key: %d %s", code, b)
	}
	if code, b := do(base, "POST", "/admin/keys", "", `{"name":"ci"}`); code != 401 {
		t.Fatalf("admin without token: %d %s", code, b)
	}
	code, b := do(base, "POST", "/admin/keys", "adm-token-123", `{"name":"ci","limits":{"rpm":50}}`)
	var created struct{ Key string }
	_ = json.Unmarshal([]byte(b), &created)
	if code != 201 || created.Key == "" {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := do(base, "POST", "/v1/responses", created.Key, body); code != 200 {
		t.Fatalf("run-time key: %d %s", code, b)
	}
	logs1, err := stop()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, logs1)
	}

	// After a restart the run-time key still works and the usage is kept.
	base, stop = startWithEnv(t, env, args...)
	if code, b := do(base, "POST", "/v1/responses", created.Key, body); code != 200 {
		t.Fatalf("run-time key after restart: %d %s", code, b)
	}
	code, b = do(base, "GET", "/admin/usage", "adm-token-123", "")
	if code != 200 || !strings.Contains(b, `"key":"ci"`) || !strings.Contains(b, `"key":"team-a"`) || !strings.Contains(b, `"cost_usd"`) {
		t.Fatalf("usage: %d %s", code, b)
	}
	logs2, _ := stop()
	logs := logs1 + logs2
	if !strings.Contains(logs, "key=ci") || !strings.Contains(logs, "status=401") {
		t.Fatalf("no access lines:\n%s", logs)
	}
	for _, secret := range []string{cfgSecret, "sk-hashed-key-0123456789abcdef", created.Key, "adm-token-123"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("a secret is in the logs:\n%s", logs)
		}
	}
}
