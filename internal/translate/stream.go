package translate

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
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
	// Background is the response's background flag, which every Response
	// object the Stream writes reports: a Chat upstream knows nothing of
	// it, the gateway runs a background response itself.
	Background bool
	// Now is the clock for completed_at; nil means time.Now.
	Now func() time.Time
	// UnknownFinish, when set, is called with a finish_reason the Stream
	// does not know as it completes the response with it (a caller logs
	// it: see finishOutcome).
	UnknownFinish func(reason string)
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
	high string // a high-surrogate escape held back from the last delta (joinSurrogates)
	// annotations are an output_text part's url_citation annotations,
	// rendered (annotations.go).
	annotations [][]byte
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
	high   string // a high-surrogate escape held back from the last arguments delta (joinSurrogates)
	// chatIndex is the Chat index the call was started under, the key of
	// Stream.calls while no other call has taken the index over
	// (replacesCall).
	chatIndex int64
}

// heldText is a text delta that waits for the tool calls that can still take
// arguments (Stream.holdText).
type heldText struct {
	kind      itemKind
	pk        partKind
	text, raw string
}

// Stream converts one Chat Completions stream into Responses events. It is
// not safe for concurrent use. Whatever the sequence of calls, it emits
// exactly one terminal event (response.completed, response.incomplete or
// response.failed) once Finish, Fail or an error chunk is reached, and
// nothing after it.
type Stream struct {
	respID     string
	model      string
	createdAt  int64
	background bool // StreamOptions.Background
	newID      func(string) string
	now        func() time.Time
	echo       []byte // the request-derived tail of the response object
	// unknownFinish is StreamOptions.UnknownFinish.
	unknownFinish func(reason string)
	completedAt   int64 // Unix seconds, set with a completed terminal

	seq     int64
	started bool
	done    bool
	status  string // response status once done

	// One item is open at a time (announced and not done): cur or
	// openCall. Tool calls that start while another item is open wait in
	// pendingCalls, unannounced, and are announced in start order when it
	// closes, so a client sees output_item.done before the next
	// output_item.added even when Chat interleaves calls by index.
	items        []*outItem          // added items, in output_index order
	cur          *outItem            // the open reasoning or message item
	openCall     *outItem            // the open (announced) tool call
	pendingCalls []*outItem          // tool calls not yet announced, in start order
	calls        map[int64]*outItem  // tool calls by Chat index
	callsByID    map[string]*outItem // tool calls by the id the upstream gave them
	lastCall     int64
	nextCall     int64 // Chat index for a tool call that names none
	lateNames    int   // name fragments that came after their call was announced (LateNameFragments)
	nameless     bool  // a tool call ended without a name (failNameless)

	// Whitespace-only text that would open a new item waits here: a message
	// made only of the "\n\n" some servers send before a tool call is noise.
	pendingWS   []byte
	pendingKind partKind
	// Text that arrived while a tool call could still take arguments waits
	// here, in order, until none can (holdText).
	held []heldText
	// Annotations that came while no output_text part was open wait here
	// for the next one (attachAnnotations).
	pendingAnnotations [][]byte

	upstreamErr *apierr.Error // the upstream's error, when an error chunk failed the stream

	finish     string // finish_reason seen
	usage      []byte // rendered usage object
	errObj     []byte // rendered error object (failed)
	incomplete string // incomplete_details.reason

	ev []Event
}

