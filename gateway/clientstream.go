package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/internal/translate"
)

// clientStream is the client's side of one request: created once per
// request (process), it outlives the upstream attempts that feed it. It is
// the request's responder, and the only writer of the client's event
// stream: it owns the sink (SSE, WebSocket frames or Chat chunks), the
// client-visible response id (the first one shown), a contiguous
// sequence_number from 0 (each relayed event's number is rewritten in
// place), what was sent (per output item: its added and done forms, the
// text of each content and summary part so far, function call arguments so
// far), the lifecycle events held back until the first content event, the
// usage, and the one terminal event.
//
// Attempts feed it through a pump (pump.go): lifecycle events go to
// lifecycle, every other event to send (Chat chunks to sendChat), and a
// failure ends it with abort. Until an event has been written (visible), a
// failure costs the client nothing: the attempt may replay the request
// elsewhere (discard drops what was held). Writes are serialised by mu: the
// attempt's goroutine, the hold-back deadline and the upstream reader's
// flush hook all write.
type clientStream struct {
	s       *Server
	ctx     context.Context
	out     responder // the request's own responder: commit, relay, failures before the stream
	req     *clientRequest
	surface string
	chat    bool // a Chat Completions client: chunks, [DONE], no sequence numbers
	start   time.Time
	hold    time.Duration // how long lifecycle events wait for content; <= 0: not held
	// bodyEcho is the client's request fields a Response echoes, read once
	// from its body: the body is the attempts' to change (forward), while
	// a stream log's flush renders the Response from another goroutine.
	bodyEcho translate.RequestEcho

	mu      sync.Mutex
	sink    eventSink   // nil until the first write commits the stream
	fs      *sseSink    // sink, when it is SSE (flushed explicitly)
	meter   *meterSink  // sink, when the request is metered (usage.go)
	header  http.Header // headers of the attempt feeding the stream, sent at commit
	lazy    bool        // the feeding attempt flushes before each blocking read
	wrote   bool        // an event reached the client
	ended   bool        // the terminal event is out (or was answered by out)
	gone    bool        // a write failed: the client is gone
	counted bool        // the terminal reason was counted
	// abandon cancels the request's work (set by process); called when the
	// client is gone.
	abandon context.CancelCauseFunc
	// unwatchEOF stops watching for the client's clean EOF (clientEOF).
	unwatchEOF func() bool

	onEnd func(reason string) // hears the terminal reason once (usage.go: the access log); may be nil

	// Responses clients.
	seq        int64       // the next sequence_number
	responseID string      // the client-visible response id: the first one shown
	createdAt  int64       // of the Response object the gateway writes
	held       []heldEvent // lifecycle events waiting for content
	holdTimer  *time.Timer
	// What the client was sent: the last lifecycle event's Response object
	// as the upstream sent it, the output items in output_index order, the
	// upstream's usage once known (Chat clients' too).
	sent sent.Output

	// Chat clients.
	sawFinish   bool             // every choice the request asked for was sent with its finish_reason (allFinished)
	chatChoices chatChoiceStates // which choices the client was sent, and which finished
	// What a Chat client was sent, kept once a continuation is armed (arm).
	trackChat bool
	chatHead  chatHead   // what the first chunk naming the completion showed of it
	chatText  []byte     // content, unescaped
	chatTools []chatTool // tool calls by index
	// chatAnnotations counts the delta.annotations sent: a restart redoes them (spliceChatAnnotationsLocked).
	chatAnnotations int

	chatRefused bool // a delta.refusal was sent

	// Continuation (continuation.go): the splicer of the attempt that
	// continues the stream after a failure after content.
	splice *splicer

	// Keepalive: a timer that writes an SSE comment when nothing was
	// written since its last run (active); a WebSocket client is pinged by
	// its session (wsSession.keepAliveWhileAnswering).
	ka     *time.Timer
	active bool

	scratch []byte // sequence_number rewrites that change length

	// The stream_event hook (streamhook.go): nil unless a policy
	// implemented it when the stream began.
	hook     StreamPolicy
	upstream string // the upstream feeding the stream (the hook's input)
	edited   bool   // the hook dropped or replaced an event

	// Resume (resume.go): every event a Responses client gets is logged
	// once the response id is known, so the stream can be resumed.
	resumable  bool
	rlog       *streamLog
	background bool          // a background request: no client reads the stream; it runs to its end
	detach     time.Duration // how long the work goes on after the client left; 0: stopped at once
	detached   bool          // the client is gone, the work goes on: events are only logged
}

// heldEvent is a lifecycle event waiting for content (its data is a copy).
type heldEvent struct {
	name string
	data []byte
}

var errClientGone = errors.New("the client is gone")

// errNoSuchOutput is sendFrom's refusal of an event that names output the
// client was never sent (sent.Output.Refers): the pump skips it as an
// unparseable event.
var errNoSuchOutput = errors.New("the event names an output item or part the client was not sent")

// errAfterDone is sendFrom's refusal of an event that adds to output the
// client was told is done, or adds again an item or part it has
// (sent.Fields.Late): the pump skips and counts it (after_done), as a Chat
// stream's text after its finish, without taking it for a broken stream.
var errAfterDone = errors.New("the event adds to output the client was told is done")

// defaultLifecycleHold is how long response.created and response.in_progress
// wait for the first content event (Options.LifecycleHold).
const defaultLifecycleHold = 250 * time.Millisecond

// newClientStream returns the stream of one request answered through out.
func (s *Server) newClientStream(ctx context.Context, out responder, req *clientRequest, start time.Time) *clientStream {
	cs := &clientStream{s: s, ctx: ctx, out: out, req: req, surface: req.surface(), chat: req.ep.chat, start: start,
		hold: s.opts.LifecycleHold, createdAt: time.Now().Unix(), bodyEcho: translate.EchoOf(req.body)}
	if cs.chat {
		cs.chatChoices.want = wantChoices(req.body)
	}
	if sp, ok := s.policy.(StreamPolicy); ok && !cs.chat && sp.StreamHookActive() {
		cs.hook = sp
	}
	if s.keepsStreamLog(req) {
		cs.resumable, cs.background = true, req.background
		cs.detach = s.logs.opts.DetachGrace
	}
	return cs
}

