package gateway_test

import (
	"bytes"
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
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// fixturePolicies loads policy fixtures from testdata/policies (module
// name → fixture name, both without .wasm) in the real runtime.
func fixturePolicies(t *testing.T, opts plugins.Options, modules map[string]string) *plugins.Runtime {
	t.Helper()
	opts.Embedded = map[string][]byte{}
	for name, fixture := range modules {
		wasm, err := os.ReadFile(filepath.Join("testdata", "policies", fixture+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		opts.Embedded[name+".wasm"] = wasm
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	opts.CallTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	for _, st := range rt.Status() {
		if st.State != plugins.StateActive {
			t.Fatalf("policy %s not loaded: %+v", st.Name, st)
		}
	}
	return rt
}

// responsesRequests is every /v1/responses request the harness's upstreams got.
func responsesRequests(h *harness) []upstreamtest.Request {
	var out []upstreamtest.Request
	for _, up := range h.ups {
		for _, r := range up.Requests() {
			if r.Path == "/v1/responses" {
				out = append(out, r)
			}
		}
	}
	return out
}

// assertAllUsable fails when any upstream is out of service (cooling down).
func assertAllUsable(t *testing.T, h *harness) {
	t.Helper()
	for name := range h.ups {
		if ok, why := h.pool.Get(name).Usable(time.Now()); !ok {
			t.Errorf("upstream %s is out of service: %s", name, why)
		}
	}
}

// TestPolicyHeaderWithAControlByte: a policy that copies a client's value
// with a control byte into a header (as one forwarding a body field
// would) is refused by the host, as net/http would refuse to send it; the
// request goes on without the header and no upstream is cooled down.
func TestPolicyHeaderWithAControlByte(t *testing.T) {
	rt := fixturePolicies(t, plugins.Options{}, map[string]string{"10-hdr": "header_ctl"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client got %d %s", resp.StatusCode, body)
	}
	reqs := responsesRequests(h)
	if len(reqs) != 1 {
		t.Fatalf("upstreams got %d requests, want 1", len(reqs))
	}
	if saw := gjson.GetBytes(reqs[0].Body, "policy_saw").Str; saw != "bad_value" {
		t.Errorf("header_set answered the policy %q, want bad_value (body %s)", saw, reqs[0].Body)
	}
	if v, ok := reqs[0].Header["X-Session-Id"]; ok {
		t.Errorf("upstream got X-Session-Id %q", v)
	}
	assertAllUsable(t, h)
}

// badHeaderPolicy is a Go Policy (not held to the policy host's checks)
// that sets a header net/http refuses to send when the input says
// "hostile".
type badHeaderPolicy struct{ gateway.BuiltinPolicy }

func (badHeaderPolicy) Rewrite(_ context.Context, in hostabi.RewriteInput) hostabi.RewriteOutput {
	if !bytes.Contains(in.Body, []byte("hostile")) {
		return hostabi.RewriteOutput{}
	}
	return hostabi.RewriteOutput{SetHeaders: map[string]string{"x-session-id": "sk-secret-session\x01"}}
}

// TestRequestTheGatewayCannotSendChargesNoUpstream: a request the gateway
// cannot build (net/http refuses a header value) is the gateway's error,
// not an upstream's: the client gets a 500 server_error naming the header
// (never its value), no upstream is called, tried in turn or cooled down,
// and the next client is served.
func TestRequestTheGatewayCannotSendChargesNoUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: badHeaderPolicy{}}, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	resp := h.post("/v1/responses", `{"model":"m","input":"hostile"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e apiError
	_ = json.Unmarshal(raw, &e)
	if resp.StatusCode != http.StatusInternalServerError || e.Error.Type != "server_error" || e.Error.Code == nil || *e.Error.Code != "internal_error" ||
		!strings.Contains(e.Error.Message, `"X-Session-Id"`) {
		t.Fatalf("client got %d %s; want 500 server_error internal_error naming X-Session-Id", resp.StatusCode, raw)
	}
	if strings.Contains(string(raw), "sk-secret-session") {
		t.Fatalf("the error shows the header's value: %s", raw)
	}

	_, evs := h.responsesStream(`{"model":"m","input":"hostile","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "internal_error" {
		t.Fatalf("stream ended with %s %q: %s", last.typ, last.code, last.data)
	}

	if n := len(responsesRequests(h)); n != 0 {
		t.Fatalf("upstreams got %d requests, want none", n)
	}
	assertAllUsable(t, h)
	if m := h.metrics(); !strings.Contains(m, `outcome="not_sent"`) {
		t.Error("sluice_upstream_attempts_total has no not_sent outcome")
	}
	resp = h.post("/v1/responses", `{"model":"m","input":"x"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the next client got %d", resp.StatusCode)
	}
}

// TestPolicyCannotTouchCredentials: the credentials policies never see
// they cannot set or remove either (SECURITY.md): with a keyed upstream
// the upstream gets the operator's key and none of the policy's
// credentials; with a drop-in upstream the client's own pass untouched.
func TestPolicyCannotTouchCredentials(t *testing.T) {
	rt := fixturePolicies(t, plugins.Options{}, map[string]string{"10-creds": "header_creds"})
	send := func(h *harness) upstreamtest.Request {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"m","input":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		req.Header.Set("X-Api-Key", "sk-client-x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		reqs := responsesRequests(h)
		if resp.StatusCode != http.StatusOK || len(reqs) != 1 {
			t.Fatalf("client got %d, upstream %d requests", resp.StatusCode, len(reqs))
		}
		if saw := gjson.GetBytes(reqs[0].Body, "policy_saw").Str; saw != "all_refused" {
			t.Errorf("the host let the policy set or remove a credential (policy_saw %q)", saw)
		}
		if got := reqs[0].Header.Get("X-Ok"); got != "yes" {
			t.Errorf("X-Ok = %q: the policy's other edit was lost", got)
		}
		return reqs[0]
	}
	check := func(got upstreamtest.Request, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if g := strings.Join(got.Header.Values(k), ","); g != v {
				t.Errorf("upstream got %s %q, want %q", k, g, v)
			}
		}
	}

	keyed := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, keys: map[string]string{"A": "sk-operator-key"}})
	check(send(keyed), map[string]string{"Authorization": "Bearer sk-operator-key", "Api-Key": "", "X-Api-Key": "", "Cookie": "", "Proxy-Authorization": ""})

	dropIn := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})
	check(send(dropIn), map[string]string{"Authorization": "Bearer sk-client-secret", "Api-Key": "", "X-Api-Key": "sk-client-x", "Cookie": ""})
}

// TestInvalidRewriteLosesAllItsEdits: a rewrite whose body is no longer a
// request the gateway accepts loses its edits as one unit (ABI.md §3.3):
// the body, its header and its upstream choice (an unknown one, which
// would fail the request), not just the body.
func TestInvalidRewriteLosesAllItsEdits(t *testing.T) {
	rt := fixturePolicies(t, plugins.Options{}, map[string]string{"10-invalid": "rewrite_invalid"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client got %d %s; want the request served as it came", resp.StatusCode, raw)
	}
	reqs := responsesRequests(h)
	if len(reqs) != 1 || reqs[0].Model != "m" {
		t.Fatalf("upstreams got %d requests (%+v), want one for model m", len(reqs), reqs)
	}
	if got := reqs[0].Header.Get("X-Ok"); got != "" {
		t.Errorf("upstream got X-Ok %q from the module whose edits were discarded", got)
	}
}

// TestReplayPenaltyOfCenturiesCoolsDown: a replay penalty too large for a
// time.Duration once in nanoseconds is the longest cooldown, not an
// overflow into none at all.
func TestReplayPenaltyOfCenturiesCoolsDown(t *testing.T) {
	rt := fixturePolicies(t, plugins.Options{}, map[string]string{"10-penalty": "replay_penalty_overflow"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	release := h.pool.Get("B").Acquire() // A is picked first
	h.ups["A"].Enqueue(upstreamtest.Status5xx(500))
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	resp.Body.Close()
	release()
	if resp.StatusCode != http.StatusOK || h.ups["A"].RequestCount() == 0 {
		t.Fatalf("client got %d after A's 500 (A called %d times); want B's answer", resp.StatusCode, h.ups["A"].RequestCount())
	}
	if ok, why := h.pool.TargetUsable(upstream.Target{Upstream: h.pool.Get("A"), Model: "m"}); ok {
		t.Fatalf("A is usable after a replay penalty of centuries (%s); want it cooling down", why)
	}
}

// TestRecordedRewriteNamesItsModule: a recorded rewrite that changed the
// request names the module that changed it, not the built-in default.
func TestRecordedRewriteNamesItsModule(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	rt := fixturePolicies(t, plugins.Options{RecordDir: dir}, map[string]string{"20-model": "rewrite_model"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})

	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	resp.Body.Close()
	if reqs := responsesRequests(h); resp.StatusCode != http.StatusOK || len(reqs) != 1 || reqs[0].Model != "m-rewritten" {
		t.Fatalf("client got %d; upstream requests %+v", resp.StatusCode, reqs)
	}
	recs, text := readRecords(t, dir)
	for _, rc := range recs {
		if rc.Hook == "rewrite" {
			if rc.Verdict != "changed" || rc.DecidedBy != "20-model" {
				t.Fatalf("rewrite recorded as %s by %q, want changed by 20-model:\n%s", rc.Verdict, rc.DecidedBy, text)
			}
			return
		}
	}
	t.Fatalf("no rewrite record:\n%s", text)
}
