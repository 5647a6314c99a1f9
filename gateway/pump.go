package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// eventSink is where a pump writes client-facing events: SSE here, WebSocket
// frames in the WebSocket bridge.
type eventSink interface {
	// Event writes one Responses event or one Chat Completions chunk.
	Event(name string, data []byte) error
	// Done writes the Chat Completions [DONE] sentinel.
	Done() error
	// KeepAlive tells the client the stream is alive while nothing else is
	// written (an SSE comment line, a WebSocket ping, which may take up to
	// timeout to be answered; it does not block for it).
	KeepAlive(timeout time.Duration) error
}

// sseSink writes SSE to an HTTP client. With auto off it leaves flushing to
// Flush, which the pump calls just before it would block on the upstream:
// events that arrived together go out in one write, and none waits.
type sseSink struct {
	w       *sse.Writer
	rc      *http.ResponseController
	auto    bool
	dirty   bool
	timeout time.Duration // per flush: a client that stops reading is cut
	// deadline is the write deadline last set. It is moved only when it has
	// come more than deadlineSlack closer: re-arming the connection's timer
	// on every flush costs more than the event.
	deadline time.Time
}

// sseSinkOf is the SSE sink under k, or nil: the metering of a request's
// usage wraps it (usage.go), and the client stream must still reach it to
// flush explicitly.
func sseSinkOf(k eventSink) *sseSink {
	for {
		switch s := k.(type) {
		case *sseSink:
			return s
		case *meterSink:
			k = s.eventSink
		default:
			return nil
		}
	}
}

// deadlineSlack is how stale the write deadline may get before a flush moves
// it (at most a quarter of the timeout): a flush that blocks is cut after
// between timeout-slack and timeout.
const deadlineSlack = time.Second

// writeOnly hides the ResponseWriter's flush methods from the sse.Writer.
type writeOnly struct{ w io.Writer }

func (o writeOnly) Write(p []byte) (int, error) { return o.w.Write(p) }

func newSSESink(w http.ResponseWriter, writeTimeout time.Duration) *sseSink {
	return &sseSink{w: sse.NewWriter(writeOnly{w}), rc: http.NewResponseController(w), auto: true, timeout: writeTimeout}
}

func (s *sseSink) Event(name string, data []byte) error {
	if err := s.w.WriteEvent(name, data); err != nil {
		return err
	}
	return s.wrote()
}

func (s *sseSink) Done() error {
	if err := s.w.WriteDone(); err != nil {
		return err
	}
	return s.wrote()
}

func (s *sseSink) wrote() error {
	s.dirty = true
	if s.auto {
		return s.Flush()
	}
	return nil
}

// KeepAlive writes the SSE comment line ": keepalive", which readers
// skip, and flushes it.
func (s *sseSink) KeepAlive(time.Duration) error {
	if err := s.w.WriteComment("keepalive"); err != nil {
		return err
	}
	s.dirty = true
	return s.Flush()
}

// Flush sends what was written since the last flush.
func (s *sseSink) Flush() error {
	if !s.dirty {
		return nil
	}
	s.dirty = false
	if s.timeout > 0 {
		if now := time.Now(); s.deadline.Sub(now) < s.timeout-min(deadlineSlack, s.timeout/4) {
			s.deadline = now.Add(s.timeout)
			_ = s.rc.SetWriteDeadline(s.deadline)
		}
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("flushing to the client: %w", err)
	}
	return nil
}

// Reasons a client stream ended, as counted in sluice_stream_terminal_total.
const (
	reasonCompleted     = "completed"
	reasonFailed        = "failed"
	reasonIncomplete    = "incomplete"
	reasonDone          = "done"
	reasonUpstreamError = "upstream_error"
	reasonRecovered     = "recovered"
	reasonCut           = "upstream_cut"
	reasonIdle          = "idle_timeout"
	reasonOversize      = "oversize_event"
	reasonGarbage       = "unparseable_event"
	reasonDrain         = "drain"
	reasonClientGone    = "client_gone"
	reasonCancelled     = "cancelled" // POST /v1/responses/{id}/cancel or DELETE stopped it (countLocked)
	reasonFirstToken    = "first_token_timeout"
)

// Options.MalformedEvents values.
const (
	malformedSkip = "skip" // a single unparseable event is skipped and counted
	malformedFail = "fail" // the first one fails the stream
)

// maxConsecutiveMalformed is how many unparseable events in a row fail a
// stream even when single ones are skipped (Options.MalformedEvents).
const maxConsecutiveMalformed = 3

