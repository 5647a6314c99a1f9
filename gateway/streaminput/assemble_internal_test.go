package streaminput

import (
	"context"
	"testing"
)

func textChunks(texts ...string) []chunk {
	var cs []chunk
	for i, s := range texts {
		cs = append(cs, chunk{seq: uint64(i), meta: chunkMeta{modality: ModalityText}, payload: []byte(s)})
	}
	return cs
}

func TestAssemble(t *testing.T) {
	img := chunk{meta: chunkMeta{modality: ModalityImage, format: "png"}, payload: []byte{1, 2, 3}}
	audio := chunk{meta: chunkMeta{modality: ModalityAudio, format: "mp3"}, payload: []byte{4, 5}}
	cases := []struct {
		name     string
		chat     bool
		template string
		chunks   []chunk
		want     string
	}{
		{"responses: no input", false, `{"model":"m"}`, textChunks("a", "b"), `{"model":"m","input":"ab"}`},
		{"responses: string input", false, `{"model":"m","input":"Q: "}`, textChunks("<b>&"), `{"model":"m","input":"Q: <b>&"}`},
		{"responses: string input and an image", false, `{"model":"m","input":"Look: "}`, []chunk{img},
			`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Look: "},{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,AQID"}]}]}`},
		{"responses: last user message, string content", false,
			`{"model":"m","input":[{"role":"user","content":"one"},{"role":"assistant","content":"ok"},{"role":"user","content":"two "},{"type":"function_call_output","call_id":"c","output":"x"}]}`,
			textChunks("more"),
			`{"model":"m","input":[{"role":"user","content":"one"},{"role":"assistant","content":"ok"},{"role":"user","content":"two more"},{"type":"function_call_output","call_id":"c","output":"x"}]}`},
		{"responses: trailing input_text extended, audio appended", false,
			`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hear "}]}]}`,
			append(textChunks("this"), audio),
			`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hear this"},{"type":"input_audio","input_audio":{"data":"BAU=","format":"mp3"}}]}]}`},
		{"responses: no user message", false, `{"model":"m","input":[{"role":"developer","content":"d"}]}`, textChunks("hi"),
			`{"model":"m","input":[{"role":"developer","content":"d"},{"type":"message","role":"user","content":"hi"}]}`},
		{"chat: last user message", true, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"a"}]}`, textChunks("b", "c"),
			`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"abc"}]}`},
		{"chat: no messages", true, `{"model":"m"}`, append(textChunks("x"), img),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AQID"}}]}]}`},
		{"chat: parts content", true, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`, textChunks("?"),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"?"}]}]}`},
		{"new_part splits text", false, `{"model":"m"}`,
			[]chunk{{meta: chunkMeta{modality: ModalityText}, payload: []byte("a")}, {meta: chunkMeta{modality: ModalityText, newPart: true}, payload: []byte("b")}, img},
			`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"},{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,AQID"}]}]}`},
		{"new_part splits text into parts, a string input too", false, `{"model":"m","input":"Say: "}`,
			[]chunk{{meta: chunkMeta{modality: ModalityText}, payload: []byte("A")}, {meta: chunkMeta{modality: ModalityText, newPart: true}, payload: []byte("B")}},
			`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Say: A"},{"type":"input_text","text":"B"}]}]}`},
		{"chat: new_part splits a string content", true, `{"model":"m","messages":[{"role":"user","content":"Say: "}]}`,
			[]chunk{{meta: chunkMeta{modality: ModalityText}, payload: []byte("A")}, {meta: chunkMeta{modality: ModalityText, newPart: true}, payload: []byte("B")}},
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Say: A"},{"type":"text","text":"B"}]}]}`},
		{"no chunks", false, `{"model":"m","input":"x"}`, nil, `{"model":"m","input":"x"}`},
	}
	for _, c := range cases {
		got, aerr := assemble(context.Background(), c.chat, []byte(c.template), c.chunks, 0)
		if aerr != nil {
			t.Errorf("%s: %v", c.name, aerr)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	if _, aerr := assemble(context.Background(), false, []byte(`{"model":"m","input":5}`), textChunks("x"), 0); aerr == nil {
		t.Error("a numeric input was accepted")
	}
}

func TestChunkMetaRoundTrip(t *testing.T) {
	for _, m := range []chunkMeta{
		{modality: ModalityText}, {modality: ModalityText, end: true},
		{modality: ModalityAudio, format: "wav", newPart: true}, {modality: ModalityImage, format: "svg+xml", end: true, newPart: true},
	} {
		got, err := decodeMeta(m.encode())
		if err != nil || got != m {
			t.Errorf("%+v → %q → %+v, %v", m, m.encode(), got, err)
		}
	}
	if _, err := decodeMeta("video"); err == nil {
		t.Error("unknown modality decoded")
	}
}
