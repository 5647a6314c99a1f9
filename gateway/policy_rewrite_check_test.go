package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins"
)

// discardedRewrite posts body, which the module named policy edits into an
// invalid request, and checks that it is handled as ABI.md §3.3 says: the
// client is served its own request (wantType is the response's
// Content-Type), none of the module's edits (x-ok) reach the upstream, and
// the error is logged and counted with why (wantReason).
func discardedRewrite(t *testing.T, opts gateway.Options, policy, fixture, body, wantType, wantReason string) {
	t.Helper()
	logs := &syncBuffer{}
	rt := fixturePolicies(t, plugins.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})},
		map[string]string{policy: fixture})
	opts.Policy = rt
	h := newHarness(t, harnessConfig{opts: opts})

	resp := h.post("/v1/responses", body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), wantType) {
		t.Fatalf("client got %d %s %s; want the request served as it came, as %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw, wantType)
	}
	reqs := responsesRequests(h)
	if len(reqs) != 1 || reqs[0].Header.Get("X-Ok") != "" || len(reqs[0].Body) != len(body) {
		var got string
		if len(reqs) > 0 {
			got = fmt.Sprintf(": the first of %d bytes with X-Ok %q", len(reqs[0].Body), reqs[0].Header.Get("X-Ok"))
		}
		t.Fatalf("upstream got %d requests%s; want the client's own request of %d bytes, none of %s's edits", len(reqs), got, len(body), policy)
	}
	if l := logs.String(); !strings.Contains(l, "[ERROR]") || !strings.Contains(l, "policy="+policy) || !strings.Contains(l, wantReason) {
		t.Errorf("no ERROR log naming %s and %q:\n%s", policy, wantReason, l)
	}
	for _, st := range rt.Status() {
		if st.Name == policy && (st.Errors != 1 || !strings.Contains(st.LastError, wantReason)) {
			t.Errorf("%s: errors %d, last_error %q; want its error counted with %q", policy, st.Errors, st.LastError, wantReason)
		}
	}
}

// TestRewriteMustKeepStream: a rewrite that turns a client's SSE request
// into a JSON one is an invalid rewrite; the client still gets its SSE
// stream. The same edit on a JSON request changes nothing it asked for,
// and is applied.
func TestRewriteMustKeepStream(t *testing.T) {
	discardedRewrite(t, gateway.Options{}, "10-stream", "rewrite_stream",
		`{"model":"m","input":"x","stream":true}`, "text/event-stream", "stream must stay true")

	rt := fixturePolicies(t, plugins.Options{}, map[string]string{"10-stream": "rewrite_stream"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	resp.Body.Close()
	if reqs := responsesRequests(h); resp.StatusCode != http.StatusOK || len(reqs) != 1 || reqs[0].Header.Get("X-Ok") != "partial" || reqs[0].Stream {
		t.Fatalf("client got %d; upstream got %+v; want the JSON request with x-ok", resp.StatusCode, reqs)
	}
}

// TestRewriteOverTheBodyLimit: a rewritten body larger than
// limits.max_body_bytes is an invalid rewrite, as the client's own body
// would be refused.
func TestRewriteOverTheBodyLimit(t *testing.T) {
	discardedRewrite(t, gateway.Options{MaxBodyBytes: 4096}, "10-pad", "rewrite_pad",
		`{"model":"m","input":"x"}`, "application/json", "over the gateway limit of 4096 bytes")
}

// TestCheckRewrittenBody: the check `sluice policy test` uses is the
// gateway's: it refuses what the gateway discards.
func TestCheckRewrittenBody(t *testing.T) {
	for _, tc := range []struct {
		name, endpoint, body string
		clientStream         bool
		limit                int64
		want                 string // "" valid, else part of the error
	}{
		{"valid", "/v1/responses", `{"model":"m","input":"x","stream":true}`, true, 0, ""},
		{"valid chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, false, 0, ""},
		{"model not a string", "/v1/responses", `{"model":123,"input":"x"}`, false, 0, "model must be a string"},
		{"stream removed", "/v1/responses", `{"model":"m","input":"x"}`, true, 0, "stream must stay true"},
		{"stream added", "/v1/responses", `{"model":"m","input":"x","stream":true}`, false, 0, "stream must stay false"},
		{"over the limit", "/v1/responses", `{"model":"m","input":"xxxxxxxxxx"}`, false, 20, "over the gateway limit of 20 bytes"},
		{"chat without messages", "/v1/chat/completions", `{"model":"m","input":"x"}`, false, 0, "messages"},
		{"unknown endpoint", "/v1/embeddings", `{"model":"m","input":"x"}`, false, 0, "unknown endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := gateway.CheckRewrittenBody(context.Background(), tc.endpoint, []byte(tc.body), tc.clientStream, tc.limit)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
