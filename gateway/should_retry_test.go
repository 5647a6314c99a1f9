package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// serverErrorSaying is an upstream's 500 whose X-Should-Retry is
// shouldRetry ("" sends none), as OpenAI's API marks an error no retry of
// the same request changes.
func serverErrorSaying(shouldRetry string) upstreamtest.Script {
	h := http.Header{}
	if shouldRetry != "" {
		h.Set("X-Should-Retry", shouldRetry)
	}
	return upstreamtest.Script{Status: http.StatusInternalServerError, Header: h,
		Body: upstreamtest.ErrorBody("boom", "server_error", "", "")}
}

// sdkCall is one Responses.New through openai-go with its default retries
// (2), as an application calls it; it returns the API error.
func sdkCall(t *testing.T, h *harness, model string) *openai.Error {
	t.Helper()
	c := openai.NewClient(option.WithBaseURL(h.url+"/v1/"), option.WithAPIKey("sk-client-secret"), option.WithMaxRetries(2))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%v, want an API error", err)
	}
	return apiErr
}

// TestShouldRetryFalseFromTheOnlyTarget: an upstream's error marked
// x-should-retry: false is not retried on the same target, and the
// client's error says x-should-retry: false too, so openai-go (with its
// default two retries) sends the request once: one upstream request, where
// an SDK talking to the upstream directly makes one. Without the header,
// or with x-should-retry: true, the gateway retries the target once and
// its 502 asks for no such thing (README "Routes and fallbacks").
func TestShouldRetryFalseFromTheOnlyTarget(t *testing.T) {
	for _, tc := range []struct {
		header        string
		wantRequests  int    // upstream requests for one SDK call
		wantNoRetryIn string // the client's X-Should-Retry
	}{
		{"false", 1, "false"},
		{"", 6, ""},     // today's rule: a same-target retry per gateway request, three SDK attempts
		{"true", 6, ""}, // the gateway's own 502 is retryable anyway
	} {
		t.Run("x-should-retry="+tc.header, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].SetDefault(serverErrorSaying(tc.header))
			e := sdkCall(t, h, "gpt-fake-1")
			if got := h.ups["A"].RequestCount(); got != tc.wantRequests {
				t.Fatalf("%d upstream requests for one SDK call, want %d (error %d %s)", got, tc.wantRequests, e.StatusCode, e.Message)
			}
			if got := e.Response.Header.Get("X-Should-Retry"); got != tc.wantNoRetryIn {
				t.Fatalf("the client's X-Should-Retry is %q, want %q", got, tc.wantNoRetryIn)
			}
			if e.StatusCode != http.StatusBadGateway || e.Code != "upstream_unavailable" || !strings.Contains(e.Message, "HTTP 500 boom") {
				t.Fatalf("%d %s %q, want the 502 naming the upstream's 500", e.StatusCode, e.Code, e.Message)
			}
			if tc.header == "false" && (e.Response.Header.Get("Retry-After") != "" || strings.Contains(e.Message, "try again")) {
				t.Fatalf("Retry-After %q, message %q: a no-retry answer asks for no wait", e.Response.Header.Get("Retry-After"), e.Message)
			}
		})
	}
}

// TestShouldRetryFalseOnEverySurface: the no-retry verdict reaches a Chat
// client's status answer (JSON and a stream that failed before anything was
// sent) as it reaches a Responses client's, and the target is called once.
func TestShouldRetryFalseOnEverySurface(t *testing.T) {
	for _, s := range judgedSurfaces {
		if s.stream && !s.chat {
			continue // a Responses stream gets response.failed on a 200: no header to read
		}
		t.Run(s.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"m"},
				Targets: []gateway.RouteTarget{{Upstream: "A", Model: "gpt-fake-1"}}}}}})
			h.ups["A"].SetDefault(serverErrorSaying("false"))
			resp := h.post(s.path, s.body)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Should-Retry") != "false" {
				t.Fatalf("%d X-Should-Retry %q %s; want the 502 with x-should-retry: false", resp.StatusCode, resp.Header.Get("X-Should-Retry"), raw)
			}
			if n := h.ups["A"].RequestCount(); n != 1 {
				t.Fatalf("%d upstream requests, want 1: no same-target retry of a no-retry answer", n)
			}
		})
	}
}

