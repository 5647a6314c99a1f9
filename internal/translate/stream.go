package translate

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/tidwall/gjson"
)

// Event is one Responses stream event.
type Event struct {
	// Type is the event type, e.g. "response.output_text.delta".
	Type string
	// Data is the complete JSON event, including "type" and "sequence_number".
	Data []byte
}

// StreamOptions configure a [Stream] (and [FromChatResponse]).
type StreamOptions struct {
	// ResponseID is the response id ("resp_…"); empty means NewID("resp").
	ResponseID string
	// Model is the model the response reports (normally RequestInfo.Model)
	// until the upstream names its own: the model of the first chunk (or of
	// the chat.completion), when it has one, wins, so the client sees the
	// model that really served it. Empty and never named by the upstream:
	// the response has an empty model.
	Model string
	// CreatedAt is the response's created_at (Unix seconds); zero means now.
	CreatedAt int64
	// NewID returns a fresh id for the given prefix ("resp", "msg", "rs",
	// "fc", "call"), including the prefix and an underscore, e.g. "msg_1".
	// Nil means prefix + "_" + 48 random hex digits. Tests pass a counter.
	NewID func(prefix string) string
	// Request holds the request fields echoed in the response object
	// (RequestInfo.Echo from ToChat).
	Request RequestEcho
}

type itemKind uint8

const (
	kindReasoning itemKind = iota
	kindMessage
	kindCall
)

type partKind uint8

const (
	partText partKind = iota
	partRefusal
	partReasoning
)

// Item statuses.
const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusIncomplete = "incomplete"
)

type outPart struct {
	kind partKind
	text []byte
	open bool
}

// outItem is one output item: a reasoning item, a message or a function call.
type outItem struct {
	kind   itemKind
	id     string
	index  int    // output_index, assigned when added
	status string // in_progress until done
	added  bool   // output_item.added was emitted
	closed bool   // output_item.done was emitted
	parts  []*outPart
	// function_call only
	callID string
	name   string
	args   []byte
}

// Stream converts one Chat Completions stream into Responses events. It is
// not safe for concurrent use. Whatever the sequence of calls, it emits
// exactly one terminal event (response.completed, response.incomplete or
// response.failed) once Finish, Fail or an error chunk is reached, and
// nothing after it.
type Stream struct {
	respID    string
	model     string
	createdAt int64
	newID     func(string) string
	echo      []byte // the request-derived tail of the response object

	seq     int64
	started bool
	done    bool
	status  string // response status once done

	// One item is open at a time (announced and not done): cur or
	// openCall. Tool calls that start while another item is open wait in
	// pendingCalls, unannounced, and are announced in start order when it
	// closes, so a client sees output_item.done before the next
	// output_item.added even when Chat interleaves calls by index.
	items        []*outItem         // added items, in output_index order
	cur          *outItem           // the open reasoning or message item
	openCall     *outItem           // the open (announced) tool call
	pendingCalls []*outItem         // tool calls not yet announced, in start order
	calls        map[int64]*outItem // tool calls by Chat index
	callIDs      map[string]bool    // upstream tool call ids seen
	lastCall     int64
	nextCall     int64 // Chat index for a tool call that names none

	// Whitespace-only text that would open a new item waits here: a message
	// made only of the "\n\n" some servers send before a tool call is noise.
	pendingWS   []byte
	pendingKind partKind

	finish     string // finish_reason seen
	usage      []byte // rendered usage object
	errObj     []byte // rendered error object (failed)
	incomplete string // incomplete_details.reason

	ev []Event
}

// NewStream returns a Stream for one response.
func NewStream(opts StreamOptions) *Stream {
	s := &Stream{
		model:     opts.Model,
		createdAt: opts.CreatedAt,
		newID:     opts.NewID,
		calls:     make(map[int64]*outItem),
		status:    statusInProgress,
	}
	if s.newID == nil {
		s.newID = randomID
	}
	if s.createdAt == 0 {
		s.createdAt = time.Now().Unix()
	}
	s.respID = opts.ResponseID
	if s.respID == "" {
		s.respID = s.newID("resp")
	}
	s.echo = appendEcho(nil, opts.Request)
	return s
}

// randomID is the default NewID: prefix, underscore, 48 random hex digits.
func randomID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// ResponseID returns the response id.
func (s *Stream) ResponseID() string { return s.respID }

// Done reports whether a terminal event has been emitted.
func (s *Stream) Done() bool { return s.done }