// keepsStreamLog reports whether req's stream keeps its client-visible event
// log (resume.go): every Responses stream does while resume is on (README,
// "Every Responses stream Sluice writes … keeps its client-visible event
// log"), whoever writes its events.
func (s *Server) keepsStreamLog(req *clientRequest) bool {
	return s.logs != nil && !req.ep.chat && req.stream
}

// watchClientEOF starts watching a streaming request's client for a clean
// EOF (clientEOF). It is called once the stream is wired (abandon, onEnd):
// the watch fires at once for a client that closed while the request was
// being checked.
func (cs *clientStream) watchClientEOF() {
	if cs.req.stream {
		cs.unwatchEOF = onClientEOF(cs.ctx, cs.clientEOF)
	}
}

// clientStreamOf is the client stream behind out (process makes every
// request's responder one); a bare responder gets a stream of its own.
func (s *Server) clientStreamOf(ctx context.Context, out responder, req *clientRequest, start time.Time) *clientStream {
	if cs, ok := out.(*clientStream); ok {
		return cs
	}
	return s.newClientStream(ctx, out, req, start)
}

// ---- responder: what forward and its helpers talk to ----

// fail answers with a gateway error: through the request's responder while
// the client has seen nothing (a JSON error, an error frame, or a lone
// response.failed), else as the stream's terminal event.
func (cs *clientStream) fail(req *clientRequest, e *apierr.Error, kind failKind) {
	cs.mu.Lock()
	if cs.ended || cs.gone {
		cs.mu.Unlock()
		return
	}
	if !cs.wrote {
		cs.dropHeldLocked()
		if cs.sink == nil {
			cs.ended = true
			cs.mu.Unlock()
			cs.out.fail(req, e, kind)
			return
		}
		// Committed before its first event (clientEOF): the client has its
		// headers, so whatever the kind, the failure is the stream's
		// terminal event.
	}
	cs.abortLocked(e)
	cs.countLocked("gateway_error")
	cs.mu.Unlock()
}

func (cs *clientStream) relay(req *clientRequest, status int, header http.Header, body []byte) {
	cs.mu.Lock()
	if cs.ended {
		cs.mu.Unlock()
		return // answered already (failInput raced the upstream's answer)
	}
	if cs.sink != nil {
		// Committed before its first event (clientEOF): the upstream's error
		// (a stream request is relayed nothing else: a 2xx that is no event
		// stream is unusableAnswer) can no longer go out as a status and a
		// body, and ends the stream instead.
		e := relayedError(status, body)
		cs.dropHeldLocked()
		cs.abortLocked(&e)
		cs.countLocked(reasonUpstreamError)
		cs.mu.Unlock()
		return
	}
	cs.ended = true
	cs.mu.Unlock()
	if cs.s.logs != nil && !cs.chat && status/100 == 2 {
		cs.s.logs.answeredJSON(req, body)
	}
	cs.out.relay(req, status, header, body)
}

func (cs *clientStream) commit(header http.Header) eventSink {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.sink == nil {
		cs.header = header
	}
	cs.commitLocked()
	return cs.sink
}

// ---- attempts ----

// attach makes ans the stream's feed: its headers go out at commit, and its
// reader flushes the client before each read that may block (events that
// arrive together leave in one write, and none waits). detach undoes it.
func (cs *clientStream) attach(ans *upstreamAnswer) (detach func()) {
	cs.mu.Lock()
	if cs.sink == nil {
		cs.header = ans.header
	}
	cs.lazy = ans.beforeRead != nil
	if cs.fs != nil {
		cs.fs.auto = !cs.lazy
	}
	cs.mu.Unlock()
	if ans.beforeRead != nil {
		*ans.beforeRead = cs.flush
	}
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.lazy = false
		if cs.fs != nil {
			cs.fs.auto = true
			_ = cs.fs.Flush()
		}
	}
}

// flush sends what was written since the last flush.
func (cs *clientStream) flush() {
	cs.mu.Lock()
	if cs.fs != nil && cs.fs.Flush() != nil {
		cs.goneLocked() // the client left: noticed now, not at the next write
	}
	cs.mu.Unlock()
}

// visible reports whether the client has seen anything of the stream (or
// its answer): from then on a failure is the stream's terminal event.
// unseenHeld reports whether the client has seen nothing of the stream
// and, if so, stops the hold deadline: the attempt ends here (pump.unseen)
// and what follows is decided as if nothing was sent (a replay elsewhere,
// or the failure as a status), which drops the held lifecycle events. The
// decision may take longer than the hold (a replay policy's call on a
// loaded machine): were the held events released meanwhile, the client
// would get this attempt's response.created and then another attempt's.
func (cs *clientStream) unseenHeld() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.wrote || cs.ended {
		return false
	}
	cs.stopHoldLocked()
	return true
}

func (cs *clientStream) visible() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.wrote || cs.ended
}

// finished reports whether a Chat client got a finish_reason for every
// choice the request asked for (its n) and has none open: a whole answer,
// whatever the upstream does next.
func (cs *clientStream) finished() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.sawFinish
}

// choicesClosed reports whether a Chat client got a finish_reason for
// every choice it was sent (at least one): enough for the upstream's [DONE]
// to end the answer well, though it may have answered fewer choices than n.
func (cs *clientStream) choicesClosed() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.sawFinish || cs.chatChoices.closed()
}

// discard forgets what an attempt fed that the client never saw (the
// held lifecycle events), before the request is replayed elsewhere.
func (cs *clientStream) discard() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.wrote {
		cs.dropHeldLocked()
		cs.responseID, cs.sent.Base = "", nil
		if cs.sink == nil {
			cs.header = nil // an early commit (writeProbeLocked) must not send them
		}
	}
}

// close ends the stream's life with its request: nothing is written after
// it (a pending hold deadline included).
func (cs *clientStream) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.rlog != nil && !cs.ended {
		cs.endLogLocked()
	}
	cs.dropHeldLocked()
	cs.ended = true
	if cs.ka != nil {
		cs.ka.Stop()
	}
	if cs.unwatchEOF != nil {
		cs.unwatchEOF()
	}
}