// pump feeds one upstream attempt's events to the client stream, through
// one upstream-error path, and ends the stream when the upstream does not
// (the terminal-event rule). It owns nothing the client sees: the
// clientStream does.
type pump struct {
	s       *Server
	cs      *clientStream
	ctx     context.Context // the client's
	upCtx   context.Context // the upstream attempt's (carries the cancel cause)
	req     *clientRequest
	u       *upstream.Upstream
	src     eventSource
	surface string

	// replayable: an error-shaped event or a read failure that arrives while
	// the client has seen nothing goes back to the attempt (unseen), which
	// may replay the request elsewhere; once it declined, events are
	// handled here.
	replayable bool
	malformed  int // consecutive malformed events

	// armed: a failure after content may be continued on another target
	// (continuation.go). Armed or not, it goes back to the attempt
	// (end.after), which charges it; once the attempt settled it
	// (settled), events are handled here.
	armed   bool
	settled bool
	cont    bool // this attempt continues a stream (its events are spliced)
	// stall bounds the silence between events once content flows (the
	// route's stall; nil: the idle timeout alone). It counts only while
	// run waits for the next event.
	stall   *idleTimer
	stallOn bool
	// sentContent: this attempt sent the client content (what stops
	// first_token: not the lifecycle events, keepalives or a Chat role
	// chunk). The route's stall bounds the silence from then on, as on
	// both surfaces before it first_token or timeouts.idle does (README
	// "Continuation").
	sentContent bool
	// firstToken stops the route's first_token timer: called at the first
	// content event (gotContent); nil once called, or without the timer.
	firstToken func()

	responseID string         // the upstream's response id (anchors, logs): the first one it named
	created    bool           // the attempt's response.created was seen (a second one is dropped)
	chatModel  bool           // the attempt's first Chat chunk was read for the model it names (noteServedModel)
	anchor     *pendingAnchor // the response's anchor write, once response.created was seen
	cleanEnd   bool           // the upstream ended the response itself (its connection may be reused)

	chatChoices []chatChoice // the choices of the Chat chunk in hand (reused: one chunk at a time)
}

// pumpEnd is how feeding stopped.
type pumpEnd struct {
	reason string // the stream ended: why (sluice_stream_terminal_total)
	// unseen: a failure arrived before the client saw anything; the
	// attempt decides (replay, or p.replayable = false and run(ev) again).
	unseen bool
	ev     sse.Event // unseen: the error-shaped event (a copy)
	err    error     // unseen: the read error
	// after: a failure after the client's answer started, for the attempt
	// to charge and perhaps continue elsewhere (or, with p.settled, to
	// run(after.ev, after.err)).
	after *afterFailure
}

// run handles ev (or the read error err) and every later event until the
// stream ends or an unseen failure comes up.
func (p *pump) run(ev sse.Event, err error) pumpEnd {
	for {
		if err != nil {
			return p.readEnded(err)
		}
		ev.Data = validText(ev.Data)
		var end pumpEnd
		var stop bool
		if p.req.ep.chat {
			end, stop = p.handleChat(ev)
		} else {
			end, stop = p.handleResponses(ev)
		}
		if stop {
			return end
		}
		if p.stall != nil {
			p.stallOn = p.stallOn || p.sentContent || p.cont
			if p.stallOn {
				p.stall.resume()
			}
		}
		ev, err = p.src.Next()
		if p.stallOn {
			p.stall.pause()
		}
	}
}

// firstEvent reads the attempt's first event. An attempt that continues
// a stream (the client has seen its content) waits for it within the
// route's stall, as for every later event (README "Continuation": a routed
// stream silent past stall is continued): a target that sends its headers
// and then nothing is left after stall, not timeouts.idle. A first attempt
// keeps first_token, or else timeouts.idle, for its first event.
func (p *pump) firstEvent() (sse.Event, error) {
	if p.stall == nil || !p.cont {
		return p.src.Next()
	}
	p.stallOn = true
	p.stall.resume()
	ev, err := p.src.Next()
	p.stall.pause()
	return ev, err
}

// unseen reports whether a failure now is still invisible to the client.
func (p *pump) unseen() bool { return p.replayable && p.cs.unseenHeld() }

func (p *pump) unseenEvent(ev sse.Event) (pumpEnd, bool) {
	return pumpEnd{unseen: true, ev: ev.Clone()}, true
}

func ended(reason string) (pumpEnd, bool) { return pumpEnd{reason: reason}, true }

// readEnded handles the end of the upstream's events.
func (p *pump) readEnded(err error) pumpEnd {
	if p.ctx.Err() != nil {
		return pumpEnd{reason: reasonClientGone}
	}
	if p.unseen() {
		return pumpEnd{unseen: true, err: err}
	}
	if p.req.ep.chat && p.cs.finished() {
		// The answer was complete (every choice's finish_reason went out);
		// the upstream only failed to say [DONE].
		return pumpEnd{reason: p.cs.done()}
	}
	reason, e := p.readFailure(err)
	if p.rescuable() {
		if end, ok := p.afterRead(err, reason, e); ok {
			return end
		}
	}
	return pumpEnd{reason: p.terminate(reason, e)}
}