// FinishReason returns the Chat finish_reason seen so far ("" if none). A
// caller whose upstream ended without [DONE] calls Finish when it is set
// (the answer was complete) and Fail otherwise (the stream was cut).
func (s *Stream) FinishReason() string { return s.finish }

// Start emits response.created and response.in_progress. It is optional:
// the first Chunk or Finish emits them if Start was not called. Calling it
// again, or after the terminal event, returns nil.
func (s *Stream) Start() []Event {
	if s.started || s.done {
		return nil
	}
	s.start()
	return s.flush()
}

func (s *Stream) start() {
	s.started = true
	for _, typ := range [...]string{"response.created", "response.in_progress"} {
		b := s.begin(typ, 512)
		b = append(b, `,"response":`...)
		b = s.appendResponse(b, statusInProgress, false)
		s.end(typ, b)
	}
}

// Chunk converts one `data:` payload of the Chat stream (not "[DONE]"). An
// error chunk ({"error":{…}}) yields response.failed. A payload that is not
// a JSON object returns an error and no events; the caller then fails the
// stream (Fail). After the terminal event Chunk returns nil, nil.
func (s *Stream) Chunk(data []byte) ([]Event, error) {
	if s.done {
		return nil, nil
	}
	if tooDeep(data) || !gjson.ValidBytes(data) {
		return nil, errors.New("translate: chat stream chunk is not valid JSON")
	}
	root := gjson.ParseBytes(data)
	if !root.IsObject() {
		return nil, errors.New("translate: chat stream chunk is not a JSON object")
	}
	var model, choices, usage, errField, object gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			model = v
		case "choices":
			choices = v
		case "usage":
			usage = v
		case "error":
			errField = v
		case "object":
			object = v
		}
		return true
	})
	if present(errField) || object.Str == "error" {
		src := root
		if present(errField) {
			src = errField
		}
		return s.fail(upstreamError(src)), nil
	}
	if model.Type == gjson.String && model.Str != "" && (!s.started || s.model == "") {
		s.model = model.Str
	}
	if !s.started {
		s.start()
	}
	if choices.IsArray() {
		choices.ForEach(func(_, ch gjson.Result) bool {
			if !ch.IsObject() {
				return true
			}
			var idx, delta, finish gjson.Result
			ch.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "index":
					idx = v
				case "delta":
					delta = v
				case "finish_reason":
					finish = v
				}
				return true
			})
			if present(idx) && (idx.Type != gjson.Number || idx.Raw != "0") {
				return true // only the first choice becomes the response
			}
			s.applyDelta(delta, false)
			if finish.Type == gjson.String && finish.Str != "" {
				s.setFinish(finish.Str)
			}
			return true
		})
	}
	if usage.IsObject() {
		s.usage = appendUsage(s.usage[:0], usage)
	}
	return s.flush(), nil
}

// Finish ends the stream at [DONE] (or a clean end after a finish_reason):
// it closes the open items and emits the one terminal event —
// response.completed, or response.incomplete for finish_reason length
// (reason max_output_tokens) and content_filter. After the terminal event it
// returns nil.
func (s *Stream) Finish() []Event {
	if s.done {
		return nil
	}
	if !s.started {
		s.start()
	}
	s.complete()
	return s.flush()
}

// Fail emits exactly one response.failed carrying e's code and message,
// without closing the open items (their state is kept in the failed
// response's output, status incomplete). Before any other event it emits
// response.failed alone, so a caller may still treat the request as not
// started. After the terminal event it returns nil. A nil e means a
// stream_incomplete error.
func (s *Stream) Fail(e *apierr.Error) []Event {
	if s.done {
		return nil
	}
	if e == nil {
		e = apierr.StreamIncomplete("the upstream stream ended without a finish reason")
	}
	return s.fail(e)
}

// OutputItems returns the output items in their current state, in
// output_index order (the final items once the stream is done), for storing
// as conversation history.
func (s *Stream) OutputItems() []json.RawMessage {
	out := make([]json.RawMessage, 0, len(s.items))
	for _, it := range s.items {
		out = append(out, it.appendJSON(nil, s.itemStatus(it), false))
	}
	return out
}

// itemStatus is the status an item shows in a response object: its own once
// done; an item still open in a finished response was cut short.
func (s *Stream) itemStatus(it *outItem) string {
	if !it.closed && s.done {
		return statusIncomplete
	}
	return it.status
}

