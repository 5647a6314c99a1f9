// Package sent follows what the readers of a Responses stream were sent and
// renders the Response object of a terminal (or opening) event written on
// the stream's behalf, so that the event agrees with what came before it
// (README, "What it promises": a response.failed Sluice writes carries a
// complete Response object whose output holds the items already streamed).
//
// Two writers need it: the gateway's client stream (gateway/clientstream.go),
// which follows every event it relays, and a streaming-input session
// (gateway/streaminput), which follows the events it captured of an answer
// and writes a response.failed to readers that lose it. Each reads the events'
// top-level fields its own way and hands them over as Fields.
package sent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/translate"
)

// Fields are the top-level fields of a Responses event that Output.Track
// reads. They may alias the event: whatever is kept is copied.
type Fields struct {
	Type, OutputIndex, ContentIndex, SummaryIndex, ItemID gjson.Result
	Delta, Item, Part, Response                           gjson.Result
	Annotation                                            gjson.Result // response.output_text.annotation.added's

	// located: Refers looked up the item (item) and part (part) the event
	// is about, which Track then uses rather than looking again.
	located bool
	item    *Item
	part    *Part
	// Late: Refers refused the event because it adds to output the
	// readers were told is done, or adds again an item or part they have
	// (not because it names output they never got).
	Late bool
}

// Read fills f from the top-level members of ev, a parsed JSON object (for
// a reader that has no one-pass scanner of its own). A later duplicate key
// wins.
func (f *Fields) Read(ev gjson.Result) {
	ev.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			f.Type = v
		case "output_index":
			f.OutputIndex = v
		case "content_index":
			f.ContentIndex = v
		case "summary_index":
			f.SummaryIndex = v
		case "item_id":
			f.ItemID = v
		case "delta":
			f.Delta = v
		case "item":
			f.Item = v
		case "part":
			f.Part = v
		case "response":
			f.Response = v
		case "annotation":
			f.Annotation = v
		}
		return true
	})
}

// Output is what the readers of a Responses stream were sent.
type Output struct {
	Base  []byte  // the Response object of the last lifecycle event, as it was sent
	Items []*Item // the output items, in the order they were added
	Usage []byte  // the usage, once known (a terminal event's, or its writer's)
}

// Item is one output item as the readers saw it.
type Item struct {
	Index int64 // output_index, as the readers were sent it
	// Upstream is the output_index the upstream that added the item gave
	// it, by which that upstream's later events name it (UpstreamItemOf):
	// a writer that gives its readers a numbering of their own sets it
	// (the gateway's client stream: docs/ARCHITECTURE.md §3); Track makes
	// it Index.
	Upstream int64
	ID       string // item id
	Type     string // message, reasoning, function_call, …
	Added    []byte // the item as output_item.added showed it
	Done     []byte // the item as output_item.done showed it; nil while open
	Parts    []*Part
	Summary  []*Part // reasoning summary parts
	Args     []byte  // function_call arguments / custom tool input so far, JSON-escaped without quotes
	// ArgsDone: the readers got the done event of its arguments or input
	// (response.function_call_arguments.done, custom_tool_call_input.done).
	ArgsDone bool
	Edited   bool // the gateway's stream hook dropped or replaced an event about it
}

// Part is one content (or summary) part as the readers saw it.
type Part struct {
	Index int64
	Added []byte // the part as *_part.added showed it
	Done  []byte // the part as *_part.done showed it; nil while open
	// TextDone: the readers got the done event of its text
	// (response.output_text.done, refusal.done, reasoning_text.done,
	// reasoning_summary_text.done), which may come before Done.
	TextDone bool
	Text     []byte // its text so far, JSON-escaped without quotes
	// Annotations are the annotations the readers got for it
	// (response.output_text.annotation.added), comma-separated JSON: a part
	// the gateway renders before its done event lists them, or its
	// annotations would take back citations the readers were shown.
	Annotations []byte
	Edited      bool // the gateway's stream hook dropped or replaced an event about it
}

// WithAnnotations returns part, a rendering of p, listing the annotations
// the readers got for p (its annotations member replaced); part itself when
// they got none.
func (p *Part) WithAnnotations(part []byte) []byte {
	if len(p.Annotations) == 0 {
		return part
	}
	if out, err := sjson.SetRawBytes(part, "annotations", append(append([]byte{'['}, p.Annotations...), ']')); err == nil {
		return out
	}
	return part
}

