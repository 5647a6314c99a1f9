package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// FuzzSplice fuzzes the stream splicer (docs/ARCHITECTURE.md §3: after
// content, a continuation feeds the same client stream from another
// target). A first attempt built from the input is pumped into a client
// stream armed for continuation until it fails after content; then one or
// two continuation attempts (restart or prefill, from the input) are
// pumped into the same stream as the attempt loop does (proxy.go), and
// what the client received is checked:
//
//   - every event is JSON with a string type (an upstream event relayed
//     verbatim excepted), a Chat chunk JSON;
//   - sequence_number, where present, is the event's position: contiguous
//     from 0;
//   - exactly one terminal event, the last; a Chat error chunk only last,
//     one completion id, one role chunk, at most one finish chunk and no
//     content after it;
//   - per part, the done texts (text done, part done, item done, the
//     terminal's output) are the deltas the client got, concatenated; the
//     terminal's output has the client's items, in order;
//   - output_index never goes backwards at an output_item.added;
//   - a diverged restart ends with response.failed whose error says the
//     stream was continued on another upstream (a Chat error chunk);
//   - without raw events, the last continuation's text model: a restart
//     that completes leaves the client exactly its output; a prefill that
//     completes appends its first message to the open one; either drops a
//     new message item that shows no text (holdNewLocked); a Chat restart's
//     content stays a prefix of the continuation's, a prefill's is what the
//     client had plus a prefix of it.
//
// The input: ctl[0] is a mode (bit 0 Chat, bit 1 lifecycle events not
// held, bits 2 and 3 the kinds of the first and second continuation,
// prefill when set, bit 4 a second continuation allowed, bit 5 a first
// attempt whose indices are not its items' and parts' positions); the
// rest drives each attempt's cut, end and per item delta sizes and
// perturbations (spliceGen). first and cont spell the attempts' items
// (spliceItems).
func FuzzSplice(f *testing.F) {
	s := streamHookServer(f, nil)
	f.Fuzz(func(t *testing.T, ctl []byte, first, cont string) {
		runSplice(t, s, ctl, first, cont)
	})
}

// spliceItem is one output item of a fuzzed upstream attempt.
type spliceItem struct {
	typ  string // message, function_call, reasoning; raw: text is an event's data as is
	name string // a function call's
	text string // a message's text, a call's arguments, a reasoning summary
}

// spliceItems reads an attempt's items from spec, segments split by '|':
// "fn:NAME:ARGS" a function call, "rs:TEXT" reasoning, "!DATA" a raw event,
// "~TEXT" the first attempt's item at that position with TEXT appended (a
// restart that reproduces it), anything else a message.
func spliceItems(spec string, prev []spliceItem) []spliceItem {
	if len(spec) > 400 {
		spec = spec[:400]
	}
	if spec == "" {
		return nil
	}
	var out []spliceItem
	for j, seg := range strings.SplitN(spec, "|", 6) {
		if strings.HasPrefix(seg, "!") {
			out = append(out, spliceItem{typ: "raw", text: seg[1:]})
			continue
		}
		seg = strings.ToValidUTF8(seg, "\uFFFD") // what a JSON encoder sends
		var it spliceItem
		switch {
		case strings.HasPrefix(seg, "~"):
			it = spliceItem{typ: "message", text: seg[1:]}
			if j < len(prev) && prev[j].typ != "raw" {
				it = prev[j]
				it.text += seg[1:]
			}
		case strings.HasPrefix(seg, "fn:"):
			name, args, _ := strings.Cut(seg[3:], ":")
			it = spliceItem{typ: "function_call", name: name, text: args}
		case strings.HasPrefix(seg, "rs:"):
			it = spliceItem{typ: "reasoning", text: seg[3:]}
		default:
			it = spliceItem{typ: "message", text: seg}
		}
		out = append(out, it)
	}
	return out
}