func (s *Stream) fail(e *apierr.Error) []Event {
	code := e.Code
	if code == "" || (code[0] >= '0' && code[0] <= '9') {
		code = e.Type // e.g. llama.cpp sends the HTTP status as code
	}
	msg := e.Message
	if msg == "" {
		msg = "The upstream reported an error."
	}
	s.errObj = AppendResponseError(s.errObj[:0], code, msg)
	s.pendingWS = s.pendingWS[:0]
	s.terminal("response.failed", "failed")
	return s.flush()
}

// upstreamError reads an error object (or string) from a Chat error chunk.
func upstreamError(v gjson.Result) *apierr.Error {
	if v.Type == gjson.String {
		return &apierr.Error{Status: 502, Type: apierr.TypeServer, Message: v.Str}
	}
	e, ok := apierr.Parse([]byte(v.Raw))
	if !ok {
		e = apierr.Error{Type: apierr.TypeServer, Message: "The upstream reported an error."}
	}
	if e.Status == 0 {
		e.Status = 502
	}
	if e.Message == "" {
		e.Message = "The upstream reported an error."
	}
	if e.Type == "" {
		e.Type = apierr.TypeServer
	}
	return &e
}

// complete closes everything and emits the terminal event the finish reason
// calls for.
func (s *Stream) complete() {
	typ, status, itemStatus := "response.completed", statusCompleted, statusCompleted
	switch s.finish {
	case "length":
		typ, status, itemStatus, s.incomplete = "response.incomplete", statusIncomplete, statusIncomplete, "max_output_tokens"
	case "content_filter":
		typ, status, itemStatus, s.incomplete = "response.incomplete", statusIncomplete, statusIncomplete, "content_filter"
	}
	s.closeAll(itemStatus)
	s.terminal(typ, status)
}

func (s *Stream) terminal(typ, status string) {
	s.done = true
	s.status = status
	b := s.begin(typ, 1024)
	b = append(b, `,"response":`...)
	b = s.appendResponse(b, status, true)
	s.end(typ, b)
}

// setFinish records the finish reason and closes what is open.
func (s *Stream) setFinish(reason string) {
	s.finish = reason
	st := statusCompleted
	if reason == "length" || reason == "content_filter" {
		st = statusIncomplete
	}
	s.closeAll(st)
}

// closeAll closes the open item and every open tool call. Whitespace still
// waiting becomes a message only when nothing else was said.
func (s *Stream) closeAll(status string) {
	if len(s.pendingWS) > 0 && len(s.items) == 0 && s.openCall == nil && len(s.pendingCalls) == 0 {
		ws := string(s.pendingWS)
		s.pendingWS = s.pendingWS[:0]
		kind := itemKind(kindMessage)
		if s.pendingKind == partReasoning {
			kind = kindReasoning
		}
		s.cur = s.addItem(kind)
		s.textDelta(kind, s.pendingKind, ws, "")
	}
	s.pendingWS = s.pendingWS[:0]
	s.closeCur(status)
	s.closeCalls(status)
}

// closeCalls closes the open tool call, then announces and closes the
// waiting ones in start order.
func (s *Stream) closeCalls(status string) {
	if s.openCall != nil {
		s.closeItem(s.openCall, status)
		s.openCall = nil
	}
	for _, c := range s.pendingCalls {
		s.closeItem(c, status)
	}
	s.pendingCalls = s.pendingCalls[:0]
}

// advanceCalls moves to the next waiting tool call once the open one is
// evidently finished (its arguments are a complete JSON value: nothing
// more can be appended to them) and the next one has a name.
func (s *Stream) advanceCalls() {
	for len(s.pendingCalls) > 0 && s.pendingCalls[0].name != "" {
		if s.cur != nil {
			return
		}
		if oc := s.openCall; oc != nil {
			if len(oc.args) == 0 || !gjson.ValidBytes(oc.args) {
				return
			}
			s.closeItem(oc, statusCompleted)
			s.openCall = nil
		}
		next := s.pendingCalls[0]
		s.pendingCalls = s.pendingCalls[1:]
		s.addCall(next)
		s.openCall = next
	}
}

func (s *Stream) closeCur(status string) {
	if s.cur != nil {
		s.closeItem(s.cur, status)
		s.cur = nil
	}
}

