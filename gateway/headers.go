package gateway

import (
	"net/http"
	"strings"
)

// hopHeaders are connection-scoped and never forwarded in either direction.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// upstreamHeaders builds the headers sent upstream: the client's, minus
// hop-by-hop and credential headers, with the upstream's own key. When the
// upstream has no key configured, the client's Authorization passes through
// (a drop-in proxy in front of an API the client holds keys for).
func upstreamHeaders(client http.Header, apiKey string, stream bool, set map[string]string, remove []string) http.Header {
	h := make(http.Header, len(client)+2)
	for k, v := range client {
		h[k] = v
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	if c := client.Get("Connection"); c != "" {
		for _, f := range strings.Split(c, ",") {
			h.Del(strings.TrimSpace(f))
		}
	}
	// The body is sent decoded (the gateway reads and may rewrite it).
	for _, k := range []string{"Host", "Content-Length", "Content-Encoding", "Accept-Encoding", "Cookie", "Expect"} {
		h.Del(k)
	}
	if apiKey != "" {
		h.Del("Api-Key")
		h.Set("Authorization", "Bearer "+apiKey)
	}
	h.Set("Content-Type", "application/json")
	if stream {
		h.Set("Accept", "text/event-stream")
	}
	for k, v := range set {
		if strings.EqualFold(k, "authorization") {
			continue // a policy never sees or sets credentials
		}
		h.Set(k, v)
	}
	for _, k := range remove {
		if strings.EqualFold(k, "authorization") {
			continue
		}
		h.Del(k)
	}
	return h
}

// copyResponseHeaders copies an upstream's response headers to the client,
// minus hop-by-hop and framing headers the gateway sets itself.
func copyResponseHeaders(dst, src http.Header) {
	for k, v := range src {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Content-Encoding", "Set-Cookie", "Connection", "Keep-Alive",
			"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Alt-Svc":
			continue
		}
		dst[k] = v
	}
}
