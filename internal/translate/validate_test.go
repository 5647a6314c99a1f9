package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/tidwall/gjson"
)

// This file holds the protocol checker every stream test (and the stream
// fuzzer) runs over the events a Stream emitted. It knows the Responses
// streaming rules independently of the implementation: ordering, indexes,
// id stability, deltas adding up to the done texts (decoded one by one, as Go
// and the done events decode them, and joined before decoding, as a
// JavaScript client joins UTF-16 strings), and one terminal event whose
// output matches the items' done events.

var terminalTypes = map[string]bool{
	"response.completed":  true,
	"response.incomplete": true,
	"response.failed":     true,
}

type vPart struct {
	typ    string
	deltas strings.Builder
	raw    strings.Builder // the deltas' JSON literals, unquoted, joined
	done   bool            // *.done seen
	closed bool            // content_part.done seen
	text   string
	// annotations are those output_text.annotation.added events gave the
	// part, in annotation_index order.
	annotations []any
}

type vItem struct {
	id      string
	index   int
	typ     string
	parts   []*vPart
	args    strings.Builder
	rawArgs strings.Builder // the deltas' JSON literals, unquoted, joined
	argsOK  bool            // function_call_arguments.done seen
	closed  bool
	done    map[string]any // the item in output_item.done
}