// clientEOFRecheck is how long after the probe that follows a client's
// clean EOF it is probed again: longer than a round trip to any client, so
// that the reset with which the host of a client that left answers the
// first probe has come back, and fails the second.
const clientEOFRecheck = time.Second

// clientEOF runs when the client's read side reached a clean EOF
// (requestContext): the client half-closed after sending its request and
// still reads, or it left. Only writes tell them apart: the host of a
// client that left answers the first with a reset, which fails the next
// (goneLocked). So the client is probed at once and again
// clientEOFRecheck later, whatever the upstream is doing. Without that, a
// client that left before the first event would be noticed at that event,
// which an upstream holding its headers, a Retry-After wait or a failover
// can put off for minutes, all for nobody; one that left a silent stream,
// at the keepalive after next.
func (cs *clientStream) clientEOF() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.writeProbeLocked() {
		time.AfterFunc(clientEOFRecheck, func() {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			cs.writeProbeLocked()
		})
	}
}

// writeProbeLocked writes a keepalive comment to the client, committing
// the stream first: a stream that is not committed yet is then committed
// early (with the headers of the attempt feeding it, if one does). A client
// that listens gets its headers early, and a failure before the first event
// reaches it as a stream (fail, relay), never as a status. It reports
// whether the stream goes on: not ended, and the client not found gone.
// clientEOF's probes are written so, uncounted: they test whether the
// client is still there, whatever the upstream does.
func (cs *clientStream) writeProbeLocked() bool {
	if cs.ended || cs.gone {
		return false
	}
	cs.commitLocked()
	if err := cs.sink.KeepAlive(cs.s.opts.KeepAlive); err != nil {
		cs.goneLocked()
		return false
	}
	return true
}

// probeLocked is writeProbeLocked for a stream that has had nothing to send
// for timeouts.keepalive (keepAlive, keepWaiting): the keepalive is counted
// in sluice_keepalives_total, which counts those written while the stream
// waited (README, timeouts.keepalive: "while the upstream is silent").
func (cs *clientStream) probeLocked() bool {
	if !cs.writeProbeLocked() {
		return false
	}
	if cs.req == nil || !cs.req.unread { // a background run's keepalive reaches no client
		cs.s.metrics.keptAlive(cs.surface)
	}
	return true
}

// keepWaiting commits an SSE stream early and writes it a keepalive
// comment, for a request that has waited timeouts.keepalive for the
// gateway's own resource (its session's upstream WebSocket, busy with the
// request ahead): the client and the proxies between see bytes, and the
// stream's keepalive timer runs from then on (README "Upstream
// WebSockets"). A failure after that reaches the client as the stream's
// terminal event, not as a status (writeProbeLocked). A WebSocket client's
// session keeps itself alive.
func (cs *clientStream) keepWaiting() {
	if cs.req == nil || cs.req.viaWebSocket {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.probeLocked()
}

// relayedError is an upstream's error answer as a stream's terminal event:
// its error object (upstreamErrorOf) as every path gives an upstream's
// error to a client (apierr.FromUpstream: a 4xx other than a 429 without a
// type is invalid_request_error), server_error when that leaves it without
// a type (a 429, whose code says what it is, or a 5xx), and a message when
// it had none.
func relayedError(status int, body []byte) apierr.Error {
	e := apierr.FromUpstream(upstreamErrorOf(status, body), status)
	if e.Type == "" {
		e.Type = apierr.TypeServer
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("the upstream answered HTTP %d %s without an error message", status, http.StatusText(status))
	}
	return e
}

// finish counts the reason the stream ended (once).
func (cs *clientStream) finish(reason string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.countLocked(reason)
}

func (cs *clientStream) countLocked(reason string) {
	if cs.counted || reason == "" {
		return
	}
	cs.counted = true
	reason = cs.stoppedReason(reason)
	cs.s.metrics.streamTerminal.WithLabelValues(cs.req.surface(), reason).Inc()
	if cs.onEnd != nil {
		cs.onEnd(reason)
	}
}

// lifecycle takes response.created / in_progress / queued: held back until
// the first content event or the hold deadline, so a failure right after
// them still finds a client that has seen nothing.
func (cs *clientStream) lifecycle(name string, data []byte, f *eventFields) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended || cs.gone && !cs.detached {
		return errClientGone
	}
	if cs.splice != nil {
		return nil // the client has its lifecycle events (and response id) from the first attempt
	}
	if cs.hold <= 0 || cs.wrote {
		return cs.writeLocked(name, data, f)
	}
	// Held past the next read: the name may alias the reader's buffer too.
	cs.held = append(cs.held, heldEvent{name: logName(name), data: bytes.Clone(data)})
	if cs.holdTimer == nil {
		cs.holdTimer = time.AfterFunc(cs.hold, cs.releaseHeld)
	}
	return nil
}

// releaseHeld is the hold deadline: the held events go out.
func (cs *clientStream) releaseHeld() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.held) == 0 || cs.ended || cs.gone && !cs.detached {
		return
	}
	if cs.flushHeldLocked() == nil && cs.fs != nil {
		if cs.fs.Flush() != nil { // the reader is blocked past its own flush
			cs.goneLocked()
		}
	}
}

