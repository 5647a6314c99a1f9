package translate

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// citation is a Chat url_citation annotation as OpenAI's search models send
// it, and wantCitation the Responses UrlCitationBody it becomes.
const (
	citation      = `{"type":"url_citation","url_citation":{"url":"https://example.com/a","title":"A","start_index":0,"end_index":5}}`
	citation2     = `{"type":"url_citation","url_citation":{"end_index":11,"start_index":6,"title":"B","url":"https://example.com/b"}}`
	wantCitation  = `{"type":"url_citation","url":"https://example.com/a","title":"A","start_index":0,"end_index":5}`
	wantCitation2 = `{"type":"url_citation","url":"https://example.com/b","title":"B","start_index":6,"end_index":11}`
)

// TestStreamAnnotations: url_citation annotations in a Chat stream's
// delta.annotations reach the Responses client: one
// response.output_text.annotation.added per annotation, after the text that
// came with or before it, its annotation_index counting within the part,
// and the done part, the done item and the terminal Response all list them.
// Annotations before any text wait for the text part; what is no
// url_citation, or cites no url, is not carried.
func TestStreamAnnotations(t *testing.T) {
	chunk := func(delta string) string { return `{"choices":[{"index":0,"delta":` + delta + `}]}` }
	finish := `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	for _, tc := range []struct {
		name   string
		chunks []string
		// order is the event types from the first output_text.delta to
		// output_text.done, "delta" and "annotation" for short.
		order []string
		want  []string // the part's annotations
	}{
		{"in a chunk of their own, after the text", []string{
			chunk(`{"role":"assistant","content":"Hello"}`),
			chunk(`{"content":" world"}`),
			chunk(`{"annotations":[` + citation + `,` + citation2 + `]}`),
			finish,
		}, []string{"delta", "delta", "annotation", "annotation"}, []string{wantCitation, wantCitation2}},
		{"with the text they cite", []string{
			chunk(`{"role":"assistant","content":"Hello","annotations":[` + citation + `]}`),
			chunk(`{"content":" world","annotations":[` + citation2 + `]}`),
			finish,
		}, []string{"delta", "annotation", "delta", "annotation"}, []string{wantCitation, wantCitation2}},
		{"before any text", []string{
			chunk(`{"role":"assistant","annotations":[` + citation + `]}`),
			chunk(`{"content":"Hello world"}`),
			finish,
		}, []string{"delta", "annotation"}, []string{wantCitation}},
		{"in the finish chunk", []string{
			chunk(`{"role":"assistant","content":"Hello world"}`),
			`{"choices":[{"index":0,"delta":{"annotations":[` + citation + `]},"finish_reason":"stop"}]}`,
		}, []string{"delta", "annotation"}, []string{wantCitation}},
		{"already in the Responses shape", []string{
			chunk(`{"role":"assistant","content":"Hello world","annotations":[` + wantCitation + `]}`),
			finish,
		}, []string{"delta", "annotation"}, []string{wantCitation}},
		{"no url_citation or no url: not carried", []string{
			chunk(`{"role":"assistant","content":"Hello world","annotations":[{"type":"file_citation","file_id":"f"},{"type":"url_citation","url_citation":{"title":"no url"}},7,` + citation + `]}`),
			finish,
		}, []string{"delta", "annotation"}, []string{wantCitation}},
		{"missing title and indexes are filled in", []string{
			chunk(`{"role":"assistant","content":"Hello world","annotations":[{"type":"url_citation","url_citation":{"url":"https://example.com/c"}}]}`),
			finish,
		}, []string{"delta", "annotation"}, []string{`{"type":"url_citation","url":"https://example.com/c","title":"","start_index":0,"end_index":0}`}},
		{"annotations null or not an array", []string{
			chunk(`{"role":"assistant","content":"Hello world","annotations":null}`),
			chunk(`{"annotations":{"type":"url_citation"}}`),
			finish,
		}, []string{"delta"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			events := feedChunks(t, s, tc.chunks)
			if err := validateEvents(events); err != nil {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			var order []string
			var added []string
			inText := false
			for _, e := range events {
				switch e.Type {
				case "response.output_text.delta":
					inText = true
					order = append(order, "delta")
				case "response.output_text.annotation.added":
					order = append(order, "annotation")
					r := gjson.ParseBytes(e.Data)
					if r.Get("item_id").Str != "msg_1" || r.Get("output_index").Int() != 0 || r.Get("content_index").Int() != 0 ||
						r.Get("annotation_index").Int() != int64(len(added)) {
						t.Errorf("annotation event refers elsewhere: %s", e.Data)
					}
					added = append(added, r.Get("annotation").Raw)
				case "response.output_text.done":
					inText = false
				}
				if !inText && e.Type == "response.output_text.annotation.added" {
					t.Errorf("annotation event outside the text: %s", e.Data)
				}
			}
			if strings.Join(order, ",") != strings.Join(tc.order, ",") {
				t.Errorf("events %v, want %v\n%s", order, tc.order, dumpEvents(events))
			}
			if strings.Join(added, ",") != strings.Join(tc.want, ",") {
				t.Errorf("annotation events carried %v, want %v", added, tc.want)
			}
			last := events[len(events)-1]
			if last.Type != "response.completed" {
				t.Fatalf("terminal %s", last.Type)
			}
			got := gjson.GetBytes(last.Data, "response.output.0.content.0.annotations").Raw
			if want := "[" + strings.Join(tc.want, ",") + "]"; got != want {
				t.Errorf("the Response's part has annotations %s, want %s", got, want)
			}
			if got := gjson.GetBytes(s.OutputItems()[0], "content.0.annotations").Raw; got != "["+strings.Join(tc.want, ",")+"]" {
				t.Errorf("the stored item's part has annotations %s", got)
			}
		})
	}
}

// TestCompletionAnnotations: a non-streamed chat.completion's
// message.annotations are the output_text part's annotations, in the
// Response (FromChatResponse) and in the events Completion renders of it.
func TestCompletionAnnotations(t *testing.T) {
	message := func(extra string) string {
		return `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Hello world"` + extra + `}}]}`
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"two citations", message(`,"annotations":[` + citation + `,` + citation2 + `]`), `[` + wantCitation + `,` + wantCitation2 + `]`},
		{"before the content", `{"choices":[{"index":0,"finish_reason":"stop","message":{"annotations":[` + citation + `],"role":"assistant","content":"Hello world"}}]}`, `[` + wantCitation + `]`},
		{"empty", message(`,"annotations":[]`), `[]`},
		{"none", message(``), `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, out, aerr, _ := FromChatResponse([]byte(tc.body), testStreamOptions())
			if aerr != nil {
				t.Fatal(aerr)
			}
			if got := gjson.GetBytes(resp, "output.0.content.0.annotations").Raw; got != tc.want {
				t.Errorf("Response part annotations %s, want %s", got, tc.want)
			}
			if got := gjson.GetBytes(out[0], "content.0.annotations").Raw; got != tc.want {
				t.Errorf("stored item annotations %s, want %s", got, tc.want)
			}
			s := NewStream(testStreamOptions())
			events, err := s.Completion([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if err := validateEvents(events); err != nil {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			n := 0
			for _, e := range events {
				if e.Type == "response.output_text.annotation.added" {
					n++
				}
			}
			if want := len(gjson.Parse(tc.want).Array()); n != want {
				t.Errorf("%d annotation events, want %d", n, want)
			}
			if got := gjson.GetBytes(events[len(events)-1].Data, "response.output.0.content.0.annotations").Raw; got != tc.want {
				t.Errorf("terminal part annotations %s, want %s", got, tc.want)
			}
		})
	}
}
