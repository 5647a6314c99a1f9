package streaminput

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/internal/translate"
	"github.com/sluice-gw/sluice/store"
)

// result captures the answer to a session's assembled request and fans it
// out to any number of readers: it is the http.ResponseWriter the dispatch
// handler writes to. It keeps up to limit bytes for readers that attach late
// or re-attach; older bytes are dropped (and only such readers lose out).
//
// It implements http.Flusher and FlushError (bytes are visible to readers as
// soon as they are written, so flushing has nothing left to do) and needs no
// Unwrap: it is the innermost writer.
type result struct {
	stream bool // the template streams: the answer must be SSE with a terminal event
	chat   bool // Chat Completions framing
	// For a synthesized response.failed whose readers got no lifecycle
	// event: the template's model and body, and when the answer started.
	model     string
	template  []byte
	createdAt int64
	limit     int64

	hdr http.Header // the handler's view, copied at WriteHeader

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	wroteHeader bool
	status      int
	header      http.Header
	base        int64 // offset of buf[0] in the whole answer
	buf         []byte
	size        int64 // total bytes written
	done        bool
	track       tracker
	comments    commentFilter // keeps the dispatch handler's SSE comments out of buf (Write)

	// tap, when set, sees every part of the answer as it is captured (its
	// status and header, each write, comments included, the end), under
	// mu: it must not block nor keep p. A session shares its answer with
	// other replicas through it (shared.go).
	tap func(kind byte, status int, header http.Header, p []byte)
}

func newResult(tpl template, limit int64, maxDepth int) *result {
	return &result{stream: tpl.stream, chat: tpl.chat, model: tpl.model, template: tpl.body, createdAt: time.Now().Unix(),
		limit: limit, hdr: http.Header{}, changed: make(chan struct{}), track: tracker{maxDepth: maxDepth}}
}

// Header implements http.ResponseWriter.
func (r *result) Header() http.Header { return r.hdr }

// WriteHeader implements http.ResponseWriter.
func (r *result) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeHeaderLocked(code)
}

func (r *result) writeHeaderLocked(code int) {
	if r.wroteHeader || r.done {
		return
	}
	if code < 200 { // 1xx: informational, not captured
		return
	}
	r.wroteHeader, r.status, r.header = true, code, r.hdr.Clone()
	r.header.Del("Content-Length")
	r.tapLocked(store.ResultHead, code, r.header, nil)
	r.notifyLocked()
}

// Write implements http.ResponseWriter.
func (r *result) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return 0, http.ErrHandlerTimeout
	}
	if !r.wroteHeader {
		if r.hdr.Get("Content-Type") == "" {
			r.hdr.Set("Content-Type", http.DetectContentType(p))
		}
		r.writeHeaderLocked(http.StatusOK)
	}
	if !r.isSSELocked() {
		r.appendLocked(p)
		return len(p), nil
	}
	// The dispatch handler's own keepalive comments (timeouts.keepalive,
	// on its schedule) are not part of the answer: each reader gets its
	// own from serve while nothing else comes, and a late reader's replay
	// gets none (gateway/streaminput/README.md, GET …/result: "a reader
	// that gets no byte for timeouts.keepalive gets a `: keepalive`
	// comment"). They still go to the tap: to a replica following the
	// answer they are the runner's sign of life while the upstream is
	// silent (follow's IdleTimeout of silence), and that replica's result
	// drops them in turn.
	if events := r.comments.strip(p); len(events) > 0 {
		r.recordLocked(events)
	}
	r.tapLocked(store.ResultData, 0, nil, p)
	return len(p), nil
}

// Flush implements http.Flusher.
func (r *result) Flush() {}

// FlushError is Flush for http.ResponseController.
func (r *result) FlushError() error { return nil }

// appendLocked adds p to the answer: recorded for its readers, and seen
// by the tap.
func (r *result) appendLocked(p []byte) {
	r.recordLocked(p)
	r.tapLocked(store.ResultData, 0, nil, p)
}

