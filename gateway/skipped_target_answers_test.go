package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A streaming follow-up whose owner's target is behind an open circuit is
// skipped without calling any upstream: nothing was sent, so the client
// gets the 503 with Retry-After and the JSON error, as the same follow-up
// without stream does (README "Continuity": an owner that is out is a 503
// with its open circuit as Retry-After; "Failover and replay": with no
// target tried a Responses SSE stream too gets the HTTP status), and the
// message says the owner was skipped, not that it failed.
func TestFollowUpWhoseOwnerIsSkippedAnswersStatusOnStreams(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := "JSON"
		if stream {
			name = "SSE"
		}
		t.Run(name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Store: openStore(t, t.TempDir())}})
			first := postForRetry(t, h, "/v1/responses", `{"model":"m","input":"hi"}`)
			id := gjson.Get(first.body, "id").Str
			if first.status != http.StatusOK || id == "" {
				t.Fatalf("first turn: %d %s", first.status, first.body)
			}
			// Cuts before content, each replayed on B, until P's circuit
			// opens (3 in a row; the first turn's success may be settled
			// after the first cut, which starts the count again).
			for i := 0; ; i++ {
				if tg, _ := h.target("P", "m"); tg.Circuit == "open" {
					break
				}
				if i == 6 {
					t.Fatal("P's circuit did not open after 6 cuts before content")
				}
				h.ups["P"].Enqueue(upstreamtest.CutAfter(0))
				if text := streamedText(t, h, "m"); text == "" {
					t.Fatalf("side request %d: no answer from B", i)
				}
			}
			p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount()
			a := postForRetry(t, h, "/v1/responses",
				`{"model":"m","input":"again","stream":`+map[bool]string{true: "true", false: "false"}[stream]+`,"previous_response_id":"`+id+`"}`)
			if a.status != http.StatusServiceUnavailable || a.code != "upstream_unavailable" || !strings.HasPrefix(a.contentType, "application/json") {
				t.Fatalf("follow-up with the owner's circuit open: %d %s %s, want a 503 upstream_unavailable JSON error", a.status, a.contentType, a.body)
			}
			checkRetryAfter(t, "follow-up with the owner's circuit open", a, 1, 30)
			msg := gjson.Get(a.body, "error.message").Str
			if !strings.Contains(msg, "skipped") || strings.Contains(msg, "failed (") || !strings.Contains(msg, "circuit open") {
				t.Fatalf("message %q: want it to say the owner was skipped for its open circuit", msg)
			}
			if gp, gb := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); gp != p || gb != b {
				t.Fatalf("upstreams called for the follow-up: P %d→%d, B %d→%d; want none", p, gp, b, gb)
			}
		})
	}
}

