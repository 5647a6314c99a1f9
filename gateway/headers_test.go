package gateway

import (
	"crypto/tls"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
)

func TestUpstreamHeaders(t *testing.T) {
	const key = "sk-operator-key-123456"
	untrusted := forwarding{peer: "203.0.113.7", proto: "http", host: "gw.example"}
	trusted := forwarding{trusted: true, peer: "10.0.0.2", proto: "http", host: "gw.internal"}
	base := func(kv ...string) http.Header {
		h := http.Header{"Authorization": {"Bearer sk-client"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name    string
		client  http.Header
		fwd     forwarding
		cfg     upstream.Config
		set     map[string]string
		remove  []string
		want    map[string]string // header → exact value ("" = absent)
		wantXFF string
	}{
		{
			name:   "keyed upstream drops credential headers and uses its key",
			client: base("X-Api-Key", "sk-x", "Api-Key", "sk-y", "OpenAI-Organization", "org-client", "OpenAI-Project", "proj-client", "X-Custom", "kept"),
			cfg:    upstream.Config{APIKey: key},
			want: map[string]string{"Authorization": "Bearer " + key, "X-Api-Key": "", "Api-Key": "", "Openai-Organization": "",
				"Openai-Project": "", "X-Custom": "kept"},
		},
		{
			name:   "forward_headers lets named credential headers through, case-insensitively",
			client: base("X-Api-Key", "sk-x", "OpenAI-Organization", "org-client", "OpenAI-Project", "proj-client"),
			cfg:    upstream.Config{APIKey: key, ForwardHeaders: []string{"openai-organization", " OPENAI-PROJECT "}},
			want: map[string]string{"Authorization": "Bearer " + key, "X-Api-Key": "", "Openai-Organization": "org-client",
				"Openai-Project": "proj-client"},
		},
		{
			name:   "forward_headers never forwards the client's Authorization",
			client: base(),
			cfg:    upstream.Config{APIKey: key, ForwardHeaders: []string{"Authorization"}},
			want:   map[string]string{"Authorization": "Bearer " + key},
		},
		{
			name:   "drop-in upstream keeps the client's credentials",
			client: base("X-Api-Key", "sk-x", "OpenAI-Organization", "org-client", "OpenAI-Project", "proj-client"),
			want: map[string]string{"Authorization": "Bearer sk-client", "X-Api-Key": "sk-x", "Openai-Organization": "org-client",
				"Openai-Project": "proj-client"},
		},
		{
			name:   "headers named by any Connection line are dropped, with the fixed hop headers",
			client: base("Connection", "keep-alive", "Connection", "X-Hop-Secret, X-Other", "X-Hop-Secret", "s", "X-Other", "o", "Keep-Alive", "timeout=5", "Te", "trailers", "Upgrade", "h2c", "Proxy-Authorization", "Basic eA==", "Cookie", "c=1", "X-Stay", "y"),
			cfg:    upstream.Config{APIKey: key},
			want: map[string]string{"X-Hop-Secret": "", "X-Other": "", "Connection": "", "Keep-Alive": "", "Te": "", "Upgrade": "",
				"Proxy-Authorization": "", "Cookie": "", "X-Stay": "y"},
		},
		{
			name:    "untrusted peer: client forwarding headers are replaced",
			client:  base("X-Forwarded-For", "1.2.3.4", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example", "X-Forwarded-Port", "443", "Forwarded", "for=1.2.3.4", "X-Real-IP", "1.2.3.4"),
			fwd:     untrusted,
			want:    map[string]string{"X-Forwarded-Proto": "http", "X-Forwarded-Host": "gw.example", "X-Forwarded-Port": "", "Forwarded": "", "X-Real-Ip": ""},
			wantXFF: "203.0.113.7",
		},
		{
			name:    "trusted peer: the chain is appended to and its other values kept",
			client:  base("X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "5.6.7.8", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "api.example", "Forwarded", "for=1.2.3.4", "X-Real-IP", "1.2.3.4"),
			fwd:     trusted,
			want:    map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example", "Forwarded": "for=1.2.3.4", "X-Real-Ip": "1.2.3.4"},
			wantXFF: "1.2.3.4, 5.6.7.8, 10.0.0.2",
		},
		{
			name:    "trusted peer without forwarding headers: the gateway's own",
			client:  base(),
			fwd:     trusted,
			want:    map[string]string{"X-Forwarded-Proto": "http", "X-Forwarded-Host": "gw.internal"},
			wantXFF: "10.0.0.2",
		},
		{
			name:   "unknown peer: nothing client-sent is believed, nothing invented",
			client: base("X-Forwarded-For", "1.2.3.4", "X-Real-IP", "1.2.3.4"),
			want:   map[string]string{"X-Real-Ip": ""},
		},
		{
			name:   "policy edits: protected names are ignored, others applied after the credential drop",
			client: base("X-Remove-Me", "r", "OpenAI-Organization", "org-client"),
			cfg:    upstream.Config{APIKey: key},
			set: map[string]string{"authorization": "Bearer sk-policy", "Host": "evil", "transfer-encoding": "chunked",
				"openai-organization": "org-operator", "x-set": "v"},
			remove: []string{"Authorization", "x-remove-me", "connection"},
			want: map[string]string{"Authorization": "Bearer " + key, "Host": "", "Transfer-Encoding": "", "Openai-Organization": "org-operator",
				"X-Set": "v", "X-Remove-Me": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.client.Clone()
			req := &clientRequest{header: tt.client, fwd: tt.fwd, setHeaders: tt.set, removeHeaders: tt.remove}
			h := upstreamHeaders(req, tt.cfg, true)
			for k, want := range tt.want {
				if got := strings.Join(h.Values(k), ","); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if got := strings.Join(h.Values("X-Forwarded-For"), ","); got != tt.wantXFF {
				t.Errorf("X-Forwarded-For = %q, want %q", got, tt.wantXFF)
			}
			if h.Get("Content-Type") != "application/json" || h.Get("Accept") != "text/event-stream" {
				t.Errorf("framing headers: %v", h)
			}
			for k, v := range before {
				if strings.Join(tt.client[k], ",") != strings.Join(v, ",") || len(tt.client) != len(before) {
					t.Fatalf("the client's headers were modified: %v", tt.client)
				}
			}
		})
	}
}

func TestForwardingOf(t *testing.T) {
	trusted, err := ParseTrustedProxies([]string{"10.0.0.0/8", "192.0.2.1", "::ffff:172.16.0.0/108", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		remote, host string
		tls          bool
		want         forwarding
	}{
		{"203.0.113.7:5555", "gw.example", false, forwarding{peer: "203.0.113.7", proto: "http", host: "gw.example"}},
		{"10.1.2.3:1", "gw", true, forwarding{trusted: true, peer: "10.1.2.3", proto: "https", host: "gw"}},
		{"[::ffff:10.1.2.3]:1", "gw", false, forwarding{trusted: true, peer: "10.1.2.3", proto: "http", host: "gw"}},
		{"192.0.2.1:80", "gw", false, forwarding{trusted: true, peer: "192.0.2.1", proto: "http", host: "gw"}},
		{"192.0.2.2:80", "gw", false, forwarding{peer: "192.0.2.2", proto: "http", host: "gw"}},
		{"172.16.9.9:80", "gw", false, forwarding{trusted: true, peer: "172.16.9.9", proto: "http", host: "gw"}},
		{"[2001:db8::5%eth0]:80", "gw", false, forwarding{trusted: true, peer: "2001:db8::5", proto: "http", host: "gw"}},
		{"[2001:db9::5]:80", "gw", false, forwarding{peer: "2001:db9::5", proto: "http", host: "gw"}},
		{"not-an-address", "gw", false, forwarding{proto: "http", host: "gw"}},
		{"", "gw", false, forwarding{proto: "http", host: "gw"}},
	}
	for _, tt := range tests {
		r := &http.Request{RemoteAddr: tt.remote, Host: tt.host}
		if tt.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if got := forwardingOf(r, trusted); got != tt.want {
			t.Errorf("%q: got %+v, want %+v", tt.remote, got, tt.want)
		}
	}
	if f := forwardingOf(&http.Request{RemoteAddr: "10.1.2.3:1"}, nil); f.trusted {
		t.Error("no trusted_proxies must trust nobody")
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := ParseTrustedProxies([]string{"10.1.2.3/8", " 192.0.2.1 ", "::1", "::ffff:10.0.0.0/104"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8")}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0"} {
		if _, err := ParseTrustedProxies([]string{bad}); err == nil || !strings.Contains(err.Error(), "trusted_proxies[0]") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

// TestPolicyHeadersHideWhatThePolicyHostHides: the gateway's filter and the
// policy host's (plugins, SDK harness) are one list.
func TestPolicyHeadersHideWhatThePolicyHostHides(t *testing.T) {
	h := http.Header{}
	for _, k := range []string{"Authorization", "Api-Key", "X-Api-Key", "Cookie", "Proxy-Authorization",
		"OpenAI-Organization", "OpenAI-Project", "X-Codex-Turn-State", "User-Agent"} {
		h.Set(k, "v")
	}
	got := policyHeaders(h)
	for k := range h {
		lk := strings.ToLower(k)
		if _, shown := got[lk]; shown == hostabi.HiddenHeader(lk) {
			t.Errorf("%s: shown=%v, but hostabi.HiddenHeader=%v", lk, shown, hostabi.HiddenHeader(lk))
		}
	}
	for _, k := range []string{"authorization", "api-key", "x-api-key", "cookie", "proxy-authorization"} {
		if _, ok := got[k]; ok {
			t.Errorf("policies see %s", k)
		}
	}
	for _, k := range []string{"openai-organization", "openai-project"} {
		if got[k] != "v" {
			t.Errorf("policies do not see %s", k)
		}
	}
}

// TestCopyResponseHeaders: an upstream's API headers reach the client; its
// connection-scoped ones (hopHeaders and every name any Connection line
// lists, RFC 9110 §7.6.1) and those the gateway owns never do, and a
// Connection line never removes one of the gateway's own.
func TestCopyResponseHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  http.Header
		want map[string]string // header → value at the client ("" = absent)
	}{
		{"API headers pass", http.Header{"X-Request-Id": {"req_u"}, "Openai-Version": {"2020-10-01"}, "Retry-After-Ms": {"5"},
			"X-Codex-Turn-State": {"ts"}, "Content-Type": {"application/json"}, "Www-Authenticate": {"Bearer"}},
			map[string]string{"X-Request-Id": "req_u", "Openai-Version": "2020-10-01", "Retry-After-Ms": "5",
				"X-Codex-Turn-State": "ts", "Content-Type": "application/json", "Www-Authenticate": "Bearer"}},
		{"hop-by-hop, every Connection line, any case", http.Header{"Connection": {"x-one, X-TWO", "x-three"},
			"X-One": {"1"}, "X-Two": {"2"}, "X-Three": {"3"}, "Proxy-Authenticate": {"Basic"}, "Keep-Alive": {"timeout=5"}, "X-Four": {"4"}},
			map[string]string{"Connection": "", "X-One": "", "X-Two": "", "X-Three": "", "Proxy-Authenticate": "", "Keep-Alive": "", "X-Four": "4"}},
		{"the gateway's own", http.Header{"Access-Control-Allow-Origin": {"*"}, "Location": {"http://evil.example/"}, "Set-Cookie": {"a=1"},
			"Strict-Transport-Security": {"max-age=0"}, "X-Accel-Redirect": {"/x"}, "Server": {"llama.cpp"}, "Content-Length": {"9"}},
			map[string]string{"Access-Control-Allow-Origin": "", "Location": "", "Set-Cookie": "", "Strict-Transport-Security": "",
				"X-Accel-Redirect": "", "Server": "", "Content-Length": ""}},
		{"a Connection line names a header the gateway set", http.Header{"Connection": {"X-Gateway"}},
			map[string]string{"X-Gateway": "gw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := http.Header{"X-Gateway": {"gw"}}
			copyResponseHeaders(dst, tc.src)
			for k, want := range tc.want {
				if got := dst.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}
