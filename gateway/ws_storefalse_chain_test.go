package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Codex in WebSocket mode sends a turn's tool output incrementally:
// previous_response_id, store:false and only the new items. Over HTTP an
// upstream keeps no store:false response, so the gateway sends such a
// follow-up in full from the session's memory (README "Privacy").

// wsToolTurn is a store:false response.create asking for the get_weather
// tool, and wsToolOutput its follow-up carrying only the call's output.
const wsToolTurn = `{"type":"response.create","model":"m","store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"weather?"}]}],` +
	`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`

func wsToolOutput(prev, callID string) string {
	return `{"type":"response.create","model":"m","store":false,"previous_response_id":"` + prev + `",` +
		`"input":[{"type":"function_call_output","call_id":"` + callID + `","output":"sunny"}],` +
		`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`
}

// toolCallAnswer is a whole answer that calls get_weather (call callID).
func toolCallAnswer(respID, fcID, callID string) upstreamtest.Script {
	evs := []string{`{"type":"response.created","response":` + g6Resp(respID, "in_progress", "[]") + `}`}
	evs = append(evs, nontextCall(fcID, callID, "", []string{`{"city":`, `"Paris","unit":"C"}`}, "arguments", "item")...)
	item := `{"id":"` + fcID + `","type":"function_call","status":"completed","call_id":"` + callID + `","name":"get_weather","arguments":` + quoteJSON(toolArgs) + `}`
	evs = append(evs, `{"type":"response.completed","response":`+g6Resp(respID, "completed", "["+item+"]")+`}`)
	return upstreamtest.Script{Frames: g6Frames(evs...)}
}

// inputShape is the type and call_id of each input item of body.
func inputShape(body []byte) string {
	var parts []string
	gjson.GetBytes(body, "input").ForEach(func(_, it gjson.Result) bool {
		parts = append(parts, it.Get("type").Str+":"+it.Get("call_id").Str)
		return true
	})
	return strings.Join(parts, " ")
}

func lastFrame(t *testing.T, evs []eventLike) eventLike {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no frame")
	}
	return evs[len(evs)-1]
}

// completedTurn sends one client frame on ws and returns the turn's
// frames, failing the test (what names the turn) unless it ends
// response.completed.
func completedTurn(t *testing.T, ws *wsClient, what, frame string) []eventLike {
	t.Helper()
	evs := ws.turn(frame)
	if last := lastFrame(t, evs); last.typ != "response.completed" {
		t.Fatalf("%s: %s", what, last.data)
	}
	return evs
}

// TestWebSocketStoreFalseToolFollowUpIsSentInFull: the tool output's
// incremental frame reaches an upstream reached over HTTP as one
// self-contained request (the first turn's input and its function call,
// then the output; no previous_response_id), with a Sluice store or
// without one; an upstream reached over its own WebSocket keeps the
// incremental frame (its socket has the previous response).
func TestWebSocketStoreFalseToolFollowUpIsSentInFull(t *testing.T) {
	for _, c := range []struct {
		name      string
		transport string
		store     bool
		want      string // the follow-up's input as the upstream got it
		wantPrev  bool
	}{
		{"http", "http", false, "message: function_call:call_1 function_call_output:call_1", false},
		{"http with a store", "http", true, "message: function_call:call_1 function_call_output:call_1", false},
		{"websocket", "websocket", true, "function_call_output:call_1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			hc := harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}}, transport: map[string]string{"P": c.transport}}
			if c.store {
				hc.opts.Store = openStore(t, t.TempDir())
			}
			h := contHarness(t, gateway.ContinuationAuto, hc)
			h.ups["P"].Enqueue(toolCallAnswer("resp_1", "fc_1", "call_1"))
			ws := h.dialWS(nil)
			first := completedTurn(t, ws, "turn 1", wsToolTurn)
			id := completedIDOf(first)
			completedTurn(t, ws, "the tool output", wsToolOutput(id, "call_1"))
			reqs := h.ups["P"].Requests()
			if len(reqs) != 2 {
				t.Fatalf("P got %d requests, want 2", len(reqs))
			}
			got := reqs[1]
			if hasPrev := gjson.GetBytes(got.Body, "previous_response_id").Exists(); hasPrev != c.wantPrev || inputShape(got.Body) != c.want {
				t.Fatalf("the follow-up reached P with previous_response_id %v and input %q; want %v and %q\n%s",
					hasPrev, inputShape(got.Body), c.wantPrev, c.want, got.Body)
			}
			if !c.wantPrev && gjson.GetBytes(got.Body, "input.0.content.0.text").Str != "weather?" {
				t.Fatalf("the first turn's input is not the follow-up's start: %s", got.Body)
			}
		})
	}
}