// sendFrom writes one Responses event of the named upstream (after what was
// held); the stream hook's input says where an event came from.
func (cs *clientStream) sendFrom(upstream, name string, data []byte, f *eventFields) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended || cs.gone && !cs.detached {
		return errClientGone
	}
	if err := cs.flushHeldLocked(); err != nil {
		return err
	}
	// The client's own output_index; a continuation maps its attempt's
	// items itself (spliceLocked). An item's upstream index is recorded
	// once it was added (below), and the hook is told the upstream's, as it
	// is on a continued stream.
	upstreamIndex, hookIndex := f.OutputIndex.Int(), indexOf(f.OutputIndex)
	if cs.splice == nil {
		var err error
		if data, f, err = cs.clientNumberedLocked(data, f); err != nil {
			return err
		}
	}
	if cs.hook != nil {
		cs.upstream = upstream
		var keep bool
		if data, f, keep = cs.streamHookLocked(data, f, hookIndex); !keep {
			return nil
		}
	}
	if cs.splice != nil {
		return cs.spliceLocked(name, data, f)
	}
	if !cs.sent.Refers(&f.Fields) {
		if f.Late {
			return errAfterDone
		}
		return errNoSuchOutput
	}
	if implied := cs.sent.ImpliedPartEvent(&f.Fields); implied != nil {
		// A lax upstream's text delta into a part it never announced: the
		// client is sent the part first, as the Response the gateway
		// renders from what it sent (Track) has it; an SDK's stream
		// accumulator looks the delta's part up and fails without it.
		if pf, ok := scanEvent(implied); ok {
			if err := cs.writeLocked(pf.Type.Str, implied, &pf); err != nil {
				return err
			}
			cs.sent.Refers(&f.Fields) // the delta's part is now that one
		}
	}
	if typ := f.Type.Str; typ == "response.failed" || typ == "response.incomplete" ||
		isTerminalType(typ) && (!f.Response.IsObject() || !cs.agreesWithSentLocked(f.Response)) {
		data, f = cs.withSentOutputLocked(data, f)
	}
	items := len(cs.sent.Items)
	err := cs.writeLocked(name, data, f)
	if len(cs.sent.Items) > items { // recorded even when the client is gone: a detached stream goes on
		cs.sent.Items[items].Upstream = upstreamIndex
	}
	return err
}

// clientNumberedLocked gives an event of the upstream feeding the stream
// the client's own output_index: the client's items are numbered 0, 1, 2…
// in the order they were added, as the terminal Response's output array
// lists them (openai-node's stream helper looks items up there by
// output_index), whatever the upstream's numbering: an upstream need not
// number from 0, and may number two items alike (docs/ARCHITECTURE.md §3).
// The event's item is found as the upstream names it
// (sent.Output.UpstreamItemOf); an event naming an item the client was not
// sent is errNoSuchOutput, as Refers would find it. An event already
// numbered as the client's is returned as it is, one whose index keeps its
// length is rewritten in place (withOutputIndex): the hot path allocates
// nothing.
func (cs *clientStream) clientNumberedLocked(data []byte, f *eventFields) ([]byte, *eventFields, error) {
	at := f.OutputIndex
	var idx int64
	switch typ := f.Type.Str; {
	case typ == "response.output_item.added":
		if !at.Exists() {
			return data, f, nil
		}
		idx = int64(len(cs.sent.Items))
	case at.Type != gjson.Number || at.Num < 0 || sent.RefersAlways(typ):
		return data, f, nil // no item's index (Refers refuses a bad one)
	default:
		it := cs.sent.UpstreamItemOf(&f.Fields)
		if it == nil {
			return nil, nil, errNoSuchOutput
		}
		idx = it.Index
	}
	if at.Type == gjson.Number && at.Num == float64(idx) {
		return data, f, nil
	}
	data, f = withOutputIndex(data, f, idx)
	return data, f, nil
}

// withOutputIndex returns the event data, whose fields f are, with its
// output_index idx: in place when idx's digits fill the upstream's value
// exactly, else in a copy (whose fields are read again).
func withOutputIndex(data []byte, f *eventFields, idx int64) ([]byte, *eventFields) {
	var num [20]byte
	d := strconv.AppendInt(num[:0], idx, 10)
	i, n := f.OutputIndex.Index, len(f.OutputIndex.Raw)
	if i <= 0 || i+n > len(data) || string(data[i:i+n]) != f.OutputIndex.Raw {
		// Not where the scan said (not expected): set by path.
		out, err := sjson.SetRawBytes(data, "output_index", strconv.AppendInt(nil, idx, 10)) // not d: it stays on the stack
		if err != nil {
			return data, f
		}
		return rescanned(data, out, f)
	}
	if len(d) == n {
		copy(data[i:], d)
		f.OutputIndex = scannedValue(data, i, i+n)
		return data, f
	}
	out := make([]byte, 0, len(data)-n+len(d))
	out = append(append(append(out, data[:i]...), d...), data[i+n:]...)
	return rescanned(data, out, f)
}

// rescanned is out, an edited copy of the event data whose fields are f,
// with its fields read again; data and f when out cannot be read.
func rescanned(data, out []byte, f *eventFields) ([]byte, *eventFields) {
	nf, ok := scanEvent(out)
	if !ok {
		return data, f
	}
	return out, &nf
}

// withSentOutputLocked gives an upstream's response.failed or
// response.incomplete the output the client was sent, rendered as the
// gateway's own terminal events render it (sent.Output.AppendResponse: the
// items still open closed as incomplete): an upstream may fail a response
// with an empty output after streaming its text, and what was sent stays
// sent (README, "What it promises"). The event's Response is then the
// gateway's to write, so it is complete as every one the gateway writes
// (the spec's required fields the upstream left out filled in, as for a
// continued stream's terminal event), and keeps everything else the
// upstream's Response had (id, status, error, usage, …), as do the event's
// other members. A stream that showed no item keeps the upstream's event
// when its Response is complete and says why it failed: there is nothing it
// would contradict. A terminal event of any type without a Response, or with
// one that does not agree with what was sent (agreesWithSentLocked), gets
// the one the gateway builds of what was sent, its status the event's: a
// terminal event carries its Response (README, the terminal-event rule),
// which clients read and GET /v1/responses/{id} answers.
func (cs *clientStream) withSentOutputLocked(data []byte, f *eventFields) ([]byte, *eventFields) {
	if len(cs.sent.Items) == 0 && cs.agreesWithSentLocked(f.Response) && failureSaysWhy(f.Response) {
		return data, f
	}
	r := cs.response("")
	if id := f.Response.Get("id"); cs.responseID == "" && id.Type == gjson.String && id.Str != "" {
		r.ID = id.Str // the client was shown no id: the upstream's is the one
	}
	upstreamResp := f.Response
	if !upstreamResp.IsObject() {
		upstreamResp = gjson.Result{} // a Response of null or a string: nothing of it is kept
	}
	r.FromUpstream(f.Type.Str, upstreamResp)
	if u := upstreamResp.Get("usage"); u.IsObject() {
		cs.sent.Usage = append(cs.sent.Usage[:0], u.Raw...) // as track records it once the event is out
	}
	resp := cs.sent.AppendResponse(make([]byte, 0, 1024), &r)
	out, err := sjson.SetRawBytes(data, "response", resp)
	if err != nil {
		return data, f
	}
	nf, ok := scanEvent(out)
	if !ok {
		return data, f
	}
	return out, &nf
}

