package gateway_test

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// threeTargetHarness is P, B then C behind the route "m" with the given
// stall bound.
func threeTargetHarness(t *testing.T, stall time.Duration, hc harnessConfig) *harness {
	t.Helper()
	hc.upstreams = []upstreamtest.Options{{Name: "P"}, {Name: "B"}, {Name: "C"}}
	hc.opts.Routes = []gateway.Route{{Models: []string{"m"},
		Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}, {Upstream: "C"}}, Stall: stall}}
	return newHarness(t, hc)
}

// foreignCompleted is a response.completed of another response
// (resp_OTHER), with its own output and usage.
func foreignCompleted() []byte {
	evs := upstreamtest.ResponsesEvents("resp_OTHER", "m", "Foreign answer.", 1)
	return evs[len(evs)-1]
}

// TestTerminalEventOfAnotherResponseIsACut: an upstream whose stream ends
// with a terminal event naming another response than the one it opened
// has not ended this one (docs/ARCHITECTURE.md §3, as an upstream
// WebSocket's foreign frame): after content the stream is continued on the
// next target, and the client gets the whole answer, completed, with a
// terminal output that holds what it was streamed; before the client saw
// anything the request is replayed. The event is counted as skipped.
func TestTerminalEventOfAnotherResponseIsACut(t *testing.T) {
	for _, s := range rescueSurfaces {
		if s.chat {
			continue // a Chat upstream's chunks name no response
		}
		for _, other := range []string{"completed", "incomplete", "failed"} {
			t.Run(s.name+"/after_content/"+other, func(t *testing.T) {
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
				evs := upstreamtest.ResponsesEvents("resp_first", "m", fullAnswer, 9)
				term := bytes.ReplaceAll(foreignCompleted(), []byte(`"response.completed"`), []byte(`"response.`+other+`"`))
				// created, in_progress, item added, part added, three deltas.
				h.ups["P"].Enqueue(scriptOf(append(evs[:7:7], term)))
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
				o := s.do(t, h)
				if o.text != fullAnswer || o.terminal != "response.completed" {
					t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
				}
				for _, raw := range o.raw {
					if strings.Contains(raw, "Foreign answer") || strings.Contains(raw, "resp_OTHER") {
						t.Fatalf("the other response reached the client: %s", raw)
					}
				}
				if b := h.ups["B"].RequestCount(); b != 1 {
					t.Fatalf("B called %d times, want once (the continuation)", b)
				}
				h.waitMetric(`sluice_stream_skipped_events_total{reason="foreign_terminal"`)
			})
		}
	}
	t.Run("before_content", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
		evs := upstreamtest.ResponsesEvents("resp_first", "m", fullAnswer, 9)
		h.ups["P"].Enqueue(scriptOf(append(evs[:2:2], foreignCompleted())))
		h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9))
		o := rescueSurfaces[0].do(t, h)
		if o.text != fullAnswer || o.terminal != "response.completed" {
			t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
		}
		if role, _ := lastMessage(h.ups["B"].Requests()[0]); role == "assistant" {
			t.Fatalf("B got a continuation, want the request replayed")
		}
	})
}

// TestContinuationTargetRateLimitCoolsForItsWait: a continuation target
// that answers 429 with Retry-After cools down for that wait, as a first
// attempt's 429 does (README failure table), not the default backoff.
func TestContinuationTargetRateLimitCoolsForItsWait(t *testing.T) {
	h := threeTargetHarness(t, 300*time.Millisecond, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	hdr := http.Header{}
	hdr.Set("Retry-After", "30")
	h.ups["B"].Enqueue(upstreamtest.Script{Status: http.StatusTooManyRequests, Header: hdr,
		Body: upstreamtest.ErrorBody("B says 429", "requests", "rate_limit_exceeded", "")})
	h.ups["C"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	o := rescueSurfaces[0].do(t, h)
	if o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
	}
	tg, ok := h.target("B", "m")
	if !ok {
		t.Fatal("no target B/m in /admin/upstreams")
	}
	cooling, err := time.ParseDuration(tg.CoolingFor)
	if err != nil || cooling <= 20*time.Second || cooling > 30*time.Second {
		t.Fatalf("B cools down for %q (%+v), want the 30s its Retry-After asked for", tg.CoolingFor, tg)
	}
}

// TestContinuationTargetSilentAfterHeadersIsAStall: a continuation target
// that sends its headers and then no event is left after the route's
// stall (the client has seen content: README "Continuation"), not after
// timeouts.idle, and the stream is continued on the next target.
func TestContinuationTargetSilentAfterHeadersIsAStall(t *testing.T) {
	// An idle timeout longer than the stall but short enough that, if the
	// stall did not bound the wait, the test still ends: B's failure then
	// reads idle_timeout.
	h := threeTargetHarness(t, 300*time.Millisecond, harnessConfig{opts: gateway.Options{IdleTimeout: 3 * time.Second}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.HangAfter(0))
	h.ups["C"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	o := rescueSurfaces[0].do(t, h)
	if o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
	}
	tg, ok := h.target("B", "m")
	if !ok {
		t.Fatal("no target B/m in /admin/upstreams")
	}
	if !strings.Contains(tg.LastFailure, "stall_timeout") {
		t.Fatalf("B's failure %q, want a stall_timeout (the route's stall, not timeouts.idle)", tg.LastFailure)
	}
}

// TestRelayedRateLimitTellsAStreamTheWait: a Responses SSE stream that ends
// on an upstream's 429 gets the upstream's wait in its response.failed
// message (it reads no Retry-After header), as the JSON client gets it as
// Retry-After.
func TestRelayedRateLimitTellsAStreamTheWait(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	hdr := http.Header{}
	hdr.Set("Retry-After", "30")
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusTooManyRequests, Header: hdr,
		Body: upstreamtest.ErrorBody("A says 429", "requests", "rate_limit_exceeded", "")})
	resp, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 {
		t.Fatalf("status %d, %d events", resp.StatusCode, len(evs))
	}
	last := gjson.ParseBytes(evs[len(evs)-1].Data)
	msg := last.Get("response.error.message").Str
	if last.Get("type").Str != "response.failed" || last.Get("response.error.code").Str != "rate_limit_exceeded" {
		t.Fatalf("last event %s", evs[len(evs)-1].Data)
	}
	if !strings.HasPrefix(msg, "A says 429") || !regexp.MustCompile(`; please try again in 30s$`).MatchString(msg) {
		t.Fatalf("message %q, want the upstream's with the wait it asked for", msg)
	}
}
