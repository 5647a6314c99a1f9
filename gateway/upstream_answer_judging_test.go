package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// judgedSurface is one client surface of the route "m" (contHarness).
type judgedSurface struct {
	name, path, body string
	stream, chat     bool
}

var judgedSurfaces = []judgedSurface{
	{"responses/json", "/v1/responses", `{"model":"m","input":"hi"}`, false, false},
	{"responses/stream", "/v1/responses", `{"model":"m","input":"hi","stream":true}`, true, false},
	{"chat/json", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false, true},
	{"chat/stream", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`, true, true},
}

// answering is the script of an upstream that answers every surface with
// body as its whole 200 JSON answer, a stream request included.
func answering(s judgedSurface, body string) upstreamtest.Script {
	if !s.stream {
		return upstreamtest.Script{Body: []byte(body)}
	}
	// Both protocols' frames: a Responses client's request reaches a Chat
	// upstream at /chat/completions.
	raw := []upstreamtest.Frame{upstreamtest.RawFrame([]byte(body))}
	return upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}}, Frames: raw, ChatFrames: raw}
}

// TestUpstreamErrorEnvelopeIn200IsItsError: a Responses upstream's 200
// whose body is an error envelope is its error, judged as its status, as a
// Chat upstream's is (README, "Chat-Completions-only upstreams"), on every
// client surface: a client error reaches the client with its status,
// message and code, is not charged to the target (B is never tried, however
// often it comes), and a server error goes on to B, whose answer the client
// gets. Neither is relayed as a successful answer.
func TestUpstreamErrorEnvelopeIn200IsItsError(t *testing.T) {
	const (
		clientErr = `{"error":{"message":"context too long","type":"invalid_request_error","param":"input","code":"invalid_value"}}`
		serverErr = `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`
	)
	for _, proto := range []string{"responses", "chat"} {
		for _, s := range judgedSurfaces {
			judgeEnvelopes(t, proto, s, clientErr, serverErr)
		}
	}
}

// judgeEnvelopes runs TestUpstreamErrorEnvelopeIn200IsItsError's two cases
// for one client surface in front of upstreams speaking proto.
func judgeEnvelopes(t *testing.T, proto string, s judgedSurface, clientErr, serverErr string) {
	cfg := harnessConfig{protocol: map[string]string{"P": proto, "B": proto}}
	t.Run(proto+"/"+s.name+"/client error", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, cfg)
		h.ups["P"].SetDefault(answering(s, clientErr))
		for i := range 4 { // more than the circuit's 3 consecutive failures
			resp := h.post(s.path, s.body)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e := gjson.GetBytes(raw, "error")
			if resp.StatusCode != http.StatusBadRequest || e.Get("message").Str != "context too long" ||
				e.Get("code").Str != "invalid_value" || e.Get("param").Str != "input" {
				t.Fatalf("request %d: %d %s; want the upstream's 400 invalid_value", i+1, resp.StatusCode, raw)
			}
		}
		if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 4 || b != 0 {
			t.Fatalf("P called %d times, B %d; want P every time (a client's error is not the target's), B never", p, b)
		}
	})
	t.Run(proto+"/"+s.name+"/server error", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, cfg)
		h.ups["P"].SetDefault(answering(s, serverErr))
		resp := h.post(s.path, s.body)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), `"boom"`) || h.ups["B"].RequestCount() != 1 {
			t.Fatalf("%d %s, B called %d times; want B's answer", resp.StatusCode, raw, h.ups["B"].RequestCount())
		}
	})
}

// TestResponsesUpstreamFailedResponseIsAnAnswer: a Response carries an
// error member of its own (a failed response's); it is the upstream's
// answer, relayed as it is, not an error envelope.
func TestResponsesUpstreamFailedResponseIsAnAnswer(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	failed := `{"id":"resp_failed1","object":"response","created_at":1,"status":"failed","model":"m","output":[],` +
		`"error":{"code":"server_error","message":"The model failed."}}`
	h.ups["P"].SetDefault(upstreamtest.Script{Body: []byte(failed)})
	resp := h.post("/v1/responses", `{"model":"m","input":"hi"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || gjson.GetBytes(raw, "id").Str != "resp_failed1" || h.ups["B"].RequestCount() != 0 {
		t.Fatalf("%d %s, B called %d times; want P's failed Response relayed", resp.StatusCode, raw, h.ups["B"].RequestCount())
	}
}

// rateLimited is an upstream's 429 with the headers OpenAI sends on one,
// and a cookie and a server name, which are never relayed.
func rateLimited(who string) upstreamtest.Script {
	h := http.Header{}
	h.Set("Retry-After-Ms", "300")
	h.Set("X-Request-Id", "req_up429_"+who)
	h.Set("X-Ratelimit-Limit-Requests", "500")
	h.Set("X-Ratelimit-Remaining-Requests", "0")
	h.Set("X-Ratelimit-Reset-Requests", "120ms")
	h.Set("Openai-Processing-Ms", "5")
	h.Set("X-Should-Retry", "true")
	h.Set("Set-Cookie", "session=upstream")
	h.Set("Server", "upstream-server")
	return upstreamtest.Script{Status: http.StatusTooManyRequests, Header: h,
		Body: upstreamtest.ErrorBody("Rate limit reached for requests at "+who, "requests", "rate_limit_exceeded", "")}
}

// TestRelayedRateLimitKeepsUpstreamHeaders: when every target answered 429,
// the client gets the 429 of the last target tried, whose error it is, with
// that answer's own headers (README "Access log": its x-request-id;
// SECURITY.md "Upstream response headers": x-ratelimit-*, openai-*,
// x-should-retry), as a relayed 400 has, and the gateway's wait; never a
// header the gateway owns. A Responses stream's client gets its
// response.failed on a 200 instead (README "Failover and replay").
func TestRelayedRateLimitKeepsUpstreamHeaders(t *testing.T) {
	for _, s := range judgedSurfaces {
		if s.stream && !s.chat {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			h.ups["P"].SetDefault(rateLimited("P"))
			h.ups["B"].SetDefault(rateLimited("B"))
			resp := h.post(s.path, s.body)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(raw, "error.code").Str != "rate_limit_exceeded" {
				t.Fatalf("%d %s; want the upstreams' 429", resp.StatusCode, raw)
			}
			msg := gjson.GetBytes(raw, "error.message").Str
			who := msg[strings.LastIndex(msg, " ")+1:]
			if who != "P" && who != "B" {
				t.Fatalf("message %q names no upstream", msg)
			}
			want := map[string]string{
				"X-Request-Id":                   "req_up429_" + who,
				"X-Ratelimit-Limit-Requests":     "500",
				"X-Ratelimit-Remaining-Requests": "0",
				"X-Ratelimit-Reset-Requests":     "120ms",
				"Openai-Processing-Ms":           "5",
				"X-Should-Retry":                 "true",
				"Content-Type":                   "application/json",
				"Set-Cookie":                     "",
				"Server":                         "",
			}
			for k, v := range want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q (the answer of %s, whose error the client got)", k, got, v, who)
				}
			}
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "" {
				t.Errorf("Retry-After %q, Retry-After-Ms %q: want the gateway's wait", resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"))
			}
		})
	}
}