// responseRequired are the members the spec's Response requires, each
// with its bit in agreesWithSentLocked's one pass.
var responseRequired = func() map[string]uint16 {
	m := map[string]uint16{}
	for i, k := range []string{"id", "object", "created_at", "error", "incomplete_details", "instructions", "model",
		"tools", "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p"} {
		m[k] = 1 << i
	}
	return m
}()

// responseRequiredAll has every responseRequired bit set.
var responseRequiredAll = uint16(1)<<len(responseRequired) - 1

// agreesWithSentLocked reports whether an upstream's terminal Response can
// reach the client as it is: it has every member the spec requires (an
// upstream may end a stream with only an id and a status) and an output
// array holding at least the items the client was shown (one that lists
// fewer, an empty output after streamed text, would take back what was
// sent). Its items themselves are the upstream's to describe.
// It reads the Response's members in one pass: it may hold the whole
// answer's text.
func (cs *clientStream) agreesWithSentLocked(resp gjson.Result) bool {
	if !resp.IsObject() {
		return false
	}
	var seen uint16
	items := -1 // output's length; -1 while not an array
	resp.ForEach(func(k, v gjson.Result) bool {
		seen |= responseRequired[k.Str]
		if k.Str == "output" && v.IsArray() {
			items = 0
			v.ForEach(func(_, _ gjson.Result) bool { items++; return true })
		}
		return true
	})
	return seen == responseRequiredAll && items >= len(cs.sent.Items)
}

// failureSaysWhy reports whether a Response is not failed, or failed with an
// error object whose code is the spec's (or one clients act on): the error
// clients read to decide on a retry.
func failureSaysWhy(resp gjson.Result) bool {
	if resp.Get("status").Str != "failed" {
		return true
	}
	e := resp.Get("error")
	if !e.IsObject() {
		return false
	}
	code := e.Get("code")
	_, keep := translate.ResponseErrorCode(code.Str, e.Get("type").Str)
	return keep && code.Type == gjson.String
}

// sendChat writes one upstream Chat chunk, whose choices handleChat read.
// A choice the client already got the finish_reason of is dropped from it
// (README: after a finish reason the answer is complete); dropped reports
// that, and a chunk left with nothing for the client is not written.
func (cs *clientStream) sendChat(data []byte, choices []chatChoice, usage gjson.Result) (dropped bool, err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.gone || cs.ended {
		return false, errClientGone
	}
	data, finish, dropped := cs.withoutFinishedChoicesLocked(data, choices, usage)
	if data == nil {
		return dropped, nil
	}
	if len(choices) == 0 && usage.IsObject() && cs.meter != nil && cs.splice == nil && !cs.chatChoices.allFinished() {
		// A usage-only chunk ahead of a finish chunk: counted now, written
		// just before [DONE] (meterSink.holdUsageOnly).
		cs.meter.holdUsageOnly(data)
		if cs.trackChat {
			cs.trackChatLocked(data)
		}
		cs.sent.Usage = append(cs.sent.Usage[:0], usage.Raw...) // what a continuation adds its usage to
		return dropped, nil
	}
	if cs.splice != nil {
		err = cs.spliceChatLocked(data, finish, usage)
	} else if err = cs.eventLocked("", data, !usage.IsObject()); err == nil && cs.trackChat {
		cs.trackChatLocked(data)
	}
	if err != nil {
		return dropped, err
	}
	for _, c := range choices {
		cs.chatChoices.sent(c.index, c.finish)
	}
	cs.sawFinish = cs.chatChoices.allFinished()
	if usage.IsObject() {
		cs.sent.Usage = append(cs.sent.Usage[:0], usage.Raw...)
	}
	return dropped, nil
}

// withoutFinishedChoicesLocked returns data without the choices whose
// finish_reason the client already got, and whether a kept choice finishes.
// It returns nil when nothing is left to send: every choice dropped and no
// usage (a usage chunk still passes, with the choices it keeps).
func (cs *clientStream) withoutFinishedChoicesLocked(data []byte, choices []chatChoice, usage gjson.Result) (out []byte, finish, dropped bool) {
	kept := 0
	for _, c := range choices {
		switch {
		case cs.chatChoices.finished(c.index):
			dropped = true
		case c.finish:
			finish = true
			kept++
		default:
			kept++
		}
	}
	if !dropped {
		return data, finish, false
	}
	if kept == 0 && !usage.IsObject() {
		return nil, false, true
	}
	out, err := withChoicesOnly(data, choices, func(c chatChoice) bool { return !cs.chatChoices.finished(c.index) })
	if err != nil { // not expected: data parsed as an object
		return nil, false, true
	}
	return out, finish, true
}

// maxChatChoices bounds the choices whose finish is tracked, as OpenAI
// bounds n. A choice the request did not ask for never gets here: the pump
// skips it (requestedChoice).
const maxChatChoices = 128

// chatChoice is what handleChat read of one choice of a Chat chunk.
type chatChoice struct {
	index  int64
	finish bool   // it carries a finish_reason
	raw    string // the choice's JSON (aliases the chunk)
}

// chatChoiceStates records, by choice index, the choices a Chat client
// was sent and which of them got their finish_reason.
type chatChoiceStates struct {
	state []uint8 // by index: choiceUnseen, choiceOpen, choiceFinished
	open  int     // choices sent without a finish_reason yet
	done  int     // choices whose finish_reason was sent
	want  int     // the choices the request asked for (its n, at least 1, at most maxChatChoices)
}

// wantChoices is the n of a Chat request's body: how many choices make its
// answer whole, 1 when it names none.
func wantChoices(body []byte) int {
	return int(min(max(gjson.GetBytes(body, "n").Int(), 1), maxChatChoices))
}

const (
	choiceUnseen uint8 = iota
	choiceOpen
	choiceFinished
)