// applyDelta applies a Chat delta (or, positional, a non-streamed message).
func (s *Stream) applyDelta(d gjson.Result, positional bool) {
	if !d.IsObject() {
		return
	}
	var content, reasoningContent, reasoning, refusal, toolCalls gjson.Result
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			content = v
		case "reasoning_content":
			reasoningContent = v
		case "reasoning":
			reasoning = v
		case "refusal":
			refusal = v
		case "tool_calls":
			toolCalls = v
		}
		return true
	})
	r := reasoningContent
	if !nonEmptyString(r) {
		r = reasoning
	}
	if nonEmptyString(r) {
		s.textDelta(kindReasoning, partReasoning, r.Str, r.Raw)
	}
	switch {
	case nonEmptyString(content):
		s.textDelta(kindMessage, partText, content.Str, content.Raw)
	case content.IsArray(): // some servers send text parts
		content.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("text"); nonEmptyString(t) {
				s.textDelta(kindMessage, partText, t.Str, t.Raw)
			}
			return true
		})
	}
	if nonEmptyString(refusal) {
		s.textDelta(kindMessage, partRefusal, refusal.Str, refusal.Raw)
	}
	if toolCalls.IsArray() {
		pos := int64(0)
		toolCalls.ForEach(func(_, tc gjson.Result) bool {
			if tc.IsObject() {
				s.toolDelta(tc, pos, positional)
			}
			pos++
			return true
		})
	}
}

func nonEmptyString(r gjson.Result) bool { return r.Type == gjson.String && len(r.Raw) > 2 }

func isSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}

// textDelta appends text (raw is its JSON literal, or "" to encode text) to
// the open item of the given kind, opening one (and closing whatever else is
// open) if needed.
func (s *Stream) textDelta(kind itemKind, pk partKind, text, raw string) {
	if len(s.pendingWS) > 0 && s.pendingKind != pk {
		s.pendingWS = s.pendingWS[:0] // something else was said after it
	}
	it := s.cur
	if it == nil || it.kind != kind {
		if isSpace(text) {
			s.pendingKind = pk
			s.pendingWS = append(s.pendingWS, text...)
			return
		}
		if len(s.pendingWS) > 0 {
			text = string(s.pendingWS) + text
			raw = ""
			s.pendingWS = s.pendingWS[:0]
		}
		s.closeCur(statusCompleted)
		s.closeCalls(statusCompleted)
		it = s.addItem(kind)
		s.cur = it
	}
	var p *outPart
	if n := len(it.parts); n > 0 && it.parts[n-1].open {
		p = it.parts[n-1]
	}
	if p == nil || p.kind != pk {
		if p != nil {
			s.closePart(it, len(it.parts)-1)
		}
		p = s.addPart(it, pk)
	}
	p.text = append(p.text, text...)
	ci := len(it.parts) - 1
	var typ string
	switch pk {
	case partText:
		typ = "response.output_text.delta"
	case partRefusal:
		typ = "response.refusal.delta"
	default:
		typ = "response.reasoning_text.delta"
	}
	b := s.begin(typ, 160+len(text)+len(raw))
	b = s.appendRef(b, it, ci)
	b = append(b, `,"delta":`...)
	if raw != "" {
		b = append(b, raw...)
	} else {
		b = jsonx.AppendQuote(b, text)
	}
	if pk == partText {
		b = append(b, `,"logprobs":[]`...)
	}
	s.end(typ, b)
}

// toolDelta applies one entry of delta.tool_calls.
func (s *Stream) toolDelta(tc gjson.Result, pos int64, positional bool) {
	var index, id, fn gjson.Result
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v
		case "id":
			id = v
		case "function":
			fn = v
		}
		return true
	})
	var idx int64
	switch {
	case positional:
		idx = pos
	case index.Type == gjson.Number:
		idx = index.Int()
	case nonEmptyString(id) && !s.knownCallID(id.Str):
		idx = s.nextCall // a new call from a server that sends no index
	default:
		idx = s.lastCall
	}
	call := s.calls[idx]
	if call == nil {
		s.pendingWS = s.pendingWS[:0]
		s.closeCur(statusCompleted)
		call = &outItem{kind: kindCall, status: statusInProgress}
		s.calls[idx] = call
		s.pendingCalls = append(s.pendingCalls, call)
		if idx >= s.nextCall {
			s.nextCall = idx + 1
		}
	}
	s.lastCall = idx
	if call.closed {
		return // the choice already finished; nothing can be added to a done item
	}
	if call.callID == "" && nonEmptyString(id) {
		call.callID = id.Str
		if s.callIDs == nil {
			s.callIDs = make(map[string]bool)
		}
		s.callIDs[id.Str] = true
	}
	var name, args gjson.Result
	if fn.IsObject() {
		name, args = fn.Get("name"), fn.Get("arguments")
	}
	if call.name == "" && nonEmptyString(name) {
		call.name = name.Str
	}
	if !call.added {
		s.advanceCalls() // announces call if it is next and nothing else is open
	}
	switch {
	case nonEmptyString(args):
		s.callArgs(call, args.Str, args.Raw)
	case args.IsObject(): // arguments sent as an object instead of a string
		s.callArgs(call, args.Raw, "")
	}
	if len(s.pendingCalls) > 0 {
		s.advanceCalls()
	}
}

