package hostabi

import "strings"

// LooksLikeCredential reports whether the (lower-case) header is a
// credential header or has a name that says it carries one (SECURITY.md):
//   - any name containing key, auth, token, secret, pass, cookie, cred,
//     signature, private, bearer, jwt, csrf or hmac (X-Goog-Api-Key,
//     X-Private-Key, X-Auth-Token, X-Amz-Security-Token,
//     X-Client-Credential, X-Pass, X-Jwt, …);
//   - any name with a word (between '-', '_' or '.') sig, tok, pwd, otp or
//     sid (X-Sig, X-Session-Tok), too short to match inside other words.
//
// CredentialValue catches what a name cannot say (X-Access: Bearer …).
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
	for _, part := range [...]string{"key", "auth", "token", "secret", "pass", "cookie", "cred", "signature", "private", "bearer", "jwt", "csrf", "hmac"} {
		if strings.Contains(name, part) {
			return true
		}
	}
	for _, word := range strings.FieldsFunc(name, isNameSeparator) {
		switch word {
		case "sig", "tok", "pwd", "otp", "sid":
			return true
		}
	}
	return false
}

// CredentialValue reports whether a header value has the shape of a
// credential whatever the header's name: an Authorization scheme followed
// by its token (Bearer, Basic, Token, ApiKey), or a JSON Web Token (three
// base64url segments, the first a JSON object's "eyJ"). Recordings and
// streaming-input sessions treat such a header as LooksLikeCredential's.
func CredentialValue(v string) bool {
	v = strings.TrimSpace(v)
	if scheme, rest, ok := strings.Cut(v, " "); ok && strings.TrimSpace(rest) != "" {
		switch strings.ToLower(scheme) {
		case "bearer", "basic", "token", "apikey", "digest":
			return true
		}
	}
	return strings.HasPrefix(v, "eyJ") && strings.Count(v, ".") == 2
}

// isNameSeparator reports whether c separates the words of a header name.
func isNameSeparator(c rune) bool { return c == '-' || c == '_' || c == '.' }
