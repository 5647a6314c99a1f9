package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// encodedSlashHarness is a gateway without an admin token or key
// requirement (its admin API open, as SECURITY.md warns), with a key store,
// in front of an upstream listing a model id that holds a "/".
func encodedSlashHarness(t *testing.T, adminToken string) *harness {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A", Models: []string{"gpt-fake-1", "meta-llama/Llama-3.1-8B"}}},
		opts:      gateway.Options{AdminToken: adminToken, Accounts: gateway.AccountsOptions{KeyStore: st, Usage: st}},
	})
}

// TestEncodedSlashIsNotASeparator: a path whose "/" is encoded (%2F, %2f,
// or %252F, which decodes to one) is an unknown path, 404 not_found, not
// the endpoint the decoded path names: a front proxy that matches the raw
// path against /admin/ must not be passed by /admin%2Fkeys (RFC 3986 §2.2,
// SECURITY.md). No key is minted through it. A model id holding a "/" is
// still found, encoded or not: it is the catch-all's part of the path.
func TestEncodedSlashIsNotASeparator(t *testing.T) {
	const clientCred = "sk-client-secret" // the response's owner (harness.post)
	h := encodedSlashHarness(t, "")
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	for _, tt := range []struct{ method, path, body string }{
		{http.MethodGet, "/admin%2Fkeys", ""},
		{http.MethodGet, "/admin%2fupstreams", ""},
		{http.MethodPost, "/admin%2Fkeys", `{"name":"viaenc"}`},
		{http.MethodPost, "/admin%2fkeys", `{"name":"viaenc2"}`},
		{http.MethodGet, "/admin%252Fkeys", ""},
		{http.MethodGet, "/v1/responses%2F" + id, ""},
		{http.MethodGet, "/v1/responses%252F" + id, ""},
		{http.MethodPost, "/v1%2Fresponses", `{"model":"gpt-fake-1","input":"hi"}`},
		{http.MethodGet, "/v1%2Fmodels", ""},
		{http.MethodGet, "/v1%2Fmodels/gpt-fake-1", ""},
	} {
		resp, b := send(t, h, tt.method, tt.path, clientCred, tt.body)
		if resp.StatusCode != http.StatusNotFound || codeOf(b) != "not_found" || !strings.Contains(string(b), `"type":"invalid_request_error"`) {
			t.Errorf("%s %s = %d %s, want 404 not_found", tt.method, tt.path, resp.StatusCode, b)
		}
	}
	if resp, b := send(t, h, http.MethodGet, "/admin/keys", "", ""); resp.StatusCode != http.StatusOK || strings.Contains(string(b), "viaenc") {
		t.Errorf("GET /admin/keys = %d %s, want 200 without a key minted through an encoded path", resp.StatusCode, b)
	}
	for _, path := range []string{"/v1/models/meta-llama%2FLlama-3.1-8B", "/v1/models/meta-llama%2fLlama-3.1-8B", "/v1/models/meta-llama/Llama-3.1-8B"} {
		if resp, b := send(t, h, http.MethodGet, path, clientCred, ""); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"id":"meta-llama/Llama-3.1-8B"`) {
			t.Errorf("GET %s = %d %s, want 200 with the model's entry", path, resp.StatusCode, b)
		}
	}
	if resp, b := send(t, h, http.MethodGet, "/v1/responses/"+id, clientCred, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/responses/%s = %d %s, want 200", id, resp.StatusCode, b)
	}
}

// TestEncodedSlashBehindAdminToken: with an admin token, an encoded admin
// path is refused by the guard without the token (as any path under
// /admin) and is a 404 with it: never the endpoint.
func TestEncodedSlashBehindAdminToken(t *testing.T) {
	h := encodedSlashHarness(t, "admintoken-0123456789")
	if resp, b := send(t, h, http.MethodPost, "/admin%2Fkeys", "", `{"name":"viaenc"}`); resp.StatusCode != http.StatusUnauthorized || codeOf(b) != "invalid_admin_token" {
		t.Errorf("POST /admin%%2Fkeys without the token = %d %s, want 401 invalid_admin_token", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodPost, "/admin%2Fkeys", "admintoken-0123456789", `{"name":"viaenc"}`); resp.StatusCode != http.StatusNotFound || codeOf(b) != "not_found" {
		t.Errorf("POST /admin%%2Fkeys with the token = %d %s, want 404 not_found", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodGet, "/admin/keys", "admintoken-0123456789", ""); resp.StatusCode != http.StatusOK || strings.Contains(string(b), "viaenc") {
		t.Errorf("GET /admin/keys = %d %s, want 200 without a key minted through an encoded path", resp.StatusCode, b)
	}
}