// validateEvents checks one stream's events. It returns the first violation.
func validateEvents(events []Event) error {
	var items []*vItem
	byID := map[string]*vItem{}
	respID := ""
	terminal := -1
	for i, e := range events {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("event %d (%s): invalid JSON: %v", i, e.Type, err)
		}
		if dec.More() {
			return fmt.Errorf("event %d: trailing data", i)
		}
		if m["type"] != e.Type {
			return fmt.Errorf("event %d: type %v, Event.Type %q", i, m["type"], e.Type)
		}
		if sn, _ := m["sequence_number"].(json.Number); sn.String() != fmt.Sprint(i) {
			return fmt.Errorf("event %d (%s): sequence_number %v", i, e.Type, m["sequence_number"])
		}
		if terminal >= 0 {
			return fmt.Errorf("event %d (%s) after terminal event %d", i, e.Type, terminal)
		}
		if resp, ok := m["response"].(map[string]any); ok {
			id, _ := resp["id"].(string)
			if !strings.HasPrefix(id, "resp_") {
				return fmt.Errorf("event %d: response id %q", i, id)
			}
			if respID != "" && id != respID {
				return fmt.Errorf("event %d: response id %q, earlier %q", i, id, respID)
			}
			respID = id
			if resp["object"] != "response" {
				return fmt.Errorf("event %d: object %v", i, resp["object"])
			}
			for _, k := range []string{"created_at", "status", "model", "output", "error", "incomplete_details", "tools", "tool_choice", "instructions", "metadata", "parallel_tool_calls", "temperature", "top_p"} {
				if _, ok := resp[k]; !ok {
					return fmt.Errorf("event %d: response has no %q", i, k)
				}
			}
		}
		switch e.Type {
		case "response.created":
			if i != 0 {
				return fmt.Errorf("response.created at %d", i)
			}
		case "response.in_progress":
			if i != 1 || events[0].Type != "response.created" {
				return fmt.Errorf("response.in_progress at %d", i)
			}
		default:
			if !terminalTypes[e.Type] && (i < 2 || events[0].Type != "response.created") {
				return fmt.Errorf("event %d (%s) before response.created/in_progress", i, e.Type)
			}
		}
		if terminalTypes[e.Type] {
			terminal = i
			if err := checkTerminal(e.Type, m, items); err != nil {
				return fmt.Errorf("event %d (%s): %v", i, e.Type, err)
			}
			continue
		}
		if e.Type == "response.created" || e.Type == "response.in_progress" {
			continue
		}
		oi, ok := intField(m, "output_index")
		if !ok {
			return fmt.Errorf("event %d (%s): no output_index", i, e.Type)
		}
		if e.Type == "response.output_item.added" {
			item, _ := m["item"].(map[string]any)
			id, _ := item["id"].(string)
			typ, _ := item["type"].(string)
			if oi != len(items) {
				return fmt.Errorf("event %d: output_index %d for new item, want %d", i, oi, len(items))
			}
			if byID[id] != nil || id == "" {
				return fmt.Errorf("event %d: item id %q reused or empty", i, id)
			}
			for _, prev := range items { // one output item at a time
				if !prev.closed {
					return fmt.Errorf("event %d: item %s added while %s is open", i, id, prev.id)
				}
			}
			prefix := map[string]string{"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}[typ]
			if prefix == "" || !strings.HasPrefix(id, prefix) {
				return fmt.Errorf("event %d: item %q of type %q", i, id, typ)
			}
			if item["status"] != "in_progress" {
				return fmt.Errorf("event %d: added item status %v", i, item["status"])
			}
			it := &vItem{id: id, index: oi, typ: typ}
			items = append(items, it)
			byID[id] = it
			continue
		}
		if oi < 0 || oi >= len(items) {
			return fmt.Errorf("event %d (%s): output_index %d of no item", i, e.Type, oi)
		}
		it := items[oi]
		if e.Type == "response.output_item.done" {
			item, _ := m["item"].(map[string]any)
			if item["id"] != it.id {
				return fmt.Errorf("event %d: done item id %v at index %d of %s", i, item["id"], oi, it.id)
			}
			if it.closed {
				return fmt.Errorf("event %d: item %s done twice", i, it.id)
			}
			for k, p := range it.parts {
				if !p.closed {
					return fmt.Errorf("event %d: item %s done with part %d open", i, it.id, k)
				}
			}
			if err := checkDoneItem(it, item); err != nil {
				return fmt.Errorf("event %d: %v", i, err)
			}
			it.closed = true
			it.done = item
			continue
		}
		if m["item_id"] != it.id {
			return fmt.Errorf("event %d (%s): item_id %v, output_index %d is %s", i, e.Type, m["item_id"], oi, it.id)
		}
		if it.closed {
			return fmt.Errorf("event %d (%s): item %s already done", i, e.Type, it.id)
		}
		switch e.Type {
		case "response.function_call_arguments.delta", "response.function_call_arguments.done":
			if it.typ != "function_call" || it.argsOK {
				return fmt.Errorf("event %d (%s) on %s", i, e.Type, it.id)
			}
			if e.Type == "response.function_call_arguments.delta" {
				it.args.WriteString(str(m["delta"]))
				it.rawArgs.WriteString(unquoted(e.Data))
			} else {
				if str(m["arguments"]) != it.args.String() {
					return fmt.Errorf("event %d: arguments %q, deltas %q", i, m["arguments"], it.args.String())
				}
				if joined := decodeJoined(it.rawArgs.String()); joined != it.args.String() {
					return fmt.Errorf("event %d: deltas joined before decoding %q, one by one %q", i, joined, it.args.String())
				}
				it.argsOK = true
			}
			continue
		}
		ci, ok := intField(m, "content_index")
		if !ok {
			return fmt.Errorf("event %d (%s): no content_index", i, e.Type)
		}
		if e.Type == "response.content_part.added" {
			if ci != len(it.parts) {
				return fmt.Errorf("event %d: content_index %d for new part, want %d", i, ci, len(it.parts))
			}
			for _, p := range it.parts {
				if !p.closed {
					return fmt.Errorf("event %d: new part while another is open", i)
				}
			}
			part, _ := m["part"].(map[string]any)
			typ := str(part["type"])
			want := map[string][]string{"message": {"output_text", "refusal"}, "reasoning": {"reasoning_text"}}[it.typ]
			if !contains(want, typ) {
				return fmt.Errorf("event %d: part %q in %s item", i, typ, it.typ)
			}
			it.parts = append(it.parts, &vPart{typ: typ})
			continue
		}
		if ci < 0 || ci >= len(it.parts) || it.parts[ci].closed {
			return fmt.Errorf("event %d (%s): content_index %d not open", i, e.Type, ci)
		}
		p := it.parts[ci]
		kinds := map[string]string{
			"response.output_text.delta": "output_text", "response.output_text.done": "output_text",
			"response.refusal.delta": "refusal", "response.refusal.done": "refusal",
			"response.reasoning_text.delta": "reasoning_text", "response.reasoning_text.done": "reasoning_text",
			"response.content_part.done": p.typ, "response.output_text.annotation.added": "output_text",
		}
		if kinds[e.Type] != p.typ {
			return fmt.Errorf("event %d (%s) on a %s part", i, e.Type, p.typ)
		}
		switch e.Type {
		case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
			if p.done {
				return fmt.Errorf("event %d: delta after done", i)
			}
			p.deltas.WriteString(str(m["delta"]))
			p.raw.WriteString(unquoted(e.Data))
		case "response.output_text.done", "response.reasoning_text.done", "response.refusal.done":
			field := "text"
			if p.typ == "refusal" {
				field = "refusal"
			}
			if str(m[field]) != p.deltas.String() {
				return fmt.Errorf("event %d: done text %q, deltas %q", i, m[field], p.deltas.String())
			}
			if joined := decodeJoined(p.raw.String()); joined != p.deltas.String() {
				return fmt.Errorf("event %d: deltas joined before decoding %q, one by one %q", i, joined, p.deltas.String())
			}
			p.done, p.text = true, p.deltas.String()
		case "response.output_text.annotation.added":
			if p.done {
				return fmt.Errorf("event %d: annotation after the text's done", i)
			}
			if ai, ok := intField(m, "annotation_index"); !ok || ai != len(p.annotations) {
				return fmt.Errorf("event %d: annotation_index %v, want %d", i, m["annotation_index"], len(p.annotations))
			}
			if err := checkAnnotation(m["annotation"]); err != nil {
				return fmt.Errorf("event %d: %v", i, err)
			}
			p.annotations = append(p.annotations, m["annotation"])
		case "response.content_part.done":
			if !p.done {
				return fmt.Errorf("event %d: content_part.done before the text's done", i)
			}
			part, _ := m["part"].(map[string]any)
			if partTextOf(part) != p.text {
				return fmt.Errorf("event %d: part text %q, want %q", i, partTextOf(part), p.text)
			}
			if err := checkPartAnnotations(part, p); err != nil {
				return fmt.Errorf("event %d: %v", i, err)
			}
			p.closed = true
		default:
			return fmt.Errorf("event %d: unexpected type %s", i, e.Type)
		}
	}
	return nil
}

