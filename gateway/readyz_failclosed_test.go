package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/policies"
)

// failClosedPolicy is a gateway whose rewrite policy name, from the file of
// a policy_dir, is held to its edits (policies.NAME.sluice_fail_closed).
type failClosedPolicy struct {
	t    *testing.T
	h    *harness
	file string
}

// newFailClosedPolicy starts a gateway whose policy_dir holds first as the
// rewrite policy 10-my, held to its edits; a version faults faultsInARow
// times in a row before it trips (0: the runtime's default).
func newFailClosedPolicy(t *testing.T, first []byte, faultsInARow int) *failClosedPolicy {
	t.Helper()
	const name = "10-my"
	p := &failClosedPolicy{t: t, file: filepath.Join(t.TempDir(), name+".wasm")}
	p.write(first)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{PolicyDir: filepath.Dir(p.file), Logger: hclog.NewNullLogger(), CacheDir: t.TempDir(),
		Debounce: 20 * time.Millisecond, FaultsBeforeRollback: faultsInARow,
		// Configured, the first-party rewrite policy rewrites requests (an alias no request uses).
		Config: map[string]json.RawMessage{name: json.RawMessage(`{"model_aliases":{"fast":"m"}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	reg := prometheus.NewRegistry()
	reg.MustRegister(rt.Collectors()...) // served on /metrics, as sluice serve registers them
	p.h = newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Ready: rt.Ready, FailClosedRewrites: []string{name}, Registry: reg}})
	return p
}

// write puts b in the policy's file, written beside and renamed in, so the
// watcher never reads half a file.
func (p *failClosedPolicy) write(b []byte) {
	p.t.Helper()
	tmp := filepath.Join(p.t.TempDir(), "policy")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(tmp, p.file); err != nil {
		p.t.Fatal(err)
	}
}

func (p *failClosedPolicy) readyz() (int, string) {
	p.t.Helper()
	var body struct{ Status string }
	code := p.h.getJSON("/readyz", &body)
	return code, body.Status
}

// waitReadyz polls /readyz until it answers wantCode and wantStatus: the
// watcher sees a file change a debounce after it happens, and a rollback
// runs in the background. The deadline only a gateway that never turns
// fails.
func (p *failClosedPolicy) waitReadyz(step string, wantCode int, wantStatus string) {
	p.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, status := p.readyz()
		if code == wantCode && status == wantStatus {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: /readyz answers %d %q; want %d %q", step, code, status, wantCode, wantStatus)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// modelRequest sends a model request: its status and error code.
func (p *failClosedPolicy) modelRequest() (int, string) {
	p.t.Helper()
	resp := p.h.post("/v1/responses", `{"model":"m","input":"x"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, gjson.GetBytes(raw, "error.code").String()
}

// wantRefused checks that a model request is refused 503 policy_unavailable.
func (p *failClosedPolicy) wantRefused(step string) {
	p.t.Helper()
	if code, errCode := p.modelRequest(); code != http.StatusServiceUnavailable || errCode != "policy_unavailable" {
		p.t.Fatalf("%s: a model request got %d %q; want 503 policy_unavailable", step, code, errCode)
	}
}

// TestReadyzFailsWhileAFailClosedRewriteHasNoVersion: /readyz is ready
// only while every rewrite policy held to its edits
// (policies.NAME.sluice_fail_closed) has a version serving. A policy_dir
// file that does not load (no earlier version), or is removed, makes every
// model request a 503 policy_unavailable, so /readyz answers 503 "policies
// not loaded" too, and 200 again once a version loads (README "Endpoints").
func TestReadyzFailsWhileAFailClosedRewriteHasNoVersion(t *testing.T) {
	good := append([]byte(nil), policies.Defaults()["rewrite.wasm"]...)
	p := newFailClosedPolicy(t, []byte("not a wasm module"), 0) // refused at start: no version of it ever served

	if code, status := p.readyz(); code != http.StatusServiceUnavailable || status != "policies not loaded" {
		t.Fatalf("a fail-closed rewrite whose file did not load: /readyz %d %q; want 503 \"policies not loaded\"", code, status)
	}
	p.wantRefused("while /readyz says not loaded")
	// Counted as a rewrite chain stopped at a fail-closed policy is (README
	// "Observability": sluice_policy_fallbacks_total).
	if m := p.h.metrics(); !strings.Contains(m, `sluice_policy_fallbacks_total{hook="rewrite_request",reason="failed_closed"} 1`) {
		t.Fatalf("the refused request is not counted:\n%s", grep(m, "policy_fallbacks"))
	}

	p.write(good)
	p.waitReadyz("the file replaced with a policy that loads", http.StatusOK, "ready")
	if code, errCode := p.modelRequest(); code != http.StatusOK {
		t.Fatalf("while /readyz says ready, a model request got %d %q", code, errCode)
	}

	if err := os.Remove(p.file); err != nil {
		t.Fatal(err)
	}
	p.waitReadyz("the file removed", http.StatusServiceUnavailable, "policies not loaded")
	p.wantRefused("the file removed")

	p.write(good)
	p.waitReadyz("the file put back", http.StatusOK, "ready")
}

// TestReadyzFailsWhileAFailClosedRewriteIsTripped: a rewrite policy held to
// its edits whose only version trips (faults in a row, nothing to roll back
// to) makes every model request a 503 policy_unavailable until a new file
// loads, so /readyz answers 503 "policies not loaded" as for a policy with
// no version (README "Endpoints"), and 200 again once a good file loads.
func TestReadyzFailsWhileAFailClosedRewriteIsTripped(t *testing.T) {
	trap, err := os.ReadFile(filepath.Join("..", "plugins", "testdata", "rewrite_trap.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	p := newFailClosedPolicy(t, trap, 2)
	if code, status := p.readyz(); code != http.StatusOK {
		t.Fatalf("before any call: /readyz %d %q; want 200 (the version loads; it faults only when called)", code, status)
	}
	p.wantRefused("the first fault")
	p.wantRefused("the second fault")
	// Tripped now; the rollback, with nothing to roll back to, leaves it so.
	p.waitReadyz("a tripped fail-closed rewrite", http.StatusServiceUnavailable, "policies not loaded")
	p.wantRefused("while /readyz says not loaded")

	p.write(append([]byte(nil), policies.Defaults()["rewrite.wasm"]...))
	p.waitReadyz("a good file replaced the tripped one", http.StatusOK, "ready")
}