// readFailure classifies why reading the upstream stopped.
func (p *pump) readFailure(err error) (string, *apierr.Error) {
	var garbled *garbledStream
	switch cause := context.Cause(p.upCtx); {
	case errors.As(err, &garbled):
		return reasonGarbage, apierr.StreamIncomplete("%s", garbled)
	case errors.As(err, new(foreignTerminalError)):
		return reasonCut, apierr.StreamIncomplete("%s", err)
	case errors.Is(cause, errDraining):
		return reasonDrain, apierr.StreamIncomplete("the gateway is shutting down; retry the request")
	case errors.Is(cause, errIdleTimeout):
		return reasonIdle, apierr.StreamIncomplete("the upstream sent nothing for %s", p.s.opts.IdleTimeout)
	case errors.Is(cause, errStallTimeout):
		return reasonStall, apierr.StreamIncomplete("the upstream sent nothing for %s after the answer started", p.stall.d)
	case errors.Is(cause, errFirstTokenTimeout):
		var d time.Duration
		if r := tryOf(p.req).route; r != nil {
			d = r.FirstToken
		}
		return reasonFirstToken, apierr.StreamIncomplete("the upstream sent no content within %s", d)
	case errors.Is(err, sse.ErrEventTooLarge):
		return reasonOversize, apierr.StreamIncomplete("the upstream sent an event larger than %d bytes", p.s.opts.MaxEventBytes)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return reasonCut, apierr.StreamIncomplete("the upstream closed the stream before it was complete")
	default:
		return reasonCut, apierr.StreamIncomplete("the upstream stream broke: %s", p.s.scrub.String(upstream.RedactError(err)))
	}
}

// terminate ends a stream that did not end on its own with the gateway's
// terminal event, and returns the reason.
func (p *pump) terminate(reason string, e *apierr.Error) string {
	if p.ctx.Err() != nil {
		return reasonClientGone
	}
	// The id the client was shown, as every other line about its stream:
	// a continuing target's own id (p.responseID) is internal to the rescue
	// (confirmRescue).
	id := p.responseID
	if r := p.req.rescue; r != nil && r.clientID != "" {
		id = r.clientID
	}
	p.s.log.Warn("stream ended by the gateway", "surface", p.surface, "upstream", p.u.Name(), "reason", reason, "response_id", LogID(id))
	p.keepChatUsage()
	p.cs.abort(e)
	return reason
}

// keepChatUsage makes the last usage a Chat upstream reported to a
// Responses client's stream (a running usage on every chunk, as vLLM's
// continuous_usage_stats sends) what the gateway's terminal event reports:
// the translation keeps it until its own terminal event, which a cut leaves
// unsent. The meter reads that event, so the request is charged the
// upstream's report, as a Chat client of the same cut is (observe reads
// every chunk's usage), and its estimate only when the upstream reported
// none (estimateUsage).
func (p *pump) keepChatUsage() {
	if p.req.ep.chat {
		return
	}
	if src, ok := chatSourceOf(p.src); ok {
		if u := src.reportedUsage(); len(u) > 0 {
			p.cs.reportRunningUsage(u)
		}
	}
}

// garbledStream is why the pump stopped reading a stream whose events it
// cannot parse: what the upstream sent.
type garbledStream struct{ what string }

func (g *garbledStream) Error() string { return "the upstream sent " + g.what }

// malformedEvent skips an unparseable event (counted), or fails the stream
// in fail mode and after maxConsecutiveMalformed in a row.
func (p *pump) malformedEvent(what string) (pumpEnd, bool) {
	p.malformed++
	if p.s.opts.MalformedEvents == malformedFail || p.malformed >= maxConsecutiveMalformed {
		return p.broken(&garbledStream{what: what}), true
	}
	p.s.metrics.skippedEvents.WithLabelValues(p.surface, "unparseable").Inc()
	p.s.log.Debug("skipped an unparseable upstream event", "surface", p.surface, "upstream", p.u.Name())
	return pumpEnd{}, false
}

// broken handles a stream whose events cannot be used (unparseable ones,
// garbledStream; a terminal event of another response,
// foreignTerminalError) as a broken one (a transport fault, README
// "Failover and replay"): while the client has seen nothing it goes back to
// the attempt (unseen), which may replay the request on the next target;
// after content it is a cut the attempt may continue elsewhere
// (continuation.go); otherwise the gateway's terminal event ends it.
func (p *pump) broken(err error) pumpEnd {
	if p.unseen() {
		return pumpEnd{unseen: true, err: err}
	}
	reason, e := p.readFailure(err)
	if p.rescuable() {
		return pumpEnd{after: &afterFailure{class: hostabi.FailureCut, reason: reason, cause: e, err: err}}
	}
	return pumpEnd{reason: p.terminate(reason, e)}
}

