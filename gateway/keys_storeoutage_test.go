package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// outageKeyStore is a key store whose reads of the keys fail while down is
// set, as a shared Redis's do during an outage.
type outageKeyStore struct {
	store.KeyStore
	down atomic.Bool
}

func (s *outageKeyStore) ListKeys(ctx context.Context) ([]store.KeyRecord, error) {
	if s.down.Load() {
		return nil, errors.New("the key store is down")
	}
	return s.KeyStore.ListKeys(ctx)
}

// TestUnknownSluiceKeyDuringStoreOutage: a Sluice key created on another
// replica (written to the shared store behind this gateway's back) and
// presented while the store cannot be read is neither forwarded upstream
// as a pass-through credential (auth not required) nor refused as an
// invalid key (auth required): the gateway cannot tell whether it is one of
// its keys, so the client gets a retryable 503 with Retry-After, and the
// key works once the store is back.
func TestUnknownSluiceKeyDuringStoreOutage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		required bool
		refresh  time.Duration // 1ns: every request finds the keys stale
	}{
		{"auth_optional", false, 0},
		{"auth_required", true, 0},
		{"auth_optional_stale_keys", false, time.Nanosecond},
		{"auth_required_stale_keys", true, time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			keys := &outageKeyStore{KeyStore: st}
			h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
				Required: tc.required, KeyStore: keys, Usage: st, KeyRefresh: tc.refresh,
			}}})
			// The gateway reads the keys once (the store still up).
			send(t, h, http.MethodPost, "/v1/responses", "sk-client-own-credential", simple)
			h.ups["A"].ClearRequests()

			const secret = "sk-sluice-created-on-another-replica-0123456789"
			if err := st.CreateKey(context.Background(), keyRec("elsewhere", secret, []string{"gpt-fake-1"}, store.KeyLimits{})); err != nil {
				t.Fatal(err)
			}
			keys.down.Store(true)
			for _, body := range []string{simple, `{"model":"gpt-fake-2","input":"hi"}`} {
				resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, body)
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || codeOf(b) != "upstream_unavailable" {
					t.Fatalf("during the outage: %d Retry-After=%q %s, want a retryable 503", resp.StatusCode, resp.Header.Get("Retry-After"), b)
				}
			}
			for _, r := range h.ups["A"].Requests() {
				for _, vs := range r.Header {
					for _, v := range vs {
						if strings.Contains(v, secret) {
							t.Fatalf("the upstream saw the Sluice key: %v", r.Header)
						}
					}
				}
			}
			if n := h.ups["A"].RequestCount(); n != 0 {
				t.Fatalf("the upstream got %d requests during the outage", n)
			}

			keys.down.Store(false)
			if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != http.StatusOK {
				t.Fatalf("after the outage: %d %s, want the key to work", resp.StatusCode, b)
			}
			if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, `{"model":"gpt-fake-2","input":"hi"}`); codeOf(b) != "model_not_allowed" {
				t.Fatalf("after the outage, another model: %d %s, want the key's models applied", resp.StatusCode, b)
			}
			for _, r := range h.ups["A"].Requests() {
				if strings.Contains(r.Header.Get("Authorization"), secret) {
					t.Fatalf("the upstream saw the Sluice key: %v", r.Header)
				}
			}
		})
	}
}