// NewStream returns a Stream for one response.
func NewStream(opts StreamOptions) *Stream {
	s := &Stream{
		model:      opts.Model,
		createdAt:  opts.CreatedAt,
		background: opts.Background,
		newID:      opts.NewID,
		now:        opts.Now,
		calls:      make(map[int64]*outItem),
		status:     statusInProgress,
	}
	if s.newID == nil {
		s.newID = randomID
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.unknownFinish = opts.UnknownFinish
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

// Usage is the last usage the Chat stream reported, as a Responses usage
// object (nil while none came): a running count on each chunk (vLLM's
// continuous usage stats) included, so a stream cut after it still says
// what its attempt cost. The caller must not modify it.
func (s *Stream) Usage() []byte { return s.usage }

// FinishReason returns the Chat finish_reason seen so far ("" if none). A
// caller whose upstream ended without [DONE] calls Finish when it is set
// (the answer was complete) and Fail otherwise (the stream was cut).
func (s *Stream) FinishReason() string { return s.finish }

// LateNameFragments is how many pieces of a tool call's name came after the
// call was announced (its arguments had begun): the call keeps the name it
// was shown with, and the caller can count what was left out.
func (s *Stream) LateNameFragments() int { return s.lateNames }

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
// error chunk ({"error":{…}}) yields response.failed, or, after a finish
// reason, the answer's own terminal event. A payload that is not
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
		if s.finish != "" {
			// The answer was complete (a finish reason came): an error
			// after it does not unmake it (README "Chat-only upstreams").
			return s.Finish(), nil
		}
		src := root
		if present(errField) {
			src = errField
		}
		return s.failUpstream(upstreamError(src)), nil
	}
	if model.Type == gjson.String && model.Str != "" && (!s.started || s.model == "") {
		s.model = model.Str
	}
	if !s.started {
		s.start()
	}
	if choices.IsArray() && s.finish == "" { // after a finish reason only usage may follow
		// One pass: choice 0's deltas are applied once the chunk is known to
		// hold no other choice. The request asks for one choice (it sends
		// no n): content on another is the upstream's mistake, and dropping
		// it would end the answer complete without the text, so such a chunk
		// is malformed.
		type choice struct{ delta, finish gjson.Result }
		var buf [1]choice
		first, other := buf[:0], false
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
			if present(idx) && (idx.Type != gjson.Number || idx.Raw != "0") { // an absent index is choice 0
				other = true
				return false
			}
			first = append(first, choice{delta, finish})
			return true
		})
		if other {
			return nil, errors.New("translate: chat stream chunk has a choice other than index 0 (one was asked for)")
		}
		for _, c := range first {
			s.applyDelta(c.delta, false)
			if c.finish.Type == gjson.String && c.finish.Str != "" {
				s.setFinish(c.finish.Str)
			}
		}
	}
	if chatUsageCounted(usage) {
		s.usage = appendUsage(s.usage[:0], usage)
	}
	s.failNameless()
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

// ErrorBeforeOutput returns the upstream's error when an error chunk (or an
// error envelope given to Completion) ended the stream before any output item
// was announced, and nil otherwise. The response then showed nothing but
// response.created and response.in_progress, so a caller may answer the
// failure as the upstream's own error — message, type, param and code as the
// upstream sent them, Status the HTTP status it stands for (0: it named none)
// — rather than as the response.failed the Stream emitted, whose error.code
// the spec's enum may have turned into server_error.
func (s *Stream) ErrorBeforeOutput() *apierr.Error {
	if len(s.items) > 0 {
		return nil
	}
	return s.UpstreamError()
}

// UpstreamError returns the upstream's error when an error chunk (or an
// error envelope given to Completion) ended the stream, before or after
// output — or a server error of the gateway's when the stream's answer was
// unusable (a tool call without a name: failNameless) — and nil otherwise;
// see ErrorBeforeOutput. A caller judges the
// failure by it (is it the client's error?) rather than by the
// response.failed's error.code, which the spec's enum may have turned into
// server_error.
func (s *Stream) UpstreamError() *apierr.Error {
	if s.upstreamErr == nil {
		return nil
	}
	e := *s.upstreamErr
	return &e
}

// failUpstream fails the stream with the upstream's own error.
func (s *Stream) failUpstream(e *apierr.Error) []Event {
	s.upstreamErr = e
	return s.fail(e)
}

func (s *Stream) fail(e *apierr.Error) []Event {
	s.failed(e)
	return s.flush()
}

// failNameless fails the stream, once a tool call ended without a function
// name, as the upstream's server error (UpstreamError): such a call cannot
// be run, nor sent back in a later request's history, so the answer is
// unusable — not a function_call item named "" (README
// "Chat-Completions-only upstreams").
func (s *Stream) failNameless() {
	if !s.nameless || s.done {
		return
	}
	s.upstreamErr = &apierr.Error{Status: http.StatusBadGateway, Type: apierr.TypeServer, Code: apierr.CodeUpstreamError,
		Message: namelessCallMessage}
	s.failed(s.upstreamErr)
}

// emptyArguments are the arguments of a tool call the upstream sent none for.
const emptyArguments = "{}"

// namelessCallMessage is the error message of an answer with a tool call
// that never got a function name.
const namelessCallMessage = "the upstream sent a tool call without a function name"

// failed emits the response.failed of fail without flushing the events.
func (s *Stream) failed(e *apierr.Error) {
	code := e.Code
	if code == "" || (code[0] >= '0' && code[0] <= '9') {
		code = e.Type // e.g. llama.cpp sends the HTTP status as code
	}
	msg := e.Message
	if msg == "" {
		msg = "The upstream reported an error."
	}
	s.errObj = AppendResponseError(s.errObj[:0], code, e.Type, msg)
	s.pendingWS = s.pendingWS[:0]
	s.held = nil // never sent: the failed response's output is what the client got
	s.terminal("response.failed", "failed")
}