// AnnotationCount is how many annotations the readers got for p: the
// annotation_index the next one of the part is given.
func (p *Part) AnnotationCount() int {
	if len(p.Annotations) == 0 {
		return 0
	}
	return int(gjson.Parse("[" + string(p.Annotations) + "]").Get("#").Int())
}

// Complete reports whether the readers were told the part's text is final:
// they got its text's done event or its part's. No more text may go into it.
func (p *Part) Complete() bool { return p.Done != nil || p.TextDone }

// Refers reports whether an event names only output the readers were sent
// and can still grow: its output_index, content_index and summary_index,
// where it has them, are not negative, and its item (by item_id, else
// output_index) and part (for an event about a part's content) are ones
// the readers got added; an event adding to an item, part or arguments the
// readers were told is done (Item.Done, Part.Complete, Item.ArgsDone), and
// an output_item.added or part added event re-using an item id or part
// index the readers got, do not refer. An event that names other output is
// not about this response's output: relayed, a reader's text would
// contradict the terminal Response (and a reader indexing its output by
// output_index fails). Lifecycle and terminal events always refer. What it
// looks up is kept in f for Track, so an event's item is looked up once
// (docs/ARCHITECTURE.md §11).
func (o *Output) Refers(f *Fields) bool {
	ok, late := o.refers(f)
	f.Late = !ok && late
	return ok
}

// refers is Refers, and whether a refusal is for lateness (Fields.Late).
func (o *Output) refers(f *Fields) (ok, late bool) {
	typ := f.Type.Str
	if RefersAlways(typ) {
		return true, false
	}
	if typ == "response.output_item.added" {
		// New output, unless its id is one the readers already have: its
		// events would be filed under (and its text shown in) the first.
		return o.itemNamed(f) == nil, true
	}
	for _, idx := range [...]gjson.Result{f.OutputIndex, f.ContentIndex, f.SummaryIndex} {
		if idx.Exists() && (idx.Type != gjson.Number || idx.Num < 0) {
			return false, false
		}
	}
	if !f.OutputIndex.Exists() && !f.ItemID.Exists() && !f.Item.IsObject() {
		return true, false // about no item
	}
	f.located = true
	if f.item = o.ItemOf(f); f.item == nil {
		return false, false
	}
	if f.item.Done != nil && grows(typ) {
		return false, true // the readers have the item's final form
	}
	// The part, looked up as Track looks it up. An event without the
	// index, or about the first part of an item that was shown no part at
	// all (a lax upstream that never announces its parts: Track records
	// the part its text goes into, impliedPart), keeps being relayed as it
	// was: an index outside the parts an item was shown is the
	// contradiction.
	switch typ {
	case "response.content_part.added":
		return o.PartOf(true, f) == nil, true // a new part, not one the readers got
	case "response.reasoning_summary_part.added":
		return o.PartOf(false, f) == nil, true
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		return !f.item.ArgsDone, true
	case "response.reasoning_summary_part.done", "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done":
		f.part = o.PartOf(false, f)
		if f.part != nil {
			return !grows(typ) || !f.part.Complete(), true
		}
		return !f.SummaryIndex.Exists() || len(f.item.Summary) == 0 && f.SummaryIndex.Int() == 0, false
	}
	if f.ContentIndex.Exists() || tracksContentPart(typ) {
		f.part = o.PartOf(true, f)
		if f.part != nil {
			return !grows(typ) || !f.part.Complete(), true
		}
		return !f.ContentIndex.Exists() || len(f.item.Parts) == 0 && f.ContentIndex.Int() == 0, false
	}
	return true, false
}

// grows reports whether an event of type typ adds output to its item:
// text, arguments, an annotation or a part. Relayed once the readers were
// told the item (or part) is done, it would give them output the terminal
// Response, built from the done forms, does not have.
func grows(typ string) bool {
	switch typ {
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
		"response.reasoning_summary_text.delta", "response.function_call_arguments.delta",
		"response.custom_tool_call_input.delta", "response.output_text.annotation.added",
		"response.content_part.added", "response.reasoning_summary_part.added":
		return true
	}
	return false
}

// RefersAlways reports whether every event of type typ refers (Refers):
// lifecycle and terminal events.
func RefersAlways(typ string) bool {
	switch typ {
	case "response.created", "response.in_progress", "response.queued", "response.completed", "response.incomplete",
		"response.failed", "error":
		return true
	}
	return false
}

