package gateway

import (
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/hostabi"
)

// The stream_event hook (ABI.md §3.5) on the client stream: a policy sees
// each text-bearing Responses event before the client does and may pass,
// drop (deltas) or replace its delta / text. Everything here runs only when
// cs.hook is set, i.e. when a loaded policy implements the hook at the
// stream's start; otherwise send pays one nil check.
//
// What the client was sent stays consistent: a dropped delta is neither
// numbered nor recorded, a replaced one is recorded as replaced, and once
// anything was edited the done forms that repeat the text (the *.done text
// events, content_part.done, output_item.done) and the upstream's terminal
// response's output are rewritten from what was recorded.

// hookedDelta reports whether events of type typ carrying a "delta" go to
// the hook, and whether the delta is part text (content or summary) or an
// item's arguments.
func hookedDelta(typ string) (hooked, content, summary bool) {
	switch typ {
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
		return true, true, false
	case "response.reasoning_summary_text.delta":
		return true, false, true
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		return true, false, false
	}
	return false, false, false
}

// hookedText reports whether a *.done event of type typ carrying a "text"
// goes to the hook, and whether its part is a summary part.
func hookedText(typ string) (hooked, summary bool) {
	switch typ {
	case "response.output_text.done", "response.reasoning_text.done":
		return true, false
	case "response.reasoning_summary_text.done":
		return true, true
	}
	return false, false
}

func indexOf(r gjson.Result) int {
	if r.Type != gjson.Number {
		return -1
	}
	return int(r.Int())
}

// streamHookLocked runs the hook on one event about to be written, whose
// output_index as its upstream numbered it is outputIndex (-1: none). It
// returns the event to write (data with fields f, re-read when changed), or
// ok false when the event is dropped.
func (cs *clientStream) streamHookLocked(data []byte, f *eventFields, outputIndex int) (_ []byte, _ *eventFields, ok bool) {
	typ := f.Type.Str
	if cs.edited && cs.splice == nil {
		data, f = cs.consistentLocked(typ, data, f)
	}
	in := hostabi.StreamEventInput{Surface: cs.req.policySurface(), Upstream: cs.upstream, Type: typ, SequenceNumber: cs.seq,
		OutputIndex: outputIndex, ContentIndex: indexOf(f.ContentIndex)}
	delta, content, summary := hookedDelta(typ)
	text, textSummary := hookedText(typ)
	switch {
	case delta && f.Delta.Type == gjson.String:
		in.Delta, in.HasDelta = f.Delta.Str, true
	case text:
		t := gjson.GetBytes(data, "text")
		if t.Type != gjson.String {
			return data, f, true
		}
		in.Text, in.HasText = t.Str, true
		content, summary = !textSummary, textSummary
	default:
		return data, f, true
	}
	if summary {
		in.ContentIndex = indexOf(f.SummaryIndex)
	}
	in.ItemID = gjson.GetBytes(data, "item_id").Str
	out := cs.hook.StreamEvent(cs.ctx, in)
	switch out.Verdict {
	case hostabi.StreamDrop:
		if !in.HasDelta {
			return data, f, true
		}
		cs.markEditedLocked(f, content, summary, nil)
		return nil, nil, false
	case hostabi.StreamReplace:
		var nd []byte
		var err error
		switch {
		case in.HasDelta && out.HasDelta:
			nd, err = sjson.SetBytes(data, "delta", out.Delta)
		case in.HasText && out.HasText:
			nd, err = sjson.SetBytes(data, "text", out.Text)
		default:
			return data, f, true
		}
		if err != nil {
			return data, f, true
		}
		nf, ok := scanEvent(nd)
		if !ok {
			return data, f, true
		}
		var doneText []byte
		if in.HasText {
			if t := gjson.GetBytes(nd, "text"); t.Type == gjson.String {
				doneText = []byte(t.Raw[1 : len(t.Raw)-1])
			}
		}
		cs.markEditedLocked(&nf, content, summary, doneText)
		return nd, &nf, true
	}
	return data, f, true
}

