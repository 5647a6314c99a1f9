package gateway_test

import (
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// TestRecordingOfARewriteToAnUnknownUpstream: a rewrite whose use_upstream
// names no configured upstream fails the request (500, ABI.md §3.3), so
// the recording says what the gateway did with it: "unchanged", decided by
// the default, as `sluice policy test -recording -upstreams` computes it,
// not "changed" for an upstream choice that was never applied.
func TestRecordingOfARewriteToAnUnknownUpstream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	rt := fixturePolicies(t, plugins.Options{RecordDir: dir}, map[string]string{"10-ghost": "rewrite_unknown_upstream"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, upstreams: []upstreamtest.Options{{Name: "A"}}})

	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("client got %d, want the 500 of an unknown upstream", resp.StatusCode)
	}
	recs, text := readRecords(t, dir)
	for _, rc := range recs {
		if rc.Hook == "rewrite" {
			if rc.Verdict != plugins.RewriteUnchanged || rc.DecidedBy != "default" {
				t.Fatalf("recorded verdict %q decided_by %q, want unchanged by default:\n%s", rc.Verdict, rc.DecidedBy, text)
			}
			return
		}
	}
	t.Fatalf("no rewrite record:\n%s", text)
}
