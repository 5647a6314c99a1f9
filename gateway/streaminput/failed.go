package streaminput

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

// sentOutput is what the readers of a Responses answer were sent, followed
// from its events as they are captured: the last lifecycle event's Response
// object and each output item with what was streamed into it. The
// response.failed a session writes after the answer began renders it, so
// that the event agrees with what came before it (README, "What it
// promises": a response.failed Sluice writes carries a complete Response
// object whose output holds the items already streamed).
//
// The rules are the gateway's client stream's (gateway/clientstream.go:
// track, sentItem.appendJSON, appendResponseWith), which this package
// cannot call: the gateway imports streaminput. The events followed here
// are the ones that client stream wrote.
type sentOutput struct {
	base  []byte // the Response object of the last lifecycle event
	items []*outItem
}

// outItem is one output item as the readers saw it.
type outItem struct {
	index   int64 // output_index
	id, typ string
	added   []byte // the item as output_item.added showed it
	done    []byte // the item as output_item.done showed it; nil while open
	parts   []*outPart
	summary []*outPart // reasoning summary parts
	args    []byte     // function call arguments / custom tool input so far, JSON-escaped without quotes
}

// outPart is one content (or summary) part as the readers saw it.
type outPart struct {
	index int64
	added []byte // the part as *_part.added showed it
	done  []byte // the part as *_part.done showed it; nil while open
	text  []byte // its text so far, JSON-escaped without quotes
}

// outEvent holds the top-level fields of a Responses event that sentOutput
// reads. They point into the event: whatever is kept is copied, so that a
// kept field does not hold the whole event in memory.
type outEvent struct {
	typ, response, outputIndex, itemID, item, contentIndex, summaryIndex, part, delta gjson.Result
}

// follow records what the event ev (a parsed JSON object) said about the
// output.
func (o *sentOutput) follow(ev gjson.Result) {
	var f outEvent
	ev.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			f.typ = v
		case "response":
			f.response = v
		case "output_index":
			f.outputIndex = v
		case "item_id":
			f.itemID = v
		case "item":
			f.item = v
		case "content_index":
			f.contentIndex = v
		case "summary_index":
			f.summaryIndex = v
		case "part":
			f.part = v
		case "delta":
			f.delta = v
		}
		return true
	})
	switch typ := f.typ.Str; typ {
	case "response.created", "response.in_progress", "response.queued":
		if f.response.IsObject() {
			o.base = append(o.base[:0], f.response.Raw...)
		}
	case "response.output_item.added":
		if f.item.IsObject() {
			o.items = append(o.items, &outItem{index: f.outputIndex.Int(), added: []byte(f.item.Raw),
				id: strings.Clone(f.item.Get("id").String()), typ: strings.Clone(f.item.Get("type").String())})
		}
	case "response.output_item.done":
		if it := o.itemOf(&f); it != nil && f.item.IsObject() {
			it.done = []byte(f.item.Raw)
		}
	case "response.content_part.added", "response.reasoning_summary_part.added":
		if it := o.itemOf(&f); it != nil && f.part.IsObject() {
			p := &outPart{added: []byte(f.part.Raw)}
			if typ == "response.content_part.added" {
				p.index = f.contentIndex.Int()
				it.parts = append(it.parts, p)
			} else {
				p.index = f.summaryIndex.Int()
				it.summary = append(it.summary, p)
			}
		}
	case "response.content_part.done", "response.reasoning_summary_part.done":
		if p := o.partOf(typ == "response.content_part.done", &f); p != nil && f.part.IsObject() {
			p.done = []byte(f.part.Raw)
		}
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
		if p := o.partOf(true, &f); p != nil && f.delta.Type == gjson.String {
			p.text = append(p.text, f.delta.Raw[1:len(f.delta.Raw)-1]...)
		}
	case "response.reasoning_summary_text.delta":
		if p := o.partOf(false, &f); p != nil && f.delta.Type == gjson.String {
			p.text = append(p.text, f.delta.Raw[1:len(f.delta.Raw)-1]...)
		}
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		if it := o.itemOf(&f); it != nil && f.delta.Type == gjson.String {
			it.args = append(it.args, f.delta.Raw[1:len(f.delta.Raw)-1]...)
		}
	}
}

// itemOf is the item an event is about: the one its item_id (or its item's
// id) names, else the latest at its output_index. By id first because an
// upstream may number two items alike (docs/ARCHITECTURE.md §3).
func (o *sentOutput) itemOf(f *outEvent) *outItem {
	id := f.itemID
	if f.item.IsObject() {
		id = f.item.Get("id")
	}
	if id.Type == gjson.String && id.Str != "" {
		for k := len(o.items) - 1; k >= 0; k-- {
			if o.items[k].id == id.Str {
				return o.items[k]
			}
		}
	}
	if f.outputIndex.Type != gjson.Number {
		return nil
	}
	n := f.outputIndex.Int()
	for k := len(o.items) - 1; k >= 0; k-- {
		if o.items[k].index == n {
			return o.items[k]
		}
	}
	return nil
}

func (o *sentOutput) partOf(content bool, f *outEvent) *outPart {
	it := o.itemOf(f)
	if it == nil {
		return nil
	}
	parts, idx := it.parts, f.contentIndex
	if !content {
		parts, idx = it.summary, f.summaryIndex
	}
	n := idx.Int()
	for _, p := range parts {
		if p.index == n {
			return p
		}
	}
	return nil
}

// responseOf says what a Response the session writes holds besides the
// output: its id, and for a response whose lifecycle event the readers
// never got, the template's model and fields and the time the answer
// started.
type responseOf struct {
	id        string
	model     string
	template  []byte // the request template (the fields a Response echoes)
	createdAt int64
}

