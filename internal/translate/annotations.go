package translate

import (
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/jsonx"
)

// This file carries a Chat answer's url_citation annotations (search models'
// citations, message.annotations or a chunk's delta.annotations) onto the
// output_text part of the translation, in the Responses shape: the part's
// annotations array, and one response.output_text.annotation.added event
// per annotation as it is attached (README "Chat-Completions-only
// upstreams").

// appendURLCitation appends a Chat annotation as a Responses url_citation
// ({"type":"url_citation","url","title","start_index","end_index"}, the
// spec's UrlCitationBody) and reports whether a was one. Chat nests the
// fields in a url_citation object; an annotation already in the flat
// Responses shape is read alike. One without a url cites nothing and is not
// carried; a missing title is "" and a missing index 0, which the schema
// requires. The indexes are kept as the upstream gave them: offsets into
// the message's text, which is the part's text.
func appendURLCitation(b []byte, a gjson.Result) ([]byte, bool) {
	if !a.IsObject() || a.Get("type").Str != "url_citation" {
		return b, false
	}
	src := a
	if c := a.Get("url_citation"); c.IsObject() {
		src = c
	}
	url := src.Get("url")
	if !nonEmptyString(url) {
		return b, false
	}
	b = append(b, `{"type":"url_citation","url":`...)
	b = jsonx.AppendQuote(b, url.Str)
	b = append(b, `,"title":`...)
	b = jsonx.AppendQuote(b, src.Get("title").Str)
	for _, k := range [...]string{"start_index", "end_index"} {
		b = appendKey(b, k)
		b = appendInt(b, src.Get(k).Int())
	}
	return append(b, '}'), true
}

// annotate takes a Chat delta's (or message's) annotations: they belong to
// the open output_text part, or, while none is open (they came before the
// text, or with text still held: holdText), wait for the next one
// (attachAnnotations).
func (s *Stream) annotate(list gjson.Result) {
	list.ForEach(func(_, a gjson.Result) bool {
		if b, ok := appendURLCitation(nil, a); ok {
			s.pendingAnnotations = append(s.pendingAnnotations, b)
		}
		return true
	})
	s.attachAnnotations()
}

// attachAnnotations adds the waiting annotations to the open output_text
// part of the open message, each announced by its annotation.added event
// after the text sent so far.
func (s *Stream) attachAnnotations() {
	it := s.cur
	if len(s.pendingAnnotations) == 0 || it == nil || it.kind != kindMessage || len(it.parts) == 0 {
		return
	}
	ci := len(it.parts) - 1
	p := it.parts[ci]
	if !p.open || p.kind != partText {
		return
	}
	for _, a := range s.pendingAnnotations {
		const typ = "response.output_text.annotation.added"
		b := s.begin(typ, 160+len(a))
		b = s.appendRef(b, it, ci)
		b = append(b, `,"annotation_index":`...)
		b = appendInt(b, int64(len(p.annotations)))
		b = append(b, `,"annotation":`...)
		b = append(b, a...)
		s.end(typ, b)
		p.annotations = append(p.annotations, a)
	}
	s.pendingAnnotations = s.pendingAnnotations[:0]
}

// appendAnnotations appends a part's annotations as a JSON array.
func appendAnnotations(b []byte, list [][]byte) []byte {
	b = append(b, '[')
	for k, a := range list {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, a...)
	}
	return append(b, ']')
}
