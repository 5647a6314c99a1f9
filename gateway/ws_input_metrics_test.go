package gateway_test

import (
	"strings"
	"testing"
)

// WebSocket input_chunk frames count in the streaming-input chunk series
// with the outcomes REST and Mode A chunks have (gateway/streaminput/
// README.md "Metrics"): accepted (and their payload bytes), duplicate,
// rejected. Before, they were not counted at all.
func TestWebSocketInputChunksAreCounted(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"abc"}`)
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"abc"}`) // a duplicate
	c.send(`{"type":"input_chunk","sequence_id":1,"payload":"de"}`)
	if evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"Say: "}`); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the create with chunks: %s", evs[len(evs)-1].data)
	}
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"x"}`)
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"y"}`) // a conflict: an error frame
	if evs := c.readUntilEnd(); evs[0].typ != "error" || evs[0].code != "sequence_conflict" {
		t.Fatalf("a conflicting chunk: %s, want sequence_conflict", evs[0].data)
	}
	m := h.metrics()
	for _, want := range []string{
		`sluice_streaming_input_chunks_total{outcome="accepted"} 3`,
		`sluice_streaming_input_chunks_total{outcome="duplicate"} 1`,
		`sluice_streaming_input_chunks_total{outcome="rejected"} 1`,
		`sluice_streaming_input_bytes_total 6`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_streaming_input"))
		}
	}
}