func (s *Stream) knownCallID(id string) bool { return s.callIDs[id] }

func (s *Stream) callArgs(call *outItem, text, raw string) {
	call.args = append(call.args, text...)
	if !call.added {
		return // sent with the output_item.added once the name is known
	}
	s.argsDelta(call, text, raw)
}

func (s *Stream) argsDelta(call *outItem, text, raw string) {
	const typ = "response.function_call_arguments.delta"
	b := s.begin(typ, 128+len(text)+len(raw))
	b = s.appendRef(b, call, -1)
	b = append(b, `,"delta":`...)
	if raw != "" {
		b = append(b, raw...)
	} else {
		b = jsonx.AppendQuote(b, text)
	}
	s.end(typ, b)
}

// addCall emits output_item.added for a tool call, and the arguments that
// arrived before its name.
func (s *Stream) addCall(call *outItem) {
	if call.callID == "" {
		call.callID = s.newID("call")
	}
	buffered := string(call.args)
	call.id = s.newID("fc")
	s.added(call)
	if buffered != "" {
		s.argsDelta(call, buffered, "")
	}
}

// addItem creates and announces a reasoning or message item.
func (s *Stream) addItem(kind itemKind) *outItem {
	it := &outItem{kind: kind, status: statusInProgress}
	if kind == kindReasoning {
		it.id = s.newID("rs")
	} else {
		it.id = s.newID("msg")
	}
	s.added(it)
	return it
}

func (s *Stream) added(it *outItem) {
	it.index = len(s.items)
	it.added = true
	s.items = append(s.items, it)
	const typ = "response.output_item.added"
	b := s.begin(typ, 256)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, int64(it.index))
	b = append(b, `,"item":`...)
	b = it.appendJSON(b, statusInProgress, true)
	s.end(typ, b)
}

func (s *Stream) addPart(it *outItem, pk partKind) *outPart {
	p := &outPart{kind: pk, open: true}
	it.parts = append(it.parts, p)
	const typ = "response.content_part.added"
	b := s.begin(typ, 256)
	b = s.appendRef(b, it, len(it.parts)-1)
	b = append(b, `,"part":`...)
	b = p.appendJSON(b)
	s.end(typ, b)
	return p
}

func (s *Stream) closePart(it *outItem, ci int) {
	p := it.parts[ci]
	p.open = false
	var typ, field string
	switch p.kind {
	case partText:
		typ, field = "response.output_text.done", "text"
	case partRefusal:
		typ, field = "response.refusal.done", "refusal"
	default:
		typ, field = "response.reasoning_text.done", "text"
	}
	b := s.begin(typ, 160+len(p.text))
	b = s.appendRef(b, it, ci)
	b = appendKey(b, field)
	b = jsonx.AppendQuote(b, string(p.text))
	if p.kind == partText {
		b = append(b, `,"logprobs":[]`...)
	}
	s.end(typ, b)
	const doneTyp = "response.content_part.done"
	b = s.begin(doneTyp, 160+len(p.text))
	b = s.appendRef(b, it, ci)
	b = append(b, `,"part":`...)
	b = p.appendJSON(b)
	s.end(doneTyp, b)
}

// closeItem emits the done events of an item.
func (s *Stream) closeItem(it *outItem, status string) {
	if it.closed {
		return
	}
	if it.kind == kindCall {
		if !it.added {
			s.addCall(it)
		}
		const typ = "response.function_call_arguments.done"
		b := s.begin(typ, 160+len(it.args))
		b = s.appendRef(b, it, -1)
		b = append(b, `,"name":`...)
		b = jsonx.AppendQuote(b, it.name)
		b = append(b, `,"arguments":`...)
		b = jsonx.AppendQuote(b, string(it.args))
		s.end(typ, b)
	}
	for ci, p := range it.parts {
		if p.open {
			s.closePart(it, ci)
		}
	}
	it.status = status
	it.closed = true
	const typ = "response.output_item.done"
	b := s.begin(typ, 256)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, int64(it.index))
	b = append(b, `,"item":`...)
	b = it.appendJSON(b, status, false)
	s.end(typ, b)
}