func (p *pump) handleResponses(ev sse.Event) (pumpEnd, bool) {
	if ev.Error != nil {
		if p.unseen() {
			return p.unseenEvent(ev)
		}
		if p.rescuable() {
			return p.afterEvent(ev, ev.Error, gjson.Result{})
		}
		return ended(p.upstreamError(ev.Error, "error"))
	}
	if ev.Done {
		if p.unseen() {
			return p.doneBeforeEvent()
		}
		e := apierr.StreamIncomplete("the upstream ended the stream without a terminal event")
		if p.rescuable() {
			return pumpEnd{after: &afterFailure{class: hostabi.FailureCut, reason: reasonCut, cause: e, ev: ev.Clone()}}, true
		}
		return ended(p.terminate(reasonCut, e))
	}
	var f eventFields
	if valid, object := f.scan(ev.Data, p.s.opts.MaxJSONDepth); !valid {
		return p.malformedEvent("an unparseable event")
	} else if !object {
		return p.malformedEvent("an event that is not a JSON object")
	}
	untyped := f.Type.Type != gjson.String || f.Type.Str == ""
	if untyped && !f.errObj.IsObject() && !bareErrorObject(f.object, f.message) {
		// Not an error without a type (OpenAI's own, handled as "error"
		// below): the event's SSE name is its type, or it has none.
		typed, ok := withTypeFromName(ev)
		if !ok {
			return p.malformedEvent("an event without a type")
		}
		ev.Data = typed
		f = eventFields{}
		f.scan(ev.Data, p.s.opts.MaxJSONDepth)
	}
	skippedBefore := p.malformed // an event the client stream refuses (errNoSuchOutput) is one more in a row
	p.malformed = 0
	typ := f.Type.Str
	if typ == "" && f.errObj.IsObject() || bareErrorObject(f.object, f.message) {
		typ = "error" // {"error":{…}} without a type, or an unwrapped error object (its type is the error's)
	}
	if f.Response.IsObject() { // lifecycle and terminal events: the stream shows one response
		if typ == "response.created" && p.created {
			p.s.metrics.skippedEvents.WithLabelValues(p.surface, "second_created").Inc()
			p.s.log.Debug("skipped a second response.created", "surface", p.surface, "upstream", p.u.Name(), "response_id", LogID(p.responseID))
			return pumpEnd{}, false
		}
		if isForeignTerminal(typ, f.Response, p.responseID) {
			return p.foreignTerminal(f.Response.Get("id").Str), true
		}
		ev.Data = p.sameResponseID(ev.Data, &f)
	}
	switch typ {
	case "error":
		if p.unseen() {
			return p.unseenEvent(ev)
		}
		if p.rescuable() {
			return p.afterEvent(ev, ev.Data, gjson.Result{})
		}
		return ended(p.upstreamError(ev.Data, typ))
	case "response.created":
		p.created = true
		p.responseID = strings.Clone(f.Response.Get("id").Str)
		p.req.meta.noteServedModel(strings.Clone(f.Response.Get("model").Str))
		if c := p.s.cont; c != nil && p.responseID != "" && p.req.recordable() {
			p.anchor = c.recordServed(p.req, p.responseID, p.u.Name()) // continuity.go: and its conversation
		}
		p.anchorContinuationCopy()
	case "response.completed", "response.incomplete":
		p.confirmAnchor(f.Response)
		if p.cs.restartShort() {
			break // the client stream fails it (splicedTerminalLocked): not the client's response
		}
		p.confirmRescue()
		if p.req.portable != nil { // portable.go: the turn is kept before the terminal event goes out
			p.keepTurn(f.Response)
		}
	case "response.failed":
		if p.unseen() {
			return p.unseenEvent(ev)
		}
		if p.rescuable() {
			return p.afterEvent(ev, []byte(f.Response.Get("error").Raw), f.Response.Get("usage"))
		}
		e := f.Response.Get("error")
		recoverIn := hostabi.RecoverInput{Surface: p.req.policySurface(), Upstream: p.u.Name(), EventType: typ,
			Code: e.Get("code").String(), Type: e.Get("type").String(), Param: e.Get("param").String(), Message: e.Get("message").String()}
		verdict := p.s.policy.Recover(p.hookCtx(), recoverIn)
		if ce := p.s.recoveredError(p.req, recoverIn, verdict); ce != nil {
			p.cleanEnd = true
			p.s.onRecovered(p.ctx, p.req, verdict)
			return ended(p.terminate(verdictReason(verdict), ce))
		}
	}
	if p.responseID == "" {
		if id := f.Response.Get("id"); id.Type == gjson.String {
			p.responseID = strings.Clone(id.Str)
		}
	}
	// The client gets the data's type as the event name whatever name the
	// upstream gave it: a client that dispatches on the SSE event name
	// (EventSource listeners) must see what the gateway acted on; every
	// event here has one (withTypeFromName).
	name := typ
	var err error
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		err = p.cs.lifecycle(name, ev.Data, &f)
	default:
		content := !progressOnly(typ)
		if content {
			p.gotContent()
		}
		err = p.cs.sendFrom(p.u.Name(), name, ev.Data, &f)
		switch {
		case errors.Is(err, errNoSuchOutput):
			p.malformed = skippedBefore
			return p.malformedEvent("an event naming output the client was not sent")
		case errors.Is(err, errAfterDone):
			// Late output, not a broken stream: skipped and counted, and
			// the run of unparseable events is as it was before it.
			p.malformed = skippedBefore
			p.s.metrics.skippedEvents.WithLabelValues(p.surface, "after_done").Inc()
			p.s.log.Debug("skipped an upstream event adding to output already done", "surface", p.surface, "upstream", p.u.Name(), "type", typ)
			return pumpEnd{}, false
		}
		p.sentContent = p.sentContent || content
	}
	if errors.Is(err, errDiverged) {
		return ended(reasonDiverged)
	}
	if err != nil {
		return ended(reasonClientGone)
	}
	switch typ {
	case "response.completed":
		p.cleanEnd = true
		return ended(reasonCompleted)
	case "response.failed":
		p.cleanEnd = true
		return ended(reasonFailed)
	case "response.incomplete":
		p.cleanEnd = true
		return ended(reasonIncomplete)
	}
	return pumpEnd{}, false
}

