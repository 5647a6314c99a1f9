package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// bareClientErrors are client errors as a Responses upstream sends them in
// a stream's bare error event, without an error type (OpenAI's own
// {"type":"error","code":…,"message":…,"param":…}): the parameter at fault,
// or a 4xx status member, marks them as the client's.
var bareClientErrors = []struct{ name, event string }{
	{"param", `{"type":"error","code":"invalid_value","message":"Invalid value for 'temperature'","param":"temperature"}`},
	{"status", `{"type":"error","status":400,"code":"invalid_value","message":"Invalid value for 'temperature'"}`},
}

// TestBareClientErrorEventIsInvalidPrompt: a client error sent as a bare
// error event reaches a Responses stream as invalid_prompt, a code a client
// does not retry, its own code leading the message (README "The
// terminal-event rule"), before content and after it alike; it is neither
// replayed nor continued on the route's next target, which would fail the
// same way.
func TestBareClientErrorEventIsInvalidPrompt(t *testing.T) {
	const wantMessage = "invalid_value: Invalid value for 'temperature'"
	for _, tc := range bareClientErrors {
		t.Run("before content/"+tc.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			h.ups["P"].Enqueue(upstreamtest.Script{Frames: []upstreamtest.Frame{upstreamtest.SSEEvent([]byte(tc.event))}})
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
			resp, evs := postWith(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`, nil)
			if resp.StatusCode != http.StatusOK || len(evs) != 2 || eventType(evs[1]) != "response.failed" {
				t.Fatalf("%d, %d events; want 200 with response.created then response.failed", resp.StatusCode, len(evs))
			}
			if e := gjson.GetBytes(evs[1].Data, "response.error"); e.Get("code").Str != "invalid_prompt" || e.Get("message").Str != wantMessage {
				t.Fatalf("stream ended with %s, want invalid_prompt with %q", evs[1].Data, wantMessage)
			}
			if n := h.ups["B"].RequestCount(); n != 0 {
				t.Fatalf("B called %d times: a client error was replayed", n)
			}
		})
		for _, surface := range []string{"sse", "websocket"} {
			t.Run("after content/"+tc.name+"/"+surface, func(t *testing.T) {
				p := upstreamtest.Answer(fullAnswer, 9)
				p.StopAfterDeltas = 3
				p.Tail = []upstreamtest.Frame{upstreamtest.SSEEvent([]byte(tc.event))}
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
				h.ups["P"].Enqueue(p)
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
				var evs [][]byte
				if surface == "sse" {
					_, sent := postWith(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`, nil)
					for _, ev := range sent {
						evs = append(evs, ev.Data)
					}
				} else {
					c := h.dialWS(nil)
					defer c.conn.CloseNow()
					for _, ev := range c.turn(`{"type":"response.create","model":"m","input":"hi"}`) {
						evs = append(evs, ev.data)
					}
				}
				o := checkResponsesEvents(t, evs)
				if o.terminal != "response.failed" || o.text == "" || o.text == fullAnswer {
					t.Fatalf("client got %q ending %s; want the text so far ending response.failed", o.text, o.terminal)
				}
				if e := gjson.GetBytes(evs[len(evs)-1], "response.error"); e.Get("code").Str != "invalid_prompt" || e.Get("message").Str != wantMessage {
					t.Fatalf("stream ended with %s, want invalid_prompt with %q", evs[len(evs)-1], wantMessage)
				}
				if n := h.ups["B"].RequestCount(); n != 0 {
					t.Fatalf("B called %d times: a client error was continued", n)
				}
			})
		}
	}
}
