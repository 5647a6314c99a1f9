package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// rateLimitAfterContent is a 429 that arrives after content and says its
// 40s wait in one of the ways an upstream says it, over the transport that
// carries it.
type rateLimitAfterContent struct {
	name      string
	transport string
	tail      upstreamtest.Frame
}

func rateLimitsAfterContent() []rateLimitAfterContent {
	frame := func(headers string) upstreamtest.Frame {
		return upstreamtest.Frame{WS: []byte(`{"type":"error","status":429,"error":{"type":"requests","code":"rate_limit_exceeded",` +
			`"message":"slow down","param":null},"headers":` + headers + `}`)}
	}
	return []rateLimitAfterContent{
		{"WebSocket error frame with retry-after", "websocket", frame(`{"retry-after":"40"}`)},
		{"WebSocket error frame with retry-after-ms", "websocket", frame(`{"retry-after-ms":"40000"}`)},
		{"HTTP error event saying try again in 40s", "http", upstreamtest.SSEEvent([]byte(
			`{"type":"error","code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 40s.","param":null}`))},
	}
}

// script is P's answer: three of fullAnswer's nine deltas, then the 429.
func (c rateLimitAfterContent) script() upstreamtest.Script {
	s := upstreamtest.Answer(fullAnswer, 9)
	s.StopAfterDeltas, s.End, s.Tail = 3, upstreamtest.EndNormal, []upstreamtest.Frame{c.tail}
	return s
}

// checkCoolsFor40s fails unless P's target m cools down for the 429's
// 40s (less the time the test took), never the hintless default (5s ±20%).
func checkCoolsFor40s(t *testing.T, h *harness) {
	t.Helper()
	tg, ok := h.target("P", "m")
	if !ok {
		t.Fatal("no target P/m in /admin/upstreams")
	}
	d, err := time.ParseDuration(tg.CoolingFor)
	if err != nil || d < 30*time.Second || d > 40*time.Second {
		t.Fatalf("P/m cools down for %q (last failure %q), want the 429's 40s", tg.CoolingFor, tg.LastFailure)
	}
}

// A 429 after content that a stream is continued past cools the target
// that failed down for the wait it asked for, as the same 429 before
// content does (README "Continuation": capacity codes, their cooldown,
// honouring Retry-After/retry-after-ms or "try again in Ns"; "Upstream
// WebSockets": an error frame's headers wait honoured alike).
func TestRateLimitAfterContentContinuedCoolsForItsWait(t *testing.T) {
	for _, c := range rateLimitsAfterContent() {
		t.Run(c.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{transport: map[string]string{"P": c.transport}})
			h.ups["P"].Enqueue(c.script())
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 4))
			o := rescueSurfaces[0].do(t, h)
			if o.text != fullAnswer || o.terminal != "response.completed" {
				t.Fatalf("client got %q ending %s", o.text, o.terminal)
			}
			checkCoolsFor40s(t, h)
		})
	}
}

// A 429 after content on a single-target route is not continued: the
// client's response.failed says the wait (it reads no Retry-After header;
// README "Failover and replay"), and the target is charged all the same,
// so the next request is told to wait rather than sent straight back.
func TestRateLimitAfterContentNotContinuedChargesTheTarget(t *testing.T) {
	for _, c := range rateLimitsAfterContent() {
		t.Run(c.name, func(t *testing.T) {
			hc := harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}}, transport: map[string]string{"P": c.transport}}
			hc.opts.Routes = []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}}}}
			h := newHarness(t, hc)
			h.ups["P"].Enqueue(c.script())
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			last := assertOneTerminal(t, evs)
			msg := gjson.GetBytes(last.data, "response.error.message").Str
			if last.typ != "response.failed" || last.code != "rate_limit_exceeded" {
				t.Fatalf("terminal %s %s: %s", last.typ, last.code, last.data)
			}
			if strings.Count(strings.ToLower(msg), "try again in 40s") != 1 {
				t.Fatalf("response.failed message %q, want the 429's wait in it once", msg)
			}
			checkCoolsFor40s(t, h)
			a := postForRetry(t, h, "/v1/responses", `{"model":"m","input":"hi"}`)
			if a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" {
				t.Fatalf("during the cooldown: got %d %s, want 429 rate_limit_exceeded", a.status, a.body)
			}
			checkRetryAfter(t, "during the cooldown", a, 30, 40)
			if n := h.ups["P"].RequestCount(); n != 1 {
				t.Fatalf("the cooling upstream was called %d times, want once", n)
			}
		})
	}
}

// An upstream that closes its stream before the client saw anything is
// named for what it did: after its response.created (held back, never
// shown) it closed before its first content event, not "before
// response.created"; without any event, before its first event. The
// answer of a request with no target left says so.
func TestUpstreamClosedBeforeContentSaysWhen(t *testing.T) {
	created := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "x", 1)[0]
	for _, transport := range []string{"http", "websocket"} {
		for _, c := range []struct {
			name   string
			frames []upstreamtest.Frame
			want   string
		}{
			{"after response.created", []upstreamtest.Frame{created}, "closed the stream before its first content event"},
			{"without an event", []upstreamtest.Frame{}, "closed the stream before its first event"},
		} {
			t.Run(transport+" "+c.name, func(t *testing.T) {
				h := newHarness(t, harnessConfig{transport: map[string]string{"A": transport}})
				// Twice: the replay policy's one replay, on the same (only) target.
				for range 2 {
					h.ups["A"].Enqueue(upstreamtest.Script{Frames: c.frames, End: upstreamtest.EndCut})
				}
				_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
				last := assertOneTerminal(t, evs)
				msg := gjson.GetBytes(last.data, "response.error.message").Str
				if last.typ != "response.failed" || !strings.Contains(msg, c.want) || strings.Contains(msg, "before response.created") {
					t.Fatalf("terminal %s: message %q, want it to say the upstream %s", last.typ, msg, c.want)
				}
			})
		}
	}
}
