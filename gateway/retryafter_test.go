package gateway_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

const (
	retryChatBody       = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	retryChatStreamBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`
	retryResponsesBody  = `{"model":"m","input":"hi"}`
)

// retryAnswer is what a client got: status, error code and Retry-After.
type retryAnswer struct {
	status       int
	code         string
	retryAfter   string
	retryAfterMs string
	contentType  string
	body         string
}

func postForRetry(t *testing.T, h *harness, path, body string) retryAnswer {
	t.Helper()
	resp := h.post(path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the body: %v", path, err)
	}
	return retryAnswer{status: resp.StatusCode, code: gjson.GetBytes(b, "error.code").Str, body: string(b),
		retryAfter: resp.Header.Get("Retry-After"), retryAfterMs: resp.Header.Get("Retry-After-Ms"),
		contentType: resp.Header.Get("Content-Type")}
}

// checkRetryAfter asserts a Retry-After of whole seconds in [lo, hi].
func checkRetryAfter(t *testing.T, what string, a retryAnswer, lo, hi int) {
	t.Helper()
	n, err := strconv.Atoi(a.retryAfter)
	if err != nil || n < lo || n > hi {
		t.Fatalf("%s: Retry-After %q, want whole seconds in [%d, %d]; %d %s", what, a.retryAfter, lo, hi, a.status, a.body)
	}
	ms, err := strconv.Atoi(a.retryAfterMs)
	if err != nil || ms <= 0 || ms > hi*1000 || (ms+999)/1000 != n {
		t.Fatalf("%s: Retry-After-Ms %q does not match Retry-After %q", what, a.retryAfterMs, a.retryAfter)
	}
}

// overloaded503 is an upstream's 503 that asks for a wait.
func overloaded503(wait time.Duration) upstreamtest.Script {
	h := http.Header{}
	h.Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
	return upstreamtest.Script{Status: http.StatusServiceUnavailable, Header: h,
		Body: upstreamtest.ErrorBody("The server is overloaded.", "server_error", "server_is_overloaded", "")}
}

// An upstream's 429 reaches the client with its Retry-After, and while the
// target cools down for it every request, streamed Chat and Responses
// included (no target is tried, so nothing was sent), gets the 429
// rate_limit_exceeded with the remaining wait, not a bare 503.
func TestRateLimitCooldownTellsTheClientTheWait(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Status429(30 * time.Second))

	first := postForRetry(t, h, "/v1/chat/completions", retryChatBody)
	if first.status != http.StatusTooManyRequests || first.code != "rate_limit_exceeded" {
		t.Fatalf("the upstream's 429: got %d %s", first.status, first.body)
	}
	checkRetryAfter(t, "the upstream's 429", first, 30, 30)

	for _, c := range []struct{ name, path, body string }{
		{"responses", "/v1/responses", retryResponsesBody},
		{"chat", "/v1/chat/completions", retryChatBody},
		{"chat stream", "/v1/chat/completions", retryChatStreamBody},
		{"responses stream", "/v1/responses", `{"model":"m","input":"hi","stream":true}`},
	} {
		a := postForRetry(t, h, c.path, c.body)
		// The upstream's error type comes with its code, never server_error
		// on a 429.
		if a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" || gjson.Get(a.body, "error.type").Str != "requests" {
			t.Fatalf("%s during the cooldown: got %d %s, want 429 rate_limit_exceeded of type requests", c.name, a.status, a.body)
		}
		checkRetryAfter(t, c.name+" during the cooldown", a, 1, 30)
	}
	if n := h.ups["A"].RequestCount(); n != 1 {
		t.Fatalf("the upstream was called %d times, want once", n)
	}
}

// A quota code cools the target down like a 429: its code is the answer
// while it lasts.
func TestQuotaCooldownKeepsTheQuotaCode(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	hdr := http.Header{}
	hdr.Set("Retry-After", "40")
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusTooManyRequests, Header: hdr,
		Body: upstreamtest.ErrorBody("You exceeded your current quota.", "insufficient_quota", "insufficient_quota", "")})

	first := postForRetry(t, h, "/v1/chat/completions", retryChatBody)
	if first.status != http.StatusTooManyRequests || first.code != "insufficient_quota" {
		t.Fatalf("the upstream's quota error: got %d %s", first.status, first.body)
	}
	checkRetryAfter(t, "the upstream's quota error", first, 40, 40)
	a := postForRetry(t, h, "/v1/chat/completions", retryChatStreamBody)
	if a.status != http.StatusTooManyRequests || a.code != "insufficient_quota" || gjson.Get(a.body, "error.type").Str != "insufficient_quota" {
		t.Fatalf("during the cooldown: got %d %s, want 429 insufficient_quota", a.status, a.body)
	}
	checkRetryAfter(t, "during the cooldown", a, 1, 40)
}

// A cooldown that is not for capacity stays a 503 upstream_unavailable, with
// the shortest wait among the request's targets as Retry-After; the failure
// that started it carries the upstreams' own wait.
func TestCooldown503CarriesTheShortestWait(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	h.ups["A"].SetDefault(upstreamtest.Status429(50 * time.Second))
	h.ups["B"].SetDefault(overloaded503(20 * time.Second))

	first := postForRetry(t, h, "/v1/chat/completions", retryChatBody)
	// Every target failed, the last capacity error is the answer (README),
	// with the wait its upstream asked for.
	if first.status != http.StatusTooManyRequests || first.code != "rate_limit_exceeded" {
		t.Fatalf("A's 429 and B's 503: got %d %s", first.status, first.body)
	}
	checkRetryAfter(t, "A's 429 and B's 503", first, 50, 50)
	for _, c := range []struct{ name, body string }{{"chat", retryChatBody}, {"chat stream", retryChatStreamBody}} {
		a := postForRetry(t, h, "/v1/chat/completions", c.body)
		if a.status != http.StatusServiceUnavailable || a.code != "upstream_unavailable" {
			t.Fatalf("%s during the cooldowns: got %d %s, want 503 upstream_unavailable", c.name, a.status, a.body)
		}
		checkRetryAfter(t, c.name+" during the cooldowns", a, 1, 20)
	}
}

// An upstream's overloaded 503 with Retry-After, with no other target: the
// client is told the wait, on the failure and during the cooldown.
func TestOverloaded503PassesTheWaitOn(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].SetDefault(overloaded503(20 * time.Second))

	first := postForRetry(t, h, "/v1/chat/completions", retryChatStreamBody)
	if first.status/100 != 5 || first.code != "upstream_unavailable" {
		t.Fatalf("the upstream's 503: got %d %s", first.status, first.body)
	}
	checkRetryAfter(t, "the upstream's 503", first, 20, 20)
	a := postForRetry(t, h, "/v1/chat/completions", retryChatStreamBody)
	if a.status != http.StatusServiceUnavailable || a.code != "upstream_unavailable" {
		t.Fatalf("during the cooldown: got %d %s, want 503 upstream_unavailable", a.status, a.body)
	}
	checkRetryAfter(t, "during the cooldown", a, 1, 20)
}

// An upstream that rejects the gateway's credentials without an error code
// is named in the next request's 503 without a dangling space where the
// code would go; it waits for its next probe, so no wait is known and no
// Retry-After is sent.
func TestRejectedCredentialsWithoutACode(t *testing.T) {
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": "sk-upstream-a"}})
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusUnauthorized, Body: []byte(`{"error":{"message":"bad key"}}`)})
	postForRetry(t, h, "/v1/chat/completions", retryChatBody)
	a := postForRetry(t, h, "/v1/chat/completions", retryChatBody)
	msg := gjson.Get(a.body, "error.message").Str
	if a.status != http.StatusServiceUnavailable || !strings.Contains(msg, "HTTP 401") || strings.Contains(msg, "HTTP 401 ") || a.retryAfter != "" {
		t.Fatalf("after the upstream rejected the credentials: %d Retry-After %q %s", a.status, a.retryAfter, a.body)
	}
}
