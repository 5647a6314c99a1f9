package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// retryNowHints are the ways an upstream's 429 says "retry now": a wait of
// zero in either header, or an HTTP-date already past.
func retryNowHints() map[string]http.Header {
	return map[string]http.Header{
		"Retry-After: 0":    {"Retry-After": {"0"}},
		"retry-after-ms: 0": {"Retry-After-Ms": {"0"}},
		"past HTTP-date":    {"Retry-After": {time.Now().Add(-100 * time.Second).UTC().Format(http.TimeFormat)}},
	}
}

// status429Saying is upstreamtest.Status429 with header as its only wait
// headers (its message's "try again in 1s" is read only without them).
func status429Saying(header http.Header) upstreamtest.Script {
	sc := upstreamtest.Status429(0)
	sc.Header = header.Clone()
	return sc
}

// TestRetryNowHintRetriesTheSameTargetAtOnce: an upstream's 429 whose hint
// is "retry now" is a hint of zero, within retry.max_wait (README "Routes
// and fallbacks"): the same target is retried at once and its answer is
// the client's, from a Responses and a Chat upstream alike, and the target
// is not cooled down for the default backoff a hintless 429 gets, nor is
// the client told to wait it out. A shorter wait never gives a longer
// outage than Retry-After: 0.5 does.
func TestRetryNowHintRetriesTheSameTargetAtOnce(t *testing.T) {
	for _, up := range []struct{ protocol, transport string }{{"responses", "http"}, {"responses", "websocket"}, {"chat", "http"}} {
		for name, hint := range retryNowHints() {
			t.Run(up.protocol+"/"+up.transport+"/"+name, func(t *testing.T) {
				h := newHarness(t, harnessConfig{protocol: map[string]string{"A": up.protocol}, transport: map[string]string{"A": up.transport}})
				h.ups["A"].Enqueue(status429Saying(hint))
				if up.transport == "websocket" { // only a stream goes over the upstream's socket
					_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
					if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
						t.Fatalf("terminal %s: %s; want the retry's answer", last.typ, last.data)
					}
				} else if a := postForRetry(t, h, "/v1/responses", retryResponsesBody); a.status != http.StatusOK {
					t.Fatalf("got %d (Retry-After %q) %s; want the retry's 200", a.status, a.retryAfter, a.body)
				}
				if n := h.ups["A"].RequestCount(); n != 2 {
					t.Fatalf("the upstream was called %d times, want twice (the 429, then its retry)", n)
				}
				if tg, _ := h.target("A", "m"); tg.CoolingFor != "" {
					t.Fatalf("A/m cools down for %s after a 429 that said retry now", tg.CoolingFor)
				}
			})
		}
	}
}

// TestRetryNowHintInAStreamErrorFrameNoCooldown: a WebSocket upstream's
// 429 error frame after its response.created (a failure before content)
// whose headers say "retry now" leaves the target usable: it is not
// cooled down for the default backoff, so the next request is served.
func TestRetryNowHintInAStreamErrorFrameNoCooldown(t *testing.T) {
	for _, hint := range []string{`{"retry-after":"0"}`, `{"retry-after-ms":"0"}`} {
		t.Run(hint, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
			created := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "x", 1)[0]
			h.ups["A"].Enqueue(upstreamtest.Script{Frames: []upstreamtest.Frame{created, {WS: []byte(
				`{"type":"error","status":429,"error":{"type":"requests","code":"rate_limit_exceeded","message":"Rate limit reached.","param":null},"headers":` + hint + `}`)}}})
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			if last := assertOneTerminal(t, evs); last.typ == "response.completed" {
				t.Fatalf("the 429 frame's request completed: %s", last.data)
			}
			if tg, _ := h.target("A", "m"); tg.CoolingFor != "" {
				t.Fatalf("A/m cools down for %s after a 429 that said retry now", tg.CoolingFor)
			}
			if a := postForRetry(t, h, "/v1/responses", retryResponsesBody); a.status != http.StatusOK {
				t.Fatalf("the next request: got %d %s; want the upstream's 200", a.status, a.body)
			}
		})
	}
}

// TestRetryNowHintOnContinuationTargetNoCooldown: a continuation target
// whose 429 says "retry now" is charged the failure but cooled down for
// none of the default backoff, from a Responses and a Chat upstream alike:
// a single-target route's next request may go straight to it.
func TestRetryNowHintOnContinuationTargetNoCooldown(t *testing.T) {
	for _, proto := range []string{"responses", "chat"} {
		for name, hint := range retryNowHints() {
			t.Run(proto+"/"+name, func(t *testing.T) {
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": proto, "B": proto}})
				h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
				h.ups["B"].Enqueue(status429Saying(hint))
				h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
				if n := h.ups["B"].RequestCount(); n == 0 {
					t.Fatal("the continuation target B was never asked")
				}
				tg, _ := h.target("B", "m")
				if !strings.Contains(tg.LastFailure, "429") {
					t.Fatalf("B/m's last failure %q; want its 429", tg.LastFailure)
				}
				if tg.CoolingFor != "" {
					t.Fatalf("B/m cools down for %s after a 429 that said retry now", tg.CoolingFor)
				}
			})
		}
	}
}