// TestWebSocketStoreFalseChainNotHeldFailsClosed: a store:false follow-up
// on a socket that does not hold its previous response (another socket made
// it) cannot be sent over HTTP in full: it fails closed with the retryable
// upstream_unavailable, and no upstream is called.
func TestWebSocketStoreFalseChainNotHeldFailsClosed(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Store: openStore(t, t.TempDir())}})
	h.ups["P"].Enqueue(toolCallAnswer("resp_1", "fc_1", "call_1"))
	first := h.dialWS(nil).turn(wsToolTurn)
	if last := lastFrame(t, first); last.typ != "response.completed" {
		t.Fatalf("turn 1: %s", last.data)
	}
	evs := h.dialWS(nil).turn(wsToolOutput(completedIDOf(first), "call_1"))
	if last := lastFrame(t, evs); last.typ != "error" || last.code != "upstream_unavailable" || errorStatus(last) != http.StatusServiceUnavailable {
		t.Fatalf("the follow-up on another socket got %s", last.data)
	}
	if n := h.ups["P"].RequestCount() + h.ups["B"].RequestCount(); n != 1 {
		t.Fatalf("the upstreams got %d requests, want only the first turn", n)
	}
	if m := h.metrics(); !strings.Contains(m, `continuity_fail_closed_total{reason="previous_response_not_found",surface="websocket"} 1`) {
		t.Fatalf("fail closed not counted:\n%s", grepLines(m, "fail_closed"))
	}
}

// TestWebSocketStoreFalseFollowUpAfterToolRescueKeepsCallIDs: a tool call
// cut on P and restarted on B, whose call has its own id: the client keeps
// the call id it was shown, and its incremental tool output goes to B in
// full from the session's memory, the function call and its output under
// that same call id, whether it is reached over HTTP or over an upstream's
// own WebSocket (B's holds B's response with B's call id, one the client
// never saw). The follow-up is not pinned to B (the session holds its
// chain): it goes to the route's first target, P, as any request does.
func TestWebSocketStoreFalseFollowUpAfterToolRescueKeepsCallIDs(t *testing.T) {
	for _, transport := range []string{"http", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{opts: gateway.Options{Store: openStore(t, t.TempDir())},
				transport: map[string]string{"P": transport, "B": transport}})
			cut := append([]string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`},
				nontextCall("fc_p", "call_p", "", []string{`{"city":`, `"Pa`})...)
			h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(cut...), End: upstreamtest.EndCut})
			h.ups["B"].Enqueue(toolCallAnswer("resp_b", "fc_b", "call_b"))
			ws := h.dialWS(nil)
			first := ws.turn(wsToolTurn)
			last := lastFrame(t, first)
			if last.typ != "response.completed" || gjson.GetBytes(last.data, "response.output.0.call_id").Str != "call_p" {
				t.Fatalf("turn 1 (rescued): %s", last.data)
			}
			completedTurn(t, ws, "the tool output", wsToolOutput(completedIDOf(first), "call_p"))
			reqs := h.ups["P"].Requests()
			if len(reqs) != 2 || h.ups["B"].RequestCount() != 1 {
				t.Fatalf("P got %d requests and B %d, want the cut and the follow-up on P, the restart on B", len(reqs), h.ups["B"].RequestCount())
			}
			got := reqs[1].Body
			if gjson.GetBytes(got, "previous_response_id").Exists() || inputShape(got) != "message: function_call:call_p function_call_output:call_p" {
				t.Fatalf("the follow-up reached P as %q (previous_response_id %s); want the call and its output under one call id\n%s",
					inputShape(got), gjson.GetBytes(got, "previous_response_id").Raw, got)
			}
			if transport == "websocket" && !reqs[1].WebSocket {
				t.Fatal("the follow-up did not go over P's WebSocket")
			}
		})
	}
}

// TestWebSocketStoreFalseFollowUpKeepsEncryptedReasoning: the turn sent in
// full carries the previous answer's reasoning item with its
// encrypted_content, by which an upstream resolves a store:false reasoning
// item (an id alone is not found there).
func TestWebSocketStoreFalseFollowUpKeepsEncryptedReasoning(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	reasoning := `{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAA-secret"}`
	item := `{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"get_weather","arguments":` + quoteJSON(toolArgs) + `}`
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_1", "in_progress", "[]") + `}`,
		`{"type":"response.output_item.added","output_index":0,"item":` + reasoning + `}`,
		`{"type":"response.output_item.done","output_index":0,"item":` + reasoning + `}`}
	for _, ev := range nontextCall("fc_1", "call_1", "", []string{toolArgs}, "arguments", "item") {
		evs = append(evs, strings.Replace(ev, `"output_index":0`, `"output_index":1`, 1))
	}
	evs = append(evs, `{"type":"response.completed","response":`+g6Resp("resp_1", "completed", "["+reasoning+","+item+"]")+`}`)
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
	ws := h.dialWS(nil)
	first := completedTurn(t, ws, "turn 1", wsToolTurn)
	completedTurn(t, ws, "the tool output", wsToolOutput(completedIDOf(first), "call_1"))
	got := h.ups["P"].Requests()[1].Body
	if inputShape(got) != "message: reasoning: function_call:call_1 function_call_output:call_1" ||
		gjson.GetBytes(got, "input.1.encrypted_content").Str != "gAAAA-secret" {
		t.Fatalf("the follow-up reached P as %q\n%s", inputShape(got), got)
	}
}
