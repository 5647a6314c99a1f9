package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A run of 429s that opens a target's circuit keeps it out for its
// capacity (README "Failover and replay"): the 429 that opened it tells the
// client the circuit's wait, not the upstream's 300 ms, and the request
// after it gets the 429 with the upstream's code and type (the SDKs'
// RateLimitError), not 503 upstream_unavailable.
func TestRateLimitCircuitAnswers429WithItsWait(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	h := newHarness(t, harnessConfig{pool: upstream.Options{Now: clock.Now}})
	h.ups["A"].SetDefault(upstreamtest.Status429(300 * time.Millisecond))
	c := h.client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := func(what string) *openai.Error {
		t.Helper()
		clock.Advance(time.Second) // past the 300 ms cooldown: the request reaches the upstream
		_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-fake-1",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("%s: %v, want an API error", what, err)
		}
		if apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" {
			t.Fatalf("%s: %d %s %s, want 429 rate_limit_exceeded of type requests", what, apiErr.StatusCode, apiErr.Code, apiErr.Type)
		}
		return apiErr
	}
	for i := range 2 {
		if e := call("a 429 before the circuit opens"); e.Response.Header.Get("Retry-After-Ms") != "300" {
			t.Fatalf("429 #%d: retry-after-ms %q, want the upstream's 300", i+1, e.Response.Header.Get("Retry-After-Ms"))
		}
	}
	if e := call("the 429 that opens the circuit"); e.Response.Header.Get("Retry-After") != "30" || e.Response.Header.Get("Retry-After-Ms") != "30000" {
		t.Fatalf("the 429 that opened the circuit: Retry-After %q, retry-after-ms %q, want the circuit's 30 s",
			e.Response.Header.Get("Retry-After"), e.Response.Header.Get("Retry-After-Ms"))
	}
	n := h.ups["A"].RequestCount()
	if e := call("behind the open circuit"); e.Response.Header.Get("Retry-After") != "29" {
		t.Fatalf("behind the open circuit: Retry-After %q, want the circuit's remaining 29 s (a second later)", e.Response.Header.Get("Retry-After"))
	}
	if got := h.ups["A"].RequestCount(); got != n {
		t.Fatalf("the open circuit let a request through (%d upstream requests, want %d)", got, n)
	}
}
