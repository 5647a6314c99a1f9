package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
)

// hopHeaders are connection-scoped and never forwarded in either direction.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// upstreamHeaders builds the headers sent to u for req (over HTTP, and for
// the WebSocket upgrade): the client's, minus hop-by-hop headers (the fixed
// ones and every one the client's Connection lines name) and credentials,
// with the upstream's own key, the gateway's forwarding headers and the
// rewrite policy's edits. When the upstream has no key configured, the
// client's Authorization and credential headers pass through (a drop-in
// proxy in front of an API the client holds keys for).
func upstreamHeaders(req *clientRequest, u upstream.Config, stream bool) http.Header {
	client := req.header
	h := make(http.Header, len(client)+4)
	for k, v := range client {
		h[k] = v
	}
	named := connectionNamed(client)
	for k := range h {
		if isHopByHop(k, named) {
			delete(h, k)
		}
	}
	// The body is sent decoded (the gateway reads and may rewrite it), and
	// the answer is asked for unencoded: no Accept-Encoding would allow any
	// coding (RFC 9110 §12.5.3), and a compressed event stream is buffered
	// by the compressor. What comes encoded anyway is decoded or refused
	// (decodeAnswer).
	for _, k := range []string{"Host", "Content-Length", "Content-Encoding", "Cookie", "Expect"} {
		h.Del(k)
	}
	h.Set("Accept-Encoding", "identity")
	if req.key != nil {
		// A Sluice key is the gateway's credential, never an upstream's: a
		// keyed upstream gets its own key below, one without gets none.
		h.Del("Authorization")
		h.Del("Api-Key")
	}
	if u.APIKey != "" || req.key != nil {
		// An upstream with its own key bills the operator: a client must not
		// pick the key, organization or project (hostabi.CredentialHeader,
		// the one list the policy host protects too) unless the upstream's
		// forward_headers names them. A client identified by its Sluice key
		// sends none either (SECURITY.md: an upstream without api_key then
		// gets no credential).
		for k := range h {
			if hostabi.CredentialHeader(strings.ToLower(k)) && !namesHeader(u.ForwardHeaders, k) {
				delete(h, k)
			}
		}
	}
	if req.key != nil {
		// Nor does a header forward_headers names carry the key (in any
		// value or position, presentedKeys' rule): only those are left to
		// look at.
		for name, secret := range presentedKeys(h) {
			if req.key.carriedBy(secret) {
				delete(h, name)
			}
		}
	}
	if u.APIKey != "" {
		h.Set("Authorization", "Bearer "+u.APIKey)
	}
	req.fwd.apply(h)
	h.Set("Content-Type", "application/json")
	if stream {
		h.Set("Accept", "text/event-stream")
	}
	// A policy never sets or removes credentials or framing (the same rule
	// the policy host enforces, hostabi.ProtectedHeader).
	for k, v := range req.setHeaders {
		if !hostabi.ProtectedHeader(strings.ToLower(k)) {
			h.Set(k, v)
		}
	}
	for _, k := range req.removeHeaders {
		if !hostabi.ProtectedHeader(strings.ToLower(k)) {
			h.Del(k)
		}
	}
	req.injectTrace(h) // with tracing: the attempt's traceparent (tracing.go)
	return h
}

// checkPolicyHeaders refuses the headers a rewrite policy set that net/http
// would refuse to send: a name that is not a token, or a value with a
// control byte (hostabi.ValidFieldName, hostabi.ValidFieldValue). They are
// the only ones to check: net/http's server refuses such client headers
// before a handler runs, and the gateway's own are well-formed. The policy
// host refuses them too; a Go Policy has no host. The error names the
// header, never its value, which may be a secret.
func checkPolicyHeaders(req *clientRequest) error {
	for k, v := range req.setHeaders {
		if hostabi.ProtectedHeader(strings.ToLower(k)) {
			continue // never sent (upstreamHeaders)
		}
		if !hostabi.ValidFieldName(k) {
			return fmt.Errorf("invalid header field name %q", http.CanonicalHeaderKey(k))
		}
		if !hostabi.ValidFieldValue(v) {
			return fmt.Errorf("invalid header field value for %q", http.CanonicalHeaderKey(k))
		}
	}
	return nil
}