// sent records that choice i reached the client, finishing when finish.
func (st *chatChoiceStates) sent(i int64, finish bool) {
	if i < 0 || i >= maxChatChoices {
		return
	}
	for int64(len(st.state)) <= i {
		st.state = append(st.state, choiceUnseen)
	}
	switch prev := st.state[i]; {
	case prev == choiceFinished:
	case finish:
		if prev == choiceOpen {
			st.open--
		}
		st.state[i] = choiceFinished
		st.done++
	case prev == choiceUnseen:
		st.state[i] = choiceOpen
		st.open++
	}
}

// finished reports whether choice i's finish_reason reached the client.
func (st *chatChoiceStates) finished(i int64) bool {
	return i >= 0 && i < int64(len(st.state)) && st.state[i] == choiceFinished
}

// allFinished reports whether every choice the request asked for finished
// and none is still open: the answer is whole even if the upstream then
// breaks off without its [DONE].
func (st *chatChoiceStates) allFinished() bool { return st.done >= max(st.want, 1) && st.open == 0 }

// closed reports whether a choice finished and none is still open: what an
// upstream's [DONE] needs to end the answer well, since an upstream that
// ignores n (llama.cpp) answers one choice and says it is done.
func (st *chatChoiceStates) closed() bool { return st.done > 0 && st.open == 0 }

// done ends a Chat stream with [DONE] and returns the reason.
func (cs *clientStream) done() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.gone || cs.ended {
		return reasonClientGone
	}
	if cs.commitLocked(); cs.gone {
		return reasonClientGone
	}
	cs.ended = true
	if err := cs.sink.Done(); err != nil {
		cs.goneLocked()
		return reasonClientGone
	}
	return reasonDone
}

// failInput fails the request with e, the error its streaming-input
// session closed with because of its own input (streaminput.ErrInputFailed:
// a bad Mode A line, a chunk over the session's limit). Unlike a client that
// went away (goneLocked), its client still reads and nobody will resume
// the answer: the client gets e now (fail: as the stream's terminal event
// once it has begun), the request is recorded as failed with e's code, and
// its work is cancelled with cause, the upstream charged for what it sent.
// A client already gone is left as goneLocked left it.
func (cs *clientStream) failInput(e *apierr.Error, cause error) {
	cs.mu.Lock()
	gone := cs.gone
	cs.mu.Unlock()
	if gone {
		return
	}
	if m := cs.req.meta; m != nil {
		m.mu.Lock()
		m.code = e.Code // error.type, and the access line's code: the stream's terminal event reports it
		m.mu.Unlock()
	}
	cs.fail(cs.req, e, failBeforeStream)
	if cs.abandon != nil {
		cs.abandon(cause)
	}
}

// abort ends the stream with the gateway's terminal event for e:
// response.failed carrying the output already streamed, or a Chat error
// chunk and [DONE]. It is a no-op once the stream ended.
func (cs *clientStream) abort(e *apierr.Error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.abortLocked(e)
}

// ---- under mu ----

// goneLocked records that a write to the client failed and stops the work
// feeding the stream: the attempt's context is cancelled, so an upstream that
// is silent (or slow) is released at once instead of at its idle timeout. A
// client that closed cleanly is noticed here, at its first failed write (see
// clientEOF).
func (cs *clientStream) goneLocked() {
	if cs.gone {
		return
	}
	cs.gone = true
	closeGoneClientConn(cs.ctx, cs.out) // detach_conn.go: no max_connections slot is held while the work runs on
	if cs.rlog != nil && (cs.background || cs.detach > 0) {
		cs.detachLocked()
		return
	}
	if cs.abandon != nil {
		cs.abandon(errClientGone)
	}
}

func (cs *clientStream) commitLocked() {
	if cs.sink != nil {
		return
	}
	cs.sink = cs.out.commit(cs.header)
	cs.meter, _ = cs.sink.(*meterSink)
	if fs := sseSinkOf(cs.sink); fs != nil {
		cs.fs = fs
		fs.auto = !cs.lazy
	}
	cs.startKeepAliveLocked()
}

// eventLocked writes one event, committing the stream first. A detached
// stream (resume.go) writes nothing: its events are only logged and
// metered. plain: the
// caller read the event and it carries nothing the usage meter keeps: a
// Responses event meterSkipsResponsesEvent names, or a Chat chunk without a
// "usage" member.
func (cs *clientStream) eventLocked(name string, data []byte, plain bool) error {
	if cs.splice != nil {
		cs.splice.wrote = true
	}
	if cs.gone {
		if cs.detached {
			// Nobody reads it, but the upstream bills it: the usage meter
			// still counts what the stream would have sent (its terminal
			// event's usage, its output deltas), or a client could take
			// answers past its key's token limits by leaving and fetching
			// them afterwards.
			if cs.req != nil && cs.req.meta != nil {
				cs.req.meta.observeUnsent(name, data, plain)
			}
			return nil
		}
		return errClientGone
	}
	cs.noteFailedTurnLocked(data)
	cs.commitLocked()
	var err error
	if plain && cs.meter != nil {
		err = cs.meter.plainEvent(name, data)
	} else {
		err = cs.sink.Event(name, data)
	}
	if err != nil {
		cs.goneLocked()
		if cs.detached {
			return nil
		}
		return errClientGone
	}
	cs.active = true
	if !cs.wrote {
		cs.wrote = true
		cs.s.metrics.firstEvent.WithLabelValues(cs.surface).Observe(time.Since(cs.start).Seconds())
	}
	return nil
}

// writeLocked writes one Responses event numbered cs.seq and records what
// it sent.
func (cs *clientStream) writeLocked(name string, data []byte, f *eventFields) error {
	terminal := isTerminalType(f.Type.Str)
	if terminal && cs.seq == 0 {
		if err := cs.openLocked(f.Response); err != nil {
			return err
		}
	}
	data = cs.renumber(data, f.seq)
	if cs.resumable {
		// With streams.durable, a terminal event is in the store when this
		// returns (streamLog.seal): the client gets it only then.
		data = cs.logLocked(name, data, terminal)
	}
	if err := cs.eventLocked(name, data, meterSkipsResponsesEvent(f.Type.Str, terminal)); err != nil {
		if cs.rlog != nil { // logged: what the log's terminal shows must agree with it
			cs.seq++
			cs.track(f)
		}
		return err
	}
	cs.seq++
	cs.track(f)
	if terminal {
		cs.ended = true
		cs.stopHoldLocked()
	}
	return nil
}

