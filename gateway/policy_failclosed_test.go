package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins"
)

// trappingRewrite loads a real runtime whose one rewrite policy, "guard",
// traps on every call, its metrics registered with the gateway's.
func trappingRewrite(t *testing.T) (*plugins.Runtime, *prometheus.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{Embedded: map[string][]byte{"guard.wasm": matrixPolicy("rewrite_request-trap")},
		Logger: hclog.NewNullLogger(), CacheDir: t.TempDir(), FaultsBeforeRollback: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	reg := prometheus.NewRegistry()
	reg.MustRegister(rt.Collectors()...)
	return rt, reg
}

// TestFailClosedRewriteRefusesTheRequest: a rewrite policy the operator
// holds to its edits (policies.NAME.sluice_fail_closed) that cannot run
// (here it traps) answers the client a retryable 503 policy_unavailable,
// and the request never reaches an upstream; without the option the
// documented fallback stands: the request goes on unrewritten.
func TestFailClosedRewriteRefusesTheRequest(t *testing.T) {
	for _, stream := range []bool{false, true} {
		body := `{"model":"m","input":"x"}`
		if stream {
			body = `{"model":"m","input":"x","stream":true}`
		}
		rt, reg := trappingRewrite(t)
		h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Registry: reg, FailClosedRewrites: []string{"guard"}}})
		resp := h.post("/v1/responses", body)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("stream=%v: client got %d %s; want 503", stream, resp.StatusCode, raw)
		}
		if typ, code := gjson.GetBytes(raw, "error.type").String(), gjson.GetBytes(raw, "error.code").String(); typ != "server_error" || code != "policy_unavailable" {
			t.Errorf("stream=%v: error type %q code %q, want server_error policy_unavailable: %s", stream, typ, code, raw)
		}
		if !strings.Contains(gjson.GetBytes(raw, "error.message").String(), `"guard"`) {
			t.Errorf("stream=%v: the message does not name the policy: %s", stream, raw)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("stream=%v: no Retry-After on the 503", stream)
		}
		if reqs := responsesRequests(h); len(reqs) != 0 {
			t.Errorf("stream=%v: upstreams got %d requests; a fail-closed rewrite that could not run must stop the request", stream, len(reqs))
		}
		page := h.metrics()
		if v := metricValue(page, `sluice_policy_fallbacks_total{hook="rewrite_request",reason="failed_closed"}`); v != 1 {
			t.Errorf("stream=%v: fallbacks{reason=failed_closed} = %v, want 1", stream, v)
		}
		if !strings.Contains(h.logs.String(), "fails closed") {
			t.Errorf("stream=%v: no log line says the request was refused:\n%s", stream, h.logs.String())
		}
	}

	// The default: the same policy's fault is the documented fallback.
	rt, reg := trappingRewrite(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Registry: reg}})
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(responsesRequests(h)) != 1 {
		t.Fatalf("without sluice_fail_closed: client got %d %s and upstreams %d requests; want the request sent on unrewritten",
			resp.StatusCode, raw, len(responsesRequests(h)))
	}
	if v := metricValue(h.metrics(), `sluice_policy_fallbacks_total{hook="rewrite_request",reason="fault"}`); v != 1 {
		t.Errorf("without sluice_fail_closed: fallbacks{reason=fault} = %v, want 1", v)
	}
}

// TestFailClosedRewriteWithoutAVersionRefusesTheRequest: a rewrite policy
// held to its edits that has no version serving (its file was refused at
// run time, removed, or never loaded) refuses requests as one that cannot
// run does: they would otherwise go on without its edits.
func TestFailClosedRewriteWithoutAVersionRefusesTheRequest(t *testing.T) {
	rt, reg := trappingRewrite(t) // serves "guard" only
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Registry: reg, FailClosedRewrites: []string{"absent"}}})
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || gjson.GetBytes(raw, "error.code").String() != "policy_unavailable" ||
		!strings.Contains(gjson.GetBytes(raw, "error.message").String(), `"absent"`) {
		t.Fatalf("client got %d %s; want 503 policy_unavailable naming the policy", resp.StatusCode, raw)
	}
	if reqs := responsesRequests(h); len(reqs) != 0 {
		t.Fatalf("upstreams got %d requests; a fail-closed rewrite without a version must stop the request", len(reqs))
	}
}
