package gateway

import (
	"fmt"
	"net/http"
	"strings"
)

// modelRoutePrefix is where GET /v1/models/{model} takes its model id: a
// catch-all, since ids such as meta-llama/Llama-3-8B hold slashes, which a
// client may send encoded (%2F).
const modelRoutePrefix = "/v1/models/"

// encodedSeparator reports whether r's path holds a "/" the client encoded
// (%2F or %2f), or an encoded "%" that makes one of the decoded path (%252F),
// outside the model id of /v1/models/{model}. RFC 3986 §2.2: %2F is data, not
// a separator, but net/http decodes it into URL.Path, which the router and
// the admin guard read: /admin%2Fkeys would be served as /admin/keys, past a
// front proxy that matches the raw path against /admin/ (SECURITY.md). Such
// a request is an unknown path (README "Endpoints"), so that every path the
// gateway routes has, decoded, the segments the client sent.
func encodedSeparator(r *http.Request) bool {
	for _, p := range []string{sentPath(r), r.URL.Path} {
		if strings.HasPrefix(p, modelRoutePrefix) {
			continue // the rest is the catch-all's: a "/" in it, encoded or not, routes the same
		}
		if strings.Contains(p, "%2F") || strings.Contains(p, "%2f") {
			return true
		}
	}
	return false
}

// sentPath is r's path as the client sent it: URL.RawPath keeps it only
// when it is not the default encoding of the decoded URL.Path.
func sentPath(r *http.Request) string {
	if r.URL.RawPath != "" {
		return r.URL.RawPath
	}
	return r.URL.Path
}

// serveEncodedSeparator answers a request whose path encodes a separator
// (encodedSeparator) as the router answers an unknown path.
func (s *Server) serveEncodedSeparator(w http.ResponseWriter, r *http.Request) {
	s.answerNotFound(w, r, fmt.Sprintf("unknown endpoint %s %s: an encoded \"/\" (%%2F) in a path is not a separator", label(r.Method), label(sentPath(r))))
}
