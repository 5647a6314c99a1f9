package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
)

// TestContinuityEndpointWhenDisabled: with continuity off (no store) the
// documented GET /admin/continuity/{response_id} still exists: behind the
// admin token like every /admin/ endpoint (401 without it), and with the
// token a 501 saying continuity is disabled, as /admin/keys and
// /admin/usage answer without a store, not "unknown endpoint".
func TestContinuityEndpointWhenDisabled(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{AdminToken: "adm-secret-0123456789"}})
	get := func(auth string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, h.url+"/admin/continuity/resp_abc", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error map[string]any `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("status %d: body is not an OpenAI-shaped error: %v", resp.StatusCode, err)
		}
		return resp.StatusCode, body.Error
	}
	if code, e := get(""); code != http.StatusUnauthorized || e["code"] != "invalid_admin_token" {
		t.Fatalf("without the admin token: %d %v; want 401 invalid_admin_token", code, e)
	}
	code, e := get("Bearer adm-secret-0123456789")
	if code != http.StatusNotImplemented || e["code"] != "continuity_disabled" || e["type"] != "invalid_request_error" ||
		e["message"] != "continuity is disabled (continuity.disabled: true): the gateway keeps no anchors" {
		t.Fatalf("with the admin token: %d %v; want 501 continuity_disabled", code, e)
	}
}