// withTypeFromName is the data of an upstream Responses event that has no
// type, or no string one, with the event's SSE name written in as its type
// (ok false when it has no name either). The SSE spec lets the name carry
// what the event is, and the pump acts on it; but the SDKs and every
// WebSocket client dispatch on the data's type (README: every relayed
// event's SSE name is its data's type), so relayed without one the event,
// and the text it carries, would be lost to them while the gateway tracks
// it as sent. Written into the data here, it reaches every surface alike
// (SSE, WebSocket frames, the resume log).
func withTypeFromName(ev sse.Event) ([]byte, bool) {
	if ev.Name == "" {
		return nil, false
	}
	typed, err := sjson.SetRawBytes(ev.Data, "type", jsonx.AppendQuote(nil, ev.Name))
	if err != nil { // not expected: the data was scanned as an object
		return nil, false
	}
	return typed, true
}

// doneBeforeEvent handles an upstream's [DONE] that comes before the client
// saw anything (as the stream's first event, or after the held lifecycle
// events): an answer that ended with nothing in it is a transport fault like
// a cut before the first event (README "Failover and replay"). It goes back
// to the attempt (unseen) as a read that ended, to be replayed on another
// target, or with none left answered as any failure before the first event
// is (a Chat client the HTTP status and JSON error, not a 200 and an error
// chunk).
func (p *pump) doneBeforeEvent() (pumpEnd, bool) {
	p.s.log.Debug("an upstream ended the stream with [DONE] before any event the client saw", "surface", p.surface, "upstream", p.u.Name())
	return pumpEnd{unseen: true, err: io.EOF}, true
}

// isForeignTerminal reports whether a terminal event's Response names
// another id than the first one the attempt's stream named (first; "" when
// none yet).
// Such an event is not this stream's end: its output and status are another
// response's, which cannot be checked against what the client was sent.
func isForeignTerminal(typ string, resp gjson.Result, first string) bool {
	id := resp.Get("id")
	return isTerminalType(typ) && first != "" && id.Type == gjson.String && id.Str != first
}

// foreignTerminalError is why the pump stopped reading a stream whose
// terminal event named another response.
type foreignTerminalError struct{}

func (foreignTerminalError) Error() string {
	return "the upstream ended the stream with the terminal event of another response"
}

// foreignTerminal handles a terminal event naming another response as a
// broken stream, as an upstream WebSocket's foreign frame is
// (docs/ARCHITECTURE.md §3 "Upstream WebSockets"): it is skipped and
// counted, and the stream is treated as cut (broken: replayed before the
// client saw anything, continued after content, else the gateway's
// terminal event).
func (p *pump) foreignTerminal(other string) pumpEnd {
	p.s.metrics.skippedEvents.WithLabelValues(p.surface, "foreign_terminal").Inc()
	p.s.log.Warn("an upstream terminal event named another response; the stream is treated as cut", "surface", p.surface,
		"upstream", p.u.Name(), "response_id", LogID(p.responseID), "other_id", LogID(other))
	return p.broken(foreignTerminalError{})
}

// sameResponseID gives a lifecycle event whose Response names another id
// than the first one the attempt named that first id (in a copy of data; f
// is read again). A stream shows one response id, the first the client was
// shown (docs/ARCHITECTURE.md §3). A lifecycle event carries no output, so
// relabelling it cannot contradict what the client has; a terminal event
// naming another id never gets here (isForeignTerminal).
func (p *pump) sameResponseID(data []byte, f *eventFields) []byte {
	id := f.Response.Get("id")
	if p.responseID == "" || id.Type != gjson.String || id.Str == p.responseID {
		return data
	}
	set := strField("response.id", p.responseID)
	out, err := sjson.SetRawBytes(data, set.path, set.raw)
	if err != nil {
		return data
	}
	nf, ok := scanEvent(out)
	if !ok {
		return data
	}
	p.s.log.Debug("an upstream event named another response id; the stream keeps the first", "surface", p.surface,
		"upstream", p.u.Name(), "response_id", LogID(p.responseID), "other_id", LogID(id.Str))
	*f = nf
	return out
}

