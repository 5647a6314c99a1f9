package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream is untrusted (SECURITY.md, Threat model): its answer's headers
// reach the client only when they are its API's own, never when they speak
// for the gateway's origin or connection (SECURITY.md, "Upstream response
// headers").

// hostileHeaders are headers an upstream must not set for the gateway's
// origin or connection; apiHeaders are its API's own, which a client reads.
var (
	hostileHeaders = http.Header{
		"Connection":                       {"X-Hop"},
		"X-Hop":                            {"hopval"},
		"Proxy-Authenticate":               {"Basic"},
		"Access-Control-Allow-Origin":      {"*"},
		"Access-Control-Allow-Credentials": {"true"},
		"Location":                         {"http://evil.example/"},
		"Strict-Transport-Security":        {"max-age=0"},
		"Content-Security-Policy":          {"none"},
		"X-Frame-Options":                  {"ALLOW"},
		"Clear-Site-Data":                  {`"*"`},
		"Set-Cookie":                       {"s=1"},
		"X-Accel-Redirect":                 {"/internal/secret"},
		"Cross-Origin-Resource-Policy":     {"cross-origin"},
	}
	apiHeaders = http.Header{
		"X-Request-Id":                 {"req_upstream_1"},
		"Openai-Processing-Ms":         {"12"},
		"X-Codex-Primary-Used":         {"3"},
		"X-Ratelimit-Remaining-Tokens": {"99"},
		"X-Provider-Region":            {"eu"},
	}
)

func withHeaders(hs ...http.Header) http.Header {
	out := http.Header{}
	for _, h := range hs {
		for k, v := range h {
			out[k] = v
		}
	}
	return out
}

func checkRelayedHeaders(t *testing.T, got http.Header) {
	t.Helper()
	for k := range hostileHeaders {
		if k == "Connection" {
			continue // the gateway's own connection may say close
		}
		if v := got.Values(k); len(v) > 0 {
			t.Errorf("the upstream's %s: %q reached the client", k, v)
		}
	}
	for k, v := range apiHeaders {
		if got.Get(k) != v[0] {
			t.Errorf("%s = %q, want the upstream's %q", k, got.Get(k), v[0])
		}
	}
}

func TestUpstreamResponseHeadersOnlyTheAPIsOwnReachTheClient(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	all := withHeaders(hostileHeaders, apiHeaders)

	t.Run("JSON answer", func(t *testing.T) {
		h.ups["A"].Enqueue(upstreamtest.Script{Header: all})
		resp := h.post("/v1/responses", respJSONBody)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		checkRelayedHeaders(t, resp.Header)
	})
	t.Run("event stream", func(t *testing.T) {
		h.ups["A"].Enqueue(upstreamtest.Script{Header: all})
		resp, evs := h.responsesStream(respBody)
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
			t.Fatalf("terminal %s", last.typ)
		}
		checkRelayedHeaders(t, resp.Header)
	})
	t.Run("error answer", func(t *testing.T) {
		h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Header: all})
		resp := h.post("/v1/responses", respJSONBody)
		readError(t, resp)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d", resp.StatusCode)
		}
		checkRelayedHeaders(t, resp.Header)
	})
}

// Every error body a client gets is OpenAI-shaped (README "Endpoints"), its
// status kept: an upstream's HTML page, or a JSON error cut at the 1 MiB
// bound (SECURITY.md, Upstreams), is never relayed as it came.
func TestUpstreamErrorBodyThatIsNoOpenAIErrorIsReRendered(t *testing.T) {
	const secret = "sk-UPSTREAM-SECRET-KEY-42"
	html := http.Header{"Content-Type": {"text/html"}}
	huge := `{"error":{"message":"` + strings.Repeat("m", 3<<20) + `","type":"invalid_request_error","param":null,"code":null}}`
	for _, tc := range []struct {
		name   string
		script upstreamtest.Script
		want   []string // in the message
		refuse string   // never in the message
	}{
		{"HTML", upstreamtest.Script{Status: http.StatusBadRequest, Header: html,
			Body: []byte("<html><body>bad " + secret + "</body></html>")},
			[]string{"HTTP 400 Bad Request: <html><body>bad [redacted]</body></html>"}, secret},
		{"JSON over the bound", upstreamtest.Script{Status: http.StatusBadRequest, Body: []byte(huge)},
			[]string{"over 1048576 bytes", `{"error":{"message":"`}, strings.Repeat("m", 300)},
		{"binary", upstreamtest.Script{Status: http.StatusUnprocessableEntity, Header: http.Header{"Content-Type": {"application/octet-stream"}},
			Body: []byte{0, 1, 2, 0xff}}, []string{"HTTP 422 Unprocessable Entity with an error body that is not text (4 bytes)"}, "\x00"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+" stream="+strconv.FormatBool(stream), func(t *testing.T) {
				h := newHarness(t, harnessConfig{keys: map[string]string{"A": secret}})
				h.ups["A"].Enqueue(tc.script)
				body := respJSONBody
				if stream {
					body = respBody
				}
				resp := h.post("/v1/responses", body)
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.script.Status || resp.Header.Get("Content-Type") != "application/json" ||
					resp.Header.Get("Content-Length") != strconv.Itoa(len(raw)) {
					t.Fatalf("%d Content-Type %q Content-Length %q (%d bytes), want %d application/json with its length",
						resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Length"), len(raw), tc.script.Status)
				}
				var e apiError
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatalf("not JSON (%v): %.300s", err, raw)
				}
				if deref(e.Error.Code) != "upstream_error" || e.Error.Type != "invalid_request_error" || e.Error.Param != nil {
					t.Errorf("error %+v, want upstream_error invalid_request_error, param null", e.Error)
				}
				for _, w := range tc.want {
					if !strings.Contains(e.Error.Message, w) {
						t.Errorf("message %q, want it to say %q", e.Error.Message, w)
					}
				}
				if strings.Contains(e.Error.Message, tc.refuse) || len(e.Error.Message) > 512 {
					t.Errorf("message %.600q: unbounded or unscrubbed", e.Error.Message)
				}
			})
		}
	}
}

// TestUpstream429BodyThatIsNoErrorIsDescribed: a 429 whose body holds no
// error the gateway can read (an HTML page, JSON over the read bound) is
// relayed as the 429 rate_limit_exceeded it is, its body described as any
// other unreadable error body is, never quoted raw or cut mid-string.
func TestUpstream429BodyThatIsNoErrorIsDescribed(t *testing.T) {
	html := http.Header{"Content-Type": {"text/html"}}
	huge := `{"error":{"message":"` + strings.Repeat("m", 2<<20) + `"}}`
	for _, tc := range []struct {
		name string
		body []byte
		hdr  http.Header
		want string
	}{
		{"HTML", []byte("<html><body>slow down</body></html>"), html, "HTTP 429 Too Many Requests: <html><body>slow down</body></html>"},
		{"JSON over the bound", []byte(huge), nil, "over 1048576 bytes, not relayed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusTooManyRequests, Header: tc.hdr, Body: tc.body})
			resp := h.post("/v1/responses", respJSONBody)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e apiError
			if err := json.Unmarshal(raw, &e); err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("%d, not JSON (%v): %.300s", resp.StatusCode, err, raw)
			}
			if deref(e.Error.Code) != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, tc.want) || len(e.Error.Message) > 512 {
				t.Fatalf("error %+v (message %.300q), want rate_limit_exceeded saying %q", e.Error, e.Error.Message, tc.want)
			}
		})
	}
}