// markEditedLocked notes that an event about a part (content or summary)
// or an item's arguments was dropped or replaced; doneText, for a replaced
// *.done text event, becomes the part's recorded text.
func (cs *clientStream) markEditedLocked(f *eventFields, content, summary bool, doneText []byte) {
	cs.edited = true
	if cs.splice != nil {
		return // the continuation maps indexes itself
	}
	it := cs.sent.ItemOf(&f.Fields)
	if it == nil {
		return
	}
	it.Edited = true
	if content || summary {
		if p := cs.sent.PartOf(content, &f.Fields); p != nil {
			p.Edited = true
			if doneText != nil {
				p.Text = append(p.Text[:0], doneText...)
			}
		}
	}
}

// consistentLocked rewrites an event that repeats edited text with what the
// client was sent instead (the fields are re-read when it changed).
func (cs *clientStream) consistentLocked(typ string, data []byte, f *eventFields) ([]byte, *eventFields) {
	orig, changed := data, false
	set := func(path string, escaped []byte) {
		v := make([]byte, 0, len(escaped)+2)
		v = append(append(append(v, '"'), escaped...), '"')
		if nd, err := sjson.SetRawBytes(data, path, v); err == nil {
			data, changed = nd, true
		}
	}
	switch typ {
	case "response.output_text.done", "response.reasoning_text.done", "response.refusal.done",
		"response.reasoning_summary_text.done":
		field := "text"
		if typ == "response.refusal.done" {
			field = "refusal"
		}
		if p := cs.sent.PartOf(typ != "response.reasoning_summary_text.done", &f.Fields); p != nil && p.Edited {
			set(field, p.Text)
		}
	case "response.content_part.done", "response.reasoning_summary_part.done":
		if p := cs.sent.PartOf(typ == "response.content_part.done", &f.Fields); p != nil && p.Edited {
			set("part."+textField(f.Part), p.Text)
		}
	case "response.function_call_arguments.done", "response.custom_tool_call_input.done":
		if it := cs.sent.ItemOf(&f.Fields); it != nil && it.Edited && len(it.Parts) == 0 {
			field := "arguments"
			if typ == "response.custom_tool_call_input.done" {
				field = "input"
			}
			set(field, it.Args)
		}
	case "response.output_item.done":
		it := cs.sent.ItemOf(&f.Fields)
		if it == nil || !it.Edited {
			break
		}
		content := f.Item.Get("content").Array()
		for _, p := range it.Parts {
			if p.Edited && p.Index >= 0 && int(p.Index) < len(content) {
				set("item.content."+itoa(p.Index)+"."+textField(content[p.Index]), p.Text)
			}
		}
		summary := f.Item.Get("summary").Array()
		for _, p := range it.Summary {
			if p.Edited && p.Index >= 0 && int(p.Index) < len(summary) {
				set("item.summary."+itoa(p.Index)+".text", p.Text)
			}
		}
		switch it.Type {
		case "function_call", "mcp_call":
			set("item.arguments", it.Args)
		case "custom_tool_call":
			set("item.input", it.Args)
		}
	case "response.completed": // response.incomplete and .failed: sendFrom (withSentOutputLocked)
		if !f.Response.IsObject() {
			break
		}
		if nd, err := sjson.SetRawBytes(data, "response.output", cs.sent.AppendOutput(nil)); err == nil {
			data, changed = nd, true
		}
	}
	if !changed {
		return data, f
	}
	nf, ok := scanEvent(data)
	if !ok {
		return orig, f
	}
	return data, &nf
}

// textField is the member holding a part's text: "refusal" for a refusal
// part, else "text".
func textField(part gjson.Result) string {
	if part.Get("type").Str == "refusal" {
		return "refusal"
	}
	return "text"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