func (r *result) tapLocked(kind byte, status int, header http.Header, p []byte) {
	if r.tap != nil {
		r.tap(kind, status, header, p)
	}
}

// recordLocked adds p to the bytes the readers get.
func (r *result) recordLocked(p []byte) {
	if r.isSSELocked() {
		r.track.feed(p, r.size)
	}
	r.buf = append(r.buf, p...)
	r.size += int64(len(p))
	if over := int64(len(r.buf)) - r.limit; over > 0 && int64(len(r.buf)) > r.limit+r.limit/4 {
		// Readers may hold slices of the old array: copy, never shift in place.
		r.buf = append([]byte(nil), r.buf[over:]...)
		r.base += over
	}
	r.notifyLocked()
}

func (r *result) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *result) isSSELocked() bool {
	return r.wroteHeader && strings.HasPrefix(strings.ToLower(r.header.Get("Content-Type")), "text/event-stream")
}

// finish ends the answer after the dispatch handler returned (or panicked,
// or was cancelled). A streamed answer that lacks its terminal event gets
// one carrying e; an answer never begun becomes e itself (an SSE stream of
// one terminal event when the template streams, a JSON error otherwise).
func (r *result) finish(e *apierr.Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	switch {
	case !r.wroteHeader && r.stream:
		r.hdr = http.Header{}
		r.hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
		r.hdr.Set("Cache-Control", "no-cache")
		r.writeHeaderLocked(http.StatusOK)
		r.appendLocked(r.terminalLocked(e))
	case !r.wroteHeader:
		body, _ := e.MarshalJSON()
		r.hdr = http.Header{}
		r.hdr.Set("Content-Type", "application/json")
		status := e.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		r.writeHeaderLocked(status)
		r.appendLocked(body)
	case r.isSSELocked() && !r.track.terminal:
		if r.track.partial {
			r.appendLocked([]byte("\n\n"))
		}
		r.appendLocked(r.terminalLocked(e))
	}
	r.done = true
	r.tapLocked(store.ResultEnd, 0, nil, nil)
	r.notifyLocked()
}

// end marks the answer complete as it stands, without a terminal event of
// its own: a copy followed from another replica, whose runner already
// wrote whatever the answer needed.
func (r *result) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		r.done = true
		r.notifyLocked()
	}
}

// terminalLocked is the SSE terminal event for e after everything
// captured: response.failed numbered after the last event (opened by a
// response.created when it is the only one), or a Chat error chunk and
// [DONE].
func (r *result) terminalLocked(e *apierr.Error) []byte {
	seq := int64(0)
	if r.track.sawSeq {
		seq = r.track.lastSeq + 1
	}
	return r.terminalAtLocked(e, seq, r.track.out.Items)
}

// terminalAtLocked is the SSE terminal event for e numbered seq, whose
// output holds items. A response.failed names the response the readers
// were shown (its id, model and created_at), else a fresh one; as the first
// event of a stream (seq 0) it is opened by that response's
// response.created, as the gateway opens its own failures (README, "What
// it promises": the SDKs' stream helpers refuse a stream that starts with
// its terminal event). The answer of a deleted session (e is
// session_cancelled) ends as the gateway ends a response it cancels
// (DELETE /v1/responses/{id}): status cancelled, without an error.
func (r *result) terminalAtLocked(e *apierr.Error, seq int64, items []*sent.Item) []byte {
	var b []byte
	if r.chat {
		body, _ := e.MarshalJSON()
		b = append(b, "data: "...)
		b = append(b, body...)
		return append(b, "\n\ndata: [DONE]\n\n"...)
	}
	// No usage: the readers got none before the answer's terminal event.
	out := sent.Output{Base: r.track.out.Base, Items: items}
	ro := sent.Response{ID: r.track.responseID, Model: r.model, CreatedAt: r.createdAt, Echo: translate.EchoOf(r.template)}
	if ro.ID == "" {
		ro.ID = sent.NewResponseID()
	}
	if seq == 0 {
		ro.Status = "in_progress"
		b = append(b, "event: response.created\ndata: "...)
		b = out.AppendEvent(b, "response.created", seq, &ro)
		b = append(b, "\n\n"...)
		seq++
	}
	ro.Status, ro.Error = "failed", e
	if e.Code == CodeSessionCancelled {
		ro.Status, ro.Error = "cancelled", nil
	}
	b = append(b, "event: response.failed\ndata: "...)
	b = out.AppendEvent(b, "response.failed", seq, &ro)
	return append(b, "\n\n"...)
}

