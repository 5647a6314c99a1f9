package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
)

// TestWebSocketSessionMemoryBound: a client WebSocket keeps its store:false
// turns for their follow-ups up to limits.ws_session_memory_bytes, the
// oldest evicted first (SECURITY.md "WebSocket"). A follow-up whose chain
// reaches an evicted turn fails closed with the retryable
// upstream_unavailable, as one naming a chain the socket never held does,
// and no upstream is called for it; the socket keeps working.
func TestWebSocketSessionMemoryBound(t *testing.T) {
	const padding = 4000 // the tool output of turn 2: turn 2 alone fits the bound, turns 1 and 2 do not
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{WSSessionMemoryBytes: padding + 300}})
	h.ups["P"].Enqueue(toolCallAnswer("resp_1", "fc_1", "call_1"))
	ws := h.dialWS(nil)
	first := ws.turn(wsToolTurn)
	if last := lastFrame(t, first); last.typ != "response.completed" {
		t.Fatalf("turn 1: %s", last.data)
	}
	output := strings.Replace(wsToolOutput(completedIDOf(first), "call_1"), `"sunny"`, `"`+strings.Repeat("s", padding)+`"`, 1)
	second := ws.turn(output)
	if last := lastFrame(t, second); last.typ != "response.completed" {
		t.Fatalf("turn 2: %s", last.data)
	}
	before := h.ups["P"].RequestCount() + h.ups["B"].RequestCount()
	third := ws.turn(`{"type":"response.create","model":"m","store":false,"previous_response_id":"` + completedIDOf(second) + `",` +
		`"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks"}]}]}`)
	last := lastFrame(t, third)
	if last.typ != "error" || last.code != "upstream_unavailable" || errorStatus(last) != http.StatusServiceUnavailable ||
		!strings.Contains(string(last.data), "limits.ws_session_memory_bytes") {
		t.Fatalf("a follow-up whose first turn was evicted got %s", last.data)
	}
	if n := h.ups["P"].RequestCount() + h.ups["B"].RequestCount(); n != before {
		t.Fatalf("the upstreams got %d more requests, want none", n-before)
	}
	if m := h.metrics(); !strings.Contains(m, `continuity_fail_closed_total{reason="previous_response_not_found",surface="websocket"} 1`) {
		t.Fatalf("fail closed not counted:\n%s", grepLines(m, "fail_closed"))
	}
	// A turn that names nothing is served on the same socket.
	if last := lastFrame(t, ws.turn(`{"type":"response.create","model":"m","store":false,"input":"hi"}`)); last.typ != "response.completed" {
		t.Fatalf("the next turn on the socket: %s", last.data)
	}
}