// TestShouldRetryFalseStillFailsOver: a no-retry answer from the first
// target is not retried on it, but another target is another request: the
// route fails over to it as for any 500, and it serves.
func TestShouldRetryFalseStillFailsOver(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].SetDefault(serverErrorSaying("false"))
	c := h.client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatalf("%v; want B's answer", err)
	}
	if r.OutputText() == "" {
		t.Fatalf("empty answer from B: %s", r.RawJSON())
	}
	if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 1 || b != 1 {
		t.Fatalf("P called %d times, B %d; want P once (no same-target retry) and B once", p, b)
	}
}

// failOverBetween posts one Responses request to route m, whose target P
// answers p and whose fallback B answers b, and returns the harness and
// the client's whole answer.
func failOverBetween(t *testing.T, p, b upstreamtest.Script) (*harness, *http.Response, []byte) {
	t.Helper()
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].SetDefault(p)
	h.ups["B"].SetDefault(b)
	resp := h.post("/v1/responses", `{"model":"m","input":"hi"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return h, resp, raw
}

// TestShouldRetryFalseNeedsEveryTarget: the client is told not to retry
// only when every failure said so; when another target failed in a way a
// retry may cure, the 502 carries no x-should-retry: false.
func TestShouldRetryFalseNeedsEveryTarget(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         string // B's X-Should-Retry
		wantB     int    // B's upstream requests
		wantRetry string // the client's X-Should-Retry
	}{
		{"both say false", "false", 1, "false"},
		{"B says nothing", "", 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, resp, raw := failOverBetween(t, serverErrorSaying("false"), serverErrorSaying(tc.b))
			if resp.StatusCode != http.StatusBadGateway || gjson.GetBytes(raw, "error.code").Str != "upstream_unavailable" {
				t.Fatalf("%d %s; want the 502", resp.StatusCode, raw)
			}
			if got := resp.Header.Get("X-Should-Retry"); got != tc.wantRetry {
				t.Fatalf("X-Should-Retry %q, want %q (%s)", got, tc.wantRetry, raw)
			}
			if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 1 || b != tc.wantB {
				t.Fatalf("P called %d times, B %d; want 1 and %d", p, b, tc.wantB)
			}
		})
	}
}

// TestRelayedRateLimitKeepsNoRetryOnlyForTheRequest: a relayed 429 carries
// its answer's headers (README "Failover and replay"), but its
// x-should-retry: false only when the request's every failure said so: when
// another target failed in a way a retry may cure, the client may retry.
func TestRelayedRateLimitKeepsNoRetryOnlyForTheRequest(t *testing.T) {
	limitedNoRetry := upstreamtest.Script{Status: http.StatusTooManyRequests, Header: http.Header{"X-Should-Retry": {"false"}},
		Body: upstreamtest.ErrorBody("You exceeded your current quota", "insufficient_quota", "insufficient_quota", "")}
	for _, tc := range []struct {
		name      string
		b         upstreamtest.Script
		wantRetry string
	}{
		{"B says no retry too", limitedNoRetry, "false"},
		{"B failed retryably", serverErrorSaying(""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, resp, raw := failOverBetween(t, limitedNoRetry, tc.b)
			if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(raw, "error.code").Str != "insufficient_quota" {
				t.Fatalf("%d %s; want the relayed 429", resp.StatusCode, raw)
			}
			if got := resp.Header.Get("X-Should-Retry"); got != tc.wantRetry {
				t.Fatalf("X-Should-Retry %q, want %q", got, tc.wantRetry)
			}
			if p := h.ups["P"].RequestCount(); p != 1 {
				t.Fatalf("P called %d times, want once", p)
			}
		})
	}
}
