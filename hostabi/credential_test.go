package hostabi_test

import (
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestLooksLikeCredential: the credential headers, and any name that says
// it carries a key, token, secret, password, authorization or cookie, are
// credentials; other headers are not.
func TestLooksLikeCredential(t *testing.T) {
	for _, name := range []string{"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key",
		"openai-organization", "openai-project", "x-auth-token", "x-goog-api-key", "x-amz-security-token",
		"x-client-secret", "x-db-password", "x-session-cookie", "x-myapikey", "www-authenticate"} {
		if !hostabi.LooksLikeCredential(name) {
			t.Errorf("%s is not taken for a credential", name)
		}
	}
	for _, name := range []string{"openai-beta", "x-request-id", "content-type", "user-agent", "x-custom-trace"} {
		if hostabi.LooksLikeCredential(name) {
			t.Errorf("%s is taken for a credential", name)
		}
	}
}