// tracksContentPart reports whether Track files an event of type typ
// under a content part (PartOf(true, …)).
func tracksContentPart(typ string) bool {
	switch typ {
	case "response.content_part.done", "response.output_text.done", "response.refusal.done", "response.reasoning_text.done",
		"response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
		"response.output_text.annotation.added":
		return true
	}
	return false
}

// itemOf is ItemOf, as Refers found it when it looked.
func (o *Output) itemOf(f *Fields) *Item {
	if f.located {
		return f.item
	}
	return o.ItemOf(f)
}

// partOf is PartOf, as Refers found it when it looked.
func (o *Output) partOf(content bool, f *Fields) *Part {
	if f.located {
		return f.part
	}
	return o.PartOf(content, f)
}

// Track records what an event the readers got said about the output.
// lifecycle reports a lifecycle event whose Response became the base.
func (o *Output) Track(f *Fields) (lifecycle bool) {
	switch typ := f.Type.Str; typ {
	case "response.created", "response.in_progress", "response.queued":
		if f.Response.IsObject() {
			o.Base = append(o.Base[:0], f.Response.Raw...)
			return true
		}
	case "response.output_item.added":
		if f.Item.IsObject() {
			idx := f.OutputIndex.Int()
			o.Items = append(o.Items, &Item{Index: idx, Upstream: idx, Added: []byte(f.Item.Raw),
				ID: strings.Clone(f.Item.Get("id").String()), Type: strings.Clone(f.Item.Get("type").String())})
		}
	case "response.output_item.done":
		if it := o.itemOf(f); it != nil && f.Item.IsObject() {
			it.Done = []byte(f.Item.Raw)
		}
	case "response.content_part.added", "response.reasoning_summary_part.added":
		if it := o.itemOf(f); it != nil && f.Part.IsObject() {
			p := &Part{Added: []byte(f.Part.Raw)}
			if typ == "response.content_part.added" {
				p.Index = f.ContentIndex.Int()
				it.Parts = append(it.Parts, p)
			} else {
				p.Index = f.SummaryIndex.Int()
				it.Summary = append(it.Summary, p)
			}
		}
	case "response.content_part.done", "response.reasoning_summary_part.done":
		if p := o.partOf(typ == "response.content_part.done", f); p != nil && f.Part.IsObject() {
			p.Done = []byte(f.Part.Raw)
		}
	case "response.output_text.done", "response.refusal.done", "response.reasoning_text.done":
		if p := o.partOf(true, f); p != nil {
			p.TextDone = true
		}
	case "response.reasoning_summary_text.done":
		if p := o.partOf(false, f); p != nil {
			p.TextDone = true
		}
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
		if p := o.partOf(true, f); p != nil && f.Delta.Type == gjson.String {
			p.Text = append(p.Text, f.Delta.Raw[1:len(f.Delta.Raw)-1]...)
		} else if p := o.impliedPart(true, f); p != nil {
			p.Text = append(p.Text, f.Delta.Raw[1:len(f.Delta.Raw)-1]...)
		}
	case "response.output_text.annotation.added":
		if p := o.partOf(true, f); p != nil && f.Annotation.IsObject() {
			if len(p.Annotations) > 0 {
				p.Annotations = append(p.Annotations, ',')
			}
			p.Annotations = append(p.Annotations, f.Annotation.Raw...)
		}
	case "response.reasoning_summary_text.delta":
		if p := o.partOf(false, f); p != nil && f.Delta.Type == gjson.String {
			p.Text = append(p.Text, f.Delta.Raw[1:len(f.Delta.Raw)-1]...)
		} else if p := o.impliedPart(false, f); p != nil {
			p.Text = append(p.Text, f.Delta.Raw[1:len(f.Delta.Raw)-1]...)
		}
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		if it := o.itemOf(f); it != nil && f.Delta.Type == gjson.String {
			it.Args = append(it.Args, f.Delta.Raw[1:len(f.Delta.Raw)-1]...)
		}
	case "response.function_call_arguments.done", "response.custom_tool_call_input.done":
		if it := o.itemOf(f); it != nil {
			it.ArgsDone = true
		}
	case "response.completed", "response.incomplete", "response.failed":
		if u := f.Response.Get("usage"); u.IsObject() {
			o.Usage = append(o.Usage[:0], u.Raw...)
		}
	}
	return false
}