func (cs *clientStream) flushHeldLocked() error {
	if len(cs.held) == 0 {
		return nil
	}
	held := cs.held
	cs.held = nil
	cs.stopHoldLocked()
	for _, h := range held {
		f, _ := scanEvent(h.data)
		if err := cs.writeLocked(h.name, h.data, &f); err != nil {
			return err
		}
	}
	return nil
}

func (cs *clientStream) dropHeldLocked() {
	cs.held = nil
	cs.stopHoldLocked()
}

func (cs *clientStream) stopHoldLocked() {
	if cs.holdTimer != nil {
		cs.holdTimer.Stop()
		cs.holdTimer = nil
	}
}

func (cs *clientStream) abortLocked(e *apierr.Error) {
	if cs.ended || cs.gone && !cs.detached {
		return
	}
	if cs.req != nil {
		cs.req.meta.noteAbort(e.Code) // the access line's code and the span's error.type: the code the client gets
	}
	e = waitInMessage(e) // a stream's client reads no Retry-After header
	if cs.chat {
		if cs.eventLocked("", chatErrorChunk(e), false) == nil {
			if err := cs.sink.Done(); err != nil {
				cs.goneLocked()
			}
		}
		cs.ended = true
		return
	}
	if cs.flushHeldLocked() != nil {
		return
	}
	if cs.seq == 0 && cs.openLocked(gjson.Result{}) != nil {
		return
	}
	ev := cs.terminalEvent("response.failed", "failed", e)
	if cs.resumable {
		ev = cs.logLocked("response.failed", ev, true)
	}
	if cs.eventLocked("response.failed", ev, false) == nil {
		cs.seq++
	}
	cs.ended = true
	cs.stopHoldLocked()
}

// noteFailedTurnLocked remembers, in its client WebSocket session's memory,
// that a store:false turn ended response.failed, whichever path wrote that
// event (an upstream's, a continuation's, the gateway's own), under the id
// the client was shown (ev: the event as the client gets it). The session
// keeps no turn of it (keepTurn runs at completed or incomplete only), and
// a follow-up naming it is then refused as naming a failed response
// (refuseFailedSessionTurn), not as one made on another socket. Only such
// a turn's events are read here.
func (cs *clientStream) noteFailedTurnLocked(ev []byte) {
	if cs.req == nil || !keepsSessionTurn(cs.req) || gjson.GetBytes(ev, "type").Str != "response.failed" {
		return
	}
	id := gjson.GetBytes(ev, "response.id").Str
	if id == "" {
		id = cs.responseID
	}
	if id != "" {
		cs.req.memory.putFailed(strings.Clone(id))
	}
}

// openLocked writes the response.created that opens a stream whose first
// event would otherwise be its terminal one: OpenAI's streams always start
// with response.created, and the SDKs' stream helpers (openai-node's
// ResponseStream, openai-python's) refuse a stream that starts otherwise.
// Its Response is from's (the upstream's terminal Response), else the one the
// gateway writes, with the id the terminal event will carry.
func (cs *clientStream) openLocked(from gjson.Result) error {
	if cs.responseID == "" {
		if id := from.Get("id"); id.Type == gjson.String && id.Str != "" {
			cs.responseID = strings.Clone(id.Str)
		} else {
			cs.responseID = sent.NewResponseID()
		}
	}
	r := cs.response("in_progress")
	r.From = from
	b := cs.sent.AppendEvent(make([]byte, 0, 1024), "response.created", cs.seq, &r)
	if cs.resumable {
		b = cs.logLocked("response.created", b, false)
	}
	if err := cs.eventLocked("response.created", b, false); err != nil {
		return err
	}
	cs.seq++
	return nil
}

// renumber sets data's top-level sequence_number (seq, an alias into data)
// to cs.seq whatever the upstream put there (a number, a string, null, or
// nothing at all: README, "sequence_number runs from 0 without a gap"). The
// value is rewritten in place when the digits fill it exactly (always so
// when the upstream's numbering matches: the hot path allocates nothing),
// else in a copy; a missing member is inserted. data is a JSON object: the
// pump skips any other event as malformed.
func (cs *clientStream) renumber(data []byte, seq gjson.Result) []byte {
	var num [20]byte
	d := strconv.AppendInt(num[:0], cs.seq, 10)
	if seq.Raw == string(d) {
		return data
	}
	if !seq.Exists() {
		return cs.insertSeq(data, d)
	}
	i, n := seq.Index, len(seq.Raw)
	if i <= 0 || i+n > len(data) || string(data[i:i+n]) != seq.Raw {
		return data // not where the parser said: leave it
	}
	if len(d) == n {
		copy(data[i:], d)
		return data
	}
	b := append(cs.scratch[:0], data[:i]...)
	b = append(b, d...)
	b = append(b, data[i+n:]...)
	cs.scratch = b
	return b
}

