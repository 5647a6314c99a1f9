// Package clientkey identifies a client by its credential without keeping
// the credential: the gateway scopes continuity anchors and the streaming
// input sessions by this hash.
package clientkey

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
)

// Hash is the hex of the first 16 bytes of SHA-256 of the request's
// Authorization (or Api-Key) header, or "" when it carries neither.
func Hash(h http.Header) string {
	cred := h.Get("Authorization")
	if cred == "" {
		cred = h.Get("Api-Key")
	}
	if cred == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(sum[:16])
}
