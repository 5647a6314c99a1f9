package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// The spec's schemas for an annotation (OpenAI's OpenAPI spec,
// components.schemas UrlCitationBody and
// ResponseOutputTextAnnotationAddedEvent, the annotation narrowed to the one
// kind a Chat answer carries), which the subset in testdata leaves out.
const (
	urlCitationSchema = `{"type":"object","required":["type","url","start_index","end_index","title"],"properties":{
		"type":{"type":"string","enum":["url_citation"]},"url":{"type":"string"},"start_index":{"type":"integer"},
		"end_index":{"type":"integer"},"title":{"type":"string"}}}`
	annotationAddedSchema = `{"type":"object","required":["type","item_id","output_index","content_index","annotation_index","annotation","sequence_number"],
		"properties":{"type":{"type":"string","enum":["response.output_text.annotation.added"]},"item_id":{"type":"string"},
		"output_index":{"type":"integer"},"content_index":{"type":"integer"},"annotation_index":{"type":"integer"},
		"sequence_number":{"type":"integer"},"annotation":{"$ref":"#/UrlCitationBody"}}}`
)

// A Chat upstream's url_citation annotations (a search model's citations)
// reach a Responses client, streamed and JSON: each one
// response.output_text.annotation.added event, after the text it cites,
// pointing at the text part, and the part in the done events and in the
// terminal Response lists them in the Responses shape — every event and the
// Response valid by OpenAI's spec.
func TestChatUpstreamAnnotationsReachTheResponsesClient(t *testing.T) {
	spec := loadSpec(t)
	spec.Schemas["UrlCitationBody"] = json.RawMessage(urlCitationSchema)
	spec.Schemas["ResponseOutputTextAnnotationAddedEvent"] = json.RawMessage(annotationAddedSchema)
	v := &validator{spec: spec, cache: map[string]*schema{}}
	valid := func(t *testing.T, name string, raw string) {
		t.Helper()
		var x any
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&x); err != nil {
			t.Fatal(err)
		}
		if errs := v.validate(&schema{Ref: "#/" + name}, x, "$"); len(errs) > 0 {
			t.Errorf("%s breaks the spec: %v\n%s", name, errs, raw)
		}
	}
	const (
		chatA = `{"type":"url_citation","url_citation":{"url":"https://example.com/a","title":"A","start_index":0,"end_index":5}}`
		chatB = `{"type":"url_citation","url_citation":{"url":"https://example.com/b","title":"B","start_index":6,"end_index":11}}`
		wantA = `{"type":"url_citation","url":"https://example.com/a","title":"A","start_index":0,"end_index":5}`
		wantB = `{"type":"url_citation","url":"https://example.com/b","title":"B","start_index":6,"end_index":11}`
	)
	want := "[" + wantA + "," + wantB + "]"
	// The text and its citations as a Chat upstream streams them, before
	// its answer ends (or is cut).
	cited := []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"content":" world"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"annotations":[` + chatA + `,` + chatB + `]},"finish_reason":null}]`),
	}
	checkResponse := func(t *testing.T, resp gjson.Result) {
		t.Helper()
		part := resp.Get("output.0.content.0")
		if part.Get("text").Str != "Hello world" || part.Get("annotations").Raw != want {
			t.Errorf("the Response's text part is %s, want text %q and annotations %s", part.Raw, "Hello world", want)
		}
		valid(t, "Response", resp.Raw)
		part.Get("annotations").ForEach(func(_, a gjson.Result) bool {
			valid(t, "UrlCitationBody", a.Raw)
			return true
		})
	}

	t.Run("stream", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: slices.Concat(cited,
			[]upstreamtest.Frame{chatChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`), chatDone})})
		resp, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"search","stream":true}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		last := assertOneTerminal(t, evs)
		if v, c := validateTerminal(t, spec, last.data); len(v)+len(c) > 0 {
			t.Fatalf("terminal event breaks the spec: %v %v\n%s", v, c, last.data)
		}
		var item, added []string
		text := ""
		for _, ev := range evs {
			r := gjson.ParseBytes(ev.data)
			switch ev.typ {
			case "response.output_item.added":
				item = append(item, r.Get("item.id").Str)
			case "response.output_text.delta":
				text += r.Get("delta").Str
			case "response.output_text.annotation.added":
				valid(t, "ResponseOutputTextAnnotationAddedEvent", string(ev.data))
				if len(item) != 1 || r.Get("item_id").Str != item[0] || r.Get("output_index").Int() != 0 ||
					r.Get("content_index").Int() != 0 || r.Get("annotation_index").Int() != int64(len(added)) {
					t.Errorf("the annotation event points elsewhere than the text part: %s", ev.data)
				}
				if text != "Hello world" {
					t.Errorf("an annotation event before the text it cites (text so far %q): %s", text, ev.data)
				}
				added = append(added, r.Get("annotation").Raw)
			case "response.content_part.done", "response.output_item.done":
				a := r.Get("part.annotations")
				if ev.typ == "response.output_item.done" {
					a = r.Get("item.content.0.annotations")
				}
				if a.Raw != want {
					t.Errorf("%s lists annotations %s, want %s", ev.typ, a.Raw, want)
				}
			}
		}
		if got := "[" + strings.Join(added, ",") + "]"; got != want {
			t.Errorf("annotation events carried %s, want %s", got, want)
		}
		checkResponse(t, gjson.GetBytes(last.data, "response"))
	})

	t.Run("cut after the annotations", func(t *testing.T) {
		// The Response the gateway writes itself (response.failed) lists the
		// citations its client was shown, as its text part's annotations.
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: cited, End: upstreamtest.EndCut})
		_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"search","stream":true}`)
		last := assertOneTerminal(t, evs)
		if last.typ != "response.failed" {
			t.Fatalf("terminal %s, want response.failed", last.typ)
		}
		part := gjson.GetBytes(last.data, "response.output.0.content.0")
		if part.Get("text").Str != "Hello world" || part.Get("annotations").Raw != want {
			t.Errorf("response.failed's text part is %s, want the text and annotations %s sent", part.Raw, want)
		}
		if v, c := validateTerminal(t, spec, last.data); len(v)+len(c) > 0 {
			t.Errorf("terminal event breaks the spec: %v %v\n%s", v, c, last.data)
		}
	})

	t.Run("json", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{Body: []byte(`{"id":"chatcmpl-a","object":"chat.completion","created":1,"model":"gpt-fake-1","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"Hello world","refusal":null,"annotations":[` + chatA + `,` + chatB + `]},"logprobs":null,"finish_reason":"stop"}]}`)})
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"search"}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		checkResponse(t, gjson.ParseBytes(raw))
	})
}