// validText is data with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as encoding/json and jsonx.AppendQuote replace them:
// a client's WebSocket text frames must be UTF-8 (RFC 6455 §8.1; strict
// clients fail the connection, before the terminal event), and SSE is read
// as UTF-8. The pump repairs every upstream event alike, on its own, before
// anything reads it, so a delta, its done text and the terminal Response
// agree, and what was sent (internal/sent, continuations) is what the
// client got. Only string contents can hold such bytes (anywhere else the
// JSON is invalid, and stays so). Valid data costs one utf8.Valid pass and
// no copy.
func validText(data []byte) []byte {
	if utf8.Valid(data) {
		return data
	}
	out := make([]byte, 0, len(data)+8)
	for rest := data; len(rest) > 0; {
		r, size := utf8.DecodeRune(rest)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, rest[:size]...)
		}
		rest = rest[size:]
	}
	return out
}

// confirmAnchor makes the response's anchor durable before the client sees
// its completion: a crash right after completion must not lose it.
func (p *pump) confirmAnchor(resp gjson.Result) {
	c := p.s.cont
	if c == nil || !p.req.recordable() {
		return
	}
	if p.anchor == nil {
		id := strings.Clone(resp.Get("id").Str)
		if id == "" {
			id = p.responseID
		}
		if id == "" {
			return
		}
		p.responseID = id
		p.anchor = c.recordServed(p.req, id, p.u.Name())
	}
	if err := p.anchor.wait(p.ctx); err != nil {
		c.logNotDurable("response completed without a durable anchor", p.responseID, err)
	}
}

// upstreamError turns an upstream error payload into the client's terminal
// event through the recover policy: a bare `error` never reaches a Responses
// client (Codex ignores it); it becomes response.failed with the upstream's
// code, or stream_incomplete when recovered.
func (p *pump) upstreamError(payload []byte, eventType string) string {
	p.cleanEnd = true // the upstream ended this response with its error; its connection is fine
	perr, _ := apierr.Parse(payload)
	obj := gjson.ParseBytes(payload)
	if perr.Code == "" && perr.Message == "" {
		// Responses error events carry code/message at the top level.
		perr.Code, perr.Message, perr.Param = obj.Get("code").String(), obj.Get("message").String(), obj.Get("param").String()
	}
	if perr.Message == "" && perr.Code == "" {
		perr.Message = strings.TrimSpace(string(payload))
	}
	recoverIn := hostabi.RecoverInput{Surface: p.req.policySurface(), Upstream: p.u.Name(), EventType: eventType,
		HTTPStatus: int(obj.Get("status").Int()), Code: perr.Code, Type: perr.Type, Param: perr.Param, Message: perr.Message}
	verdict := p.s.policy.Recover(p.hookCtx(), recoverIn)
	if ce := p.s.recoveredError(p.req, recoverIn, verdict); ce != nil {
		p.s.onRecovered(p.ctx, p.req, verdict)
		return p.terminate(verdictReason(verdict), ce)
	}
	status := recoverIn.HTTPStatus
	if status == 0 { // the status its error stands for, as the attempt judged it (errorShaped)
		_, status, _ = errorShaped(sse.Event{Data: payload}, false)
	}
	// A code that only repeats the status is none, llama.cpp's 400 for a
	// prompt over the context is context_length_exceeded (Codex compacts
	// on it), and an error without a type (OpenAI's own error events) that
	// stands for a 4xx is invalid_request_error, as on every path an
	// upstream's error takes to a client (apierr.FromUpstream).
	perr = apierr.FromUpstream(perr, status)
	if perr.Type == "" {
		perr.Type = apierr.TypeServer
	}
	if isClientErrorStatus(status) && perr.Code == "" {
		// A client error without a code gets one of the spec's codes a
		// client does not retry, invalid_prompt, never the server_error a
		// missing code would travel as (README "Endpoints"). A type other
		// than the generic ones leads the message, as an unknown code does.
		perr.Code = "invalid_prompt"
		if perr.Type != apierr.TypeInvalidRequest && perr.Type != apierr.TypeServer {
			perr.Message = perr.Type + ": " + perr.Message
		}
	}
	if perr.Code == "" {
		perr.Code = apierr.CodeUpstreamError
	} else if perr.Message == "" { // a code alone tells a reader little
		perr.Message = "the upstream failed the response with the code " + strconv.Quote(perr.Code) + " and no message"
	}
	p.terminate(reasonUpstreamError, &perr)
	return reasonUpstreamError
}

func verdictReason(v hostabi.RecoverOutput) string {
	if v.Verdict == hostabi.RecoverFailClosed {
		return "fail_closed"
	}
	return reasonRecovered
}

