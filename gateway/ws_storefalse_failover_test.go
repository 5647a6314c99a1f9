package gateway_test

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A store:false follow-up on a client WebSocket whose previous turn the
// session's memory holds goes in full to any target (sessionChainBody), so
// it is not pinned to the upstream that made the previous response: it
// fails over and is replayed like any request (README "Failover and
// replay"), in full there, over HTTP or over the other upstream's own
// WebSocket, which does not hold the previous response.

// cutBeforeContent is a stream cut after its lifecycle events, before any
// content: a failure replayed on the next target and charged to this one.
func cutBeforeContent() upstreamtest.Script {
	return upstreamtest.Script{Frames: lifecycleThen(), End: upstreamtest.EndCut}
}

func TestWebSocketStoreFalseFollowUpIsNotPinnedToItsOwner(t *testing.T) {
	for _, transport := range []string{"http", "websocket"} {
		for _, c := range []struct {
			name string
			// fault makes P fail the follow-up: openCircuit opens P's
			// circuit before it is sent, else P cuts it before content.
			openCircuit bool
			followUpToP int // the requests the follow-up makes to P
		}{
			{"owner's circuit open", true, 0},
			{"owner cuts before content", false, 1},
		} {
			t.Run(transport+"/"+c.name, func(t *testing.T) {
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Store: openStore(t, t.TempDir())},
					transport: map[string]string{"P": transport, "B": transport}})
				h.ups["P"].Enqueue(toolCallAnswer("resp_1", "fc_1", "call_1"))
				ws := h.dialWS(nil)
				first := ws.turn(wsToolTurn)
				if last := lastFrame(t, first); last.typ != "response.completed" {
					t.Fatalf("turn 1: %s", last.data)
				}
				if c.openCircuit {
					// Cuts before content until P's circuit opens (3 in a
					// row): turn 1's success may be settled after the first
					// of them (a target is settled once its request is done
					// with it), which starts the count again.
					for i := 0; ; i++ {
						if tg, _ := h.target("P", "m"); tg.Circuit == "open" {
							break
						}
						if i == 6 {
							t.Fatal("P's circuit did not open after 6 cuts before content")
						}
						h.ups["P"].Enqueue(cutBeforeContent())
						if text := streamedText(t, h, "m"); text != "Hello from B" {
							t.Fatalf("side request %d: client got %q, want B's answer", i, text)
						}
					}
				} else {
					h.ups["P"].Enqueue(cutBeforeContent())
				}
				pBefore := h.ups["P"].RequestCount()
				second := ws.turn(wsToolOutput(completedIDOf(first), "call_1"))
				if last := lastFrame(t, second); last.typ != "response.completed" {
					t.Fatalf("the tool output: %s", last.data)
				}
				if n := h.ups["P"].RequestCount() - pBefore; n != c.followUpToP {
					t.Fatalf("the follow-up made %d requests to P, want %d", n, c.followUpToP)
				}
				reqs := h.ups["B"].Requests()
				if len(reqs) == 0 {
					t.Fatal("B got no request")
				}
				got := reqs[len(reqs)-1]
				if gjson.GetBytes(got.Body, "previous_response_id").Exists() ||
					inputShape(got.Body) != "message: function_call:call_1 function_call_output:call_1" {
					t.Fatalf("the follow-up reached B as %q (previous_response_id %s); want it in full\n%s",
						inputShape(got.Body), gjson.GetBytes(got.Body, "previous_response_id").Raw, got.Body)
				}
				if got.WebSocket != (transport == "websocket") {
					t.Fatalf("the follow-up reached B over WebSocket %v, want %v", got.WebSocket, transport == "websocket")
				}
			})
		}
	}
}