// state is a snapshot for status views.
func (r *result) state() (status string, httpStatus int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done && r.failedLocked():
		status = "failed"
	case r.done:
		status = "completed"
	case r.wroteHeader:
		status = "streaming"
	default:
		status = "pending"
	}
	return status, r.status, r.size
}

func (r *result) failedLocked() bool {
	if r.status/100 != 2 {
		return true
	}
	return r.isSSELocked() && r.track.failed
}

// serveOptions say how a reader attaches.
type serveOptions struct {
	startingAfter int64 // Responses streams: skip events with sequence_number <= this; -1: replay all
	extra         http.Header
	// lost is written (as a terminal event) when the reader fell behind
	// the replay buffer.
	lost func() *apierr.Error
	// keepAlive, when set, writes an SSE comment to a reader of an event
	// stream that got no byte for that long, between events (Options.KeepAlive).
	keepAlive time.Duration
}

// sseKeepAlive is the comment a quiet SSE reader gets (serveOptions.keepAlive).
var sseKeepAlive = []byte(": keepalive\n\n")

// serve copies the answer to w: what was written so far, then live bytes
// until the answer is complete or ctx ends. It returns the error to answer
// with, nothing written, when it cannot start: the bytes it needed were
// already dropped, or a Responses stream ended before the event after
// startingAfter.
func (r *result) serve(ctx context.Context, w http.ResponseWriter, o serveOptions) *apierr.Error {
	rc := http.NewResponseController(w)
	// Wait for the header, and for a reader that resumes a Responses
	// stream, for the first event it has not seen.
	var off int64
	for {
		r.mu.Lock()
		if r.wroteHeader {
			var ready bool
			var aerr *apierr.Error
			if off, ready, aerr = r.resumeAtLocked(o.startingAfter); aerr != nil {
				r.mu.Unlock()
				return aerr
			}
			if ready {
				break
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	if off < r.base {
		r.mu.Unlock()
		return &apierr.Error{Status: http.StatusGone, Type: apierr.TypeInvalidRequest, Code: CodeResultGone,
			Message: fmt.Sprintf("the answer is longer than the %d bytes kept for replay; its beginning is gone", r.limit)}
	}
	h := w.Header()
	for k, v := range r.header {
		h[k] = v
	}
	for k, v := range o.extra {
		h[k] = v
	}
	status, sseOut := r.status, r.isSSELocked()
	r.mu.Unlock()
	w.WriteHeader(status)
	_ = rc.Flush()

	// A reader of an event stream that gets nothing for keepAlive (the
	// upstream thinks, or the replica running the answer went quiet) gets
	// a comment, so that proxies between it and the gateway do not take
	// the connection for dead; only between events, where a comment is a
	// line of its own (betweenEvents).
	var quiet <-chan time.Time
	rearm := func() {}
	if sseOut && o.keepAlive > 0 {
		t := time.NewTimer(o.keepAlive)
		defer t.Stop()
		quiet, rearm = t.C, func() { t.Reset(o.keepAlive) }
	}
	var tail [2]byte // the last two bytes written: "\n\n" between events
	between := true  // nothing of an event written yet
	for {
		r.mu.Lock()
		if off < r.base {
			var t []byte
			if sseOut && o.lost != nil {
				// The reader fell behind the buffer: end its copy cleanly,
				// numbered after the last event it got. What was streamed
				// into the output after that is not known as of its copy:
				// the output is left empty rather than claim text the reader
				// never got.
				t = r.terminalAtLocked(o.lost(), r.track.seqAfter(off), nil)
			}
			r.mu.Unlock()
			if t != nil {
				_, _ = w.Write(append([]byte("\n\n"), t...))
				_ = rc.Flush()
			}
			return nil
		}
		data := r.buf[off-r.base:]
		done, ch := r.done, r.changed
		r.mu.Unlock()
		if len(data) > 0 {
			if _, err := w.Write(data); err != nil {
				return nil
			}
			_ = rc.Flush()
			off += int64(len(data))
			if len(data) == 1 {
				tail = [2]byte{tail[1], data[0]}
			} else {
				tail = [2]byte{data[len(data)-2], data[len(data)-1]}
			}
			between = tail == [2]byte{'\n', '\n'}
			rearm()
			continue
		}
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		case <-quiet:
			if between {
				if _, err := w.Write(sseKeepAlive); err != nil {
					return nil
				}
				_ = rc.Flush()
			}
			rearm()
		}
	}
}

// resumeAtLocked is where a reader that has every event numbered up to
// after starts: the answer's first byte without after (-1); just after
// that event in a Responses stream. starting_after counts Responses events
// only: for any other answer (a Chat stream, a JSON answer or error) the
// reader gets errStartingAfterNotApplicable rather than a silent replay of
// what it already has. A resume of the gateway's own streams
// (GET /v1/responses/{id}?stream=true&starting_after=N) sets the rule for
// an after the answer has not reached: while the answer is live the reader
// waits for it (not ready); once the answer has ended before it, the
// reader gets that resume's 400.
func (r *result) resumeAtLocked(after int64) (off int64, ready bool, aerr *apierr.Error) {
	switch {
	case after < 0:
		return 0, true, nil
	case r.chat || !r.isSSELocked():
		return 0, false, errStartingAfterNotApplicable()
	case r.track.sawSeq && r.track.lastSeq >= after:
		return r.track.offsetAfter(after), true, nil
	case !r.done:
		return 0, false, nil
	}
	return 0, false, apierr.PastLastEvent(r.track.responseID, after)
}

// errStartingAfterNotApplicable refuses ?starting_after=N for an answer that
// is not a Responses event stream: it has no sequence numbers to resume
// after (README "GET …/result").
func errStartingAfterNotApplicable() *apierr.Error {
	return apierr.Invalid("starting_after", apierr.CodeInvalidValue,
		"starting_after applies to Responses event streams only (a template for /v1/responses with \"stream\": true); "+
			"read this session's answer without it")
}

// commentFilter drops the comment lines (": …") of an event stream written
// in pieces of any size. A comment between events goes with the blank line
// that ends it, so that no empty event is left in its place; one inside an
// event goes alone, the event staying whole. Readers skip comments (the
// SSE spec), so what is left holds the same events.
type commentFilter struct {
	midLine  bool // the last byte seen did not end its line
	dropLine bool // the line being seen is dropped: a comment, or the blank line after comments between events
	inEvent  bool // a field line of an unfinished event was kept
	dropNext bool // the comments dropped since the last event ended were between events: the blank line that ends them goes too
}

// strip returns p without its comment lines: p itself when it has none.
func (f *commentFilter) strip(p []byte) []byte {
	var kept []byte
	dropped := false
	for rest := p; len(rest) > 0; {
		n := len(rest)
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			n = i + 1
		}
		line := rest[:n]
		rest = rest[n:]
		if !f.midLine {
			switch {
			case line[0] == ':':
				f.dropLine = true
				f.dropNext = f.dropNext || !f.inEvent
			case line[0] == '\n' || line[0] == '\r': // a blank line ends the event
				f.dropLine, f.inEvent, f.dropNext = f.dropNext, false, false
			default:
				f.dropLine, f.inEvent, f.dropNext = false, true, false
			}
		}
		drop := f.dropLine
		f.midLine = line[len(line)-1] != '\n'
		switch {
		case drop && !dropped:
			kept, dropped = append([]byte(nil), p[:len(p)-len(rest)-n]...), true
		case !drop && dropped:
			kept = append(kept, line...)
		}
	}
	if !dropped {
		return p
	}
	return kept
}

// tracker follows the SSE events of the answer as they are written: it
// knows whether a terminal event was seen, the last sequence number and
// response id (to number a synthesized terminal event), and where each
// Responses event ends (for starting_after).
type tracker struct {
	line     []byte // the unfinished line
	data     []byte // data lines of the current event
	partial  bool   // bytes of an unfinished event are pending
	terminal bool
	failed   bool // the terminal event reports a failure
	lastSeq  int64
	sawSeq   bool

	responseID string
	out        sent.Output // what a Responses answer's readers were sent, until its terminal event
	ends       []eventEnd
	maxDepth   int // events nested deeper are not parsed (the gateway refuses them before)
}

type eventEnd struct {
	seq int64
	end int64 // offset just after the event's blank line
}

func (t *tracker) feed(p []byte, off int64) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.line = append(t.line, p...)
			t.partial = true
			return
		}
		line := p[:i]
		if len(t.line) > 0 {
			line = append(t.line, line...)
			t.line = t.line[:0]
		}
		off += int64(i + 1)
		p = p[i+1:]
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			t.dispatch(off)
			continue
		}
		t.partial = true
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(t.data) > 0 {
				t.data = append(t.data, '\n')
			}
			t.data = append(t.data, bytes.TrimPrefix(v, []byte(" "))...)
		}
	}
}