// unquoted is an event's delta as its JSON literal, without the quotes.
func unquoted(data []byte) string {
	raw := gjson.GetBytes(data, "delta").Raw
	if len(raw) < 2 {
		return ""
	}
	return raw[1 : len(raw)-1]
}

// decodeJoined decodes joined JSON string literal contents as one string: a
// surrogate pair split across two deltas becomes its character here, and two
// U+FFFD when each delta is decoded on its own.
func decodeJoined(raw string) string {
	var s string
	_ = json.Unmarshal([]byte(`"`+raw+`"`), &s)
	return s
}

func partTextOf(part map[string]any) string {
	if part["type"] == "refusal" {
		return str(part["refusal"])
	}
	return str(part["text"])
}

// checkDoneItem compares an output_item.done item with what its events said.
func checkDoneItem(it *vItem, item map[string]any) error {
	if item["type"] != it.typ {
		return fmt.Errorf("item %s type %v, added as %s", it.id, item["type"], it.typ)
	}
	if st := item["status"]; st != "completed" && st != "incomplete" {
		return fmt.Errorf("item %s done with status %v", it.id, st)
	}
	if it.typ == "function_call" {
		if !it.argsOK {
			return fmt.Errorf("item %s done without function_call_arguments.done", it.id)
		}
		if str(item["arguments"]) != it.args.String() {
			return fmt.Errorf("item %s arguments %q, deltas %q", it.id, item["arguments"], it.args.String())
		}
		if str(item["call_id"]) == "" { // upstream ids are kept as they are
			return fmt.Errorf("item %s call_id %q", it.id, item["call_id"])
		}
		return nil
	}
	content, _ := item["content"].([]any)
	if len(content) != len(it.parts) {
		return fmt.Errorf("item %s has %d parts, events made %d", it.id, len(content), len(it.parts))
	}
	for k, c := range content {
		part, _ := c.(map[string]any)
		if partTextOf(part) != it.parts[k].text {
			return fmt.Errorf("item %s part %d text %q, events %q", it.id, k, partTextOf(part), it.parts[k].text)
		}
		if err := checkPartAnnotations(part, it.parts[k]); err != nil {
			return fmt.Errorf("item %s part %d: %v", it.id, k, err)
		}
	}
	return nil
}

