package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestModeAIsHeldToItsKey: a Mode A request (a chunked NDJSON body with
// X-Streaming-Input: true) is held to its Sluice key as any request of that
// key is (README "Keys, limits and usage"): a model outside the key's list
// is a 403 model_not_allowed that never reaches the upstream, rpm refuses
// the request beyond it, usage is booked under the key, and the upstream
// never gets the Sluice key.
func TestModeAIsHeldToItsKey(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	const (
		narrowKey = "sk-modea-narrow-0123456789abcdef"
		rpmKey    = "sk-modea-rpm-0123456789abcdef"
	)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\nadmin_token: adm-token-123\nauth: {required: true}\nupstreams:\n  - {name: A, base_url: " + up.URL + "}\n" +
		"keys:\n  - {name: narrow, key: " + narrowKey + ", models: [\"gpt-fake-1\"]}\n" +
		"  - {name: one-a-minute, key: " + rpmKey + ", limits: {rpm: 1}}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, nil, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	defer func() { _, _ = stop() }()

	modeA := func(key, model string) (int, string) {
		t.Helper()
		lines := `{"template":{"model":"` + model + `","stream":false,"input":"MODEA: "}}` + "\n" + `{"payload":"x"}` + "\n"
		// A reader of unknown length: the body is sent chunked, as Mode A's is.
		req, err := http.NewRequest("POST", base+"/v1/responses", io.MultiReader(strings.NewReader(lines)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Streaming-Input", "true")
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, b := modeA(narrowKey, "gpt-fake-2"); code != http.StatusForbidden || !strings.Contains(b, `"model_not_allowed"`) {
		t.Fatalf("Mode A for a model the key may not use: %d %s", code, b)
	}
	if n := up.RequestCount(); n != 0 {
		t.Fatalf("the refused Mode A request reached the upstream (%d requests)", n)
	}
	if code, b := modeA(narrowKey, "gpt-fake-1"); code != http.StatusOK {
		t.Fatalf("Mode A for the key's model: %d %s", code, b)
	}

	if code, b := modeA(rpmKey, "gpt-fake-1"); code != http.StatusOK {
		t.Fatalf("first Mode A request under rpm 1: %d %s", code, b)
	}
	if code, b := modeA(rpmKey, "gpt-fake-1"); code != http.StatusTooManyRequests || !strings.Contains(b, `"rate_limit_exceeded"`) {
		t.Fatalf("second Mode A request under rpm 1: %d %s", code, b)
	}
	for _, r := range up.Requests() {
		for name, values := range r.Header {
			for _, v := range values {
				if strings.Contains(v, narrowKey) || strings.Contains(v, rpmKey) {
					t.Fatalf("the upstream got the Sluice key in %s", name)
				}
			}
		}
	}

	// Usage is booked when the answer settles, which may follow the
	// client's last byte: poll for it.
	booked := func(key string) (int64, string) {
		req, _ := http.NewRequest("GET", base+"/admin/usage?key="+key, nil)
		req.Header.Set("Authorization", "Bearer adm-token-123")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var rep struct {
			Total struct {
				Requests int64 `json:"requests"`
			} `json:"total"`
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("/admin/usage: %v: %s", err, b)
		}
		return rep.Total.Requests, string(b)
	}
	for _, key := range []string{"narrow", "one-a-minute"} {
		var n int64
		var b string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if n, b = booked(key); n >= 1 || time.Now().After(deadline) {
				break
			}
		}
		if n != 1 {
			t.Fatalf("usage of %s after one answered Mode A request: %s", key, b)
		}
	}
}