// insertSeq returns the JSON object data with "sequence_number":d as its
// first member, in a copy.
func (cs *clientStream) insertSeq(data, d []byte) []byte {
	body := bytes.TrimLeft(data, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return data // not an object: nothing to number
	}
	open := len(data) - len(body) + 1 // just after the brace
	b := append(cs.scratch[:0], data[:open]...)
	b = append(b, `"sequence_number":`...)
	b = append(b, d...)
	if rest := bytes.TrimLeft(data[open:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
		b = append(b, ',')
	}
	b = append(b, data[open:]...)
	cs.scratch = b
	return b
}

// ---- what was sent ----

// track records what an event the client got said about the output; the
// first lifecycle event's Response names the client-visible response id.
func (cs *clientStream) track(f *eventFields) {
	if cs.sent.Track(&f.Fields) && cs.responseID == "" {
		if id := f.Response.Get("id"); id.Type == gjson.String {
			cs.responseID = strings.Clone(id.Str)
		}
	}
}

// ---- the terminal events the gateway writes ----

// terminalEvent renders a terminal event of the given type and status for
// e: a complete Response object (every field the spec's Response requires,
// null where unknown) with the output already streamed, numbered next.
func (cs *clientStream) terminalEvent(typ, status string, e *apierr.Error) []byte {
	r := cs.response(status)
	r.Error = e
	return cs.sent.AppendEvent(make([]byte, 0, 1024), typ, cs.seq, &r)
}

func (cs *clientStream) appendResponse(b []byte, status string, e *apierr.Error) []byte {
	r := cs.response(status)
	r.Error = e
	return cs.sent.AppendResponse(b, &r)
}

// response is the Response the gateway writes with the given status, besides
// what the client was sent: the client-visible id (a new one while none was
// shown), and the request's model and the fields a Response echoes, for
// those the upstream did not show.
func (cs *clientStream) response(status string) sent.Response {
	id := cs.responseID
	if id == "" {
		id = sent.NewResponseID()
	}
	return sent.Response{ID: id, CreatedAt: cs.createdAt, Status: status, Model: cs.req.model, Echo: cs.requestEcho()}
}

// requestEcho reads the request fields a Response object echoes.
func (cs *clientStream) requestEcho() translate.RequestEcho {
	if cs.req.chat != nil && cs.req.chat.err == nil {
		return cs.req.chat.info.Echo
	}
	return cs.bodyEcho
}

// writeGatewayTerminal writes e as the only event of a stream the gateway
// answers itself (no upstream served it): after the response.created that
// opens it (openLocked), with the id the gateway mints. Its events are
// logged as any Responses stream's (logLocked), so the id the client was
// shown can be read, resumed and its input items listed like any other.
// Nothing runs on after it: a client that left has nothing to detach from.
// Its response.created is the client's first event, timed from the
// request's arrival as any stream's is (eventLocked): the access line's
// ttfe and sluice_time_to_first_event_seconds include the streams that
// failed before any content.
func (s *Server) writeGatewayTerminal(req *clientRequest, sink eventSink, e *apierr.Error) {
	cs := &clientStream{s: s, req: req, surface: req.surface(), chat: req.ep.chat, sink: sink, wrote: true, createdAt: time.Now().Unix(),
		resumable: s.keepsStreamLog(req), bodyEcho: translate.EchoOf(req.body)}
	m := req.meta
	if m != nil {
		cs.start, cs.wrote = m.start, false
	}
	cs.abort(e)
	if m != nil && cs.wrote {
		m.mu.Lock()
		m.firstEvent()
		m.mu.Unlock()
	}
}

// ---- reading upstream events ----

// eventFields are the top-level fields of a Responses event, read in one
// pass. They alias the event's data.
type eventFields struct {
	sent.Fields     // what the client stream tracks (track), shared with the pump
	seq, errObj     gjson.Result
	object, message gjson.Result // an unwrapped error object's (bareErrorObject)
}

// scanEvent reads data's top-level fields; ok is false when data is not a
// JSON object. For events the gateway wrote or edited itself, whose nesting
// the pump's limit does not apply to.
func scanEvent(data []byte) (f eventFields, ok bool) {
	valid, object := f.scan(data, math.MaxInt32)
	return f, valid && object
}

// scan fills f from data's top-level fields in the one pass that also
// checks data is JSON nested at most maxDepth deep (jsonx.ScanTop).
func (f *eventFields) scan(data []byte, maxDepth int) (valid, object bool) {
	return scanMembers(data, maxDepth, func(key string, vs, ve int) {
		var dst *gjson.Result
		switch key {
		case "type":
			dst = &f.Type
		case "sequence_number":
			dst = &f.seq
		case "output_index":
			dst = &f.OutputIndex
		case "item_id":
			dst = &f.ItemID
		case "content_index":
			dst = &f.ContentIndex
		case "summary_index":
			dst = &f.SummaryIndex
		case "delta":
			dst = &f.Delta
		case "item":
			dst = &f.Item
		case "part":
			dst = &f.Part
		case "response":
			dst = &f.Response
		case "annotation":
			dst = &f.Annotation
		case "error":
			dst = &f.errObj
		case "object":
			dst = &f.object
		case "message":
			dst = &f.message
		default:
			return
		}
		*dst = scannedValue(data, vs, ve)
	})
}

// scanMembers checks data (jsonx.ScanTop) and calls member for each
// top-level member of an object with its key decoded and its value's
// bounds, for scannedValue. A later duplicate key wins.
func scanMembers(data []byte, maxDepth int, member func(key string, vs, ve int)) (valid, object bool) {
	return jsonx.ScanTop(data, maxDepth, func(key []byte, vs, ve int) {
		k := unsafe.String(unsafe.SliceData(key), len(key))
		if jsonx.HasBackslash(key) {
			var ok bool
			if k, ok = jsonx.Unescape(key); !ok {
				return
			}
		}
		member(k, vs, ve)
	})
}

// scannedValue is the gjson.Result of the valid JSON value data[vs:ve], as
// gjson would parse it (aliasing data, its offset in Index), built without
// parsing it again where that is simple.
func scannedValue(data []byte, vs, ve int) gjson.Result {
	raw := data[vs:ve]
	r := gjson.Result{Raw: unsafe.String(unsafe.SliceData(raw), len(raw)), Index: vs}
	switch c := raw[0]; {
	case c == '{' || c == '[':
		r.Type = gjson.JSON
	case c == '"' && !jsonx.HasBackslash(raw):
		r.Type, r.Str = gjson.String, r.Raw[1:len(r.Raw)-1]
	case c == 't':
		r.Type = gjson.True
	case c == 'f':
		r.Type = gjson.False
	case c == 'n':
		r.Type = gjson.Null
	case c >= '0' && c <= '9' && len(raw) < 16:
		if n, ok := smallUint(raw); ok {
			r.Type, r.Num = gjson.Number, float64(n)
			break
		}
		fallthrough
	default: // an escaped string, a negative or non-integer number
		r = parseJSON(raw)
		r.Index = vs
	}
	return r
}

// smallUint reads raw when it is only decimal digits (under 16 of them, so
// the float64 is exact).
func smallUint(raw []byte) (uint64, bool) {
	var n uint64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

func isTerminalType(typ string) bool {
	return typ == "response.completed" || typ == "response.failed" || typ == "response.incomplete"
}
