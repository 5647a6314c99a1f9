package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Failures of an upstream that answered 200 with an event stream and then
// failed before the client saw anything (README "Failover and replay"): a
// silent stream, a garbled one, an error whose code is an HTTP status. Each
// runs on every client surface (routeSurfaces), from a Responses and from a
// Chat upstream, behind the route "m" → [P, B] without route timeouts.

// pbHarness is P then B, both of protocol proto, behind the route "m", with
// a short idle timeout and the replay policy p (nil: the built-in one).
func pbHarness(t *testing.T, proto string, p gateway.Policy) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		protocol:  map[string]string{"P": proto, "B": proto},
		opts: gateway.Options{Policy: p, IdleTimeout: 300 * time.Millisecond,
			Routes: []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}}}}},
	})
}

// askedOnce returns the one replay input the policy was asked about P.
func askedOnce(t *testing.T, p *overridePolicy) hostabi.ReplayInput {
	t.Helper()
	var got []hostabi.ReplayInput
	for _, in := range p.asked() {
		if in.Upstream == "P" {
			got = append(got, in)
		}
	}
	if len(got) != 1 {
		t.Fatalf("the replay policy was asked %d times about P: %+v", len(got), got)
	}
	return got[0]
}

// servedByB checks that B answered the client in full and each upstream was
// called once.
func servedByB(t *testing.T, h *harness, o routeOutcome) {
	t.Helper()
	if o.status != 0 || o.text != "Hello from B" {
		t.Fatalf("client saw %+v; want B's answer", o)
	}
	if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 1 || b != 1 {
		t.Fatalf("P called %d times, B %d; want 1, 1", p, b)
	}
}

var upstreamProtocols = []string{"responses", "chat"}

// TestSilentStreamMovesOn: an upstream that sends its stream's headers and
// then no event at all is a silent upstream: at timeouts.idle the request
// moves on to the next target, invisibly, as when the headers never come;
// the silent target is charged as a timeout, and the replay policy is asked
// (before content, as a first_token failure with the code idle_timeout).
func TestSilentStreamMovesOn(t *testing.T) {
	for _, proto := range upstreamProtocols {
		for _, s := range routeSurfaces {
			t.Run(proto+"/"+s.name, func(t *testing.T) {
				pol := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false }}
				h := pbHarness(t, proto, pol)
				h.ups["P"].Enqueue(upstreamtest.HangAfter(0))
				servedByB(t, h, s.do(t, h, "m"))
				if in := askedOnce(t, pol); in.Phase != hostabi.PhaseBeforeContent || in.FailureClass != hostabi.FailureFirstToken || in.Code != "idle_timeout" {
					t.Fatalf("replay policy asked %+v", in)
				}
				if m := h.metrics(); !strings.Contains(m, `sluice_target_failures_total{class="timeout",model="m",upstream="P"} 1`) {
					t.Fatalf("the silent target was not charged as a timeout:\n%s", grep(m, "sluice_target_failures"))
				}
			})
		}
	}
	t.Run("no target left", func(t *testing.T) {
		h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: 300 * time.Millisecond}})
		h.ups["A"].Enqueue(upstreamtest.HangAfter(0))
		_, evs := h.responsesStream(respBody)
		last := assertOneTerminal(t, evs)
		assertOpensItsFailure(t, evs)
		if last.code != "upstream_unavailable" || !strings.Contains(string(last.data), "idle timeout: nothing within 300ms") {
			t.Fatalf("terminal %s", last.data)
		}
	})
}

// garbledFrame is an event that is not JSON.
var garbledFrame = upstreamtest.Frame{Raw: []byte("data: not json{{\n\n"), WS: []byte("not json{{")}

// TestGarbledStreamBeforeContentMovesOn: three unparseable events in a row
// before the client saw anything (after the held-back response.created and
// in_progress) fail the attempt like a transport fault: the request is
// replayed on the next target, through the replay policy (class cut); a
// policy that declines gives the client the failure as it came.
func TestGarbledStreamBeforeContentMovesOn(t *testing.T) {
	lifecycle := upstreamtest.CutAfter(2).Frames // response.created, response.in_progress
	garbled := upstreamtest.Script{
		Frames:     append(lifecycle, garbledFrame, garbledFrame, garbledFrame),
		ChatFrames: []upstreamtest.Frame{garbledFrame, garbledFrame, garbledFrame},
	}
	for _, proto := range upstreamProtocols {
		for _, s := range routeSurfaces {
			t.Run(proto+"/"+s.name, func(t *testing.T) {
				pol := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false }}
				h := pbHarness(t, proto, pol)
				h.ups["P"].Enqueue(garbled)
				servedByB(t, h, s.do(t, h, "m"))
				if in := askedOnce(t, pol); in.Phase != hostabi.PhaseBeforeContent || in.FailureClass != hostabi.FailureCut || in.Code != "transport" {
					t.Fatalf("replay policy asked %+v", in)
				}
			})
		}
	}
	t.Run("declined by the policy", func(t *testing.T) {
		pol := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return hostabi.ReplayNo, true }}
		h := pbHarness(t, "responses", pol)
		h.ups["P"].Enqueue(garbled)
		_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
		last := assertOneTerminal(t, evs)
		assertOpensItsFailure(t, evs)
		if last.code != "stream_incomplete" || !strings.Contains(string(last.data), "unparseable") || h.ups["B"].RequestCount() != 0 {
			t.Fatalf("terminal %s (B called %d times)", last.data, h.ups["B"].RequestCount())
		}
	})
}

