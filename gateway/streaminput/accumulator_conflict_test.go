package streaminput_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/apierr"
)

// A WebSocket input_chunk resent with the same payload but a different
// end_of_input or new_part is refused with a message naming that field,
// as on the REST path, not one claiming the payload differs.
func TestAccumulatorSequenceConflictNamesWhatDiffers(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second string
		want          string
		notWant       string
	}{
		{"end_of_input", `{"type":"input_chunk","sequence_id":0,"payload":"a","end_of_input":false}`, `{"type":"input_chunk","sequence_id":0,"payload":"a","end_of_input":true}`,
			"end_of_input false (this chunk has true)", "payload"},
		{"new_part", `{"type":"input_chunk","sequence_id":0,"payload":"a"}`, `{"type":"input_chunk","sequence_id":0,"payload":"a","new_part":true}`,
			"new_part false (this chunk has true)", "payload"},
		{"payload", `{"type":"input_chunk","sequence_id":0,"payload":"a"}`, `{"type":"input_chunk","sequence_id":0,"payload":"b"}`,
			"with a different payload", "end_of_input"},
		{"payload and end_of_input", `{"type":"input_chunk","sequence_id":0,"payload":"a"}`, `{"type":"input_chunk","sequence_id":0,"payload":"b","end_of_input":true}`,
			"with a different payload, end_of_input false (this chunk has true)", "new_part"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := streaminput.NewAccumulator(streaminput.AccumulatorOptions{ReorderWindow: 4})
			if err := a.Add([]byte(tc.first)); err != nil {
				t.Fatalf("first chunk: %v", err)
			}
			err := a.Add([]byte(tc.second))
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != streaminput.CodeSequenceConflict ||
				!strings.Contains(ae.Message, tc.want) || strings.Contains(ae.Message, tc.notWant) {
				t.Fatalf("conflicting resend: %v, want a 409 sequence_conflict with %q and without %q", err, tc.want, tc.notWant)
			}
		})
	}
}
