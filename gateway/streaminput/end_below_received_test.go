package streaminput_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/apierr"
)

// TestEndOfInputBelowAReceivedIDIsAConflict: an end_of_input on an id
// below one already received is a 409 sequence_conflict naming
// end_of_input, over REST and in a WebSocket's chunks alike, and the
// session stays open (gateway/streaminput/README.md): session_finished is
// for a chunk after the input ended, which this is not.
func TestEndOfInputBelowAReceivedIDIsAConflict(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", `{"model":"gpt-fake-1","input":"Say: "}`))
	e.mustChunk(id, textChunk(3, "D", false))
	status, _, aerr := e.chunk(id, textChunk(1, "B", true))
	if status != http.StatusConflict || aerr.code() != streaminput.CodeSequenceConflict || aerr.param() != "end_of_input" {
		t.Fatalf("REST: %d %s %s, want 409 sequence_conflict on end_of_input", status, aerr.code(), aerr.param())
	}
	if _, st := e.status(id); st.State != "open" {
		t.Fatalf("the session is %q after the refused chunk, want open", st.State)
	}

	a := streaminput.NewAccumulator(streaminput.AccumulatorOptions{})
	if err := a.Add([]byte(`{"type":"input_chunk","sequence_id":3,"payload":"D"}`)); err != nil {
		t.Fatal(err)
	}
	err := a.Add([]byte(`{"type":"input_chunk","sequence_id":1,"payload":"B","end_of_input":true}`))
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Code != streaminput.CodeSequenceConflict || ae.Param != "end_of_input" {
		t.Fatalf("WebSocket chunks: %v, want sequence_conflict on end_of_input", err)
	}
}