// responseKeys are the Response fields the session sets itself.
var responseKeys = map[string]bool{"id": true, "object": true, "created_at": true, "status": true, "error": true,
	"incomplete_details": true, "output": true, "usage": true}

// appendEvent appends the data of a lifecycle or terminal event of type
// typ numbered seq, whose Response has the given status and error (e nil:
// none).
func (o *sentOutput) appendEvent(b []byte, typ string, seq int64, ro responseOf, status string, e *apierr.Error) []byte {
	b = append(b, `{"type":`...)
	b = jsonx.AppendQuote(b, typ)
	b = append(b, `,"sequence_number":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"response":`...)
	b = o.appendResponse(b, ro, status, e)
	return append(b, '}')
}

// appendResponse appends a complete Response object (every field the
// spec's Response requires) with the output already sent, the items still
// open closed as incomplete. Its other fields are the last lifecycle
// event's, else the template's with the API's defaults.
func (o *sentOutput) appendResponse(b []byte, ro responseOf, status string, e *apierr.Error) []byte {
	base := gjson.ParseBytes(o.base)
	b = append(b, `{"id":`...)
	b = jsonx.AppendQuote(b, ro.id)
	b = append(b, `,"object":"response","created_at":`...)
	if created := base.Get("created_at"); created.Type == gjson.Number {
		b = append(b, created.Raw...)
	} else {
		b = strconv.AppendInt(b, ro.createdAt, 10)
	}
	b = append(b, `,"status":`...)
	b = jsonx.AppendQuote(b, status)
	b = append(b, `,"error":`...)
	if e != nil {
		b = translate.AppendResponseError(b, e.Code, e.Message)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":null,"output":[`...)
	for k, it := range o.items {
		if k > 0 {
			b = append(b, ',')
		}
		b = it.appendJSON(b)
	}
	b = append(b, ']')
	seen := map[string]bool{}
	if base.IsObject() {
		base.ForEach(func(k, v gjson.Result) bool {
			if !responseKeys[k.Str] && !seen[k.Str] {
				seen[k.Str] = true
				b = append(b, ',')
				b = append(b, k.Raw...)
				b = append(b, ':')
				b = append(b, v.Raw...)
			}
			return true
		})
	}
	if !seen["model"] {
		b = append(b, `,"model":`...)
		b = jsonx.AppendQuote(b, ro.model)
	}
	// The template's fields the Response echoes, for those the lifecycle
	// event did not show (or when there was none), with the API's defaults.
	echo := translate.AppendEcho([]byte(`{"_":0`), echoOf(ro.template))
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

// appendJSON renders the item for the Response object: its done form once
// done, else its added form closed as incomplete with what was streamed
// into it.
func (it *outItem) appendJSON(b []byte) []byte {
	if it.done != nil {
		return append(b, it.done...)
	}
	raw := it.added
	set := func(path string, value []byte) {
		if out, err := sjson.SetRawBytes(raw, path, value); err == nil {
			raw = out
		}
	}
	set("status", []byte(`"incomplete"`))
	switch it.typ {
	case "function_call", "custom_tool_call", "mcp_call":
		field := "arguments"
		if it.typ == "custom_tool_call" {
			field = "input"
		}
		set(field, quoted(it.args))
	default:
		if len(it.parts) > 0 || it.typ == "message" {
			set("content", appendParts(nil, it.parts))
		}
		if len(it.summary) > 0 {
			set("summary", appendParts(nil, it.summary))
		} else if it.typ == "reasoning" && !gjson.GetBytes(raw, "summary").Exists() {
			set("summary", []byte("[]"))
		}
	}
	return append(b, raw...)
}

func appendParts(b []byte, parts []*outPart) []byte {
	b = append(b, '[')
	for k, p := range parts {
		if k > 0 {
			b = append(b, ',')
		}
		if p.done != nil {
			b = append(b, p.done...)
			continue
		}
		field := "text"
		if gjson.GetBytes(p.added, "type").Str == "refusal" {
			field = "refusal"
		}
		part := p.added
		if out, err := sjson.SetRawBytes(part, field, quoted(p.text)); err == nil {
			part = out
		}
		b = append(b, part...)
	}
	return append(b, ']')
}

// quoted makes JSON-escaped text a JSON string.
func quoted(escaped []byte) []byte {
	return append(append(append(make([]byte, 0, len(escaped)+2), '"'), escaped...), '"')
}

// echoOf reads the template fields a Response object echoes (the streamed
// input only fills the template's input, never these).
func echoOf(template []byte) translate.RequestEcho {
	var r translate.RequestEcho
	raw := func(v gjson.Result) json.RawMessage { return json.RawMessage(v.Raw) }
	gjson.ParseBytes(template).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "instructions":
			if v.Type == gjson.String || v.Type == gjson.Null || v.IsArray() {
				r.Instructions = raw(v)
			}
		case "tools":
			r.Tools = raw(v)
		case "tool_choice":
			r.ToolChoice = raw(v)
		case "parallel_tool_calls":
			r.ParallelToolCalls = raw(v)
		case "temperature":
			r.Temperature = raw(v)
		case "top_p":
			r.TopP = raw(v)
		case "max_output_tokens":
			r.MaxOutputTokens = raw(v)
		case "previous_response_id":
			r.PreviousResponseID = raw(v)
		case "reasoning":
			r.Reasoning = raw(v)
		case "text":
			r.Text = raw(v)
		case "metadata":
			r.Metadata = raw(v)
		case "store":
			r.Store = raw(v)
		}
		return true
	})
	return r
}

// newResponseID is a response id for a failure the readers got no id for,
// in the form the gateway gives the ids it writes ("resp_sluice_" and 24
// hex digits).
func newResponseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "resp_sluice_" + hex.EncodeToString(b[:])
}