// begin starts an event: {"type":…,"sequence_number":N
func (s *Stream) begin(typ string, size int) []byte {
	b := make([]byte, 0, size+len(typ))
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = appendInt(b, s.seq)
	s.seq++
	return b
}

func (s *Stream) end(typ string, b []byte) {
	s.ev = append(s.ev, Event{Type: typ, Data: append(b, '}')})
}

func (s *Stream) flush() []Event {
	ev := s.ev
	s.ev = nil
	return ev
}

// appendRef appends item_id, output_index and (ci >= 0) content_index.
func (s *Stream) appendRef(b []byte, it *outItem, ci int) []byte {
	b = append(b, `,"item_id":`...)
	b = jsonx.AppendQuote(b, it.id)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, int64(it.index))
	if ci >= 0 {
		b = append(b, `,"content_index":`...)
		b = appendInt(b, int64(ci))
	}
	return b
}

// appendJSON renders a content part in its current state.
func (p *outPart) appendJSON(b []byte) []byte {
	switch p.kind {
	case partText:
		b = append(b, `{"type":"output_text","annotations":[],"logprobs":[],"text":`...)
		b = jsonx.AppendQuote(b, string(p.text))
	case partRefusal:
		b = append(b, `{"type":"refusal","refusal":`...)
		b = jsonx.AppendQuote(b, string(p.text))
	default:
		b = append(b, `{"type":"reasoning_text","text":`...)
		b = jsonx.AppendQuote(b, string(p.text))
	}
	return append(b, '}')
}

// appendJSON renders an item in its current state with the given status;
// announce renders it as output_item.added shows it (no arguments yet).
func (it *outItem) appendJSON(b []byte, status string, announce bool) []byte {
	b = append(b, `{"id":`...)
	b = jsonx.AppendQuote(b, it.id)
	switch it.kind {
	case kindCall:
		b = append(b, `,"type":"function_call","status":"`...)
		b = append(b, status...)
		b = append(b, `","arguments":`...)
		if announce {
			b = append(b, `""`...) // arguments stream as deltas after added
		} else {
			b = jsonx.AppendQuote(b, string(it.args))
		}
		b = append(b, `,"call_id":`...)
		b = jsonx.AppendQuote(b, it.callID)
		b = append(b, `,"name":`...)
		b = jsonx.AppendQuote(b, it.name)
		return append(b, '}')
	case kindReasoning:
		b = append(b, `,"type":"reasoning","status":"`...)
		b = append(b, status...)
		b = append(b, `","summary":[],"content":[`...)
	default:
		b = append(b, `,"type":"message","role":"assistant","status":"`...)
		b = append(b, status...)
		b = append(b, `","content":[`...)
	}
	for k, p := range it.parts {
		if k > 0 {
			b = append(b, ',')
		}
		b = p.appendJSON(b)
	}
	return append(b, "]}"...)
}

