package gateway_test

import (
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/store"
)

// TestEveryKeySecretTheConfigAcceptsAuthenticates: the config refuses a
// secret the credential parser would split (config.IsCredentialSeparator);
// one it accepts, whatever its other punctuation, is presented whole and
// authenticates.
func TestEveryKeySecretTheConfigAcceptsAuthenticates(t *testing.T) {
	const secret = "sk-team_a.b+c/d=e:f~g!h(i)j[k]l"
	if _, err := config.Parse([]byte("keys: [{name: p, key: \"${S}\"}]\n"), func(string) (string, bool) { return secret, true }); err != nil {
		t.Fatalf("the config refuses %q: %v", secret, err)
	}
	h, _ := keyedHarness(t, keyRec("p", secret, nil, store.KeyLimits{}))
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != 200 {
		t.Fatalf("the key the config accepts: %d %s", resp.StatusCode, b)
	}
}
