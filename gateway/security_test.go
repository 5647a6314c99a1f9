package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// operatorKey is the upstream's api_key in these tests; it must never reach
// a client or a log line.
const operatorKey = "sk-operator-9f8e7d6c5b4a3210"

// quotesKey is an upstream 400 that quotes the credential it received, as
// OpenAI's "Incorrect API key provided" does. The code is not an auth code,
// so the gateway relays it instead of failing over.
func quotesKey() []byte {
	return upstreamtest.ErrorBody("Incorrect API key provided: Bearer "+operatorKey+". You can find your API key at https://platform.openai.com.",
		"invalid_request_error", "invalid_value", "")
}

// sendRaw sends body to path with extra headers (a header may be given
// twice) and returns the response and its whole body.
func (h *harness) sendRaw(path, body string, headers http.Header) (*http.Response, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	for k, v := range headers {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("reading %s: %v", path, err)
	}
	return resp, raw
}

// TestUpstreamKeyNeverReachesClients: an upstream error quoting the
// gateway's key reaches clients with the key redacted, over JSON, SSE (HTTP
// and WebSocket upstreams, Responses and Chat) and client WebSockets, in
// bodies, events and headers; and no log line carries it.
func TestUpstreamKeyNeverReachesClients(t *testing.T) {
	echoHeader := http.Header{"X-Echo-Authorization": {"Bearer " + operatorKey}}
	const respBody = `{"model":"gpt-fake-1","input":"hi"}`
	const respStream = `{"model":"gpt-fake-1","input":"hi","stream":true}`
	const chatStream = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`
	tests := []struct {
		name      string
		transport string // the upstream's
		script    upstreamtest.Script
		client    string // json | sse | chat | ws
		wantJSON  bool   // the client's answer is an OpenAI error body
	}{
		{"JSON: 400 status", "http", upstreamtest.Script{Status: 400, Body: quotesKey(), Header: echoHeader}, "json", true},
		{"SSE: 400 status before the stream", "http", upstreamtest.Script{Status: 400, Body: quotesKey(), Header: echoHeader}, "sse", true},
		{"SSE: error event", "http", upstreamtest.Failure(upstreamtest.ShapeErrorEvent, 400, quotesKey()), "sse", false},
		{"SSE: response.failed after created", "http", upstreamtest.Failure(upstreamtest.ShapeFailed, 400, quotesKey()).AfterCreated(), "sse", false},
		{"SSE: an ordinary event quoting it", "http", upstreamtest.Script{Frames: upstreamtest.ResponsesStream(upstreamtest.PlaceholderID,
			upstreamtest.PlaceholderModel, "the key is Bearer "+operatorKey, 1)}, "sse", false},
		{"Chat SSE: error chunk", "http", upstreamtest.Failure(upstreamtest.ShapeErrorEvent, 400, quotesKey()), "chat", false},
		{"SSE from a WebSocket upstream: error frame", "websocket", upstreamtest.Script{Status: 400, Body: quotesKey()}, "sse", false},
		{"client WebSocket: 400 status", "http", upstreamtest.Script{Status: 400, Body: quotesKey(), Header: echoHeader}, "ws", false},
		{"client WebSocket: error event", "http", upstreamtest.Failure(upstreamtest.ShapeErrorEvent, 400, quotesKey()), "ws", false},
		{"client WebSocket through a WebSocket upstream", "websocket", upstreamtest.Script{Status: 400, Body: quotesKey()}, "ws", false},
	}
	harnesses := map[string]*harness{}
	for _, tr := range []string{"http", "websocket"} {
		harnesses[tr] = newHarness(t, harnessConfig{keys: map[string]string{"A": operatorKey}, transport: map[string]string{"A": tr},
			upstreams: []upstreamtest.Options{{Name: "A", APIKey: operatorKey}}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := harnesses[tt.transport]
			h.t = t
			h.ups["A"].Enqueue(tt.script)
			var seen string // everything the client received
			switch tt.client {
			case "ws":
				c := h.dialWS(nil)
				for _, ev := range c.turn(createFrame("")) {
					seen += string(ev.data) + "\n"
				}
			default:
				path, body := "/v1/responses", respStream
				switch tt.client {
				case "json":
					body = respBody
				case "chat":
					path, body = "/v1/chat/completions", chatStream
				}
				resp, raw := h.sendRaw(path, body, nil)
				seen = fmt.Sprint(resp.Header) + "\n" + string(raw)
				if tt.wantJSON {
					if resp.StatusCode != http.StatusBadRequest || !json.Valid(raw) {
						t.Fatalf("want the relayed 400 as valid JSON, got %d %s", resp.StatusCode, raw)
					}
					if got := resp.Header.Get("X-Echo-Authorization"); got != "[redacted]" {
						t.Errorf("upstream response header relayed as %q", got)
					}
				}
			}
			if strings.Contains(seen, operatorKey) {
				t.Fatalf("the operator's key reached the client:\n%s", seen)
			}
			if !strings.Contains(seen, "[redacted]") {
				t.Fatalf("the upstream's text did not reach the client redacted:\n%s", seen)
			}
		})
	}
	for tr, h := range harnesses {
		if strings.Contains(h.logs.String(), operatorKey) {
			t.Errorf("%s: the operator's key is in the logs", tr)
		}
	}
}

// credentialAndHopHeaders is what a hostile client sends along.
func credentialAndHopHeaders() http.Header {
	return http.Header{
		"X-Api-Key":           {"sk-client-x"},
		"Api-Key":             {"sk-client-azure"},
		"Openai-Organization": {"org-client"},
		"Openai-Project":      {"proj-client"},
		// The named header is on the second Connection line.
		"Connection":      {"keep-alive", "X-Hop-Secret"},
		"X-Hop-Secret":    {"hop"},
		"X-Forwarded-For": {"1.2.3.4"},
		"X-Real-Ip":       {"1.2.3.4"},
		"Forwarded":       {"for=1.2.3.4"},
	}
}

// lastUpstreamHeader is the headers of the last request upstream A got (for
// a WebSocket upstream, its upgrade request's).
func lastUpstreamHeader(t *testing.T, h *harness) http.Header {
	t.Helper()
	reqs := h.ups["A"].Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream got no request")
	}
	return reqs[len(reqs)-1].Header
}

// TestKeyedUpstreamNeverGetsClientCredentialHeaders: X-Api-Key, Api-Key,
// OpenAI-Organization and OpenAI-Project never reach an upstream with its own
// api_key unless its forward_headers names them; a drop-in upstream still
// gets them. Over HTTP and WebSocket upstreams, and from client WebSockets.
func TestKeyedUpstreamNeverGetsClientCredentialHeaders(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		forward []string
		want    map[string]string // "" = must be absent
	}{
		{"keyed", operatorKey, nil, map[string]string{"Authorization": "Bearer " + operatorKey, "X-Api-Key": "", "Api-Key": "",
			"Openai-Organization": "", "Openai-Project": ""}},
		{"keyed, forward_headers", operatorKey, []string{"OpenAI-Organization", "x-api-key"}, map[string]string{"Authorization": "Bearer " + operatorKey,
			"X-Api-Key": "sk-client-x", "Api-Key": "", "Openai-Organization": "org-client", "Openai-Project": ""}},
		{"drop-in", "", nil, map[string]string{"Authorization": "Bearer sk-client-secret", "X-Api-Key": "sk-client-x", "Api-Key": "sk-client-azure",
			"Openai-Organization": "org-client", "Openai-Project": "proj-client"}},
	}
	for _, tt := range tests {
		for _, tr := range []string{"http", "websocket"} {
			t.Run(tt.name+"/"+tr, func(t *testing.T) {
				h := newHarness(t, harnessConfig{keys: map[string]string{"A": tt.key}, transport: map[string]string{"A": tr},
					forward: map[string][]string{"A": tt.forward}, upstreams: []upstreamtest.Options{{Name: "A", APIKey: tt.key}}})
				check := func(via string) {
					t.Helper()
					got := lastUpstreamHeader(t, h)
					for k, want := range tt.want {
						if v := got.Get(k); v != want {
							t.Errorf("%s: upstream got %s = %q, want %q", via, k, v, want)
						}
					}
				}
				resp, raw := h.sendRaw("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, credentialAndHopHeaders())
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "response.completed") {
					t.Fatalf("HTTP: %d %s", resp.StatusCode, raw)
				}
				check("HTTP client")
				ws := map[string]string{}
				for k, v := range credentialAndHopHeaders() {
					if k != "Connection" {
						ws[k] = v[0]
					}
				}
				c := h.dialWS(ws)
				if last := assertOneTerminal(t, c.turn(createFrame(""))); last.typ != "response.completed" {
					t.Fatalf("WebSocket: %s", last.data)
				}
				check("WebSocket client")
			})
		}
	}
}

// TestConnectionNamedHeadersNeverReachTheUpstream: a header the client's
// Connection header names (on any of its lines) is hop-by-hop, on HTTP and
// WebSocket upstreams alike.
func TestConnectionNamedHeadersNeverReachTheUpstream(t *testing.T) {
	for _, tr := range []string{"http", "websocket"} {
		t.Run(tr, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": tr}})
			for i, conn := range [][]string{{"X-Hop-Secret"}, {"keep-alive", "X-Hop-Secret"}, {"keep-alive, X-Hop-Secret"}} {
				// A turn state of its own: a WebSocket upstream dials a new
				// socket (with these headers) for each.
				hdr := http.Header{"Connection": conn, "X-Hop-Secret": {"hop"}, "X-Stays": {"yes"}, "X-Codex-Turn-State": {fmt.Sprint("turn-", i)}}
				resp, raw := h.sendRaw("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, hdr)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%d %s", resp.StatusCode, raw)
				}
				got := lastUpstreamHeader(t, h)
				if v := got.Get("X-Hop-Secret"); v != "" {
					t.Errorf("Connection %q: the upstream got X-Hop-Secret %q", conn, v)
				}
				if got.Get("X-Stays") != "yes" {
					t.Errorf("Connection %q: an ordinary header was dropped", conn)
				}
			}
		})
	}
}

// TestForwardedForIsTheRealPeer: an untrusted peer's forwarding headers are
// replaced with what the gateway saw; a trusted proxy's chain is appended to.
func TestForwardedForIsTheRealPeer(t *testing.T) {
	tests := []struct {
		name     string
		trusted  []netip.Prefix
		wantXFF  string
		wantReal string
		wantFwd  string
		wantHost string // "" = the gateway's own address
	}{
		{"untrusted peer", nil, "127.0.0.1", "", "", ""},
		{"untrusted peer, other proxies trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "127.0.0.1", "", "", ""},
		{"trusted peer", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "1.2.3.4, 127.0.0.1", "1.2.3.4", "for=1.2.3.4", "api.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{TrustedProxies: tt.trusted}})
			wantHost := tt.wantHost
			if wantHost == "" {
				wantHost = strings.TrimPrefix(h.url, "http://")
			}
			check := func(via string) {
				t.Helper()
				got := lastUpstreamHeader(t, h)
				for k, want := range map[string]string{"X-Forwarded-For": tt.wantXFF, "X-Real-Ip": tt.wantReal, "Forwarded": tt.wantFwd,
					"X-Forwarded-Host": wantHost, "X-Forwarded-Proto": "http"} {
					if v := strings.Join(got.Values(k), ","); v != want {
						t.Errorf("%s: upstream got %s = %q, want %q", via, k, v, want)
					}
				}
			}
			hdr := map[string]string{"X-Forwarded-For": "1.2.3.4", "X-Real-IP": "1.2.3.4", "Forwarded": "for=1.2.3.4",
				"X-Forwarded-Host": "api.example"}
			hh := http.Header{}
			for k, v := range hdr {
				hh.Set(k, v)
			}
			if resp, raw := h.sendRaw("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`, hh); resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
			check("HTTP client")
			c := h.dialWS(hdr)
			assertOneTerminal(t, c.turn(createFrame("")))
			check("WebSocket client")
		})
	}
}