// upstreamError reads an error object (or string) from a Chat error chunk
// or error envelope. Its Status is the HTTP status the error stands for
// (ErrorStatus); its code and type are as the client gets them
// (apierr.FromUpstream: llama.cpp's status sent as the code is none, or
// rate_limit_exceeded for a 429, and its context overflow is
// context_length_exceeded), whichever path renders it.
func upstreamError(v gjson.Result) *apierr.Error {
	if v.Type == gjson.String {
		return &apierr.Error{Status: http.StatusBadGateway, Type: apierr.TypeServer, Message: v.Str}
	}
	e, ok := apierr.Parse([]byte(v.Raw))
	if !ok {
		e = apierr.Error{Type: apierr.TypeServer, Message: "The upstream reported an error."}
	}
	e.Status = ErrorStatus(e) // before FromUpstream: a status sent as the code names it
	e = apierr.FromUpstream(e, e.Status)
	if e.Message == "" {
		e.Message = "The upstream reported an error."
	}
	if e.Type == "" {
		e.Type = apierr.TypeServer
	}
	return &e
}

// ErrorStatus is the HTTP status an upstream error object stands for when it
// names none. A Chat error chunk has no field for it, nor has a Responses
// error event always: llama.cpp and vLLM send the status as the code (a
// number); otherwise OpenAI's two error types say whose fault it is
// (invalid_request_error: 400, server_error: 502), and OpenAI's capacity
// codes are its 429s (rate_limit_exceeded, insufficient_quota, whatever
// their type: requests, tokens). An error of neither type that names the
// request parameter at fault (param, a non-empty string) is a client error,
// 400: OpenAI's own stream error events carry no type
// ({"type":"error","code":"invalid_value","param":"temperature",…}), and a
// server's failure names no parameter of the request. A code clients act on
// (a quota, an overload, context_length_exceeded: upstreamActionCodes) is
// judged by the code alone, param or not. Any other error gets 0, and its
// code alone classifies it. The gateway reads both protocols' errors by this
// one rule.
func ErrorStatus(e apierr.Error) int {
	if n, err := strconv.Atoi(e.Code); err == nil && n >= 400 && n <= 599 {
		return n
	}
	switch e.Code {
	case apierr.CodeRateLimitExceeded, apierr.CodeInsufficientQuota:
		return http.StatusTooManyRequests
	}
	switch e.Type {
	case apierr.TypeInvalidRequest:
		return http.StatusBadRequest
	case apierr.TypeServer:
		return http.StatusBadGateway
	}
	if e.Param != "" && !upstreamActionCodes[e.Code] {
		return http.StatusBadRequest
	}
	return 0
}

// complete closes everything and emits the terminal event the finish reason
// calls for.
func (s *Stream) complete() {
	typ, status, itemStatus := "response.completed", statusCompleted, statusCompleted
	incomplete, cut, known := finishOutcome(s.finish)
	switch {
	case cut:
		// Failed as a cut stream is (Fail): what is open stays open, so a
		// continuation carries on from the very text the client has.
		s.upstreamErr = cutShortError(s.finish)
		s.failed(s.upstreamErr)
		return
	case incomplete != "":
		typ, status, itemStatus, s.incomplete = "response.incomplete", statusIncomplete, statusIncomplete, incomplete
	case !known && s.unknownFinish != nil:
		s.unknownFinish(s.finish)
	}
	s.closeAll(itemStatus)
	if s.failNameless(); s.done {
		return
	}
	if status == statusCompleted {
		s.completedAt = s.now().Unix()
	}
	s.terminal(typ, status)
}

// finishOutcome is what a Chat finish_reason makes of the response:
//   - stop, tool_calls, the legacy function_call, and TGI's eos_token and
//     stop_sequence complete it;
//   - length (incomplete reason max_output_tokens) and content_filter make
//     it incomplete — the spec's incomplete_details.reason has only these
//     two;
//   - abort and error (vLLM's and SGLang's for a request the engine
//     aborted or failed mid-answer) say the answer was cut short: cut, the
//     response fails as a stream cut does (cutShortError), so a client never
//     takes a truncated answer for a whole one, and a route may continue it
//     on its next target (README "Chat-only upstreams");
//   - any other reason completes it, known false: the text came whole as
//     far as the stream shows, and failing every answer of a server with
//     a reason of its own would make it unusable; the caller logs it.
//
// An empty reason (none came: [DONE] after a Finish) completes it.
func finishOutcome(reason string) (incomplete string, cut, known bool) {
	switch reason {
	case "", "stop", "tool_calls", "function_call", "eos_token", "stop_sequence":
		return "", false, true
	case "length":
		return "max_output_tokens", false, true
	case "content_filter":
		return "content_filter", false, true
	case "abort", "error":
		return "", true, true
	}
	return "", false, false
}

