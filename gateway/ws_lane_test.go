package gateway_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// laneCreate is a response.create frame on the given lane ("": none).
func laneCreate(lane string) string {
	f := `{"type":"response.create","model":"gpt-fake-1","input":"hi"`
	if lane != "" {
		f += `,"stream_id":"` + lane + `"`
	}
	return f + "}"
}

// checkLane fails unless every frame of a turn names lane as its stream_id
// exactly once (as OpenAI's spec says: present when the response.create
// supplied one), or, for lane "", none names one.
func checkLane(t *testing.T, what, lane string, evs []eventLike) {
	t.Helper()
	for _, ev := range evs {
		got := gjson.GetBytes(ev.data, "stream_id")
		switch {
		case lane == "" && got.Exists():
			t.Fatalf("%s: a frame of a create without stream_id has one: %s", what, ev.data)
		case lane != "" && (got.Type != gjson.String || got.Str != lane):
			t.Fatalf("%s: a frame does not echo stream_id %q: %s", what, lane, ev.data)
		case lane != "" && bytes.Count(ev.data, []byte(`"stream_id"`)) != 1:
			t.Fatalf("%s: stream_id appears more than once: %s", what, ev.data)
		}
	}
}

// Every frame of a response.create tagged with a stream_id echoes it, from
// any upstream kind, and the upstream never gets the field (it is WebSocket
// envelope, not part of a response request). Lanes are served one after
// another in the order their frames came (README "WebSocket"): each turn's
// frames are read whole before the next lane's begin.
func TestWebSocketStreamIDEchoedOnEveryFrame(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   harnessConfig
	}{
		{"Responses upstream over HTTP", harnessConfig{}},
		{"Responses upstream over WebSocket", harnessConfig{transport: map[string]string{"A": "websocket"}}},
		{"Chat upstream", harnessConfig{protocol: map[string]string{"A": "chat"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.hc)
			c := h.dialWS(nil)
			lanes := []string{"laneA", "lane.B-2_x", "", "laneA"}
			for _, lane := range lanes {
				c.send(laneCreate(lane))
			}
			for i, lane := range lanes {
				evs := c.readUntilEnd()
				if last := evs[len(evs)-1]; last.typ != "response.completed" {
					t.Fatalf("turn %d on lane %q ended with %s", i, lane, last.data)
				}
				checkLane(t, "turn on lane "+lane, lane, evs)
			}
			for _, r := range h.ups["A"].Requests() {
				if gjson.GetBytes(r.Body, "stream_id").Exists() {
					t.Fatalf("the upstream got stream_id: %s", r.Body)
				}
			}
		})
	}
}

// The answers Sluice writes itself echo the lane too: a refused frame's
// error frame, an upstream's refusal relayed as an error frame, and the
// terminal event of a stream the upstream cut. Before, none carried it, so
// a client routing by lane never saw its lane's answer.
func TestWebSocketStreamIDEchoedOnErrorsAndGatewayEvents(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)

	evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","stream_id":"refused","Stream":true}`)
	if evs[0].typ != "error" || evs[0].code != "unknown_parameter" {
		t.Fatalf("a refused frame: %s", evs[0].data)
	}
	checkLane(t, "a refused frame", "refused", evs)

	h.ups["A"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest,
		upstreamtest.ErrorBody("bad input", "invalid_request_error", "invalid_value", "input")))
	evs = c.turn(laneCreate("relayed"))
	if evs[0].typ != "error" || errorStatus(evs[0]) != http.StatusBadRequest {
		t.Fatalf("a relayed upstream refusal: %s", evs[0].data)
	}
	checkLane(t, "a relayed upstream refusal", "relayed", evs)

	h.ups["A"].Enqueue(upstreamtest.CutAfter(4), upstreamtest.CutAfter(4), upstreamtest.CutAfter(4))
	evs = c.turn(laneCreate("cut"))
	if !isTerminal(evs[len(evs)-1].typ) {
		t.Fatalf("a cut stream ended with %s", evs[len(evs)-1].data)
	}
	checkLane(t, "a cut stream", "cut", evs)

	// The socket still serves a lane afterwards.
	evs = c.turn(laneCreate("after"))
	checkLane(t, "a turn after the errors", "after", evs)
}

// A stream_id that is not what OpenAI's spec accepts (a string of 1 to 256
// of [A-Za-z0-9_.-]) is refused with an error frame naming stream_id,
// which does not echo it; nothing reaches the upstream, and the socket
// keeps working. Before, any value was sent upstream as a parameter.
func TestWebSocketInvalidStreamIDIsRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	for _, tc := range []struct{ name, value, code string }{
		{"a number", `5`, "invalid_type"},
		{"null", `null`, "invalid_type"},
		{"an object", `{"a":"b"}`, "invalid_type"},
		{"empty", `""`, "invalid_value"},
		{"too long", `"` + strings.Repeat("a", 257) + `"`, "invalid_value"},
		{"a space", `"lane A"`, "invalid_value"},
		{"a quote", `"lane\"A"`, "invalid_value"},
		{"not ASCII", `"lané"`, "invalid_value"},
	} {
		evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","stream_id":` + tc.value + `}`)
		ev := evs[0]
		if ev.typ != "error" || errorStatus(ev) != http.StatusBadRequest || ev.code != tc.code ||
			gjson.GetBytes(ev.data, "error.param").Str != "stream_id" {
			t.Fatalf("%s: %s, want a 400 %s naming stream_id", tc.name, ev.data, tc.code)
		}
		if gjson.GetBytes(ev.data, "stream_id").Exists() {
			t.Fatalf("%s: the refusal echoes the stream_id it refused: %s", tc.name, ev.data)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the upstream got %d requests, want none", n)
	}
	evs := c.turn(laneCreate(strings.Repeat("z", 256)))
	if evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("a 256-character stream_id: %s", evs[len(evs)-1].data)
	}
	checkLane(t, "the longest stream_id", strings.Repeat("z", 256), evs)
}
