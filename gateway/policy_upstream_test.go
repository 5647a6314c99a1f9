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
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// TestRewriteChoosingAnUnknownUpstream: a rewrite module whose use_upstream
// names no configured upstream is a policy bug, not an outage (ABI.md
// §3.3): the client gets a 500 server_error naming the upstream, not the
// retryable 503 of an upstream that is down, no upstream is called, and the
// error is the module's, named in the log and counted in /admin/policies
// and the policy metrics.
func TestRewriteChoosingAnUnknownUpstream(t *testing.T) {
	logs := &syncBuffer{}
	rt := fixturePolicies(t, plugins.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})},
		map[string]string{"10-ghost": "rewrite_unknown_upstream"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(rt.Collectors()...)
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Registry: reg}, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	for _, body := range []string{`{"model":"m","input":"x"}`, `{"model":"m","input":"x","stream":true}`} {
		resp := h.post("/v1/responses", body)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := gjson.GetBytes(raw, "error")
		if resp.StatusCode != http.StatusInternalServerError || e.Get("type").Str != "server_error" ||
			!strings.Contains(e.Get("message").Str, `"ghost"`) || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("%s: client got %d %s; want a 500 server_error naming the upstream, without Retry-After", body, resp.StatusCode, raw)
		}
	}
	if reqs := responsesRequests(h); len(reqs) != 0 {
		t.Fatalf("upstreams got %d requests, want none", len(reqs))
	}
	if !strings.Contains(logs.String(), "policy=10-ghost") || !strings.Contains(logs.String(), "upstream=ghost") {
		t.Errorf("the log does not name the policy and the upstream:\n%s", logs.String())
	}
	// rt.Status is what GET /admin/policies serves (cmd/sluice).
	if st := policyStatus(rt, "10-ghost"); st.Errors != 2 || !strings.Contains(st.LastError, `"ghost"`) {
		t.Errorf("10-ghost: errors %d, last_error %q; want both requests' errors counted", st.Errors, st.LastError)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_policy_calls_total{hook="rewrite_request",outcome="error",policy="10-ghost"} 2`) {
		t.Errorf("the policy's error metric is not 2:\n%s", grepLines(m, "sluice_policy_calls_total"))
	}
}

// upstreamChoicePolicy is a Go Policy that sends every request to one
// upstream.
type upstreamChoicePolicy struct {
	gateway.BuiltinPolicy
	upstream string
}

func (p upstreamChoicePolicy) Rewrite(context.Context, hostabi.RewriteInput) hostabi.RewriteOutput {
	return hostabi.RewriteOutput{Upstream: p.upstream}
}

// TestRewriteChoosingAnUpstreamThatIsDown: the upstream a policy chose is
// configured but cooling down: that is an outage, and the client gets the
// retryable 503 upstream_unavailable; the request does not go elsewhere.
// The same policy choosing a name no upstream has gets the 500.
func TestRewriteChoosingAnUpstreamThatIsDown(t *testing.T) {
	for _, tc := range []struct {
		upstream string
		status   int
		code     string
	}{
		{"B", http.StatusServiceUnavailable, "upstream_unavailable"},
		{"ghost", http.StatusInternalServerError, "internal_error"},
	} {
		h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: upstreamChoicePolicy{upstream: tc.upstream}},
			upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
		h.pool.Cooldown(h.pool.Get("B"), time.Hour, "test: down")
		resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || gjson.GetBytes(raw, "error.code").Str != tc.code {
			t.Errorf("policy chose %s: client got %d %s; want %d %s", tc.upstream, resp.StatusCode, raw, tc.status, tc.code)
		}
		if reqs := responsesRequests(h); len(reqs) != 0 {
			t.Errorf("policy chose %s: upstreams got %d requests, want none", tc.upstream, len(reqs))
		}
	}
}