// checkTerminal compares the terminal response's output with the items.
func checkTerminal(typ string, m map[string]any, items []*vItem) error {
	resp, _ := m["response"].(map[string]any)
	want := map[string]string{"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}[typ]
	if resp["status"] != want {
		return fmt.Errorf("status %v", resp["status"])
	}
	switch typ {
	case "response.failed":
		e, _ := resp["error"].(map[string]any)
		if str(e["code"]) == "" || str(e["message"]) == "" {
			return fmt.Errorf("failed without error code and message: %v", resp["error"])
		}
	case "response.incomplete":
		d, _ := resp["incomplete_details"].(map[string]any)
		if str(d["reason"]) == "" {
			return fmt.Errorf("incomplete without reason")
		}
	}
	if typ != "response.failed" && resp["error"] != nil {
		return fmt.Errorf("error %v in %s", resp["error"], typ)
	}
	output, _ := resp["output"].([]any)
	if len(output) != len(items) {
		return fmt.Errorf("output has %d items, events added %d", len(output), len(items))
	}
	for k, o := range output {
		item, _ := o.(map[string]any)
		it := items[k]
		if item["id"] != it.id {
			return fmt.Errorf("output[%d] is %v, want %s", k, item["id"], it.id)
		}
		if typ != "response.failed" && !it.closed {
			return fmt.Errorf("item %s not done before %s", it.id, typ)
		}
		if it.closed && !reflect.DeepEqual(item, it.done) {
			return fmt.Errorf("output[%d] differs from its output_item.done:\n%v\n%v", k, item, it.done)
		}
	}
	return nil
}

// checkAnnotation checks an annotation against the spec's UrlCitationBody,
// the one kind a Chat answer carries: every field required, of its type.
func checkAnnotation(a any) error {
	m, _ := a.(map[string]any)
	if m["type"] != "url_citation" {
		return fmt.Errorf("annotation %v is not a url_citation", a)
	}
	for _, k := range []string{"url", "title"} {
		if _, ok := m[k].(string); !ok {
			return fmt.Errorf("annotation %v: %s is not a string", a, k)
		}
	}
	for _, k := range []string{"start_index", "end_index"} {
		if _, ok := intField(m, k); !ok {
			return fmt.Errorf("annotation %v: %s is not an integer", a, k)
		}
	}
	if len(m) != 5 {
		return fmt.Errorf("annotation %v has fields UrlCitationBody has not", a)
	}
	return nil
}

// checkPartAnnotations compares a done part's annotations with those its
// annotation.added events gave it: an output_text part always has the
// array (the spec requires it), other parts none.
func checkPartAnnotations(part map[string]any, p *vPart) error {
	got, ok := part["annotations"].([]any)
	if p.typ != "output_text" {
		if p.annotations != nil {
			return fmt.Errorf("annotations on a %s part", p.typ)
		}
		return nil
	}
	if !ok {
		return fmt.Errorf("output_text part without an annotations array: %v", part)
	}
	if len(got) != len(p.annotations) || len(got) > 0 && !reflect.DeepEqual(got, p.annotations) {
		return fmt.Errorf("part annotations %v, events added %v", got, p.annotations)
	}
	return nil
}

func intField(m map[string]any, k string) (int, bool) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := n.Int64()
	return int(v), err == nil
}

func str(v any) string { s, _ := v.(string); return s }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
