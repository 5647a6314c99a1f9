package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// Every 401 the gateway answers carries a WWW-Authenticate challenge (RFC
// 9110 §15.5.2: a 401 MUST send one), for the Bearer scheme its keys and
// admin token are sent with (RFC 6750): the key gate's invalid_api_key on
// every /v1/ path, the WebSocket upgrade included, and the admin API's
// invalid_admin_token, routed or not.
func TestEvery401CarriesABearerChallenge(t *testing.T) {
	const want = `Bearer realm="sluice"`
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := newHarness(t, harnessConfig{opts: gateway.Options{AdminToken: "adm-secret-0123456789",
		Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: st}}})
	for _, c := range []struct {
		method, path, cred, code string
	}{
		{http.MethodPost, "/v1/responses", "", "invalid_api_key"},
		{http.MethodPost, "/v1/chat/completions", "sk-sluice-unknown-000000000000", "invalid_api_key"},
		{http.MethodGet, "/v1/models", "", "invalid_api_key"},
		{http.MethodGet, "/admin/keys", "", "invalid_admin_token"},
		{http.MethodGet, "/admin/usage", teamAKey, "invalid_admin_token"},
		{http.MethodGet, "/metrics", "wrong-token", "invalid_admin_token"},
		{http.MethodGet, "/admin/nope", "", "invalid_admin_token"},
	} {
		resp, b := send(t, h, c.method, c.path, c.cred, simple)
		if resp.StatusCode != http.StatusUnauthorized || codeOf(b) != c.code {
			t.Fatalf("%s %s: %d %s, want 401 %s", c.method, c.path, resp.StatusCode, b, c.code)
		}
		if got := resp.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != want {
			t.Fatalf("%s %s: WWW-Authenticate %q, want %q", c.method, c.path, got, want)
		}
	}
	_, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(h.url, "http")+"/v1/responses", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("websocket upgrade without a key: %v %v", err, resp)
	}
	if got := resp.Header.Get("WWW-Authenticate"); got != want {
		t.Fatalf("websocket upgrade: WWW-Authenticate %q, want %q", got, want)
	}
	// An answer that is no 401 has no challenge.
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 || resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("with the key: %d %v %s", resp.StatusCode, resp.Header, b)
	}
}
