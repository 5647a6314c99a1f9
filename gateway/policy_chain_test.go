package gateway_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins"
)

// TestInvalidRewriteInAChain: in a chain of rewrite modules, the one whose
// body is no longer a request loses its own edits only (ABI.md §3.3): the
// edits before it reach the upstream, and the error is its own, named in
// the log, in /admin/policies and in the recording.
func TestInvalidRewriteInAChain(t *testing.T) {
	logs := &syncBuffer{}
	dir := filepath.Join(t.TempDir(), "rec")
	rt := fixturePolicies(t, plugins.Options{RecordDir: dir, Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})},
		map[string]string{"10-model": "rewrite_model", "20-invalid": "rewrite_invalid"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})

	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client got %d %s", resp.StatusCode, raw)
	}
	reqs := responsesRequests(h)
	if len(reqs) != 1 || reqs[0].Model != "m-rewritten" || reqs[0].Header.Get("X-Ok") != "" {
		t.Fatalf("upstream got %+v; want 10-model's model and none of 20-invalid's edits", reqs)
	}
	if !strings.Contains(logs.String(), "policy=20-invalid") || !strings.Contains(logs.String(), "model must be a string") {
		t.Errorf("the log does not name the policy and the problem:\n%s", logs.String())
	}
	for _, st := range rt.Status() {
		switch st.Name {
		case "20-invalid":
			if st.Errors != 1 || !strings.Contains(st.LastError, "model must be a string") {
				t.Errorf("20-invalid: errors %d, last_error %q; want its error counted", st.Errors, st.LastError)
			}
		case "10-model":
			if st.Errors != 0 {
				t.Errorf("10-model: errors %d", st.Errors)
			}
		}
	}
	recs, text := readRecords(t, dir)
	for _, rc := range recs {
		if rc.Hook == "rewrite" && (rc.Verdict != "changed" || rc.DecidedBy != "10-model") {
			t.Fatalf("rewrite recorded as %s by %q, want changed by 10-model:\n%s", rc.Verdict, rc.DecidedBy, text)
		}
	}
}

// TestOverlongNamesAreTooLarge: a header name or an upstream name over its
// 256-byte limit is too_large (-6), as ABI.md §5 says of every limit.
func TestOverlongNamesAreTooLarge(t *testing.T) {
	rt := fixturePolicies(t, plugins.Options{}, map[string]string{"10-limits": "limits"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	resp.Body.Close()
	reqs := responsesRequests(h)
	if resp.StatusCode != http.StatusOK || len(reqs) != 1 {
		t.Fatalf("client got %d, upstream %d requests", resp.StatusCode, len(reqs))
	}
	if saw := gjson.GetBytes(reqs[0].Body, "policy_saw").Str; saw != "too_large" {
		t.Fatalf("header_set/use_upstream with 300-byte names did not both answer too_large (policy_saw %q)", saw)
	}
}