// cutShortError is the error of an answer the upstream ended with a finish
// reason that says it was cut short (finishOutcome): a server error, as a
// stream cut is (stream_incomplete), so it is replayed before output and
// continued after it like one.
func cutShortError(reason string) *apierr.Error {
	return apierr.StreamIncomplete("the Chat upstream ended the answer with finish_reason %q: it was cut short", reason)
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
	incomplete, cut, _ := finishOutcome(reason)
	if cut {
		return // complete fails the stream with the items as they stand
	}
	st := statusCompleted
	if incomplete != "" {
		st = statusIncomplete
	}
	s.closeAll(st)
}

// closeAll closes the open item and every open tool call. Text held for the
// calls follows them; whitespace still waiting becomes a message only when
// nothing else was said.
func (s *Stream) closeAll(status string) {
	if len(s.held) > 0 {
		s.closeCalls(status)
		s.releaseText()
	}
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
// evidently finished (nothing more can be appended to its arguments:
// argsEnded) and the next one has a name and the start
// of its arguments (before them, more of its name may come).
func (s *Stream) advanceCalls() {
	for len(s.pendingCalls) > 0 && s.pendingCalls[0].name != "" && len(s.pendingCalls[0].args) > 0 {
		if s.cur != nil {
			return
		}
		if oc := s.openCall; oc != nil {
			if !argsEnded(oc) {
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

// argsEnded reports whether nothing more can be appended to a tool call's
// arguments: they are a complete JSON value. A call whose Chat index another
// call took over (replacesCall) can still be continued by its id, so it
// stays open until then, or until the choice ends.
func argsEnded(call *outItem) bool {
	return len(call.args) > 0 && gjson.ValidBytes(call.args)
}

// callsOpen reports whether a tool call, open or waiting, can still take
// arguments.
func (s *Stream) callsOpen() bool {
	if s.openCall != nil && !argsEnded(s.openCall) {
		return true
	}
	for _, c := range s.pendingCalls {
		if !argsEnded(c) {
			return true
		}
	}
	return false
}

// holdText keeps a text delta that arrives while a tool call can still take
// arguments, and every one after it until releaseText: closing the call for
// the text would end its arguments where they were (the rest dropped, the
// call done with partial JSON), and only one item is open at a time. Text that
// is only whitespace is not held (it waits as pendingWS, as it would anyway).
func (s *Stream) holdText(kind itemKind, pk partKind, text, raw string) bool {
	if len(s.held) == 0 && (isSpace(text) || !s.callsOpen()) {
		return false
	}
	s.held = append(s.held, heldText{kind: kind, pk: pk, text: text, raw: raw})
	return true
}

// releaseText emits the held text, after the tool calls it waited for (the
// first text delta closes them).
func (s *Stream) releaseText() {
	held := s.held
	s.held = nil
	for _, h := range held {
		s.textDelta(h.kind, h.pk, h.text, h.raw)
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
	var content, reasoningContent, reasoning, refusal, toolCalls, functionCall, annotations gjson.Result
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			content = v
		case "annotations":
			annotations = v
		case "reasoning_content":
			reasoningContent = v
		case "reasoning":
			reasoning = v
		case "refusal":
			refusal = v
		case "tool_calls":
			toolCalls = v
		case "function_call":
			functionCall = v
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
	case content.IsArray():
		eachContentPart(content, func(t gjson.Result, refusal bool) {
			if refusal {
				s.textDelta(kindMessage, partRefusal, t.Str, t.Raw)
			} else {
				s.textDelta(kindMessage, partText, t.Str, t.Raw)
			}
		})
	}
	if annotations.IsArray() { // after the text they cite, which this delta may carry
		s.annotate(annotations)
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
	if functionCall.IsObject() {
		// The legacy form of a tool call (OpenAI's deprecated functions):
		// one call per message, no id, no index. It is a call all the same
		// (a function_call item, its call id generated), not text to drop.
		s.callDelta(legacyCallIndex, gjson.Result{}, functionCall.Get("name"), functionCall.Get("arguments"))
	}
}

// legacyCallIndex is the Chat index a legacy function_call is kept under:
// below every tool_calls index, so it never continues one of them.
const legacyCallIndex = -1

// eachContentPart calls fn, in order, with the text of every part that
// has some of content sent as an array of parts rather than a string (some
// servers do so): a text part's text, or a refusal part's refusal (refusal
// true), which is the message's refusal, never its text. The Responses
// translation and the chunks a Chat client gets (JoinParts) read such
// content by this one rule.
func eachContentPart(content gjson.Result, fn func(text gjson.Result, refusal bool)) {
	content.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); nonEmptyString(t) {
			fn(t, false)
		} else if r := p.Get("refusal"); nonEmptyString(r) {
			fn(r, true)
		}
		return true
	})
}

// JoinParts returns content, an array of parts, as the strings the
// Responses translation makes of it (eachContentPart): its text and its
// refusal, for a client that expects content (and refusal) to be a string;
// ok is false when content is not an array.
func JoinParts(content gjson.Result) (text, refusal string, ok bool) {
	if !content.IsArray() {
		return "", "", false
	}
	var t, r strings.Builder
	eachContentPart(content, func(p gjson.Result, isRefusal bool) {
		if isRefusal {
			r.WriteString(p.Str)
		} else {
			t.WriteString(p.Str)
		}
	})
	return t.String(), r.String(), true
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
	if s.holdText(kind, pk, text, raw) {
		return
	}
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
			if raw != "" { // keep the literal: it may end in half a surrogate pair
				ws := jsonx.AppendQuote(nil, string(s.pendingWS))
				raw = string(ws[:len(ws)-1]) + raw[1:]
			}
			text = string(s.pendingWS) + text
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
	if text, raw = joinSurrogates(&p.high, text, raw); text == "" {
		return // all of it was half a surrogate pair, held for the next delta
	}
	p.text = append(p.text, text...)
	s.partDelta(it, len(it.parts)-1, text, raw)
	if pk == partText && len(s.pendingAnnotations) > 0 {
		s.attachAnnotations()
	}
}

// partDelta emits the delta event of content part ci of it.
func (s *Stream) partDelta(it *outItem, ci int, text, raw string) {
	pk := it.parts[ci].kind
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
	var name, args gjson.Result
	if fn.IsObject() {
		name, args = fn.Get("name"), fn.Get("arguments")
	}
	var idx int64
	switch {
	case positional:
		idx = pos
	case s.revisitsCall(index, id):
		// Some servers interleave parallel calls under one index, naming
		// each again by its id: the delta goes to that call, whichever
		// call came last, and the call takes its index back, so the
		// deltas that follow with only arguments continue it.
		call := s.callsByID[id.Str]
		idx = call.chatIndex
		s.calls[idx] = call
	case index.Type == gjson.Number:
		idx = index.Int()
		if prev := s.calls[idx]; prev != nil && s.replacesCall(prev, id, name, args) {
			// Some servers (Ollama, some vLLM tool parsers) send every
			// parallel call as index 0: the new call takes the index over;
			// the one it replaces is continued only by its id.
			delete(s.calls, idx)
		}
	case nonEmptyString(id):
		idx = s.nextCall // a new call from a server that sends no index
	case s.namesNextCall(name, args):
		idx = s.nextCall // a new call from a server that sends neither index nor id
	default:
		idx = s.lastCall
	}
	s.callDelta(idx, id, name, args)
}

// callDelta applies a piece of the tool call kept under Chat index idx:
// its id, a piece of its name, a piece of its arguments (each may be
// absent).
func (s *Stream) callDelta(idx int64, id, name, args gjson.Result) {
	call := s.calls[idx]
	if call == nil {
		s.pendingWS = s.pendingWS[:0]
		s.closeCur(statusCompleted)
		call = &outItem{kind: kindCall, status: statusInProgress, chatIndex: idx}
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
		if s.callsByID == nil {
			s.callsByID = make(map[string]*outItem)
		}
		if s.callsByID[id.Str] == nil { // an id repeated by another call does not take the first call's deltas
			s.callsByID[id.Str] = call
		}
	}
	if nonEmptyString(name) && name.Str != call.name {
		// A Chat chunk's function name is a delta, as its arguments are:
		// OpenAI sends it whole, some servers in pieces, which the call is
		// announced only once its arguments begin to have gathered
		// (advanceCalls). A server that repeats the whole name in every
		// chunk is not appended to itself. A piece after the announcement
		// cannot change the name the client was shown: it is counted.
		if call.added {
			s.lateNames++
		} else {
			call.name += name.Str
		}
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
	if len(s.held) > 0 && !s.callsOpen() {
		s.releaseText()
	}
}

// revisitsCall reports whether a tool call delta with id and index (either
// may be absent) continues the call the upstream gave that id: one whose
// Chat index is index, when the delta has one, since a server that gives two
// calls under their own indexes the same id still tells them apart by index.
func (s *Stream) revisitsCall(index, id gjson.Result) bool {
	if !nonEmptyString(id) {
		return false
	}
	call := s.callsByID[id.Str]
	return call != nil && (index.Type != gjson.Number || call.chatIndex == index.Int())
}

// replacesCall reports whether a tool call delta sent under the Chat index
// of call, without the id of a call already seen (those go to their call),
// starts another call: it names a function once call's arguments are
// complete (namedAfterArgs, as namesNextCall judges), or it carries a new id
// and a name, call having an id from the upstream, and the name is another
// than call's or call's arguments are complete (the same function called
// again, its arguments to follow: Ollama and vLLM parsers). OpenAI
// sends a call's id only with its first delta; a delta with the same id, or
// none, continues the call. Some servers send a call's later deltas under an
// id of their own: without a name, or with the call's name while its
// arguments are unfinished, such a delta continues the call too (a call
// begun without a name would fail the answer: failNameless). Another name
// without an id while the arguments are unfinished is a piece of call's name.
func (s *Stream) replacesCall(call *outItem, id, name, args gjson.Result) bool {
	return namedAfterArgs(call, name, args) ||
		nonEmptyString(id) && nonEmptyString(name) && (name.Str != call.name || argsEnded(call)) && s.callsByID[call.callID] == call
}

// namesNextCall reports whether a tool call delta with neither index nor id
// starts the next call rather than continuing the last: the last
// call has its name already, and the delta names another function, or the
// same one as namedAfterArgs judges. A server that repeats the name in every
// delta of a call still continues it.
func (s *Stream) namesNextCall(name, args gjson.Result) bool {
	last := s.calls[s.lastCall]
	return last != nil && nonEmptyString(name) && last.name != "" && (last.name != name.Str || namedAfterArgs(last, name, args))
}

// namedAfterArgs reports whether a tool call delta that carries name starts
// another call because call's arguments are already a complete JSON value
// (argsEnded), so nothing more can be appended to them: the delta names
// another function, or call's function again with arguments of its own (the
// same function called twice; Ollama and some vLLM tool parsers send the
// second call under the same index, without an id of its own). The name
// alone again is not a call: a server that repeats a call's whole name in
// every chunk may send it once more after the arguments. The index and the
// no-index paths of toolDelta both judge by it.
func namedAfterArgs(call *outItem, name, args gjson.Result) bool {
	return nonEmptyString(name) && call.name != "" && argsEnded(call) &&
		(name.Str != call.name || nonEmptyString(args) || args.IsObject())
}

func (s *Stream) callArgs(call *outItem, text, raw string) {
	if text, raw = joinSurrogates(&call.high, text, raw); text == "" {
		return
	}
	call.args = append(call.args, text...)
	if !call.added {
		return // sent with the output_item.added (advanceCalls)
	}
	s.argsDelta(call, text, raw)
}

// joinSurrogates makes a delta's JSON string literal raw safe to forward on
// its own. An upstream may split a UTF-16 surrogate pair across two deltas
// ("\ud83d" ends one, "\ude00" starts the next); forwarded as they are, the
// halves are joined into the character by some clients (JavaScript) and
// decoded into two U+FFFD by others and by the text the done events carry.
// So a high half that ends raw is held back in *high and put in front of the
// next delta's literal, and text is raw decoded again. A literal that still
// holds a lone surrogate comes back as raw "": the caller forwards text
// re-encoded, with the U+FFFD every decoder agrees on. A delta given as text
// alone (raw "") ends what is held as U+FFFD.
func joinSurrogates(high *string, text, raw string) (string, string) {
	if raw == "" {
		if *high != "" {
			text, *high = "\uFFFD"+text, ""
		}
		return text, ""
	}
	if *high != "" {
		raw, *high = `"`+*high+raw[1:], ""
	} else if !strings.Contains(raw, `\ud`) && !strings.Contains(raw, `\uD`) {
		return text, raw // no surrogate escape: the common case
	}
	lone, trailing := scanSurrogates(raw)
	if trailing >= 0 {
		*high = raw[trailing : trailing+6]
		raw = raw[:trailing] + `"`
	}
	text = gjson.Parse(raw).Str
	if lone {
		raw = ""
	}
	return text, raw
}

// scanSurrogates reads the \u escapes of a JSON string literal: lone reports
// a surrogate escape without its other half, trailing is the offset of a
// high-surrogate escape that ends the literal (not counted as lone), or -1.
func scanSurrogates(raw string) (lone bool, trailing int) {
	high := -1 // offset of a high-surrogate escape waiting for its low half
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			if high >= 0 {
				lone, high = true, -1
			}
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw)-1 {
			if high >= 0 {
				lone, high = true, -1
			}
			i++ // a two-character escape
			continue
		}
		r, err := strconv.ParseUint(raw[i+2:i+6], 16, 16)
		switch {
		case err == nil && r >= 0xD800 && r <= 0xDBFF:
			lone = lone || high >= 0
			high = i
		case err == nil && r >= 0xDC00 && r <= 0xDFFF:
			lone = lone || high < 0
			high = -1
		case high >= 0:
			lone, high = true, -1
		}
		i += 5
	}
	return lone, high
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
	if p.high != "" { // half a surrogate pair that never got its other half
		p.high = ""
		p.text = append(p.text, "\uFFFD"...)
		s.partDelta(it, ci, "\uFFFD", "")
	}
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
	if it.kind == kindCall && !it.added && it.name == "" {
		// Never announced (advanceCalls waits for a name): the client saw
		// nothing of it, and the stream fails (failNameless).
		it.closed = true
		s.nameless = true
		return
	}
	if it.kind == kindCall {
		if it.high != "" {
			s.callArgs(it, "", "") // half a surrogate pair that never got its other half
		}
		if !it.added {
			s.addCall(it)
		}
		if isSpace(string(it.args)) {
			// A call sent without arguments (absent, null or ""): OpenAI
			// always sends a JSON object, which clients parse and send back
			// in the next turn's history, where Chat servers parse it too.
			it.args = it.args[:0]
			s.callArgs(it, emptyArguments, "")
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
		b = append(b, `{"type":"output_text","annotations":`...)
		b = appendAnnotations(b, p.annotations)
		b = append(b, `,"logprobs":[],"text":`...)
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
	b = append(b, `,"completed_at":`...)
	if final && s.completedAt != 0 { // the spec: present when the status is completed
		b = appendInt(b, s.completedAt)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","background":`...)
	b = strconv.AppendBool(b, s.background)
	b = append(b, `,"error":`...)
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

// chatUsageCounted reports whether u is a Chat usage with its two counts
// (prompt_tokens and completion_tokens numbers): one without them ({}, or a
// prompt count alone) is no usage, so the translated Response has none and
// the request is charged its estimate (README "Keys, limits and usage"),
// not zero tokens; on a stream the last counted usage stays.
func chatUsageCounted(u gjson.Result) bool {
	return u.IsObject() && u.Get("prompt_tokens").Type == gjson.Number && u.Get("completion_tokens").Type == gjson.Number
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
// the upstream codes clients act on, is kept (keep true); anything else is
// mapped (keep false), and the caller keeps the original code in the
// message: a client error's (errType invalid_request_error: an upstream's
// invalid_value) to invalid_prompt, a code a client does not retry, and any
// other (the gateway's own stream_incomplete, upstream_unavailable) to
// server_error.
func ResponseErrorCode(code, errType string) (mapped string, keep bool) {
	switch {
	case specErrorCodes[code] || upstreamActionCodes[code]:
		return code, true
	case errType == apierr.TypeInvalidRequest:
		return "invalid_prompt", false
	}
	return apierr.TypeServer, false
}

// AppendResponseError appends a Response object's error object for code,
// of the error type errType, and message: {"code":…,"message":…}, with a
// code outside ResponseErrorCode's enum mapped and kept as the message's
// prefix ("stream_incomplete: the upstream …").
func AppendResponseError(b []byte, code, errType, message string) []byte {
	mapped, keep := ResponseErrorCode(code, errType)
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
		{"truncation", r.Truncation, `"disabled"`},
		{"user", stringOnly(r.User), ""},
		{"safety_identifier", stringOnly(r.SafetyIdentifier), "null"},
		{"prompt_cache_key", stringOnly(r.PromptCacheKey), "null"},
		{"service_tier", echoServiceTier(r.ServiceTier), `"default"`},
		{"max_tool_calls", numberOnly(r.MaxToolCalls), "null"},
		{"top_logprobs", numberOnly(r.TopLogprobs), "null"},
	} {
		valid := len(f.raw) > 0 && string(f.raw) != "null" && json.Valid(f.raw)
		if !valid && f.def == "" {
			continue // no default: left out
		}
		b = append(b, `,"`...)
		b = append(b, f.key...)
		b = append(b, `":`...)
		if valid {
			b = append(b, f.raw...)
		} else {
			b = append(b, f.def...)
		}
	}
	return b
}

// stringOnly is raw when it is a JSON string, else nil (the default).
func stringOnly(raw json.RawMessage) json.RawMessage {
	if gjson.ParseBytes(raw).Type != gjson.String {
		return nil
	}
	return raw
}

// numberOnly is raw when it is a JSON number, else nil (the default).
func numberOnly(raw json.RawMessage) json.RawMessage {
	if gjson.ParseBytes(raw).Type != gjson.Number {
		return nil
	}
	return raw
}

// echoServiceTier is the service_tier a Response reports for the request's:
// the tier used, which the spec says may differ from the one asked for —
// auto is the project's default tier ("default"), and fast is reported as
// priority; flex, scale and priority are the tier asked for; none (nil), or
// a value the spec's enum does not have (the upstream never said which tier
// it used), "default".
func echoServiceTier(raw json.RawMessage) json.RawMessage {
	switch gjson.ParseBytes(raw).Str {
	case "flex", "scale", "priority", "default":
		return stringOnly(raw)
	case "fast":
		return json.RawMessage(`"priority"`)
	case "auto":
		return json.RawMessage(`"default"`)
	}
	return nil
}

// FromChatResponse converts a non-streamed chat.completion body into a full
// Response object, and returns its output items for storing. The upstream's
// error envelope comes back as err (upstream true), with the HTTP status it
// stands for (0 when it names none: see ErrorStatus); a body that is not a
// chat.completion, or one with a tool call without a function name, is a
// stream_incomplete error.
func FromChatResponse(body []byte, opts StreamOptions) (response []byte, output []json.RawMessage, err *apierr.Error, upstream bool) {
	s := NewStream(opts)
	if aerr, up := s.completion(body); aerr != nil {
		return nil, nil, aerr, up
	}
	if e := s.UpstreamError(); e != nil {
		// Cut short (finishOutcome): nothing reached the client yet, so
		// the answer is the upstream's error, judged as a 5xx (the next
		// target of a route may serve the request).
		return nil, nil, e, true
	}
	return s.appendResponse(nil, s.status, true), s.OutputItems(), nil, false
}

// ErrorEnvelope returns the upstream's error when body, a Chat upstream's
// complete answer, is an error envelope ({"error":…}, or vLLM's
// {"object":"error",…}) rather than a chat.completion, with the HTTP status
// it stands for (ErrorStatus; 0 when it names none); nil otherwise. A 200
// with such a body is the upstream's error (README, "Chat-Completions-only
// upstreams"), judged as its status would be.
func ErrorEnvelope(body []byte) *apierr.Error {
	if tooDeep(body) || !gjson.ValidBytes(body) {
		return nil
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil
	}
	return envelopeError(root)
}

// envelopeError reads the error of an error envelope, nil when root is none.
func envelopeError(root gjson.Result) *apierr.Error {
	e := root.Get("error")
	if !present(e) {
		if root.Get("object").Str != "error" {
			return nil
		}
		e = root
	}
	return upstreamError(e)
}

// Completion converts a whole non-streamed chat.completion — the answer of
// an upstream that ignored stream:true — into the events a stream of it
// would have carried, through the terminal event. Its tool calls are told
// apart by their position in the message, as FromChatResponse does (a
// message's calls carry no index, and need no id). An error envelope fails
// the stream as an error chunk does. A body that is not a chat.completion,
// or one with a tool call without a function name (unusable: failNameless),
// returns an error and no events; the caller then fails the stream (Fail).
// After the terminal event Completion returns nil, nil.
func (s *Stream) Completion(body []byte) ([]Event, error) {
	if s.done {
		return nil, nil
	}
	aerr, upstream := s.completion(body)
	switch {
	case upstream:
		return s.failUpstream(aerr), nil
	case aerr != nil:
		return nil, errors.New("translate: " + aerr.Message)
	}
	return s.flush(), nil
}

// completion applies a whole chat.completion and completes the stream. It
// applies nothing and returns the upstream's error envelope (upstream true),
// or a stream_incomplete error for a body that is not a chat.completion.
func (s *Stream) completion(body []byte) (aerr *apierr.Error, upstream bool) {
	if tooDeep(body) || !gjson.ValidBytes(body) {
		return apierr.StreamIncomplete("the upstream returned a chat completion that is not valid JSON"), false
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return apierr.StreamIncomplete("the upstream returned a chat completion that is not a JSON object"), false
	}
	if e := envelopeError(root); e != nil {
		return e, true
	}
	var message, finish gjson.Result
	found := false
	if choices := root.Get("choices"); choices.IsArray() {
		choices.ForEach(func(_, ch gjson.Result) bool {
			if idx := ch.Get("index"); present(idx) && idx.Raw != "0" {
				return true
			}
			found = true
			message, finish = ch.Get("message"), ch.Get("finish_reason")
			return false
		})
	}
	if !found {
		return apierr.StreamIncomplete("the upstream returned a chat completion without choices"), false
	}
	if message.IsObject() && hasNamelessCall(message) { // unusable, checked before anything is emitted
		return apierr.StreamIncomplete("%s", namelessCallMessage), false
	}
	if m := root.Get("model"); m.Type == gjson.String && m.Str != "" && (!s.started || s.model == "") {
		s.model = m.Str
	}
	if !s.started {
		s.start()
	}
	s.applyDelta(message, true)
	if finish.Type == gjson.String && finish.Str != "" {
		s.finish = finish.Str
	}
	if u := root.Get("usage"); chatUsageCounted(u) {
		s.usage = appendUsage(s.usage[:0], u)
	}
	s.complete()
	return nil, false
}

// hasNamelessCall reports whether a chat.completion's message holds a tool
// call (or a legacy function_call) without a function name, which the
// stream would fail (failNameless).
func hasNamelessCall(message gjson.Result) bool {
	nameless := false
	message.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		nameless = tc.IsObject() && !nonEmptyString(tc.Get("function.name"))
		return !nameless
	})
	if fc := message.Get("function_call"); fc.IsObject() && !nonEmptyString(fc.Get("name")) {
		nameless = true
	}
	return nameless
}
