package hostabi_test

import (
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestLooksLikeCredential: the credential headers, and any name that says
// it carries a key, token, secret, password, signature, authorization or
// cookie, are credentials (SECURITY.md); other headers, session ids
// included, are not.
func TestLooksLikeCredential(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		// The credential headers.
		{"authorization", true}, {"proxy-authorization", true}, {"cookie", true}, {"x-api-key", true},
		{"api-key", true}, {"openai-organization", true}, {"openai-project", true},
		// Names that say what they carry.
		{"x-auth-token", true}, {"x-goog-api-key", true}, {"x-amz-security-token", true},
		{"x-client-secret", true}, {"x-db-password", true}, {"x-session-cookie", true}, {"x-myapikey", true},
		{"www-authenticate", true}, {"x-client-credential", true}, {"x-credentials", true},
		{"x-private-key", true}, {"x-signing-key", true}, {"x-access-key-id", true}, {"x-private", true},
		{"x-pass", true}, {"x-passphrase", true}, {"x-passwd", true}, {"x-passcode", true},
		{"x-signature", true}, {"x-hub-signature-256", true}, {"x-sig", true}, {"x_request_sig", true},
		{"x-session-tok", true}, {"x.tok", true}, {"x-pwd", true},
		// Harmless to leave out of a recording: the rule errs that way.
		{"idempotency-key", true}, {"x-cache-bypass", true},
		// Not credentials.
		{"openai-beta", false}, {"x-request-id", false}, {"content-type", false}, {"user-agent", false},
		{"x-custom-trace", false}, {"session_id", false}, {"x-session-id", false}, {"conversation_id", false},
		{"x-design", false}, {"x-signal", false}, {"x-stock", false}, {"x-stainless-os", false},
		{"x-codex-turn-state", false}, {"accept", false}, {"", false},
	} {
		if got := hostabi.LooksLikeCredential(tc.name); got != tc.want {
			t.Errorf("LooksLikeCredential(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