func namesHeader(list []string, name string) bool {
	for _, n := range list {
		if strings.EqualFold(strings.TrimSpace(n), name) {
			return true
		}
	}
	return false
}

// forwarding is what the gateway tells an upstream about the client's hop.
// The zero value trusts nothing and adds nothing.
type forwarding struct {
	trusted bool   // the peer is a trusted proxy: its forwarding headers are believed
	peer    string // the immediate peer's IP ("" when unknown)
	proto   string // http or https, as the gateway was reached
	host    string // the Host the client asked the gateway for
}

// forwardingOf computes r's forwarding values. A peer is trusted when its
// address is in trusted; only then are the X-Forwarded-*, Forwarded and
// X-Real-IP headers it sent kept.
func forwardingOf(r *http.Request, trusted []netip.Prefix) forwarding {
	f := forwarding{proto: "http", host: r.Host}
	if r.TLS != nil {
		f.proto = "https"
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap().WithZone("")
		f.peer = a.String()
		for _, p := range trusted {
			if p.Contains(a) {
				f.trusted = true
				break
			}
		}
	}
	return f
}

// apply sets the forwarding headers on h: X-Forwarded-For is the trusted
// chain (if any) plus the peer, X-Forwarded-Proto and -Host are the
// trusted proxy's or the gateway's own. An untrusted peer's X-Forwarded-*,
// Forwarded and X-Real-IP never pass.
func (f forwarding) apply(h http.Header) {
	var chain []string
	if f.trusted {
		for _, v := range h.Values("X-Forwarded-For") {
			if v = strings.TrimSpace(v); v != "" {
				chain = append(chain, v)
			}
		}
	} else {
		for k := range h {
			if ck := http.CanonicalHeaderKey(k); strings.HasPrefix(ck, "X-Forwarded-") || ck == "Forwarded" || ck == "X-Real-Ip" {
				delete(h, k)
			}
		}
	}
	if f.peer != "" {
		chain = append(chain, f.peer)
	}
	if len(chain) > 0 {
		h.Set("X-Forwarded-For", strings.Join(chain, ", "))
	} else {
		h.Del("X-Forwarded-For")
	}
	if f.proto != "" && (!f.trusted || h.Get("X-Forwarded-Proto") == "") {
		h.Set("X-Forwarded-Proto", f.proto)
	}
	if f.host != "" && (!f.trusted || h.Get("X-Forwarded-Host") == "") {
		h.Set("X-Forwarded-Host", f.host)
	}
}

// ParseTrustedProxies parses trusted_proxies: IP addresses and CIDRs.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		s = strings.TrimSpace(s)
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap().WithZone("")
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("trusted_proxies[%d]: %q is not an IP address or CIDR", i, s)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// hopHeaderSet is hopHeaders by canonical name.
var hopHeaderSet = canonicalSet(hopHeaders...)

