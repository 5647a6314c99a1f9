package hostabi

import "strings"

// LooksLikeCredential reports whether the (lower-case) header is a
// credential header or has a name that says it carries one (SECURITY.md):
//   - any name containing key, auth, token, secret, pass, cookie,
//     credential, signature or private (X-Goog-Api-Key, X-Private-Key,
//     X-Auth-Token, X-Amz-Security-Token, X-Client-Credential, X-Pass, …);
//   - any name with a word (between '-', '_' or '.') sig, tok or pwd
//     (X-Sig, X-Session-Tok), too short to match inside other words.
//
// Such headers are never written to disk (gateway/streaminput/README.md,
// README "Recorded traffic as tests"): a client may send any header its own
// upstream reads as a key, and no list of names can know them all. The rule
// errs towards leaving a header out: a name like Idempotency-Key or
// X-Cache-Bypass only goes missing from a recording (and a streaming-input
// session holds it in memory). Session ids are not credentials: policies
// route by them and a streaming-input session must keep them.
func LooksLikeCredential(name string) bool {
	if CredentialHeader(name) {
		return true
	}
	for _, part := range [...]string{"key", "auth", "token", "secret", "pass", "cookie", "credential", "signature", "private"} {
		if strings.Contains(name, part) {
			return true
		}
	}
	for _, word := range strings.FieldsFunc(name, isNameSeparator) {
		switch word {
		case "sig", "tok", "pwd":
			return true
		}
	}
	return false
}

// isNameSeparator reports whether c separates the words of a header name.
func isNameSeparator(c rune) bool { return c == '-' || c == '_' || c == '.' }