// TestGarbledStreamAfterContentIsContinued: three unparseable events after
// content break the stream as a cut does: it is continued on the route's
// next target (README "Continuation"), on every client surface.
func TestGarbledStreamAfterContentIsContinued(t *testing.T) {
	p := upstreamtest.Answer(fullAnswer, 9)
	p.StopAfterDeltas = 3
	p.Tail = []upstreamtest.Frame{garbledFrame, garbledFrame, garbledFrame}
	p.ChatTail = p.Tail
	for _, s := range rescueSurfaces {
		t.Run(s.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			h.ups["P"].Enqueue(p)
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
			o := s.do(t, h)
			if o.text != fullAnswer || (o.terminal != "response.completed" && o.terminal != "done") {
				t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
			}
			if role, text := lastMessage(h.ups["B"].Requests()[0]); role != "assistant" || text != sentPart {
				t.Fatalf("B's request ends with %s %q; want the text sent as an assistant message", role, text)
			}
			h.waitMetric(`sluice_rescues_total{kind="prefill",outcome="completed"`)
		})
	}
}

// TestErrorStatusCodeIsJudgedAlike: an upstream error whose code is an HTTP
// status (a string or a number, in an error event or an `error:` field, as
// llama.cpp sends), or whose type is server_error, is judged by that status
// from a Responses upstream as from a Chat upstream: a 5xx is a server
// error, replayed before content on the next target; a 4xx code stays a
// client error, not replayed.
func TestErrorStatusCodeIsJudgedAlike(t *testing.T) {
	errorEvent := func(event, chunk string) upstreamtest.Script {
		return upstreamtest.Script{
			Frames:     []upstreamtest.Frame{upstreamtest.SSEEvent([]byte(event))},
			ChatFrames: []upstreamtest.Frame{upstreamtest.SSEData([]byte(chunk)), upstreamtest.SSEData([]byte("[DONE]"))},
		}
	}
	rows := []struct {
		name   string
		p      upstreamtest.Script
		status int // the status the replay policy is told
	}{
		{"error field with the number 500", upstreamtest.ErrorField([]byte(`{"message":"llama boom","type":"server_error","code":500}`), 0), 500},
		{"error event with the code \"500\"", errorEvent(`{"type":"error","code":"500","message":"boom"}`,
			`{"error":{"code":"500","message":"boom"}}`), 500},
		{"server_error type with another code", errorEvent(`{"type":"error","error":{"type":"server_error","code":"model_crashed","message":"boom"}}`,
			`{"error":{"type":"server_error","code":"model_crashed","message":"boom"}}`), 502},
	}
	for _, proto := range upstreamProtocols {
		for _, s := range routeSurfaces {
			for _, row := range rows {
				t.Run(proto+"/"+s.name+"/"+row.name, func(t *testing.T) {
					pol := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false }}
					h := pbHarness(t, proto, pol)
					h.ups["P"].Enqueue(row.p)
					servedByB(t, h, s.do(t, h, "m"))
					if in := askedOnce(t, pol); in.Phase != hostabi.PhaseBeforeContent || in.FailureClass != hostabi.FailureServerError || in.HTTPStatus != row.status {
						t.Fatalf("replay policy asked %+v; want a server_error of status %d", in, row.status)
					}
				})
			}
		}
		for _, ep := range []string{"/v1/responses", "/v1/chat/completions"} {
			t.Run(proto+"/"+ep+"/a 4xx code stays a client error", func(t *testing.T) {
				pol := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false }}
				h := pbHarness(t, proto, pol)
				h.ups["P"].Enqueue(errorEvent(`{"type":"error","code":"400","message":"bad request"}`, `{"error":{"code":400,"message":"bad request"}}`))
				body := `{"model":"m","input":"hi","stream":true}`
				if ep != "/v1/responses" {
					body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`
				}
				if ep == "/v1/responses" {
					_, evs := h.streamEvents(ep, body)
					var got []string
					for _, ev := range evs {
						got = append(got, string(ev.Data))
					}
					// response.created and response.failed.
					if len(evs) != 2 || !strings.Contains(got[0]+got[1], "bad request") {
						t.Fatalf("the client did not get P's error: %q", got)
					}
				} else {
					// Nothing went out: a Chat stream gets the status and
					// JSON error (README "Failover and replay").
					resp := h.post(ep, body)
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "bad request") {
						t.Fatalf("the client did not get P's error as a 400: %d %s", resp.StatusCode, got)
					}
				}
				if in := askedOnce(t, pol); in.FailureClass != hostabi.FailureClientError || in.HTTPStatus != 400 {
					t.Fatalf("replay policy asked %+v; want a client_error of status 400", in)
				}
				if h.ups["B"].RequestCount() != 0 {
					t.Fatal("a client error was replayed on B")
				}
			})
		}
	}
}
