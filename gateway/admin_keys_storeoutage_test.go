package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// With Redis down, the admin keys API answers as the key gate does in the
// same outage: a retryable 503 with Retry-After, coded store_unavailable
// (the gateway's own store, as streaming input codes it), not
// upstream_unavailable, which names the upstreams.
func TestAdminKeysAnswerRetryableStoreUnavailableWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: rs,
		Accounts: gateway.AccountsOptions{Required: true, KeyStore: rs, Usage: rs}}})
	if resp, b := send(t, h, http.MethodPost, "/admin/keys", "", `{"name":"k"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create with Redis up: %d %s", resp.StatusCode, b)
	}
	srv.Kill()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/admin/keys", `{"name":"other"}`},
		{http.MethodPatch, "/admin/keys/k", `{"models":["m"]}`},
		{http.MethodDelete, "/admin/keys/k", ``},
	} {
		resp, b := send(t, h, c.method, c.path, "", c.body)
		if resp.StatusCode != http.StatusServiceUnavailable || codeOf(b) != "store_unavailable" || resp.Header.Get("Retry-After") != "2" ||
			!strings.Contains(string(b), "see the gateway log") {
			t.Fatalf("%s %s: %d Retry-After=%q %s, want a retryable 503 store_unavailable", c.method, c.path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
}