// A Chat client keeps a Chat upstream's annotations as they came: streamed
// in delta.annotations, in message.annotations of a JSON answer, and in
// delta.annotations of the chunks a whole chat.completion answering a
// stream is made into (chatCompletionChunks).
func TestChatClientKeepsAnnotations(t *testing.T) {
	const citation = `{"type":"url_citation","url_citation":{"url":"https://example.com/a","title":"A","start_index":0,"end_index":5}}`
	completion := []byte(`{"id":"chatcmpl-a","object":"chat.completion","created":1,"model":"gpt-fake-1","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Hello world","annotations":[` + citation + `]},"logprobs":null,"finish_reason":"stop"}]}`)
	streamed := func(t *testing.T, script upstreamtest.Script) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(script)
		_, evs := postWith(t, h, "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
		var got []string
		for _, ev := range evs {
			gjson.GetBytes(ev.Data, "choices.0.delta.annotations").ForEach(func(_, a gjson.Result) bool {
				got = append(got, a.Raw)
				return true
			})
		}
		if strings.Join(got, ",") != citation {
			t.Fatalf("the client got annotations %v, want %s", got, citation)
		}
	}
	t.Run("stream", func(t *testing.T) {
		streamed(t, upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
			chatChunk(`[{"index":0,"delta":{"role":"assistant","content":"Hello world"},"finish_reason":null}]`),
			chatChunk(`[{"index":0,"delta":{"annotations":[` + citation + `]},"finish_reason":"stop"}]`),
			chatDone,
		}})
	})
	t.Run("stream answered with a chat.completion", func(t *testing.T) {
		streamed(t, upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
			ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame(completion)}})
	})
	t.Run("json", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{Body: completion})
		resp := h.post("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := gjson.GetBytes(raw, "choices.0.message.annotations").Raw; got != "["+citation+"]" {
			t.Fatalf("the client got annotations %s: %s", got, raw)
		}
	})
}
