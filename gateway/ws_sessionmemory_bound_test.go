package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

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

// TestWebSocketSessionMemoryTotalBound: all client WebSockets together keep
// at most limits.ws_session_memory_total_bytes of store:false turns
// (SECURITY.md "WebSocket"). A socket whose turn would take the total past
// it does not keep that turn — what another socket holds stays — so its
// follow-up fails closed with the retryable upstream_unavailable and no
// upstream is called; the other socket's follow-up works. Once the first
// socket closes, its bytes are free again for the second.
func TestWebSocketSessionMemoryTotalBound(t *testing.T) {
	const padding = 3000 // one padded turn fits the total, two do not
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{WSSessionMemoryTotalBytes: padding + 2000}})
	padded := `{"type":"response.create","model":"m","store":false,"input":"` + strings.Repeat("p", padding) + `"}`
	followUp := func(id string) string {
		return `{"type":"response.create","model":"m","store":false,"previous_response_id":"` + id + `","input":"thanks"}`
	}
	a, b := h.dialWS(nil), h.dialWS(nil)
	firstA := a.turn(padded)
	if last := lastFrame(t, firstA); last.typ != "response.completed" {
		t.Fatalf("socket A's turn: %s", last.data)
	}
	firstB := b.turn(padded)
	if last := lastFrame(t, firstB); last.typ != "response.completed" {
		t.Fatalf("socket B's turn: %s", last.data)
	}
	before := h.ups["P"].RequestCount() + h.ups["B"].RequestCount()
	last := lastFrame(t, b.turn(followUp(completedIDOf(firstB))))
	if last.typ != "error" || last.code != "upstream_unavailable" || errorStatus(last) != http.StatusServiceUnavailable ||
		!strings.Contains(string(last.data), "limits.ws_session_memory_total_bytes") {
		t.Fatalf("socket B's follow-up of a turn past the total got %s", last.data)
	}
	if n := h.ups["P"].RequestCount() + h.ups["B"].RequestCount(); n != before {
		t.Fatalf("the upstreams got %d more requests, want none", n-before)
	}
	if last := lastFrame(t, a.turn(followUp(completedIDOf(firstA)))); last.typ != "response.completed" {
		t.Fatalf("socket A's follow-up: %s", last.data)
	}

	// A closes: its turns go back to the total once the gateway ends its
	// session, which it does after the close handshake (so B retries).
	if err := a.conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("closing socket A: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		turn := b.turn(padded)
		last := lastFrame(t, b.turn(followUp(completedIDOf(turn))))
		if last.typ == "response.completed" {
			break
		}
		if last.code != "upstream_unavailable" || time.Now().After(deadline) {
			t.Fatalf("socket B's follow-up after socket A closed: %s", last.data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