// impliedPart records, for a text delta (content, else summary) about an
// open item the readers were shown no part of (content, else summary) at
// all, the part its text goes into (impliedPartOf). A lax upstream that
// never announces its parts has such deltas relayed (Refers), so the
// Response the gateway renders from what it sent (a response.failed, a
// rebuilt terminal, a continuation's prefill) must hold their text. Nil
// when the delta is not such a one.
func (o *Output) impliedPart(content bool, f *Fields) *Part {
	it := o.itemOf(f)
	typ, idx, ok := impliedPartOf(it, content, f)
	if !ok {
		return nil
	}
	p := &Part{Index: idx, Added: impliedPartAdded(typ)}
	if content {
		it.Parts = append(it.Parts, p)
	} else {
		it.Summary = append(it.Summary, p)
	}
	return p
}

// impliedPartOf is the part a text delta f (content, else summary) about
// item it goes into when its upstream never announced one: for an open
// item shown no part of that kind at all, an output_text, refusal,
// reasoning_text or summary_text part (as the delta's type says) at the
// delta's index (0 without one). ok false when the delta needs none.
func impliedPartOf(it *Item, content bool, f *Fields) (typ string, idx int64, ok bool) {
	if it == nil || it.Done != nil || f.Delta.Type != gjson.String {
		return "", 0, false
	}
	parts, at := it.Parts, f.ContentIndex
	typ = "output_text"
	switch f.Type.Str {
	case "response.output_text.delta":
	case "response.refusal.delta":
		typ = "refusal"
	case "response.reasoning_text.delta":
		typ = "reasoning_text"
	case "response.reasoning_summary_text.delta":
		parts, at, typ = it.Summary, f.SummaryIndex, "summary_text"
	default:
		return "", 0, false
	}
	if content != (typ != "summary_text") || len(parts) > 0 || at.Exists() && (at.Type != gjson.Number || at.Num < 0) {
		return "", 0, false
	}
	return typ, at.Int(), true
}

// impliedPartAdded is the added form of a part of type typ its upstream
// never announced (impliedPart): empty, with the members the spec requires
// of its type (CompletePart).
func impliedPartAdded(typ string) []byte {
	return CompletePart(append(jsonx.AppendQuote([]byte(`{"type":`), typ), '}'))
}

// ImpliedPartEvent is, for a text delta f that Refers accepted and that
// goes into a part its upstream never announced (impliedPartOf), the data
// of the part added event (response.content_part.added,
// response.reasoning_summary_part.added) that announces the part, without
// a sequence_number; nil for any other event. A writer relays it ahead of
// the delta: a reader that accumulates the stream (the OpenAI SDKs' stream
// helpers) looks the delta's part up and fails without it, and once
// relayed it is the part Track records, as the Response the writer renders
// shows it. Any other event costs a switch on its type.
func (o *Output) ImpliedPartEvent(f *Fields) []byte {
	var content bool
	switch f.Type.Str {
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
		content = true
	case "response.reasoning_summary_text.delta":
	default:
		return nil
	}
	it := f.item // Refers looked it up
	if it == nil {
		it = o.ItemOf(f)
	}
	typ, idx, ok := impliedPartOf(it, content, f)
	if !ok {
		return nil
	}
	b := []byte(`{"type":"response.content_part.added","item_id":`)
	if !content {
		b = []byte(`{"type":"response.reasoning_summary_part.added","item_id":`)
	}
	b = jsonx.AppendQuote(b, it.ID)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, it.Index, 10)
	if content {
		b = append(b, `,"content_index":`...)
	} else {
		b = append(b, `,"summary_index":`...)
	}
	b = strconv.AppendInt(b, idx, 10)
	b = append(b, `,"part":`...)
	b = append(b, impliedPartAdded(typ)...)
	return append(b, '}')
}

// ItemOf is the item an event is about: the one its item_id (or, for
// response.output_item.done, its item's id) names, else the latest at its
// output_index. By id first because an upstream may number two items alike
// (docs/ARCHITECTURE.md §3): by index alone, the second item's parts would
// be filed under the first.
func (o *Output) ItemOf(f *Fields) *Item {
	if it := o.itemNamed(f); it != nil {
		return it
	}
	return o.ItemAt(f.OutputIndex)
}

