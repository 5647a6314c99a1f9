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
		{"x-bearer", true}, {"x-jwt", true}, {"x-creds", true}, {"x-csrf", true}, {"x-hmac", true},
		{"x-otp", true}, {"x-sid", true},
		// Harmless to leave out of a recording: the rule errs that way.
		{"idempotency-key", true}, {"x-cache-bypass", true},
		// Not credentials.
		{"openai-beta", false}, {"x-request-id", false}, {"content-type", false}, {"user-agent", false},
		{"x-custom-trace", false}, {"session_id", false}, {"x-session-id", false}, {"conversation_id", false},
		{"x-design", false}, {"x-signal", false}, {"x-stock", false}, {"x-stainless-os", false},
		{"x-codex-turn-state", false}, {"accept", false}, {"", false}, {"x-option", false}, {"x-side", false},
	} {
		if got := hostabi.LooksLikeCredential(tc.name); got != tc.want {
			t.Errorf("LooksLikeCredential(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCredentialValue: a value with a credential's shape, whatever its
// header's name (X-Access: Bearer …), and the values that are not.
func TestCredentialValue(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{"Bearer sk-abc", true}, {"bearer x", true}, {"  Basic dXNlcjpwYXNz", true}, {"Token abc", true},
		{"ApiKey abc", true}, {"Digest username=x", true},
		{"eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl", true},
		{"Bearer", false}, {"Bearer ", false}, {"en-US", false}, {"gpt-5 is great", false}, {"eyJ", false},
		{"eyJ.a", false}, {"1.2.3", false}, {"", false},
	} {
		if got := hostabi.CredentialValue(tc.value); got != tc.want {
			t.Errorf("CredentialValue(%q) = %v, want %v", tc.value, got, tc.want)
		}
	}
}