// appendResponse renders the response object. final includes the output
// items and usage.
func (s *Stream) appendResponse(b []byte, status string, final bool) []byte {
	b = append(b, `{"id":`...)
	b = jsonx.AppendQuote(b, s.respID)
	b = append(b, `,"object":"response","created_at":`...)
	b = appendInt(b, s.createdAt)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","background":false,"error":`...)
	if final && len(s.errObj) > 0 {
		b = append(b, s.errObj...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if final && s.incomplete != "" {
		b = append(b, `{"reason":`...)
		b = jsonx.AppendQuote(b, s.incomplete)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"model":`...)
	b = jsonx.AppendQuote(b, s.model)
	b = append(b, `,"output":[`...)
	if final {
		for k, it := range s.items {
			if k > 0 {
				b = append(b, ',')
			}
			b = it.appendJSON(b, s.itemStatus(it), false)
		}
	}
	b = append(b, ']')
	if final && len(s.usage) > 0 { // the spec's usage is an object: absent while unknown
		b = append(b, `,"usage":`...)
		b = append(b, s.usage...)
	}
	b = append(b, s.echo...)
	return append(b, '}')
}

// appendUsage maps Chat usage onto Responses usage.
func appendUsage(b []byte, u gjson.Result) []byte {
	in := u.Get("prompt_tokens").Int()
	out := u.Get("completion_tokens").Int()
	total := in + out
	if t := u.Get("total_tokens"); t.Type == gjson.Number {
		total = t.Int()
	}
	b = append(b, `{"input_tokens":`...)
	b = appendInt(b, in)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = appendInt(b, u.Get("prompt_tokens_details.cached_tokens").Int())
	b = append(b, `,"cache_write_tokens":`...)
	b = appendInt(b, u.Get("prompt_tokens_details.cache_write_tokens").Int())
	b = append(b, `},"output_tokens":`...)
	b = appendInt(b, out)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = appendInt(b, u.Get("completion_tokens_details.reasoning_tokens").Int())
	b = append(b, `},"total_tokens":`...)
	b = appendInt(b, total)
	return append(b, '}')
}

// specErrorCodes is the ResponseErrorCode enum of OpenAI's OpenAPI spec
// (github.com/openai/openai-openapi f85dbe2, spec version 2.3.0): the codes
// a Response object's error.code may carry.
var specErrorCodes = map[string]bool{
	"server_error": true, "rate_limit_exceeded": true, "invalid_prompt": true, "data_residency_mismatch": true,
	"bio_policy": true, "vector_store_timeout": true, "invalid_image": true, "invalid_image_format": true,
	"invalid_base64_image": true, "invalid_image_url": true, "image_too_large": true, "image_too_small": true,
	"image_parse_error": true, "image_content_policy_violation": true, "invalid_image_mode": true,
	"image_file_too_large": true, "unsupported_image_media_type": true, "empty_image_file": true,
	"failed_to_download_image": true, "image_file_not_found": true,
}

// upstreamActionCodes are codes outside the spec's enum that OpenAI itself
// sends in response.failed and that clients act on (Codex stops on
// insufficient_quota, usage_not_included and context_length_exceeded, backs
// off on the overload codes): an upstream's code among them is kept as is.
var upstreamActionCodes = map[string]bool{
	"insufficient_quota": true, "usage_not_included": true, "usage_limit_reached": true, "quota_exceeded": true,
	"context_length_exceeded": true, "server_is_overloaded": true, "overloaded_error": true, "slow_down": true,
}

// ResponseErrorCode maps an error code onto what a Response object's
// error.code carries: a code of the spec's ResponseErrorCode enum, or one of
// the upstream codes clients act on, is kept (keep true); anything else —
// the gateway's own stream_incomplete, upstream_unavailable, an upstream's
// invalid_value — becomes server_error (keep false), and the caller keeps
// the original code in the message.
func ResponseErrorCode(code string) (mapped string, keep bool) {
	if specErrorCodes[code] || upstreamActionCodes[code] {
		return code, true
	}
	return apierr.TypeServer, false
}

// AppendResponseError appends a Response object's error object for code and
// message: {"code":…,"message":…}, with a code outside ResponseErrorCode's
// enum mapped to server_error and kept as the message's prefix
// ("stream_incomplete: the upstream …").
func AppendResponseError(b []byte, code, message string) []byte {
	mapped, keep := ResponseErrorCode(code)
	if !keep && code != "" && code != mapped {
		message = code + ": " + message
	}
	b = append(b, `{"code":`...)
	b = jsonx.AppendQuote(b, mapped)
	b = append(b, `,"message":`...)
	b = jsonx.AppendQuote(b, message)
	return append(b, '}')
}

// AppendEcho appends the request-derived fields of a Response object (see
// RequestEcho), each prefixed by a comma, with the API's defaults for absent
// or invalid values.
func AppendEcho(b []byte, r RequestEcho) []byte { return appendEcho(b, r) }

// EchoTools returns tools as a Response object echoes them: every function
// tool carries the fields the spec's FunctionTool requires — strict (false
// when the request left it out: a Chat upstream, which gets no strict then,
// runs the function non-strict) and parameters (null when absent). Other
// tools, and input that is not an array, come back unchanged.
func EchoTools(tools json.RawMessage) json.RawMessage {
	r := gjson.ParseBytes(tools)
	if !r.IsArray() {
		return tools
	}
	needs := false
	r.ForEach(func(_, t gjson.Result) bool {
		if t.Get("type").Str == "function" && (!t.Get("strict").Exists() || !t.Get("parameters").Exists()) {
			needs = true
			return false
		}
		return true
	})
	if !needs {
		return tools
	}
	out := make([]byte, 0, len(tools)+64)
	out = append(out, '[')
	n := 0
	r.ForEach(func(_, t gjson.Result) bool {
		if n > 0 {
			out = append(out, ',')
		}
		n++
		raw := strings.TrimSpace(t.Raw)
		if t.Get("type").Str != "function" || !t.IsObject() {
			out = append(out, raw...)
			return true
		}
		out = append(out, raw[:len(raw)-1]...)
		empty := strings.TrimSpace(raw[1:len(raw)-1]) == ""
		for _, f := range [...]struct{ key, def string }{{"strict", "false"}, {"parameters", "null"}} {
			if t.Get(f.key).Exists() {
				continue
			}
			if !empty {
				out = append(out, ',')
			}
			empty = false
			out = append(out, '"')
			out = append(out, f.key...)
			out = append(out, `":`...)
			out = append(out, f.def...)
		}
		out = append(out, '}')
		return true
	})
	return append(out, ']')
}

// appendEcho renders the request-derived fields of the response object, each
// prefixed by a comma, with the API defaults for absent or invalid values.
func appendEcho(b []byte, r RequestEcho) []byte {
	if len(r.Tools) > 0 && json.Valid(r.Tools) {
		r.Tools = EchoTools(r.Tools)
	}
	for _, f := range [...]struct {
		key string
		raw json.RawMessage
		def string
	}{
		{"instructions", r.Instructions, "null"},
		{"max_output_tokens", r.MaxOutputTokens, "null"},
		{"metadata", r.Metadata, "{}"},
		{"parallel_tool_calls", r.ParallelToolCalls, "true"},
		{"previous_response_id", r.PreviousResponseID, "null"},
		{"reasoning", r.Reasoning, `{"effort":null,"summary":null}`},
		{"store", r.Store, "true"},
		{"temperature", r.Temperature, "1"},
		{"text", r.Text, `{"format":{"type":"text"}}`},
		{"tool_choice", r.ToolChoice, `"auto"`},
		{"tools", r.Tools, "[]"},
		{"top_p", r.TopP, "1"},
	} {
		b = append(b, `,"`...)
		b = append(b, f.key...)
		b = append(b, `":`...)
		if len(f.raw) > 0 && string(f.raw) != "null" && json.Valid(f.raw) {
			b = append(b, f.raw...)
		} else {
			b = append(b, f.def...)
		}
	}
	return append(b, `,"truncation":"disabled"`...)
}

// FromChatResponse converts a non-streamed chat.completion body into a full
// Response object, and returns its output items for storing. The upstream's
// error envelope comes back as err (status 502 unless it carried one); a body
// that is not a chat.completion is a stream_incomplete error.
func FromChatResponse(body []byte, opts StreamOptions) (response []byte, output []json.RawMessage, err *apierr.Error) {
	if tooDeep(body) || !gjson.ValidBytes(body) {
		return nil, nil, apierr.StreamIncomplete("the upstream returned a chat completion that is not valid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, nil, apierr.StreamIncomplete("the upstream returned a chat completion that is not a JSON object")
	}
	if e := root.Get("error"); present(e) || root.Get("object").Str == "error" {
		if !present(e) {
			e = root
		}
		return nil, nil, upstreamError(e)
	}
	choices := root.Get("choices")
	if !choices.IsArray() {
		return nil, nil, apierr.StreamIncomplete("the upstream returned a chat completion without choices")
	}
	s := NewStream(opts)
	s.started = true
	if m := root.Get("model"); m.Type == gjson.String && m.Str != "" {
		s.model = m.Str
	}
	found := false
	choices.ForEach(func(_, ch gjson.Result) bool {
		if idx := ch.Get("index"); present(idx) && idx.Raw != "0" {
			return true
		}
		found = true
		s.applyDelta(ch.Get("message"), true)
		if fr := ch.Get("finish_reason"); fr.Type == gjson.String && fr.Str != "" {
			s.finish = fr.Str
		}
		return false
	})
	if !found {
		return nil, nil, apierr.StreamIncomplete("the upstream returned a chat completion without choices")
	}
	if u := root.Get("usage"); u.IsObject() {
		s.usage = appendUsage(nil, u)
	}
	s.complete()
	s.ev = nil
	return s.appendResponse(nil, s.status, true), s.OutputItems(), nil
}