func (t *tracker) dispatch(end int64) {
	data := t.data
	t.data, t.partial = t.data[:0], false
	if len(data) == 0 {
		return
	}
	if string(data) == "[DONE]" {
		t.terminal = true
		return
	}
	if jsonx.CheckDepth(data, t.maxDepth) != nil {
		return // not an event this tracker can read (nor one the gateway emits)
	}
	obj := gjson.ParseBytes(data)
	if obj.Get("error").Exists() {
		t.failed = true // a Chat error chunk; [DONE] follows
	}
	typ := obj.Get("type").Str
	switch typ {
	case "response.completed", "response.incomplete":
		t.terminal = true
	case "response.failed":
		t.terminal, t.failed = true, true
	}
	switch {
	case t.terminal:
		t.out.Items = nil // no failure of this answer is written any more: its text is not needed
	case strings.HasPrefix(typ, "response."): // a Responses event (not a Chat chunk)
		// What it said about the output its readers were sent, by the rules
		// the gateway's client stream follows too (internal/sent): the
		// response.failed a session writes after the answer began renders
		// it (terminalAtLocked), so that it agrees with what came before.
		var f sent.Fields
		f.Read(obj)
		t.out.Track(&f)
	}
	if id := obj.Get("response.id"); id.Type == gjson.String && t.responseID == "" {
		t.responseID = id.Str
	}
	if seq := obj.Get("sequence_number"); seq.Type == gjson.Number {
		t.lastSeq, t.sawSeq = seq.Int(), true
		t.ends = append(t.ends, eventEnd{seq: seq.Int(), end: end})
	}
}

// seqAfter is the sequence number that follows the last event ending at or
// before off (0 if none).
func (t *tracker) seqAfter(off int64) int64 {
	seq := int64(0)
	for _, e := range t.ends {
		if e.end > off {
			break
		}
		seq = e.seq + 1
	}
	return seq
}

// offsetAfter is where a reader that has seen every event numbered up to
// seq resumes: just after the last such event (0 if none).
func (t *tracker) offsetAfter(seq int64) int64 {
	off := int64(0)
	for _, e := range t.ends {
		if e.seq > seq {
			break
		}
		off = e.end
	}
	return off
}

func parseStartingAfter(s string) (int64, *apierr.Error) {
	if s == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, apierr.Invalid("starting_after", apierr.CodeInvalidType, "starting_after must be a non-negative integer")
	}
	return n, nil
}