// A request whose first target fails before content in a way the replay
// policy replays elsewhere (a cut, a body cut short) while the next target
// cools down is answered as a 5xx in the same place is (README "A down
// upstream…"): the 502 names the failure, then after "not tried:" the
// skipped target and why, with its wait as Retry-After and in the message.
func TestReplayOntoSkippedTargetNamesItAndItsWait(t *testing.T) {
	type answer struct {
		status     int
		msg        string
		retryAfter retryAnswer // status and Retry-After headers (a status answer only)
	}
	surfaces := []struct {
		name string
		cut  upstreamtest.Script
		ask  func(t *testing.T, h *harness) answer
	}{
		{"Responses JSON", upstreamtest.Script{BodyPrefix: 40, End: upstreamtest.EndCut}, func(t *testing.T, h *harness) answer {
			a := postForRetry(t, h, "/v1/responses", `{"model":"m","input":"again"}`)
			return answer{a.status, gjson.Get(a.body, "error.message").Str, a}
		}},
		{"Chat JSON", upstreamtest.Script{BodyPrefix: 40, End: upstreamtest.EndCut}, func(t *testing.T, h *harness) answer {
			a := postForRetry(t, h, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"again"}]}`)
			return answer{a.status, gjson.Get(a.body, "error.message").Str, a}
		}},
		{"Chat SSE", upstreamtest.CutAfter(0), func(t *testing.T, h *harness) answer {
			a := postForRetry(t, h, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"again"}]}`)
			return answer{a.status, gjson.Get(a.body, "error.message").Str, a}
		}},
		{"Responses SSE", upstreamtest.CutAfter(0), func(t *testing.T, h *harness) answer {
			// A target was tried: the stream ends with response.failed
			// (README "Failover and replay"), whose message says the wait.
			_, evs := h.responsesStream(`{"model":"m","input":"again","stream":true}`)
			last := assertOneTerminal(t, evs)
			if last.typ != "response.failed" || last.code != "upstream_unavailable" {
				t.Fatalf("last event %s %s, want response.failed upstream_unavailable", last.typ, last.data)
			}
			return answer{http.StatusBadGateway, gjson.GetBytes(last.data, "response.error.message").Str, retryAnswer{}}
		}},
	}
	for _, s := range surfaces {
		t.Run(s.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Now()}
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{pool: upstream.Options{Now: clock.Now}})
			h.ups["P"].SetDefault(hintless429())
			h.ups["B"].SetDefault(upstreamtest.Status429(60 * time.Second))
			if a := postForRetry(t, h, "/v1/responses", `{"model":"m","input":"hi"}`); a.status != http.StatusTooManyRequests {
				t.Fatalf("both 429: got %d %s", a.status, a.body)
			}
			clock.Advance(10 * time.Second) // P's default cooldown is over; B cools down for 50s more
			h.ups["P"].SetDefault(s.cut)
			b := h.ups["B"].RequestCount()
			got := s.ask(t, h)
			if got.status != http.StatusBadGateway {
				t.Fatalf("P cut with B cooling down: status %d (%s), want 502", got.status, got.msg)
			}
			if got.retryAfter.status != 0 {
				checkRetryAfter(t, "P cut with B cooling down", got.retryAfter, 49, 50)
			}
			if !strings.Contains(got.msg, "P/m: ") || !strings.Contains(got.msg, "not tried: B/m: cooling down for 50s") {
				t.Fatalf("message %q: want P's failure and B skipped with its cooldown", got.msg)
			}
			if secs, ok := waitInStreamMessage([]byte(got.msg)); !ok || secs <= 49 || secs > 50 {
				t.Fatalf("message %q: want B's 50s wait", got.msg)
			}
			if n := h.ups["B"].RequestCount(); n != b {
				t.Fatal("the cooling upstream B was called during its cooldown")
			}
		})
	}
}

// A rate limit after content that asks for no wait, on a single-target
// route (not continued), ends the stream with the wait the failure started
// (the default cooldown) in its message: the client of a stream reads no
// Retry-After header (README "Failover and replay").
func TestHintlessRateLimitAfterContentSaysTheCooldownItStarted(t *testing.T) {
	for _, s := range []struct {
		name, path, body string
		message          func(last []byte) string
	}{
		{"Responses", "/v1/responses", `{"model":"m","input":"hi","stream":true}`,
			func(last []byte) string { return gjson.GetBytes(last, "response.error.message").Str }},
		{"Chat", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			func(last []byte) string { return gjson.GetBytes(last, "error.message").Str }},
	} {
		for _, protocol := range []string{"responses", "chat"} {
			t.Run(s.name+" client, "+protocol+" upstream", func(t *testing.T) {
				hc := harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}}, protocol: map[string]string{"P": protocol}}
				hc.opts.Routes = []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}}}}
				h := newHarness(t, hc)
				h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(3, "rate_limit_exceeded"))
				_, evs := h.streamEvents(s.path, s.body)
				var last []byte
				for _, ev := range evs {
					if string(ev.Data) != "[DONE]" {
						last = ev.Data
					}
				}
				msg := s.message(last)
				if !strings.Contains(string(last), "rate_limit_exceeded") || msg == "" {
					t.Fatalf("last event %s: want the rate limit", last)
				}
				if secs, ok := waitInStreamMessage([]byte(msg)); !ok || secs <= 0 || secs > 6 {
					t.Fatalf("message %q: want the cooldown's wait (0, 6]s in it (the default 5s, ±20%%)", msg)
				}
				if tg, _ := h.target("P", "m"); tg.CoolingFor == "" {
					t.Fatalf("P/m is not cooling down after its rate limit (%+v)", tg)
				}
			})
		}
	}
}

// The same rate limit, continued on a target that then fails before adding
// anything, ends the stream with that failure and the wait the client
// faces in its message: the soonest either target is back.
func TestHintlessRateLimitAfterContentGivenUpSaysTheWait(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(3, "rate_limit_exceeded"))
	h.ups["B"].SetDefault(hintless429())
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	msg := gjson.GetBytes(last.data, "response.error.message").Str
	if last.typ != "response.failed" || last.code != "rate_limit_exceeded" {
		t.Fatalf("terminal %s %s", last.typ, last.data)
	}
	if secs, ok := waitInStreamMessage([]byte(msg)); !ok || secs <= 0 || secs > 6 {
		t.Fatalf("message %q: want the cooldown's wait (0, 6]s in it", msg)
	}
}
