package gateway_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// hintless429 is an upstream's 429 that asks for no wait: no header, and
// no "try again in" in its message.
func hintless429() upstreamtest.Script {
	return upstreamtest.Script{Status: http.StatusTooManyRequests,
		Body: upstreamtest.ErrorBody("Rate limit reached.", "requests", "rate_limit_exceeded", "")}
}

// waitInStreamMessage is the wait, in seconds, that a stream's last event
// says in its message ("please try again in 4.2s"); ok is false without one.
func waitInStreamMessage(data []byte) (secs float64, ok bool) {
	m := regexp.MustCompile(`try again in (\d+(?:\.\d{1,3})?)s`).FindSubmatch(data)
	if len(m) != 2 {
		return 0, false
	}
	secs, err := strconv.ParseFloat(string(m[1]), 64)
	return secs, err == nil
}

// The request whose 429, asking for no wait, leaves every target cooling
// down for the default backoff is told that cooldown (README "Failover and
// replay"), as the request after it is, on every client surface.
func TestHintless429TellsTheCooldownItStarted(t *testing.T) {
	surfaces := map[string]func(t *testing.T, h *harness){
		"JSON": func(t *testing.T, h *harness) {
			a := postForRetry(t, h, "/v1/responses", retryResponsesBody)
			if a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" {
				t.Fatalf("got %d %s, want 429 rate_limit_exceeded", a.status, a.body)
			}
			checkRetryAfter(t, "the 429 that started the cooldowns", a, 1, 6) // the default 5s, ±20%
		},
		"SSE": func(t *testing.T, h *harness) {
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			last := assertOneTerminal(t, evs)
			if last.typ != "response.failed" || last.code != "rate_limit_exceeded" {
				t.Fatalf("last event %s %s, want response.failed rate_limit_exceeded", last.typ, last.data)
			}
			if secs, ok := waitInStreamMessage(last.data); !ok || secs <= 0 || secs > 6 {
				t.Fatalf("response.failed %s: want the cooldown's wait (0, 6]s in its message", last.data)
			}
		},
		"WebSocket": func(t *testing.T, h *harness) {
			evs := h.dialWS(nil).turn(createFrame(""))
			var got struct {
				Status  int
				Error   struct{ Code string }
				Headers map[string]string
			}
			if len(evs) != 1 || json.Unmarshal(evs[0].data, &got) != nil {
				t.Fatalf("%d frames, first %s", len(evs), evs[0].data)
			}
			if got.Status != http.StatusTooManyRequests || got.Error.Code != "rate_limit_exceeded" {
				t.Fatalf("error frame %s, want 429 rate_limit_exceeded", evs[0].data)
			}
			if secs, err := strconv.Atoi(got.Headers["retry-after"]); err != nil || secs < 1 || secs > 6 || got.Headers["retry-after-ms"] == "" {
				t.Fatalf("error frame %s, want the cooldown's wait in its headers", evs[0].data)
			}
		},
	}
	for name, ask := range surfaces {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
			h.ups["A"].SetDefault(hintless429())
			h.ups["B"].SetDefault(hintless429())
			ask(t, h)
			if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 1 {
				t.Fatalf("upstream requests A %d, B %d: want each target tried once", a, b)
			}
		})
	}
}

// A request some of whose targets failed while the others were skipped
// for a cooldown names the skipped ones and why, and carries their wait
// (README: the answer names each upstream and why, with the shortest
// remaining cooldown), streamed or not.
func TestPartlyFailedPartlySkippedNamesTheSkippedAndTheirWait(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			clock := &fakeClock{t: time.Now()}
			h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}, pool: upstream.Options{Now: clock.Now}})
			h.ups["A"].SetDefault(hintless429())
			h.ups["B"].SetDefault(upstreamtest.Status429(60 * time.Second))
			if a := postForRetry(t, h, "/v1/responses", retryResponsesBody); a.status != http.StatusTooManyRequests {
				t.Fatalf("both 429: got %d %s", a.status, a.body)
			}
			clock.Advance(10 * time.Second) // A's default cooldown is over; B cools down for 50s more
			h.ups["A"].SetDefault(upstreamtest.Status5xx(http.StatusInternalServerError))
			b := h.ups["B"].RequestCount()

			var msg string
			if stream {
				_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
				last := assertOneTerminal(t, evs)
				if last.typ != "response.failed" || last.code != "upstream_unavailable" {
					t.Fatalf("last event %s %s, want response.failed upstream_unavailable", last.typ, last.data)
				}
				var ev struct {
					Response struct{ Error struct{ Message string } }
				}
				if err := json.Unmarshal(last.data, &ev); err != nil {
					t.Fatalf("response.failed %s: %v", last.data, err)
				}
				msg = ev.Response.Error.Message
			} else {
				a := postForRetry(t, h, "/v1/responses", retryResponsesBody)
				if a.status != http.StatusBadGateway || a.code != "upstream_unavailable" {
					t.Fatalf("A's 500 with B cooling down: got %d %s, want 502 upstream_unavailable", a.status, a.body)
				}
				checkRetryAfter(t, "A's 500 with B cooling down", a, 49, 50)
				var body struct{ Error struct{ Message string } }
				if err := json.Unmarshal([]byte(a.body), &body); err != nil {
					t.Fatalf("body %s: %v", a.body, err)
				}
				msg = body.Error.Message
			}
			if !strings.Contains(msg, "A/m: HTTP 500") || !strings.Contains(msg, "not tried: B: cooling down for 50s") {
				t.Fatalf("message %q: want A's failure and B skipped with its cooldown", msg)
			}
			if secs, ok := waitInStreamMessage([]byte(msg)); !ok || secs <= 49 || secs > 50 {
				t.Fatalf("message %q: want B's 50s wait", msg)
			}
			if got := h.ups["B"].RequestCount(); got != b {
				t.Fatalf("the cooling upstream B was called during its cooldown")
			}
		})
	}
}

// The request whose own failure takes its targets out (a refused
// connection cools a target down) is told when the first is back, as the
// request after it is: a follow-up pinned to its owner (503) and a request
// whose every target refused (502) alike.
func TestOwnFailureTellsTheCooldownItStarted(t *testing.T) {
	t.Run("every target refused", func(t *testing.T) {
		h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
		h.ups["A"].Close()
		h.ups["B"].Close()
		a := postForRetry(t, h, "/v1/responses", retryResponsesBody)
		if a.status != http.StatusBadGateway || a.code != "upstream_unavailable" {
			t.Fatalf("got %d %s, want 502 upstream_unavailable", a.status, a.body)
		}
		checkRetryAfter(t, "the request whose refused connections started the cooldowns", a, 1, 6) // the default 5s, ±20%
		if secs, ok := waitInStreamMessage([]byte(a.body)); !ok || secs <= 0 || secs > 6 {
			t.Fatalf("body %s: want the cooldown's wait in the message", a.body)
		}
	})
	t.Run("pinned owner refused", func(t *testing.T) {
		h := continuityHarness(t, openStore(t, t.TempDir()), gateway.Options{})
		_, id := h.turn("", nil)
		h.ups[owner(id)].Close()
		a := postForRetry(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"more","previous_response_id":"`+id+`"}`)
		if a.status != http.StatusServiceUnavailable || a.code != "upstream_unavailable" {
			t.Fatalf("got %d %s, want 503 upstream_unavailable", a.status, a.body)
		}
		checkRetryAfter(t, "the follow-up whose owner refused", a, 1, 6) // the default 5s, ±20%
	})
}