func (p *pump) handleChat(ev sse.Event) (pumpEnd, bool) {
	if ev.Error != nil {
		if p.unseen() {
			return p.unseenEvent(ev)
		}
		if p.rescuable() {
			return p.afterEvent(ev, ev.Error, gjson.Result{})
		}
		return ended(p.chatError(ev.Error))
	}
	if ev.Done {
		if !p.cs.choicesClosed() {
			if p.unseen() {
				return p.doneBeforeEvent()
			}
			e := apierr.StreamIncomplete("the upstream ended the stream before the finish chunk of every choice")
			if p.rescuable() {
				return pumpEnd{after: &afterFailure{class: hostabi.FailureCut, reason: reasonCut, cause: e, ev: ev.Clone()}}, true
			}
			return ended(p.terminate(reasonCut, e))
		}
		p.cleanEnd = true // [DONE] after the finish: the upstream ended the stream itself
		return ended(p.cs.done())
	}
	c, valid, object := scanChatChunk(ev.Data, p.s.opts.MaxJSONDepth)
	if valid && object && !c.isError() {
		if joined := withTextPartsJoined(ev.Data, c.choices); joined != nil {
			// Content sent as text parts becomes the string a Chat client
			// reads (chatjson.go); the chunk is read again.
			ev.Data = joined
			c, valid, object = scanChatChunk(ev.Data, p.s.opts.MaxJSONDepth)
		}
	}
	if !valid {
		return p.malformedEvent("an unparseable chunk")
	}
	if !object {
		return p.malformedEvent("a chunk that is not a JSON object")
	}
	if !c.isError() && !c.choices.IsArray() {
		if !c.usage.IsObject() || c.choices.Exists() && c.choices.Type != gjson.Null {
			// Not a chunk (the spec's choices is an array; the SDKs
			// iterate it): unparseable, as README's terminal-event rule
			// treats those.
			return p.malformedEvent("a chunk whose choices is not an array")
		}
		// A usage chunk without choices, or with choices null: the
		// usage-only chunk it stands for, with the empty list the spec's
		// has (usageOnlyChunk counts it as one either way).
		if withList, err := sjson.SetRawBytes(ev.Data, "choices", []byte("[]")); err == nil {
			ev.Data = withList
			c, _, _ = scanChatChunk(ev.Data, p.s.opts.MaxJSONDepth)
		}
	}
	choices, usage := c.choices, c.usage
	p.malformed = 0
	if c.isError() {
		if p.unseen() {
			return p.unseenEvent(ev)
		}
		if p.rescuable() {
			return p.afterEvent(ev, ev.Data, usage)
		}
		return ended(p.chatError(ev.Data))
	}
	if !p.chatModel {
		p.chatModel = true
		p.req.meta.noteServedModel(strings.Clone(gjson.GetBytes(ev.Data, "model").Str))
	}
	// One pass over each choice's members reads all that is needed.
	finish, content, unrequested := false, false, false
	list := p.chatChoices[:0]
	choices.ForEach(func(_, ch gjson.Result) bool {
		c := chatChoice{raw: ch.Raw}
		var delta gjson.Result
		ch.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "index":
				c.index = v.Int()
			case "finish_reason":
				c.finish = v.Type == gjson.String && v.Str != ""
			case "delta":
				delta = v
			}
			return true
		})
		if !p.requestedChoice(c.index) {
			unrequested = true
			return true
		}
		if !content && (p.firstToken != nil || !p.sentContent) {
			content = chatContent(delta)
		}
		finish = finish || c.finish
		list = append(list, c)
		return true
	})
	p.chatChoices = list
	if unrequested {
		// A choice the request did not ask for (its index at or past n):
		// skipped and counted, never relayed. Relayed, it would be an
		// answer the client did not ask for, and a choice whose finish the
		// stream then waits for, failing an answer that was whole (README:
		// a Chat stream whose finish chunk went out for every choice the
		// request asked for ends with [DONE]).
		p.s.metrics.skippedEvents.WithLabelValues(p.surface, "unrequested_choice").Inc()
		p.s.log.Debug("skipped a Chat choice the request did not ask for", "surface", p.surface, "upstream", p.u.Name())
		if len(list) == 0 && !usage.IsObject() {
			return pumpEnd{}, false
		}
		if kept, err := withChoicesOnly(ev.Data, list, nil); err == nil { // not expected: the chunk parsed as an object
			ev.Data = kept
		}
	}
	if finish || content {
		p.gotContent()
	}
	dropped, err := p.cs.sendChat(ev.Data, list, usage)
	clear(list) // its strings alias the chunk
	if dropped {
		p.s.metrics.skippedEvents.WithLabelValues(p.surface, "after_finish").Inc()
		p.s.log.Debug("skipped a Chat choice after its finish_reason", "surface", p.surface, "upstream", p.u.Name())
	}
	if err != nil {
		if errors.Is(err, errDiverged) {
			return ended(reasonDiverged)
		}
		return ended(reasonClientGone)
	}
	p.sentContent = p.sentContent || finish || content
	return pumpEnd{}, false
}

// requestedChoice reports whether a Chat choice index is one of the n the
// request asked for (clientStream.chatChoices.want, set once when the
// stream was made).
func (p *pump) requestedChoice(i int64) bool {
	return i >= 0 && i < int64(max(p.cs.chatChoices.want, 1))
}

// withChoicesOnly is a Chat chunk whose choices member holds only those of
// choices that keep accepts (all when keep is nil); their raw JSON aliases
// chunk, which is not changed.
func withChoicesOnly(chunk []byte, choices []chatChoice, keep func(chatChoice) bool) ([]byte, error) {
	list := []byte{'['}
	for _, c := range choices {
		if keep != nil && !keep(c) {
			continue
		}
		if len(list) > 1 {
			list = append(list, ',')
		}
		list = append(list, c.raw...)
	}
	return sjson.SetRawBytes(chunk, "choices", append(list, ']'))
}

