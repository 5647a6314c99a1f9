package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

// A response.create refused because its input_chunks have a gap is
// answered with 409 sequence_gap, and the chunks go with it: the next
// response.create starts clean, with or without chunks of its own, their
// sequence ids again from 0 (gateway/streaminput/README.md "WebSocket").
// Before, the chunks stayed held: every later response.create on the socket
// got the same 409, and a fresh chunk 0 got sequence_conflict.
func TestWebSocketSequenceGapDoesNotPoisonTheSocket(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"A"}`)
	c.send(`{"type":"input_chunk","sequence_id":2,"payload":"C"}`)
	evs := c.turn(createFrame(""))
	if evs[0].typ != "error" || errorStatus(evs[0]) != http.StatusConflict || evs[0].code != "sequence_gap" {
		t.Fatalf("a create with a gap: %s, want 409 sequence_gap", evs[0].data)
	}
	if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the next create, without chunks: %s", evs[len(evs)-1].data)
	}
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"after the gap"}`)
	if evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"Say: "}`); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("a create with fresh chunks from 0: %s", evs[len(evs)-1].data)
	}
	reqs := h.ups["A"].Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want the two accepted creates", len(reqs))
	}
	if body := string(reqs[1].Body); !strings.Contains(body, "after the gap") || strings.Contains(body, `"C"`) || strings.Contains(body, "AC") {
		t.Fatalf("the last create's upstream body: %s, want only the fresh chunk merged", body)
	}
}
