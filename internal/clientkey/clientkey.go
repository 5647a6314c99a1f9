// Package clientkey identifies a client by its credential without keeping
// the credential: the gateway scopes continuity anchors and the streaming
// input sessions by this hash.
package clientkey

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// Hash is the hex of the first 16 bytes of SHA-256 of the request's
// credential, or "" when it carries none. The credential is Authorization's
// value, else Api-Key's, hashed in one form, "Bearer <token>", however the
// token was sent (any case of the scheme's name, extra spaces, Api-Key with
// or without the scheme), so one key is one client; a value of another
// scheme is hashed as it is.
func Hash(h http.Header) string {
	cred := h.Get("Authorization")
	token := BearerToken(cred)
	if cred == "" {
		cred = strings.TrimSpace(h.Get("Api-Key"))
		if token = BearerToken(cred); token == "" {
			token = cred
		}
	}
	switch {
	case cred == "":
		return ""
	case token != "" && !(strings.HasPrefix(cred, "Bearer ") && cred[len("Bearer "):] == token):
		cred = "Bearer " + token // the common form is hashed as it came
	}
	sum := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(sum[:16])
}

// BearerToken is the token of an Authorization value with the Bearer
// scheme, whose name is case-insensitive (RFC 9110 §11.1), or "".
func BearerToken(authorization string) string {
	if len(authorization) > 7 && strings.EqualFold(authorization[:7], "bearer ") {
		return strings.TrimSpace(authorization[7:])
	}
	return ""
}