// connectionNamed is the set of header names, canonical, that h's
// Connection lines list (every line, not just the first): connection-scoped
// in that message, which a proxy removes (RFC 9110 §7.6.1); nil when there
// are none, as in most messages.
func connectionNamed(h http.Header) map[string]bool {
	var set map[string]bool
	for _, c := range h.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			if f = strings.TrimSpace(f); f != "" {
				if set == nil {
					set = map[string]bool{}
				}
				set[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	return set
}

// isHopByHop reports whether the header named k is connection-scoped in a
// message whose Connection lines list named (connectionNamed): the one rule
// for both directions (upstreamHeaders, copyResponseHeaders). Header maps
// from Go's server and transport have canonical keys, which
// http.CanonicalHeaderKey returns without allocating.
func isHopByHop(k string, named map[string]bool) bool {
	k = http.CanonicalHeaderKey(k)
	return hopHeaderSet[k] || named[k]
}

// canonicalSet is the set of names, canonical.
func canonicalSet(names ...string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[http.CanonicalHeaderKey(n)] = true
	}
	return set
}

// gatewayOwnedHeaders are response headers that speak for the gateway's
// origin or its connection, not for the upstream's API, so an upstream's
// never reaches a client (SECURITY.md, "Upstream response headers"): the
// framing the gateway sets itself (the body is relayed decoded), cookies,
// the origin's browser security policy, redirection, alternative services,
// directives to a proxy in front of the gateway (nginx's X-Accel-Redirect
// would have it serve an internal location), and the upstream's software (a
// llama.cpp or Python server behind it is no client's business).
// gatewayOwnedPrefixes are the families of such headers, canonical.
var (
	gatewayOwnedHeaders = canonicalSet(
		"content-length", "content-encoding",
		"set-cookie", "set-cookie2",
		"strict-transport-security", "content-security-policy", "content-security-policy-report-only",
		"x-frame-options", "x-content-type-options", "x-xss-protection", "referrer-policy",
		"permissions-policy", "feature-policy", "clear-site-data", "origin-agent-cluster",
		"public-key-pins", "public-key-pins-report-only", "expect-ct", "nel",
		"report-to", "reporting-endpoints", "service-worker-allowed", "timing-allow-origin",
		"x-dns-prefetch-control", "x-permitted-cross-domain-policies",
		"location", "content-location", "refresh", "link",
		"alt-svc", "x-sendfile", "x-lighttpd-send-file",
		"server", "x-powered-by",
	)
	gatewayOwnedPrefixes = []string{"Access-Control-", "Cross-Origin-", "Proxy-", "Sec-", "X-Accel-"}
)

// relaysResponseHeader reports whether an upstream's response header named
// k reaches the client; named is the upstream's connectionNamed.
func relaysResponseHeader(k string, named map[string]bool) bool {
	k = http.CanonicalHeaderKey(k)
	if hopHeaderSet[k] || named[k] || gatewayOwnedHeaders[k] {
		return false
	}
	for _, p := range gatewayOwnedPrefixes {
		if strings.HasPrefix(k, p) {
			return false
		}
	}
	return true
}

// copyResponseHeaders copies an upstream's response headers to the client:
// its API's own (content type, request id, rate limits, retry hints,
// openai-*, x-codex-* and the like), never a connection-scoped one or one the
// gateway owns (relaysResponseHeader). A family of x-ratelimit-* headers the
// upstream relays any of replaces the gateway's whole (README "Limits":
// unless the upstream sends its own), so no limit is described half by each.
func copyResponseHeaders(dst, src http.Header) {
	named := connectionNamed(src)
	for _, family := range rateLimitHeaders {
		if relaysAnyOf(src, family[:], named) {
			for _, k := range family {
				dst.Del(k)
			}
		}
	}
	for k, v := range src {
		if relaysResponseHeader(k, named) {
			dst[k] = v
		}
	}
}

// relaysAnyOf reports whether src has a header of names that
// copyResponseHeaders relays.
func relaysAnyOf(src http.Header, names []string, named map[string]bool) bool {
	for k := range src {
		for _, n := range names {
			if strings.EqualFold(k, n) && relaysResponseHeader(k, named) {
				return true
			}
		}
	}
	return false
}

// upstreamSaysNoRetry reports whether an upstream's answer carries
// x-should-retry: false: OpenAI's API marks an error no retry of the same
// request can change so, and its SDKs then do not retry, whatever the
// status. The gateway does not retry such an answer on the same target
// either (forward), and tells the client so when every failure said it
// (candidates.noRetryAnswer).
func upstreamSaysNoRetry(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get("X-Should-Retry")), "false")
}

// keepNoRetryOnly drops an upstream's x-should-retry: false from h, the
// headers of the answer the client gets, unless noRetry (the request's
// verdict, candidates.noRetryAnswer) says the client must not retry: one
// target's "false" never speaks for a request another target may still
// serve. An x-should-retry: true is kept.
func keepNoRetryOnly(h http.Header, noRetry bool) {
	if !noRetry && upstreamSaysNoRetry(h) {
		h.Del("X-Should-Retry")
	}
}
