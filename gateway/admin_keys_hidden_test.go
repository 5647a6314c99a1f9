package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// A stored key under a config key's name is ignored while the config has
// the name; DELETE /admin/keys/{name} removes it, says that the config's
// key still applies, and leaves that key working. Once the config entry is
// removed (a gateway on the same store without it), the stored key's old
// secret does not come back.
func TestDeleteRemovesAStoredKeyHiddenByTheConfig(t *testing.T) {
	const (
		configSecret = "sk-cfg-res-cccccccccccccccccc"
		storedSecret = "sk-sluice-hidden-stored-key-0123456789abcdef"
	)
	h, st := keyedHarness(t, keyRec("res", configSecret, nil, store.KeyLimits{}))
	hidden := keyRec("res", storedSecret, nil, store.KeyLimits{})
	hidden.ID = "hidden-record"
	if err := st.CreateKey(context.Background(), hidden); err != nil {
		t.Fatal(err)
	}
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", storedSecret, simple); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the hidden key's secret: %d %s, want 401", resp.StatusCode, b)
	}
	resp, b := send(t, h, http.MethodDelete, "/admin/keys/res", "", "")
	if resp.StatusCode != http.StatusOK || !gjson.GetBytes(b, "deleted").Bool() || gjson.GetBytes(b, "source").Str != "store" ||
		!strings.Contains(gjson.GetBytes(b, "message").Str, "still applies") {
		t.Fatalf("DELETE of the hidden key: %d %s", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", configSecret, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("the config's key after the DELETE: %d %s", resp.StatusCode, b)
	}
	// Nothing is hidden any more: the config's key is not the API's to delete.
	if resp, b := send(t, h, http.MethodDelete, "/admin/keys/res", "", ""); resp.StatusCode != http.StatusConflict || codeOf(b) != "key_conflict" {
		t.Fatalf("second DELETE: %d %s, want 409 key_conflict", resp.StatusCode, b)
	}

	// The config entry removed: the store has no key of the name left.
	after := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, KeyStore: st, Usage: st}}})
	if resp, b := send(t, after, http.MethodPost, "/v1/responses", storedSecret, simple); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the deleted key's secret without the config entry: %d %s, want 401", resp.StatusCode, b)
	}
	if resp, b := send(t, after, http.MethodGet, "/admin/keys", "", ""); resp.StatusCode != http.StatusOK || strings.Contains(string(b), `"res"`) {
		t.Fatalf("keys without the config entry: %d %s", resp.StatusCode, b)
	}
}
