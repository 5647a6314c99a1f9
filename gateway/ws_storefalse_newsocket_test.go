package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestWebSocketStoreFalseFollowUpOnNewClientSocket: a client reconnects
// and sends a store:false tool output incrementally, naming a response its
// new socket's memory does not hold, to P, the transport: websocket upstream
// that made it. Where P's connection that served that response is gone (P
// closed it after the answer), no connection of P can hold it: the
// follow-up, and the client's retry of it, fail closed with the documented
// 503 upstream_unavailable error frame without P being called (README
// "Privacy"), not with a response.failed telling the client to retry. Where
// that connection is still open (the client reconnected in the same session
// scope, its X-Codex-Turn-State, whose upstream socket P kept), the
// follow-up goes on it as sent and is answered.
func TestWebSocketStoreFalseFollowUpOnNewClientSocket(t *testing.T) {
	t.Run("served connection closed", func(t *testing.T) {
		h := perConnectionHarness(t)
		call := toolCallAnswer("{{id}}", "fc_1", "call_1")
		call.End = upstreamtest.EndCut
		h.ups["P"].Enqueue(call)
		first := h.dialWS(nil)
		id := completedIDOf(completedTurn(t, first, "turn 1", wsToolTurn))
		first.conn.CloseNow()
		second := h.dialWS(nil)
		for _, what := range []string{"the tool output on the new socket", "the client's retry"} {
			last := lastFrame(t, second.turn(wsToolOutput(id, "call_1")))
			if last.typ != "error" || last.code != "upstream_unavailable" || errorStatus(last) != http.StatusServiceUnavailable {
				t.Fatalf("%s got %s", what, last.data)
			}
		}
		if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 1 || b != 0 {
			t.Fatalf("P got %d requests and B %d; want only the first turn on P", p, b)
		}
		if m := h.metrics(); !strings.Contains(m, `continuity_fail_closed_total{reason="previous_response_not_found",surface="websocket"} 2`) {
			t.Fatalf("fail closed not counted twice:\n%s", grepLines(m, "fail_closed"))
		}
	})
	t.Run("served connection open", func(t *testing.T) {
		h := perConnectionHarness(t)
		h.ups["P"].Enqueue(toolCallAnswer("{{id}}", "fc_1", "call_1"))
		first := h.dialWS(nil)
		id := completedIDOf(completedTurn(t, first, "turn 1", wsToolTurn))
		first.conn.CloseNow()
		// The client reconnects with the turn state its first socket was
		// given, so its requests keep that scope's upstream socket.
		again := h.dialWS(map[string]string{"X-Codex-Turn-State": first.header.Get("X-Codex-Turn-State")})
		completedTurn(t, again, "the tool output on the new socket", wsToolOutput(id, "call_1"))
		reqs := h.ups["P"].Requests()
		if len(reqs) != 2 || h.ups["B"].RequestCount() != 0 {
			t.Fatalf("P got %d requests and B %d; want 2 on P and none on B", len(reqs), h.ups["B"].RequestCount())
		}
		checkUpstreamTurn(t, reqs, 1, 1, id, "function_call_output:call_1")
	})
}