// spliceGen renders fuzzed upstream attempts, reading its choices from ctl
// (zeros once it is used up).
type spliceGen struct {
	ctl  []byte
	raws map[string]bool // the raw events' data: relayed verbatim, they need not be events
	skew bool            // a first attempt's output_index and content_index may be off their positions
}

func (g *spliceGen) next() byte {
	if len(g.ctl) == 0 {
		return 0
	}
	c := g.ctl[0]
	g.ctl = g.ctl[1:]
	return c
}

func spliceJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type jobj = map[string]any

// pieces splits text into deltas of n runes.
func pieces(text string, n int) []string {
	var out []string
	r := []rune(text)
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// responses renders a Responses attempt. Its first two bytes: the cut (a
// first attempt keeps cut%(n+1) of its n events; a continuation all of them
// from 128 on) and the end (a first attempt: EOF, an error event,
// response.failed or [DONE]; a continuation also response.completed or
// response.incomplete). Then a byte per item: delta size (low nibble), an
// output_index off the item's position (16), content_index 1 (32), no
// text/part/arguments done (64), no item done (128).
func (g *spliceGen) responses(tag string, items []spliceItem, first bool) []sse.Event {
	cut, end := g.next(), g.next()
	var evs []sse.Event
	seq := 0
	add := func(o jobj) {
		o["sequence_number"] = seq
		seq++
		evs = append(evs, sse.Event{Data: spliceJSON(o)})
	}
	respID := "resp_" + tag
	response := func(status string, output []any) jobj {
		return jobj{"id": respID, "object": "response", "created_at": upstreamtest.FixedCreatedAt, "status": status, "model": "m",
			"output": output}
	}
	add(jobj{"type": "response.created", "response": response("in_progress", []any{})})
	add(jobj{"type": "response.in_progress", "response": response("in_progress", []any{})})
	var output []any
	skip := 0 // output indices skipped so far: an upstream's indices may have gaps, never go back
	for j, it := range items {
		p := g.next()
		if it.typ == "raw" {
			g.raws[it.text] = true
			evs = append(evs, sse.Event{Data: []byte(it.text)})
			continue
		}
		// A continuation's indices are its own (the splicer maps them); a
		// first attempt's are the client's: off their positions only when
		// the mode asks (skew).
		if (!first || g.skew) && p&16 != 0 {
			skip += 5
		}
		size, oi, ci := 1+int(p&15), j+skip, 0
		if (!first || g.skew) && p&32 != 0 {
			ci = 1
		}
		id := it.typ[:3] + "_" + tag + "_" + strconv.Itoa(j)
		at := func(o jobj) jobj {
			o["item_id"], o["output_index"] = id, oi
			return o
		}
		var added, done jobj
		switch it.typ {
		case "message":
			part := jobj{"type": "output_text", "text": it.text, "annotations": []any{}}
			added = jobj{"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []any{}}
			done = jobj{"type": "message", "id": id, "status": "completed", "role": "assistant", "content": []any{part}}
			add(jobj{"type": "response.output_item.added", "output_index": oi, "item": added})
			add(at(jobj{"type": "response.content_part.added", "content_index": ci,
				"part": jobj{"type": "output_text", "text": "", "annotations": []any{}}}))
			for _, d := range pieces(it.text, size) {
				add(at(jobj{"type": "response.output_text.delta", "content_index": ci, "delta": d, "logprobs": []any{}}))
			}
			if p&64 == 0 {
				add(at(jobj{"type": "response.output_text.done", "content_index": ci, "text": it.text, "logprobs": []any{}}))
				add(at(jobj{"type": "response.content_part.done", "content_index": ci, "part": part}))
			}
		case "function_call":
			call := "call_" + tag + "_" + strconv.Itoa(j)
			added = jobj{"type": "function_call", "id": id, "call_id": call, "name": it.name, "arguments": "", "status": "in_progress"}
			done = jobj{"type": "function_call", "id": id, "call_id": call, "name": it.name, "arguments": it.text, "status": "completed"}
			add(jobj{"type": "response.output_item.added", "output_index": oi, "item": added})
			for _, d := range pieces(it.text, size) {
				add(at(jobj{"type": "response.function_call_arguments.delta", "delta": d}))
			}
			if p&64 == 0 {
				add(at(jobj{"type": "response.function_call_arguments.done", "arguments": it.text}))
			}
		case "reasoning":
			part := jobj{"type": "summary_text", "text": it.text}
			added = jobj{"type": "reasoning", "id": id, "summary": []any{}}
			// Its encrypted_content in its done form only, as OpenAI sends it.
			done = jobj{"type": "reasoning", "id": id, "summary": []any{part}, "encrypted_content": "enc_" + id}
			add(jobj{"type": "response.output_item.added", "output_index": oi, "item": added})
			add(at(jobj{"type": "response.reasoning_summary_part.added", "summary_index": 0, "part": jobj{"type": "summary_text", "text": ""}}))
			for _, d := range pieces(it.text, size) {
				add(at(jobj{"type": "response.reasoning_summary_text.delta", "summary_index": 0, "delta": d}))
			}
			if p&64 == 0 {
				add(at(jobj{"type": "response.reasoning_summary_text.done", "summary_index": 0, "text": it.text}))
				add(at(jobj{"type": "response.reasoning_summary_part.done", "summary_index": 0, "part": part}))
			}
		}
		if p&128 == 0 {
			add(jobj{"type": "response.output_item.done", "output_index": oi, "item": done})
		}
		output = append(output, done)
	}
	if first || cut < 128 {
		evs = evs[:int(cut)%(len(evs)+1)]
	}
	kinds := 6
	if first {
		kinds = 4
	}
	usage := jobj{"input_tokens": 3, "output_tokens": len(evs), "total_tokens": 3 + len(evs)}
	switch int(end) % kinds {
	case 1:
		add(jobj{"type": "error", "code": "server_error", "message": "boom"})
	case 2:
		r := response("failed", output)
		r["error"], r["usage"] = jobj{"code": "server_error", "message": "boom"}, usage
		add(jobj{"type": "response.failed", "response": r})
	case 3:
		evs = append(evs, sse.Event{Done: true})
	case 4:
		r := response("completed", output)
		r["usage"] = usage
		add(jobj{"type": "response.completed", "response": r})
	case 5:
		r := response("incomplete", output)
		r["incomplete_details"], r["usage"] = jobj{"reason": "max_output_tokens"}, usage
		add(jobj{"type": "response.incomplete", "response": r})
	}
	return evs
}

// chat renders a Chat attempt (upstreamtest.ChatSpec): the cut and the end
// as for responses (EOF, an error chunk, [DONE]), then a byte for the
// delta counts, interleaved tool calls (32) and a usage chunk (64). Raw
// events follow the role chunk.
func (g *spliceGen) chat(tag string, items []spliceItem, first bool) []sse.Event {
	cut, end, d := g.next(), g.next(), g.next()
	spec := upstreamtest.ChatSpec{ID: "chatcmpl-" + tag, Model: "m", Deltas: 1 + int(d&7), ReasoningDeltas: 1 + int(d>>3&3),
		InterleaveTools: d&32 != 0, Usage: d&64 != 0}
	var raws []sse.Event
	for j, it := range items {
		switch it.typ {
		case "message":
			spec.Text += it.text
		case "reasoning":
			spec.Reasoning += it.text
		case "function_call":
			spec.ToolCalls = append(spec.ToolCalls, upstreamtest.ToolCallSpec{ID: "call_" + tag + "_" + strconv.Itoa(j), Name: it.name,
				Arguments: it.text, Pieces: 1 + int(d>>4&1)})
		case "raw":
			g.raws[it.text] = true
			raws = append(raws, sse.Event{Data: []byte(it.text)})
		}
	}
	var evs []sse.Event
	for k, c := range spec.Chunks() {
		if string(c) == "[DONE]" {
			evs = append(evs, sse.Event{Done: true})
			continue
		}
		evs = append(evs, sse.Event{Data: c})
		if k == 0 {
			evs = append(evs, raws...)
		}
	}
	if !first && cut >= 128 {
		return evs
	}
	evs = evs[:int(cut)%(len(evs)+1)]
	switch end % 3 {
	case 1:
		evs = append(evs, sse.Event{Data: []byte(`{"error":{"message":"boom","type":"server_error","code":"server_error"}}`)})
	case 2:
		evs = append(evs, sse.Event{Done: true})
	}
	return evs
}

// spliceSnap is a client item when the last continuation began.
type spliceSnap struct {
	typ, name, text string
	open            bool
}

// runSplice feeds the attempts of one input into a client stream and
// checks what the client got.
func runSplice(t *testing.T, s *Server, ctl []byte, firstSpec, contSpec string) {
	if len(ctl) == 0 {
		return
	}
	mode := ctl[0]
	g := &spliceGen{ctl: ctl[1:], raws: map[string]bool{}, skew: mode&32 != 0}
	chat := mode&1 != 0
	req := hookReq()
	if chat {
		req = &clientRequest{ep: chatEndpoint, stream: true, model: "m",
			body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)}
	}
	render := func(tag string, items []spliceItem, first bool) []sse.Event {
		if chat {
			return g.chat(tag, items, first)
		}
		return g.responses(tag, items, first)
	}
	ctx := context.Background()
	sink := &recordSink{}
	cs := s.newClientStream(ctx, recordResponder{sink}, req, time.Now())
	defer cs.close()
	cs.hold = time.Hour // never released by its deadline: deterministic
	if mode&2 != 0 {
		cs.hold = 0
	}
	cs.arm()
	pumpOf := func(evs []sse.Event, cont bool) *pump {
		return &pump{s: s, cs: cs, ctx: ctx, upCtx: ctx, req: req, u: s.pool.Get("A"), src: &sliceSource{evs: evs},
			surface: cs.surface, replayable: true, armed: true, cont: cont}
	}
	run := func(p *pump) pumpEnd {
		ev, err := p.src.Next()
		return p.run(ev, err)
	}

	var firstItems []spliceItem
	for _, it := range spliceItems(firstSpec, nil) {
		if it.typ != "raw" { // raw events only in continuations: the splicer's input, not a relay's
			firstItems = append(firstItems, it)
		}
	}
	contItems := spliceItems(contSpec, firstItems)
	p := pumpOf(render("a", firstItems, true), false)
	end := run(p)
	if end.unseen {
		return // the client saw nothing: the request would be replayed, not continued
	}
	var (
		kind     string
		spliceAt int // the client's events when the last continuation began
		contEvs  []sse.Event
		snap     []spliceSnap
		chatSnap string
	)
	if af := end.after; af != nil {
		cause, usage := af.cause, []byte(nil)
		for k := 0; ; k++ {
			// As the attempt does (continueAfter, continuationFailed,
			// giveUp): a continuation that failed before it added anything
			// is its own failure, not the stream's.
			spliced := k > 0 && cs.splicedAny()
			if k == 0 || spliced {
				cause, usage = af.cause, sumUsage(usage, af.usage)
			}
			if k == 1+int(mode>>4&1) {
				if k > 0 && !spliced {
					cs.abort(cause)
					end = pumpEnd{reason: reasonCut}
					break
				}
				p.settled = true // not continued: the stream ends as it always did
				end = p.run(af.ev, af.err)
				break
			}
			kind = kindRestart
			if mode&(4<<k) != 0 {
				kind = kindPrefill
			}
			// askContinuation: no prefill with a tool call in flight or
			// nothing to prefill.
			if facts := cs.facts(); kind == kindPrefill && (facts.toolInFlight || facts.text == "") {
				kind = kindRestart
			}
			cs.beginSplice(kind, usage)
			snap, chatSnap = snapshotItems(cs)
			spliceAt = len(sink.evs)
			contEvs = render("b"+strconv.Itoa(k), contItems, false)
			p = pumpOf(contEvs, true)
			if end = run(p); end.after == nil {
				break
			}
			af = end.after
		}
	}
	cs.finish(end.reason)

	clean := len(g.raws) == 0
	if chat {
		checkChatSplice(t, sink.evs, end.reason, kind, chatSnap, spliceAt, contEvs, clean)
		return
	}
	checkResponsesSplice(t, sink.evs, end.reason, kind, snap, contEvs, clean)
}

// snapshotItems is what the client has when a continuation begins.
func snapshotItems(cs *clientStream) ([]spliceSnap, string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []spliceSnap
	for _, it := range cs.sent.Items {
		sn := spliceSnap{typ: it.Type, text: it.Text(), open: it.Done == nil}
		switch it.Type {
		case "function_call":
			sn.text, sn.name = it.Arguments(), gjson.GetBytes(it.Added, "name").Str
		case "reasoning":
			var b []byte
			for _, p := range it.Summary {
				b = append(b, p.Text...)
			}
			sn.text = sent.Unescape(b)
		}
		out = append(out, sn)
	}
	return out, string(cs.chatText)
}

// spliceClientItem is an item as the client's events showed it.
type spliceClientItem struct {
	typ, name string
	parts     []int64          // content (or summary) indices, in the order added
	text      map[int64]string // deltas per content (or summary) index, concatenated
	args      string
}

func (it *spliceClientItem) joined() string {
	if it.typ == "function_call" {
		return it.args
	}
	var b strings.Builder
	for _, k := range it.parts {
		b.WriteString(it.text[k])
	}
	return b.String()
}

func checkResponsesSplice(t *testing.T, evs [][]byte, reason, kind string, snap []spliceSnap,
	contEvs []sse.Event, clean bool) {
	if len(evs) == 0 {
		t.Fatalf("the client got nothing (reason %s)", reason)
	}
	var (
		items    []*spliceClientItem
		byIndex  = map[int64]*spliceClientItem{}
		lastOI   = int64(-1)
		terminal gjson.Result
	)
	fail := spliceFailer(t, "event", evs)
	for k, e := range evs {
		if !json.Valid(e) {
			fail(k, "not JSON")
		}
		ev := gjson.ParseBytes(e)
		typ := ev.Get("type")
		if terminal.Exists() {
			fail(k, "an event after the terminal event")
		}
		if typ.Type != gjson.String {
			if clean {
				fail(k, "no string type")
			}
			continue // a raw event, relayed as it came
		}
		if sq := ev.Get("sequence_number"); (sq.Exists() || clean) && (sq.Type != gjson.Number || sq.Int() != int64(k)) &&
			(clean || sq.Type == gjson.Number) {
			fail(k, "sequence_number %s at position %d", sq.Raw, k)
		}
		oi := ev.Get("output_index")
		var it *spliceClientItem
		if oi.Type == gjson.Number {
			it = byIndex[oi.Int()]
			if it == nil && typ.Str != "response.output_item.added" {
				fail(k, "about an item the client never saw added")
			}
		}
		ci := ev.Get("content_index")
		if strings.HasPrefix(typ.Str, "response.reasoning_summary") {
			ci = ev.Get("summary_index")
		}
		doneText := func(field string) {
			if !clean || it == nil || ci.Type != gjson.Number {
				return
			}
			if got, want := ev.Get(field).Str, it.text[ci.Int()]; got != want {
				fail(k, "%s %q, but the deltas were %q", field, got, want)
			}
		}
		switch typ.Str {
		case "response.completed", "response.failed", "response.incomplete":
			terminal = ev
		case "response.output_item.added":
			it = &spliceClientItem{typ: ev.Get("item.type").Str, name: ev.Get("item.name").Str, text: map[int64]string{}}
			items = append(items, it) // the terminal's output has it, numbered or not
			if oi.Type != gjson.Number {
				continue
			}
			if oi.Int() <= lastOI {
				fail(k, "output_index %d after %d", oi.Int(), lastOI)
			}
			lastOI = oi.Int()
			byIndex[oi.Int()] = it
		case "response.content_part.added", "response.reasoning_summary_part.added":
			if it != nil && ci.Type == gjson.Number {
				it.parts = append(it.parts, ci.Int())
			}
		case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
			"response.reasoning_summary_text.delta":
			if it != nil && ci.Type == gjson.Number {
				it.text[ci.Int()] += ev.Get("delta").Str
			}
		case "response.function_call_arguments.delta":
			if it != nil {
				it.args += ev.Get("delta").Str
			}
		case "response.output_text.done", "response.reasoning_summary_text.done":
			doneText("text")
		case "response.content_part.done", "response.reasoning_summary_part.done":
			doneText("part.text")
		case "response.function_call_arguments.done":
			if clean && it != nil && ev.Get("arguments").Str != it.args {
				fail(k, "arguments %q, but the deltas were %q", ev.Get("arguments").Str, it.args)
			}
		case "response.output_item.done":
			if clean && it != nil {
				checkSplicedItem(fail, k, it, ev.Get("item"))
			}
		}
	}
	if !terminal.Exists() {
		fail(len(evs)-1, "no terminal event (reason %s)", reason)
	}
	out := terminal.Get("response.output").Array()
	if len(out) != len(items) {
		fail(len(evs)-1, "the terminal's output has %d items, the client saw %d added", len(out), len(items))
	}
	for j, it := range items {
		if clean { // a raw event may add to a part after its done form went out: relayed as it came
			checkSplicedItem(fail, len(evs)-1, it, out[j])
		}
	}
	if reason == reasonDiverged {
		// The Response error's code is the spec's (translate.AppendResponseError).
		e := terminal.Get("response.error")
		if terminal.Get("type").Str != "response.failed" || e.Get("code").Str != "server_error" ||
			!strings.HasPrefix(e.Get("message").Str, "stream_incomplete: ") ||
			!strings.Contains(e.Get("message").Str, "continued on another upstream") {
			fail(len(evs)-1, "diverged, but the terminal does not say so")
		}
	}
	if !clean || terminal.Get("type").Str != "response.completed" || kind == "" {
		return
	}
	// A reasoning item the client got cut, first, is redone by a restart's
	// first item if that is reasoning: once its done form carried an
	// encrypted_content, the client's item ends with it (carriedReasoning).
	if kind == kindRestart && len(snap) > 0 && snap[0].typ == "reasoning" && snap[0].open {
		if enc := firstReasoningEncrypted(contEvs); enc != "" && (out[0].Get("encrypted_content").Str != enc ||
			out[0].Get("status").Str != "completed") {
			fail(len(evs)-1, "the restart's reasoning carried %q; the client's cut reasoning ended %s", enc, out[0].Raw)
		}
	}
	// The text model of the last continuation that completed.
	want := contModel(contEvs)
	for _, it := range want {
		if it.typ == "reasoning" {
			return // a restart's reasoning is kept as shown or redone; a prefill's dropped
		}
	}
	for _, sn := range snap {
		if sn.typ == "reasoning" {
			return
		}
	}
	if kind == kindPrefill {
		var client []spliceSnap
		for _, sn := range snap {
			client = append(client, spliceSnap{typ: sn.typ, name: sn.name, text: sn.text})
		}
		if n := len(client); n > 0 && snap[n-1].typ == "message" && snap[n-1].open && len(want) > 0 && want[0].typ == "message" {
			client[n-1].text += want[0].text
			want = want[1:]
		}
		want = append(client, withoutEmptyMessages(want)...)
	} else if len(want) > len(snap) {
		// The items a restart adds past those the client has are new.
		want = append(want[:len(snap):len(snap)], withoutEmptyMessages(want[len(snap):])...)
	}
	if len(want) != len(items) {
		fail(len(evs)-1, "a %s completed with %d items, the client has %d", kind, len(want), len(items))
	}
	for j, w := range want {
		it := items[j]
		if it.typ != w.typ || it.joined() != w.text || (it.name != "" && w.name != "" && it.name != w.name) {
			fail(len(evs)-1, "item %d: a %s completed with %s %q %q; the client has %s %q %q", j, kind, w.typ, w.name, w.text,
				it.typ, it.name, it.joined())
		}
	}
}

// spliceFailer fails the test at the client's event k, listing them all.
func spliceFailer(t *testing.T, what string, evs [][]byte) func(k int, format string, args ...any) {
	return func(k int, format string, args ...any) {
		t.Helper()
		var all bytes.Buffer
		for j, e := range evs {
			all.WriteString(strconv.Itoa(j) + ": " + string(e) + "\n")
		}
		t.Fatalf("%s %d: "+format+"\n%s", append(append([]any{what, k}, args...), all.String())...)
	}
}

// checkSplicedItem compares an item's done form (an output_item.done's, or
// the terminal output's) with the deltas the client got.
func checkSplicedItem(fail func(int, string, ...any), k int, it *spliceClientItem, item gjson.Result) {
	if typ := item.Get("type").Str; typ != it.typ {
		fail(k, "item type %q, added as %q", typ, it.typ)
	}
	if it.typ == "function_call" {
		if got := item.Get("arguments").Str; got != it.args {
			fail(k, "arguments %q, but the deltas were %q", got, it.args)
		}
		return
	}
	field := "content"
	if it.typ == "reasoning" {
		field = "summary"
		// Every attempt's reasoning carries an encrypted_content in its done
		// form: a client item ends with its own, or with that of a restart's
		// reasoning at its position (completed), or, cut with none to carry,
		// incomplete without one (carriedReasoning).
		enc := item.Get("encrypted_content")
		if incomplete := item.Get("status").Str == "incomplete"; incomplete == enc.Exists() {
			fail(k, "reasoning item %s: status and encrypted_content disagree", item.Raw)
		}
		if enc.Exists() && enc.Str != "enc_"+item.Get("id").Str && !strings.HasPrefix(enc.Str, "enc_rea_b") {
			fail(k, "reasoning item %s carries the encrypted_content of no restart", item.Raw)
		}
	}
	parts := item.Get(field).Array()
	if len(parts) != len(it.parts) {
		fail(k, "%d %s parts, the client saw %d added", len(parts), field, len(it.parts))
	}
	for j, ci := range it.parts {
		if got := parts[j].Get("text").Str; got != it.text[ci] {
			fail(k, "part %d text %q, but the deltas were %q", ci, got, it.text[ci])
		}
	}
}

// withoutEmptyMessages is a continuation's new items as the client gets
// them: a new message item that shows no text is held back and dropped
// (holdNewLocked), so that a continuation with nothing to add leaves no
// empty message (docs/ARCHITECTURE.md §3). The generator's messages carry
// text only in their deltas and in done forms that follow them, so a
// message whose deltas are empty showed none.
func withoutEmptyMessages(items []spliceSnap) []spliceSnap {
	var out []spliceSnap
	for _, it := range items {
		if it.typ != "message" || it.text != "" {
			out = append(out, it)
		}
	}
	return out
}

// firstReasoningEncrypted is the encrypted_content a continuation
// attempt's first item carried in its output_item.done when that item is
// reasoning; "" otherwise.
func firstReasoningEncrypted(evs []sse.Event) string {
	id := ""
	for _, e := range evs {
		ev := gjson.ParseBytes(e.Data)
		switch ev.Get("type").Str {
		case "response.output_item.added":
			if id == "" {
				if ev.Get("item.type").Str != "reasoning" {
					return ""
				}
				id = ev.Get("item.id").Str
			}
		case "response.output_item.done":
			if id != "" && ev.Get("item.id").Str == id {
				return ev.Get("item.encrypted_content").Str
			}
		}
	}
	return ""
}

// contModel is what a continuation attempt sent of its items: their
// types, names and text, from its events (in output_item.added order).
func contModel(evs []sse.Event) []spliceSnap {
	var out []spliceSnap
	at := map[int64]int{}
	for _, e := range evs {
		ev := gjson.ParseBytes(e.Data)
		k, ok := at[ev.Get("output_index").Int()]
		switch ev.Get("type").Str {
		case "response.output_item.added":
			at[ev.Get("output_index").Int()] = len(out)
			out = append(out, spliceSnap{typ: ev.Get("item.type").Str, name: ev.Get("item.name").Str})
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_summary_text.delta":
			if ok {
				out[k].text += ev.Get("delta").Str
			}
		}
	}
	return out
}

// checkChatSplice checks the chunks a Chat client got.
func checkChatSplice(t *testing.T, evs [][]byte, reason, kind, snap string, spliceAt int, contEvs []sse.Event, clean bool) {
	var (
		id                      string
		roles, finish, finished int // finished: finish chunks from the last continuation
		content                 strings.Builder
		errored                 bool
	)
	fail := spliceFailer(t, "chunk", evs)
	for k, e := range evs {
		if !json.Valid(e) {
			fail(k, "not JSON")
		}
		if errored {
			fail(k, "a chunk after the error chunk")
		}
		ch := gjson.ParseBytes(e)
		if ch.Get("error").Exists() {
			errored = true
			continue
		}
		if v := ch.Get("id"); v.Type == gjson.String {
			if id == "" {
				id = v.Str
			} else if v.Str != id {
				fail(k, "completion id %q after %q", v.Str, id)
			}
		}
		delta := ch.Get("choices.0.delta")
		if delta.Get("role").Exists() {
			roles++
		}
		if finish > 0 && (delta.Get("content").Str != "" || delta.Get("tool_calls").Exists()) {
			fail(k, "content after the finish chunk")
		}
		if fr := ch.Get("choices.0.finish_reason"); fr.Type == gjson.String && fr.Str != "" {
			finish++
			if k >= spliceAt {
				finished++
			}
		}
		content.WriteString(delta.Get("content").Str)
	}
	if roles > 1 || finish > 1 {
		fail(len(evs)-1, "%d role chunks, %d finish chunks", roles, finish)
	}
	if reason == reasonDiverged && (!errored || !strings.Contains(string(evs[len(evs)-1]), "continued on another upstream")) {
		fail(len(evs)-1, "diverged, but the last chunk does not say so")
	}
	if !clean || kind == "" {
		return
	}
	var sent strings.Builder // the content the last continuation sent
	for _, e := range contEvs {
		sent.WriteString(gjson.GetBytes(e.Data, "choices.0.delta.content").Str)
	}
	got := content.String()
	switch {
	case kind == kindRestart && got != snap && !strings.HasPrefix(sent.String(), got):
		fail(len(evs)-1, "a restart that sent %q left the client %q (it had %q)", sent.String(), got, snap)
	case kind == kindRestart && finished == 1 && !errored && got != sent.String():
		fail(len(evs)-1, "a restart finished with %q; the client has %q", sent.String(), got)
	case kind == kindPrefill && (!strings.HasPrefix(got, snap) || !strings.HasPrefix(sent.String(), got[len(snap):])):
		fail(len(evs)-1, "a prefill that sent %q left the client %q (it had %q)", sent.String(), got, snap)
	}
}
