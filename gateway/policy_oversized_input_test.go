package gateway_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
)

// TestOversizedHeadersDoNotDisableAGuardrail: a client cannot switch a
// guardrail off for everyone by sending requests too large for the policy.
// The fixture rejects every request, and its sluice_alloc traps on inputs
// over 64 KiB (the fixed buffer ABI.md §2 allows): a request with a 70 KB
// header is a fault, so it gets what a fault gives (sent on unrewritten, or
// refused where the policy fails closed), but more such requests than
// faults_before_rollback do not trip the policy (ABI.md §7): the next
// ordinary request is still rejected.
func TestOversizedHeadersDoNotDisableAGuardrail(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		rt := moduleFileRuntime(t, "guard.wasm", filepath.Join("..", "plugins", "testdata", "reject.wasm"))
		opts := gateway.Options{Policy: rt}
		if failClosed {
			opts.FailClosedRewrites = []string{"guard"}
		}
		h := newHarness(t, harnessConfig{opts: opts})
		send := func(pad string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"m","input":"x"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer sk-client-secret")
			if pad != "" {
				req.Header.Set("X-Pad", pad)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, gjson.GetBytes(raw, "error.code").String()
		}
		if status, code := send(""); status != http.StatusForbidden || code != "blocked_by_policy" {
			t.Fatalf("fail_closed=%v: an ordinary request got %d %q, want the guardrail's 403", failClosed, status, code)
		}
		pad := strings.Repeat("a", 70000)
		for i := 0; i < 7; i++ { // faults_before_rollback is 5
			status, code := send(pad)
			if failClosed && (status != http.StatusServiceUnavailable || code != "policy_unavailable") ||
				!failClosed && status != http.StatusOK {
				t.Fatalf("fail_closed=%v: oversized request %d got %d %q", failClosed, i, status, code)
			}
		}
		if status, code := send(""); status != http.StatusForbidden || code != "blocked_by_policy" {
			t.Fatalf("fail_closed=%v: after oversized requests an ordinary request got %d %q, want the guardrail's 403", failClosed, status, code)
		}
	}
}
