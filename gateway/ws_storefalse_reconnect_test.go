package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream's Responses WebSocket keeps a store:false response on the
// connection that made it only (upstreamtest PreviousPerWebSocket), and it
// closes connections of its own accord (OpenAI after 60 minutes, a restart,
// an idle timeout). A client's incremental follow-up that has to go on a new
// connection is sent there in full from the session's memory; one on the
// connection that served its previous response stays incremental.

// wsThanks is a store:false follow-up of prev carrying only a user message.
func wsThanks(prev string) string {
	return `{"type":"response.create","model":"m","store":false,"previous_response_id":"` + prev + `",` +
		`"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks"}]}]}`
}

// perConnectionHarness is P over its WebSocket, keeping store:false
// responses per connection, then B.
func perConnectionHarness(t *testing.T) *harness {
	return contHarness(t, gateway.ContinuationAuto, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P", PreviousPerWebSocket: true}, {Name: "B"}},
		transport: map[string]string{"P": "websocket"},
	})
}

// checkUpstreamTurn checks the request P got at index i: the WebSocket
// connection it came on, and whether it was incremental (naming prev, with
// input shape want) or in full (no previous_response_id, input want).
func checkUpstreamTurn(t *testing.T, reqs []upstreamtest.Request, i, conn int, prev, want string) {
	t.Helper()
	if len(reqs) <= i {
		t.Fatalf("P got %d requests, want at least %d", len(reqs), i+1)
	}
	got := reqs[i]
	if !got.WebSocket || got.WebSocketConn != conn {
		t.Fatalf("P's request %d came on connection %d (WebSocket %v), want %d", i+1, got.WebSocketConn, got.WebSocket, conn)
	}
	if gotPrev := gjson.GetBytes(got.Body, "previous_response_id").Str; gotPrev != prev || inputShape(got.Body) != want {
		t.Fatalf("P's request %d named previous_response_id %q with input %q; want %q and %q\n%s",
			i+1, gotPrev, inputShape(got.Body), prev, want, got.Body)
	}
}

// TestWebSocketStoreFalseFollowUpOnNewUpstreamConnectionIsSentInFull: the
// upstream closed the connection that served the tool call, while it waited
// for the follow-up or on the follow-up itself before answering; the tool
// output goes on a new connection in full (the first turn's input, the call,
// its output) and is answered, and the next follow-up, on that live
// connection which served its previous response, goes as sent.
func TestWebSocketStoreFalseFollowUpOnNewUpstreamConnectionIsSentInFull(t *testing.T) {
	full := "message: function_call:call_1 function_call_output:call_1"
	for _, c := range []struct {
		name    string
		scripts []upstreamtest.Script // P's, after the tool call
		close   upstreamtest.Ending   // how the tool call's connection ends after it
		lost    int                   // the follow-up's attempts on the closed connection
	}{
		{"closed while waiting", nil, upstreamtest.EndCut, 0},
		{"closed on the follow-up", []upstreamtest.Script{upstreamtest.CutAfter(0)}, upstreamtest.EndNormal, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := perConnectionHarness(t)
			call := toolCallAnswer("{{id}}", "fc_1", "call_1")
			call.End = c.close
			h.ups["P"].Enqueue(call)
			h.ups["P"].Enqueue(c.scripts...)
			ws := h.dialWS(nil)
			first := completedTurn(t, ws, "turn 1", wsToolTurn)
			id := completedIDOf(first)
			second := completedTurn(t, ws, "the tool output after the upstream closed its socket", wsToolOutput(id, "call_1"))
			completedTurn(t, ws, "the next follow-up", wsThanks(completedIDOf(second)))
			reqs := h.ups["P"].Requests()
			if len(reqs) != 3+c.lost || h.ups["B"].RequestCount() != 0 {
				t.Fatalf("P got %d requests and B %d; want %d on P and none on B", len(reqs), h.ups["B"].RequestCount(), 3+c.lost)
			}
			if c.lost == 1 {
				checkUpstreamTurn(t, reqs, 1, 1, id, "function_call_output:call_1")
			}
			checkUpstreamTurn(t, reqs, 1+c.lost, 2, "", full)
			checkUpstreamTurn(t, reqs, 2+c.lost, 2, completedIDOf(second), "message:")
		})
	}
}

// TestWebSocketStoreFalseFollowUpRetriedOnNewUpstreamConnection: the
// follow-up sent in full on a new connection was refused there (a client
// error, passed through); the client's retry of the same incremental frame
// goes on that connection, which never served the previous response, in
// full again, and is answered.
func TestWebSocketStoreFalseFollowUpRetriedOnNewUpstreamConnection(t *testing.T) {
	h := perConnectionHarness(t)
	h.ups["P"].Enqueue(toolCallAnswer("{{id}}", "fc_1", "call_1"),
		upstreamtest.CutAfter(0),
		upstreamtest.Script{Status: http.StatusBadRequest, Body: upstreamtest.ErrorBody("Try again.", "invalid_request_error", "", "")})
	ws := h.dialWS(nil)
	first := completedTurn(t, ws, "turn 1", wsToolTurn)
	id := completedIDOf(first)
	if last := lastFrame(t, ws.turn(wsToolOutput(id, "call_1"))); last.typ != "error" || errorStatus(last) != http.StatusBadRequest {
		t.Fatalf("the refused tool output: %s", last.data)
	}
	completedTurn(t, ws, "the client's retry", wsToolOutput(id, "call_1"))
	reqs := h.ups["P"].Requests()
	if len(reqs) != 4 {
		t.Fatalf("P got %d requests, want 4", len(reqs))
	}
	full := "message: function_call:call_1 function_call_output:call_1"
	checkUpstreamTurn(t, reqs, 2, 2, "", full)
	checkUpstreamTurn(t, reqs, 3, 2, "", full)
}