// UpstreamItemOf is ItemOf for an event numbered as the upstream that
// added the items numbered them (Item.Upstream), before its writer gave it
// the readers' numbering: the item its id names, else the latest the
// upstream put at its output_index.
func (o *Output) UpstreamItemOf(f *Fields) *Item {
	if it := o.itemNamed(f); it != nil {
		return it
	}
	return o.latestAt(f.OutputIndex, true)
}

// itemNamed is the item an event's item_id (for output_item.done, its
// item's id) names; nil when it names none.
func (o *Output) itemNamed(f *Fields) *Item {
	id := f.ItemID
	if f.Item.IsObject() {
		id = f.Item.Get("id")
	}
	if id.Type == gjson.String && id.Str != "" {
		for k := len(o.Items) - 1; k >= 0; k-- {
			if o.Items[k].ID == id.Str {
				return o.Items[k]
			}
		}
	}
	return nil
}

// ItemAt is the item at output index idx; with two at one index, the later.
func (o *Output) ItemAt(idx gjson.Result) *Item { return o.latestAt(idx, false) }

// latestAt is the latest item at output index idx: the readers' index, or
// the upstream's (Item.Upstream).
func (o *Output) latestAt(idx gjson.Result, upstream bool) *Item {
	if idx.Type != gjson.Number {
		return nil
	}
	n := idx.Int()
	for k := len(o.Items) - 1; k >= 0; k-- {
		it := o.Items[k]
		at := it.Index
		if upstream {
			at = it.Upstream
		}
		if at == n {
			return it
		}
	}
	return nil
}

// PartOf is the content (else summary) part an event is about.
func (o *Output) PartOf(content bool, f *Fields) *Part {
	it := o.ItemOf(f)
	if it == nil {
		return nil
	}
	parts, idx := it.Parts, f.ContentIndex
	if !content {
		parts, idx = it.Summary, f.SummaryIndex
	}
	n := idx.Int()
	if n >= 0 && n < int64(len(parts)) && parts[n].Index == n {
		return parts[n]
	}
	for _, p := range parts {
		if p.Index == n {
			return p
		}
	}
	return nil
}

// Text returns the item's text so far: its content parts' texts joined.
func (it *Item) Text() string {
	var b []byte
	for _, p := range it.Parts {
		b = append(b, p.Text...)
	}
	return Unescape(b)
}

// Arguments returns a function call's arguments so far.
func (it *Item) Arguments() string { return Unescape(it.Args) }

// Status is "completed" (or what its done form says) once done, else
// "in_progress".
func (it *Item) Status() string {
	if it.Done != nil {
		if st := gjson.GetBytes(it.Done, "status"); st.Type == gjson.String {
			return st.Str
		}
		return "completed"
	}
	return "in_progress"
}

// Unescape returns JSON-escaped text (without its quotes) as a Go string.
func Unescape(escaped []byte) string {
	var s string
	if json.Unmarshal(Quoted(escaped), &s) != nil {
		return string(escaped)
	}
	return s
}

// Quoted makes JSON-escaped text a JSON string, in a new slice.
func Quoted(escaped []byte) []byte {
	return append(append(append(make([]byte, 0, len(escaped)+2), '"'), escaped...), '"')
}

// AppendJSON renders the item for a Response object that ended: its done
// form once done, else its added form closed as incomplete with what was
// streamed into it; either way with every part carrying the members the
// spec requires of its type (CompleteContent).
func (it *Item) AppendJSON(b []byte) []byte { return it.appendJSON(b, false) }

// appendJSON renders the item as AppendJSON does; running: for a Response
// still being written, in which an item not done yet is in_progress (the
// spec's item status while it is written), not closed as incomplete.
func (it *Item) appendJSON(b []byte, running bool) []byte {
	// Its parts, the upstream's as they came, get the members the spec
	// requires of them (CompleteContent).
	if it.Done != nil {
		return append(b, CompleteContent(it.Done)...)
	}
	raw := CompleteContent(it.Added)
	set := func(path string, value []byte) {
		if out, err := sjson.SetRawBytes(raw, path, value); err == nil {
			raw = out
		}
	}
	status := `"incomplete"`
	if running {
		status = `"in_progress"`
	}
	set("status", []byte(status))
	switch it.Type {
	case "function_call", "custom_tool_call", "mcp_call":
		field := "arguments"
		if it.Type == "custom_tool_call" {
			field = "input"
		}
		set(field, Quoted(it.Args))
	default:
		if len(it.Parts) > 0 || it.Type == "message" {
			set("content", appendParts(nil, it.Parts))
		}
		if len(it.Summary) > 0 {
			set("summary", appendParts(nil, it.Summary))
		} else if it.Type == "reasoning" && !gjson.GetBytes(raw, "summary").Exists() {
			set("summary", []byte("[]"))
		}
	}
	return append(b, raw...)
}