// TestRateLimitEnvelopeIn200IsA429: an upstream's 200 whose envelope says
// rate_limit_exceeded (OpenAI's own shape, type "requests") is the 429 it
// stands for: the client gets a 429, the target cools down as rate
// limited, and the cooldown's reason names what the upstream sent (a 200
// with an error body), not an invented 502.
func TestRateLimitEnvelopeIn200IsA429(t *testing.T) {
	const limited = `{"error":{"message":"Rate limit reached for requests. Please try again in 9s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	s := judgedSurfaces[0] // responses/json
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].SetDefault(answering(s, limited))
	h.ups["B"].SetDefault(answering(s, limited))
	for i := range 2 { // the second is answered from the cooldowns
		resp := h.post(s.path, s.body)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(raw, "error.code").Str != "rate_limit_exceeded" ||
			strings.Contains(string(raw), "502") {
			t.Fatalf("request %d: %d %s; want a 429 that says no 502", i+1, resp.StatusCode, raw)
		}
	}
	if logs := h.logs.String(); strings.Contains(logs, "HTTP 502") || !strings.Contains(logs, `reason="rate_limited: HTTP 200 error body: rate_limit_exceeded"`) {
		t.Fatalf("the cooldown's reason does not say the rate limit in a 200's error body:\n%s", grepLines(logs, "cooling down"))
	}
}
