package streaminput_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/apierr"
)

func wantAPIErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code {
		t.Fatalf("error %v, want %d %s", err, status, code)
	}
}

func TestAccumulatorMergesIntoNextResponseCreate(t *testing.T) {
	a := streaminput.NewAccumulator(streaminput.AccumulatorOptions{ReorderWindow: 4})
	frames := []string{
		`{"type":"input_chunk","sequence_id":1,"payload":"about "}`, // early: buffered
		`{"type":"input_chunk","sequence_id":0,"payload":"Tell me "}`,
		`{"type":"input_chunk","sequence_id":1,"payload":"about "}`, // duplicate: ignored
		`{"type":"input_chunk","payload":"otters."}`,                // sequence_id 2 implied (follows the previous frame's)
	}
	for _, f := range frames {
		if !streaminput.IsInputChunk([]byte(f)) {
			t.Fatalf("not recognised: %s", f)
		}
		if err := a.Add([]byte(f)); err != nil {
			t.Fatalf("Add(%s): %v", f, err)
		}
	}
	wantAPIErr(t, a.Add([]byte(`{"type":"input_chunk","sequence_id":1,"payload":"else"}`)), http.StatusConflict, streaminput.CodeSequenceConflict)
	wantAPIErr(t, a.Add([]byte(`{"type":"input_chunk","sequence_id":9,"payload":"far"}`)), http.StatusConflict, streaminput.CodeOutOfWindow)
	wantAPIErr(t, a.Add([]byte(`{"type":"input_chunk","sequence_id":"x","payload":"far"}`)), http.StatusBadRequest, apierr.CodeInvalidType)
	if a.Len() != 3 || a.Bytes() != int64(len("Tell me about otters.")) {
		t.Fatalf("Len %d Bytes %d", a.Len(), a.Bytes())
	}
	create := `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_1","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi. "}]}]}`
	out, err := a.Apply([]byte(create))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_1","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi. Tell me about otters."}]}]}`
	if string(out) != want {
		t.Fatalf("Apply:\n got %s\nwant %s", out, want)
	}
	// Applied chunks are gone; ids start again at 0; no chunks: unchanged.
	if a.Len() != 0 {
		t.Fatal("chunks survived Apply")
	}
	if out, _ := a.Apply([]byte(create)); string(out) != create {
		t.Fatalf("Apply with nothing held changed the frame: %s", out)
	}
	if err := a.Add([]byte(`{"type":"input_chunk","sequence_id":0,"payload":"again"}`)); err != nil {
		t.Fatal(err)
	}
}

func TestAccumulatorGapsCapAndParts(t *testing.T) {
	a := streaminput.NewAccumulator(streaminput.AccumulatorOptions{MaxBytes: 64})
	if err := a.Add([]byte(`{"type":"input_chunk","sequence_id":1,"payload":"x"}`)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Apply([]byte(`{"type":"response.create","model":"m","input":"q"}`))
	wantAPIErr(t, err, http.StatusConflict, streaminput.CodeSequenceGap)
	if a.Len() != 0 {
		t.Fatal("a failed Apply kept the chunks: the next response.create would be refused too")
	}
	wantAPIErr(t, a.Add([]byte(`{"type":"input_chunk","sequence_id":0,"payload":"`+strings.Repeat("y", 80)+`"}`)), http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge)
	if a.Len() != 0 {
		t.Fatal("chunks survived the cap")
	}
	wantAPIErr(t, a.Add([]byte(`{"type":"response.create"}`)), http.StatusBadRequest, "invalid_value")

	// Audio pieces join into one part; an image follows; text after it is a new part.
	audio1, audio2 := []byte("RIFF....WAVEfmt "), []byte("data....")
	img := []byte{0xff, 0xd8, 0xff}
	b64 := base64.StdEncoding.EncodeToString
	for _, f := range []string{
		`{"type":"input_chunk","modality":"audio","format":"wav","payload":"` + b64(audio1) + `"}`,
		`{"type":"input_chunk","modality":"audio","format":"wav","payload":"` + b64(audio2) + `"}`,
		`{"type":"input_chunk","modality":"image","format":"jpeg","payload":"` + b64(img) + `"}`,
		`{"type":"input_chunk","payload":"What is this?"}`,
	} {
		if err := a.Add([]byte(f)); err != nil {
			t.Fatalf("Add(%s): %v", f, err)
		}
	}
	out, err := a.Apply([]byte(`{"type":"response.create","response":{"model":"m","instructions":"be brief"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"response.create","response":{"model":"m","instructions":"be brief","input":[{"type":"message","role":"user","content":[` +
		`{"type":"input_audio","input_audio":{"data":"` + b64(append(audio1, audio2...)) + `","format":"wav"}},` +
		`{"type":"input_image","detail":"auto","image_url":"data:image/jpeg;base64,` + b64(img) + `"},` +
		`{"type":"input_text","text":"What is this?"}]}]}}`
	if string(out) != want {
		t.Fatalf("Apply:\n got %s\nwant %s", out, want)
	}
}