func appendParts(b []byte, parts []*Part) []byte {
	b = append(b, '[')
	for k, p := range parts {
		if k > 0 {
			b = append(b, ',')
		}
		if p.Done != nil {
			b = append(b, CompletePart(p.Done)...)
			continue
		}
		field := "text"
		if gjson.GetBytes(p.Added, "type").Str == "refusal" {
			field = "refusal"
		}
		part := p.WithAnnotations(CompletePart(p.Added)) // before its text goes in: the added form is small
		if out, err := sjson.SetRawBytes(part, field, Quoted(p.Text)); err == nil {
			part = out
		}
		b = append(b, part...)
	}
	return append(b, ']')
}

// AppendOutput appends the output array of a Response object that ended:
// every item sent, the items still open closed as incomplete with what was
// streamed into them (Item.AppendJSON).
func (o *Output) AppendOutput(b []byte) []byte { return o.appendOutput(b, false) }

// appendOutput appends the output array as AppendOutput does; running: the
// items still open are in_progress (Item.appendJSON).
func (o *Output) appendOutput(b []byte, running bool) []byte {
	b = append(b, '[')
	for k, it := range o.Items {
		if k > 0 {
			b = append(b, ',')
		}
		b = it.appendJSON(b, running)
	}
	return append(b, ']')
}

// Response is what a Response object the writer renders holds besides what
// the Output has.
type Response struct {
	ID        string
	CreatedAt int64  // used when neither the base nor From has a created_at
	Status    string // the Response's status
	// The error: Error, else ErrorRaw (an upstream's error object), else null.
	Error    *apierr.Error
	ErrorRaw []byte
	// IncompleteDetails is the incomplete_details object; nil: null.
	IncompleteDetails []byte
	// From, when an object, gives the other fields instead of the base (a
	// continuation's own Response); its created_at and model only when the
	// base has none: the readers keep the ones they were first shown, as
	// one response has one (README "Continuation").
	From  gjson.Result
	Model string                // when neither the base nor From shows one
	Echo  translate.RequestEcho // the request's fields, for those neither shows
}

// FromUpstream makes r render an upstream's own terminal Response resp (of
// an event of type typ): resp's status (typ's when it shows none), its error
// (its code mapped into the spec's enum as translate.ResponseErrorCode maps
// it; a failed status without one gets a server_error) and
// incomplete_details when they are objects, and resp for every other
// field it has, the required ones it left out filled in by AppendResponse
// as for any Response the writer renders. The output and usage stay the
// Output's (what was sent stays sent; the caller says which usage counts).
func (r *Response) FromUpstream(typ string, resp gjson.Result) {
	r.Status = strings.TrimPrefix(typ, "response.")
	if st := resp.Get("status"); st.Type == gjson.String && st.Str != "" {
		r.Status = st.Str
	}
	r.From = resp
	if e := resp.Get("error"); e.IsObject() {
		code, errType := e.Get("code"), e.Get("type").Str
		if _, keep := translate.ResponseErrorCode(code.Str, errType); keep && code.Type == gjson.String {
			r.ErrorRaw = []byte(e.Raw)
		} else {
			// A code outside the spec's enum is mapped as for any error the
			// gateway writes, the upstream's code leading the message.
			r.Error = &apierr.Error{Code: code.Str, Type: errType, Message: e.Get("message").Str}
		}
	}
	if r.Status == "failed" && r.Error == nil && r.ErrorRaw == nil {
		// A failed Response says why (clients read error.code to decide on
		// a retry): an upstream that did not gets the server error it is.
		r.Error = &apierr.Error{Code: apierr.TypeServer, Type: apierr.TypeServer, Message: "the upstream failed the response without saying why"}
	}
	if d := resp.Get("incomplete_details"); d.IsObject() {
		r.IncompleteDetails = []byte(d.Raw)
	}
}

