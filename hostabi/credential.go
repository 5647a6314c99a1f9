package hostabi

import "strings"

// LooksLikeCredential reports whether the (lower-case) header is a
// credential header or has a name that says it carries one: any name
// containing api-key, apikey, auth, token, secret, password or cookie
// (X-Auth-Token, X-Goog-Api-Key, X-Amz-Security-Token, …). Such headers are
// never written to disk (gateway/streaminput/README.md, README "Recorded
// traffic as tests"): a client may send any header its own upstream reads
// as a key, and no list of names can know them all.
func LooksLikeCredential(name string) bool {
	if CredentialHeader(name) {
		return true
	}
	for _, word := range [...]string{"api-key", "apikey", "auth", "token", "secret", "password", "cookie"} {
		if strings.Contains(name, word) {
			return true
		}
	}
	return false
}