// chatChunkMembers are the top-level members of a Chat chunk handleChat
// acts on. They alias the chunk.
type chatChunkMembers struct {
	choices, usage, errField gjson.Result
	object, message          gjson.Result // an unwrapped error object's (isError)
}

// isError reports whether the chunk is an upstream error: an error
// member, or an error object sent unwrapped, {"object":"error",
// "message":…} (vLLM's HTTP error body, from a server that streams it as
// is). errorShaped judges it alike (bareErrorObject).
func (c chatChunkMembers) isError() bool {
	return c.errField.Exists() || bareErrorObject(c.object, c.message)
}

// bareErrorObject reports whether an event's top-level object and message
// members make it an unwrapped error object: object "error" and a message.
func bareErrorObject(object, message gjson.Result) bool {
	return object.Type == gjson.String && object.Str == "error" && message.Type == gjson.String
}

// scanChatChunk reads the members of a Chat chunk handleChat acts on
// (scanMembers: valid and object say whether it is a JSON object within
// maxDepth).
func scanChatChunk(data []byte, maxDepth int) (c chatChunkMembers, valid, object bool) {
	valid, object = scanMembers(data, maxDepth, func(k string, vs, ve int) {
		switch k {
		case "choices":
			c.choices = scannedValue(data, vs, ve)
		case "usage":
			c.usage = scannedValue(data, vs, ve)
		case "error":
			c.errField = scannedValue(data, vs, ve)
		case "object":
			c.object = scannedValue(data, vs, ve)
		case "message":
			c.message = scannedValue(data, vs, ve)
		}
	})
	return c, valid, object
}

// gotContent marks the first content event: the route's first_token
// timer stops.
func (p *pump) gotContent() {
	if p.firstToken != nil {
		p.firstToken()
		p.firstToken = nil
	}
}

// progressOnly reports whether a Responses event type says only that the
// response exists or is alive (lifecycle, keepalive): not content, for the
// route's first_token.
func progressOnly(typ string) bool {
	switch typ {
	case "response.created", "response.in_progress", "response.queued", "keepalive", "ping", "response.keepalive", "response.ping":
		return true
	}
	return false
}

// chatContent reports whether a Chat delta carries content: text, a
// refusal, reasoning, or a tool call. A role-only delta (the first chunk,
// often with "content":"") is not content.
func chatContent(delta gjson.Result) bool {
	found := false
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content", "refusal", "reasoning_content", "reasoning":
			found = v.Type == gjson.String && v.Str != ""
		case "tool_calls":
			found = v.IsArray() && len(v.Array()) > 0
		case "function_call":
			found = v.IsObject()
		}
		return !found
	})
	return found
}

// chatError relays an upstream error chunk, through the recover policy, then
// ends the stream with [DONE].
func (p *pump) chatError(payload []byte) string {
	perr, _ := apierr.Parse(payload)
	recoverIn := hostabi.RecoverInput{Surface: p.req.policySurface(), Upstream: p.u.Name(), EventType: "error",
		Code: perr.Code, Type: perr.Type, Param: perr.Param, Message: perr.Message}
	verdict := p.s.policy.Recover(p.hookCtx(), recoverIn)
	if ce := p.s.recoveredError(p.req, recoverIn, verdict); ce != nil {
		return p.terminate(verdictReason(verdict), ce)
	}
	if perr.Message == "" && perr.Code == "" {
		perr = apierr.Error{Type: apierr.TypeServer, Code: apierr.CodeUpstreamError, Message: strings.TrimSpace(string(payload))}
	} else {
		e := gjson.ParseBytes(payload)
		if inner := e.Get("error"); inner.IsObject() {
			e = inner
		}
		perr.Status = errorStatusOf(e)
		perr = apierr.FromUpstream(perr, perr.Status)
	}
	if !p.cs.visible() {
		// Nothing went out yet: the error is the HTTP status and JSON
		// error an answer of the upstream's would be (README "Failover and
		// replay": only a Chat stream whose headers already went out gets
		// an error chunk), so the SDKs raise the error class its status
		// stands for (BadRequestError for a 400), not a generic one.
		if perr.Status == 0 {
			perr.Status = http.StatusBadGateway // as answerAsError: an error that names no status is the upstream's fault
		}
		p.cs.fail(p.req, &perr, failBeforeStream)
		return reasonUpstreamError
	}
	p.terminate(reasonUpstreamError, &perr)
	return reasonUpstreamError
}

// chatErrorChunk is the Chat Completions in-stream error chunk.
func chatErrorChunk(e *apierr.Error) []byte {
	b, err := json.Marshal(e)
	if err != nil {
		return []byte(fmt.Sprintf(`{"error":{"message":%q,"type":"server_error","code":"stream_incomplete","param":null}}`, e.Message))
	}
	return b
}

// parseJSON parses b without copying it: results alias b, so b must not
// change while they are used, and strings kept beyond that are cloned.
func parseJSON(b []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(b), len(b)))
}