// running reports whether the Response is still being written (a snapshot
// of a running stream, or its opening event), not ended: its items still
// open are in_progress then, and closed as incomplete only once it ends.
func (r *Response) running() bool { return r.Status == "in_progress" || r.Status == "queued" }

// responseKeys are the Response fields the writer sets itself.
var responseKeys = map[string]bool{"id": true, "object": true, "created_at": true, "status": true, "error": true,
	"incomplete_details": true, "output": true, "usage": true}

// AppendEvent appends the data of a lifecycle or terminal event of type typ
// numbered seq, whose Response is r's.
func (o *Output) AppendEvent(b []byte, typ string, seq int64, r *Response) []byte {
	b = append(b, `{"type":`...)
	b = jsonx.AppendQuote(b, typ)
	b = append(b, `,"sequence_number":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"response":`...)
	b = o.AppendResponse(b, r)
	return append(b, '}')
}

// AppendResponse appends a complete Response object (every field the spec's
// Response requires, null where unknown) with the output already sent, the
// items still open closed as incomplete (in_progress while the Response
// runs), and the usage once known. Its other fields are r.From's, else the
// last lifecycle event's, else r's model and request echo with the API's
// defaults; its created_at and model are the last lifecycle event's
// whenever it has them (Response.From).
func (o *Output) AppendResponse(b []byte, r *Response) []byte {
	base := gjson.ParseBytes(o.Base)
	created := base.Get("created_at")
	var shownModel gjson.Result // the base's model, when From's stands in for the base
	if r.From.IsObject() {
		if created.Type != gjson.Number {
			created = r.From.Get("created_at")
		}
		if m := base.Get("model"); m.Type == gjson.String {
			shownModel = m
		}
		base = r.From
	}
	b = append(b, `{"id":`...)
	b = jsonx.AppendQuote(b, r.ID)
	b = append(b, `,"object":"response","created_at":`...)
	if created.Type == gjson.Number {
		b = append(b, created.Raw...)
	} else {
		b = strconv.AppendInt(b, r.CreatedAt, 10)
	}
	b = append(b, `,"status":`...)
	b = jsonx.AppendQuote(b, r.Status)
	b = append(b, `,"error":`...)
	switch {
	case r.Error != nil:
		b = translate.AppendResponseError(b, r.Error.Code, r.Error.Type, r.Error.Message)
	case len(r.ErrorRaw) > 0:
		b = append(b, r.ErrorRaw...)
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if len(r.IncompleteDetails) > 0 {
		b = append(b, r.IncompleteDetails...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"output":`...)
	b = o.appendOutput(b, r.running())
	if len(o.Usage) > 0 { // the spec's usage is an object: absent while unknown
		b = append(b, `,"usage":`...)
		b = append(b, o.Usage...)
	}
	seen := map[string]bool{}
	if base.IsObject() {
		base.ForEach(func(k, v gjson.Result) bool {
			if !responseKeys[k.Str] && !seen[k.Str] {
				seen[k.Str] = true
				if k.Str == "model" && shownModel.Exists() {
					v = shownModel
				}
				b = append(b, ',')
				b = append(b, k.Raw...)
				b = append(b, ':')
				b = append(b, v.Raw...)
			}
			return true
		})
	}
	switch {
	case seen["model"]:
	case shownModel.Exists():
		b = append(append(b, `,"model":`...), shownModel.Raw...)
	default:
		b = append(b, `,"model":`...)
		b = jsonx.AppendQuote(b, r.Model)
	}
	// The request's fields the Response echoes, for those the base did not
	// show (or when there was none), with the API's defaults.
	echo := translate.AppendEcho([]byte(`{"_":0`), r.Echo)
	gjson.ParseBytes(append(echo, '}')).ForEach(func(k, v gjson.Result) bool {
		if k.Str != "_" && !seen[k.Str] && !responseKeys[k.Str] {
			b = append(b, ',')
			b = append(b, k.Raw...)
			b = append(b, ':')
			b = append(b, v.Raw...)
		}
		return true
	})
	return append(b, '}')
}

// NewResponseID is the id of a Response written for a stream whose readers
// were shown none: "resp_sluice_" and 24 hex digits.
func NewResponseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "resp_sluice_" + hex.EncodeToString(b[:])
}
