package sent_test

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/sent"
)

// TestRenderedPartsCarryWhatTheSpecRequires: a part the upstream described
// minimally ({"type":"output_text","text":""}, as vLLM's and llama.cpp's
// Responses servers send) is rendered in a Response with every member the
// spec requires of its type (OutputTextContent: annotations and logprobs;
// RefusalContent: refusal; ReasoningTextContent, SummaryTextContent: text),
// whether the item is still open (its added part, its part's done form) or
// done; the members the upstream did send stay as they came.
func TestRenderedPartsCarryWhatTheSpecRequires(t *testing.T) {
	at := `"item_id":"it_1","output_index":0`
	msgAdded := `{"type":"response.output_item.added","output_index":0,"item":{"id":"it_1","type":"message","role":"assistant","status":"in_progress","content":[]}}`
	reasoningAdded := `{"type":"response.output_item.added","output_index":0,"item":{"id":"it_1","type":"reasoning","summary":[]}}`
	for _, c := range []struct {
		name   string
		events []string
		path   string // of the part in the Response
		want   string // the part as rendered
	}{
		{"open output_text, minimal", []string{msgAdded,
			`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"output_text","text":""}}`,
			`{"type":"response.output_text.delta",` + at + `,"content_index":0,"delta":"Hi"}`},
			"output.0.content.0", `{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}`},
		{"open output_text keeps the upstream's annotations and logprobs", []string{msgAdded,
			`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"output_text","text":"","annotations":[{"type":"x"}],"logprobs":[{"token":"a"}]}}`,
			`{"type":"response.output_text.delta",` + at + `,"content_index":0,"delta":"Hi"}`},
			"output.0.content.0", `{"type":"output_text","text":"Hi","annotations":[{"type":"x"}],"logprobs":[{"token":"a"}]}`},
		{"open output_text without a text, nothing streamed", []string{msgAdded,
			`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"output_text"}}`},
			"output.0.content.0", `{"type":"output_text","text":"","annotations":[],"logprobs":[]}`},
		{"open output_text lists the annotations the readers were sent", []string{msgAdded,
			`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"output_text","text":""}}`,
			`{"type":"response.output_text.delta",` + at + `,"content_index":0,"delta":"See"}`,
			`{"type":"response.output_text.annotation.added",` + at + `,"content_index":0,"annotation_index":0,"annotation":{"type":"url_citation","url":"https://a.example","title":"A","start_index":0,"end_index":3}}`,
			`{"type":"response.output_text.annotation.added",` + at + `,"content_index":0,"annotation_index":1,"annotation":{"type":"url_citation","url":"https://b.example","title":"B","start_index":0,"end_index":3}}`},
			"output.0.content.0", `{"type":"output_text","text":"See","annotations":[{"type":"url_citation","url":"https://a.example","title":"A","start_index":0,"end_index":3},{"type":"url_citation","url":"https://b.example","title":"B","start_index":0,"end_index":3}],"logprobs":[]}`},
		{"open refusal, minimal", []string{msgAdded,
			`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"refusal"}}`,
			`{"type":"response.refusal.delta",` + at + `,"content_index":0,"delta":"No"}`},
			"output.0.content.0", `{"type":"refusal","refusal":"No"}`},
		{"part done, minimal", []string{msgAdded,
			`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"output_text","text":""}}`,
			`{"type":"response.content_part.done",` + at + `,"content_index":0,"part":{ "type":"output_text","text":"Hi" }}`},
			"output.0.content.0", `{ "type":"output_text","text":"Hi","annotations":[],"logprobs":[]}`},
		{"item done, minimal parts", []string{msgAdded,
			`{"type":"response.output_item.done","output_index":0,"item":{"id":"it_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi","annotations":[]},{"type":"refusal"}]}}`},
			"output.0.content", `[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]},{"type":"refusal","refusal":""}]`},
		{"item done, complete parts", []string{msgAdded,
			`{"type":"response.output_item.done","output_index":0,"item":{"id":"it_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}]}}`},
			"output.0.content", `[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}]`},
		{"reasoning done, minimal parts", []string{reasoningAdded,
			`{"type":"response.output_item.done","output_index":0,"item":{"id":"it_1","type":"reasoning","summary":[{"type":"summary_text"}],"content":[{"type":"reasoning_text"}]}}`},
			"output.0", `{"id":"it_1","type":"reasoning","summary":[{"type":"summary_text","text":""}],"content":[{"type":"reasoning_text","text":""}]}`},
		{"a part of a type the spec does not describe here stays as it came", []string{msgAdded,
			`{"type":"response.output_item.done","output_index":0,"item":{"id":"it_1","type":"message","role":"assistant","status":"completed","content":[{"type":"x_audio"},{}]}}`},
			"output.0.content", `[{"type":"x_audio"},{}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o sent.Output
			for _, ev := range c.events {
				o.Track(fields(ev))
			}
			b := o.AppendResponse(nil, &sent.Response{ID: "resp_1", Status: "failed", Model: "m"})
			if !gjson.ValidBytes(b) {
				t.Fatalf("invalid Response: %s", b)
			}
			if got := gjson.GetBytes(b, c.path).Raw; got != c.want {
				t.Fatalf("%s = %s\nwant %s", c.path, got, c.want)
			}
		})
	}
}

// TestCompletePart: the members a part lacks are added after the ones it
// has, without disturbing them (nested objects included); a complete part,
// or anything that is not a part the spec describes, comes back as it is.
func TestCompletePart(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"type":"output_text","text":"a"}`, `{"type":"output_text","text":"a","annotations":[],"logprobs":[]}`},
		{`{"type":"output_text","text":"}","annotations":[{"x":{}}]}`, `{"type":"output_text","text":"}","annotations":[{"x":{}}],"logprobs":[]}`},
		{` {"type":"output_text","logprobs":null} `, `{"type":"output_text","logprobs":null,"text":"","annotations":[]}`},
		{`{"type":"refusal"}`, `{"type":"refusal","refusal":""}`},
		{`{"type":"reasoning_text"}`, `{"type":"reasoning_text","text":""}`},
		{`{"type":"summary_text","text":"s"}`, `{"type":"summary_text","text":"s"}`},
		{`{"type":"output_text","text":"","annotations":[],"logprobs":[]}`, `{"type":"output_text","text":"","annotations":[],"logprobs":[]}`},
		{`{"type":"input_text"}`, `{"type":"input_text"}`},
		{`{}`, `{}`},
		{`null`, `null`},
		{`"output_text"`, `"output_text"`},
	} {
		if got := string(sent.CompletePart([]byte(c.in))); got != c.want {
			t.Errorf("CompletePart(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}
