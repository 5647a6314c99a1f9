package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/policies"
)

// TestReadyzFailsWhileAFailClosedRewriteHasNoVersion: /readyz is ready
// only while every rewrite policy held to its edits
// (policies.NAME.sluice_fail_closed) has a version serving. A policy_dir
// file that does not load (no earlier version), or is removed, makes every
// model request a 503 policy_unavailable, so /readyz answers 503 "policies
// not loaded" too, and 200 again once a version loads (README "Endpoints").
func TestReadyzFailsWhileAFailClosedRewriteHasNoVersion(t *testing.T) {
	const name = "10-my"
	dir := t.TempDir()
	file := filepath.Join(dir, name+".wasm")
	write := func(b []byte) {
		t.Helper()
		// Written beside and renamed in, so the watcher never reads half a file.
		tmp := filepath.Join(t.TempDir(), "policy")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	good := append([]byte(nil), policies.Defaults()["rewrite.wasm"]...)
	write([]byte("not a wasm module")) // refused at start: no version of it ever served

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{PolicyDir: dir, Logger: hclog.NewNullLogger(), CacheDir: t.TempDir(),
		Debounce: 20 * time.Millisecond,
		// Configured, the first-party rewrite policy rewrites requests (an alias no request uses).
		Config: map[string]json.RawMessage{name: json.RawMessage(`{"model_aliases":{"fast":"m"}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Ready: rt.Ready, FailClosedRewrites: []string{name}}})

	readyz := func() (int, string) {
		t.Helper()
		var body struct{ Status string }
		code := h.getJSON("/readyz", &body)
		return code, body.Status
	}
	// The watcher sees a file change a debounce after it happens: poll,
	// with a deadline that only a gateway that never turns fails.
	waitReadyz := func(step string, wantCode int, wantStatus string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			code, status := readyz()
			if code == wantCode && status == wantStatus {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz answers %d %q; want %d %q", step, code, status, wantCode, wantStatus)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	modelRequest := func() (int, string) {
		t.Helper()
		resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, gjson.GetBytes(raw, "error.code").String()
	}

	if code, status := readyz(); code != http.StatusServiceUnavailable || status != "policies not loaded" {
		t.Fatalf("a fail-closed rewrite whose file did not load: /readyz %d %q; want 503 \"policies not loaded\"", code, status)
	}
	if code, errCode := modelRequest(); code != http.StatusServiceUnavailable || errCode != "policy_unavailable" {
		t.Fatalf("while /readyz says not loaded, a model request got %d %q; want 503 policy_unavailable", code, errCode)
	}

	write(good)
	waitReadyz("the file replaced with a policy that loads", http.StatusOK, "ready")
	if code, errCode := modelRequest(); code != http.StatusOK {
		t.Fatalf("while /readyz says ready, a model request got %d %q", code, errCode)
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	waitReadyz("the file removed", http.StatusServiceUnavailable, "policies not loaded")
	if code, errCode := modelRequest(); code != http.StatusServiceUnavailable || errCode != "policy_unavailable" {
		t.Fatalf("the file removed: a model request got %d %q; want 503 policy_unavailable", code, errCode)
	}

	write(good)
	waitReadyz("the file put back", http.StatusOK, "ready")
}

// TestReadyzFailsWhileAFailClosedRewriteIsTripped: a rewrite policy held to
// its edits whose only version trips (faults in a row, nothing to roll back
// to) makes every model request a 503 policy_unavailable until a new file
// loads, so /readyz answers 503 "policies not loaded" as for a policy with
// no version (README "Endpoints"), and 200 again once a good file loads.
func TestReadyzFailsWhileAFailClosedRewriteIsTripped(t *testing.T) {
	const name = "10-my"
	dir := t.TempDir()
	trap, err := os.ReadFile(filepath.Join("..", "plugins", "testdata", "rewrite_trap.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+".wasm")
	if err := os.WriteFile(file, trap, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{PolicyDir: dir, Logger: hclog.NewNullLogger(), CacheDir: t.TempDir(),
		Debounce: 20 * time.Millisecond, FaultsBeforeRollback: 2,
		// Configured, the first-party rewrite policy that replaces the trap rewrites requests.
		Config: map[string]json.RawMessage{name: json.RawMessage(`{"model_aliases":{"fast":"m"}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Ready: rt.Ready, FailClosedRewrites: []string{name}}})
	readyz := func() (int, string) {
		t.Helper()
		var body struct{ Status string }
		code := h.getJSON("/readyz", &body)
		return code, body.Status
	}
	if code, status := readyz(); code != http.StatusOK {
		t.Fatalf("before any call: /readyz %d %q; want 200 (the version loads; it faults only when called)", code, status)
	}
	for i := range 2 {
		resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || gjson.GetBytes(raw, "error.code").Str != "policy_unavailable" {
			t.Fatalf("request %d to a faulting fail-closed rewrite: %d %s; want 503 policy_unavailable", i+1, resp.StatusCode, raw)
		}
	}
	// Tripped now (the rollback, with nothing to roll back to, leaves it so).
	deadline := time.Now().Add(time.Minute)
	for {
		code, status := readyz()
		if code == http.StatusServiceUnavailable && status == "policies not loaded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a tripped fail-closed rewrite: /readyz %d %q; want 503 \"policies not loaded\"", code, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("while /readyz says not loaded, a model request got %d; want 503", resp.StatusCode)
	}
	good := append([]byte(nil), policies.Defaults()["rewrite.wasm"]...)
	tmp := filepath.Join(t.TempDir(), "policy")
	if err := os.WriteFile(tmp, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		if code, _ := readyz(); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a good file replaced the tripped one: /readyz never 200 again")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
