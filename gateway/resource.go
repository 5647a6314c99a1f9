package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/internal/translate"
	"github.com/sluice-gw/sluice/store"
)

// The Responses resource API for what the gateway serves (README "The
// responses resource API"): GET /v1/responses/{id} (with ?stream=true, a
// resume), GET …/input_items, DELETE, POST …/cancel and background: true.
// A response whose log the gateway holds (in memory, or in the store with
// streams.durable) is answered from it — it is exactly what the client was
// sent, continued streams and Chat upstreams included. Any other response
// is asked of the upstream that owns it (its anchor), like a follow-up.

// ---- the client stream's side ----

// logLocked adds an event the client is sent (or would be, detached) to
// the stream's log, opening the log at the first event that names the
// response, and returns the event as logged, which is what the client is
// sent too: a background response's Response objects say background: true
// there, as its create and retrieve answers do (withBackground), though the
// upstream never saw background (process takes it out).
func (cs *clientStream) logLocked(name string, data []byte, terminal bool) []byte {
	if cs.background {
		data = withBackgroundEvent(data)
	}
	if cs.rlog == nil {
		id := cs.responseID
		if id == "" {
			id = gjson.GetBytes(data, "response.id").Str
		}
		if id == "" {
			cs.resumable = false // no id to resume by
			return data
		}
		cs.rlog = cs.s.logs.open(strings.Clone(id), cs.req.clientKeyHash, cs.background, cs.req.storeFalse, inputItems(cs.req.body))
		cs.rlog.mu.Lock()
		cs.rlog.cancel, cs.rlog.snapshot = cs.abandon, cs.snapshot
		cs.rlog.mu.Unlock()
		if cs.req.onLog != nil {
			// The Response the log opened with, copied now: a background
			// create answers with it, and by the time its handler runs a
			// fast upstream may have finished the response.
			var opened []byte
			if r := gjson.GetBytes(data, "response"); r.IsObject() && !terminal {
				resp := cs.response("in_progress")
				resp.ID = cs.rlog.id
				resp.FromUpstream("response.in_progress", r) // its own status, queued or in progress
				opened = cs.sent.AppendResponse(nil, &resp)
			}
			defer cs.req.onLog(cs.rlog, opened) // after the first event is in it
		}
	}
	cs.rlog.append(cs.seq, logName(name), data, terminal)
	return data
}

// withBackgroundEvent returns event with its Response (a lifecycle or
// terminal event's "response") saying background: true; any other event
// comes back as it is.
func withBackgroundEvent(event []byte) []byte {
	resp := gjson.GetBytes(event, "response")
	if !resp.IsObject() || resp.Get("background").Type == gjson.True {
		return event
	}
	if out, err := sjson.SetRawBytes(event, "response", withBackground([]byte(resp.Raw), true)); err == nil {
		return out
	}
	return event
}

// logName is name as a log may keep it: without an SSE event line, the
// pump's name is the event's type read in place from a buffer the
// upstream's reader reuses.
func logName(name string) string {
	if n, ok := eventNames[name]; ok {
		return n
	}
	return strings.Clone(name)
}

// eventNames interns the Responses event names (no copy per event).
var eventNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"response.created", "response.in_progress", "response.queued",
		"response.output_item.added", "response.output_item.done", "response.content_part.added", "response.content_part.done",
		"response.output_text.delta", "response.output_text.done", "response.output_text.annotation.added",
		"response.refusal.delta", "response.refusal.done",
		"response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
		"response.reasoning_text.delta", "response.reasoning_text.done",
		"response.completed", "response.failed", "response.incomplete", "error"} {
		m[n] = n
	}
	return m
}()

// snapshot renders the Response as the client has it so far: while it
// runs, the items still being written are in_progress, and the Response
// keeps the status its stream gave it, queued until the upstream starts it
// (the status the create answered, as OpenAI's retrieve does).
func (cs *clientStream) snapshot() []byte {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	status := "in_progress"
	switch {
	case cs.ended:
		status = "completed"
	case cs.rlog != nil && cs.rlog.isQueued():
		status = "queued"
	}
	return cs.appendResponse(nil, status, nil)
}

// detachLocked keeps the work going after the client left: a background
// request to its end, any other stream for its grace, renewed while a
// resumer follows it, here or on another replica through the store.
func (cs *clientStream) detachLocked() {
	cs.detached = true
	if cs.ka != nil {
		cs.ka.Stop()
	}
	if cs.background {
		return
	}
	l, grace, abandon := cs.rlog, cs.detach, cs.abandon
	var check func()
	check = func() {
		l.mu.Lock()
		ended, followed := l.ended, l.followers > 0
		l.mu.Unlock()
		if ended {
			return
		}
		if !followed { // read off the lock: a store round trip
			followed = l.hub.followedThroughStore(l)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case l.ended:
		case followed:
			l.detachTimer = time.AfterFunc(grace, check)
		case abandon != nil:
			abandon(errClientGone)
		}
	}
	l.mu.Lock()
	l.detachTimer = time.AfterFunc(grace, check)
	l.mu.Unlock()
}

// endLogLocked ends a log whose stream stopped without its terminal event
// (cancelled, or abandoned after its client left): a resumer gets a
// terminal event, never a stream that just stops. A client still reading
// a stream cancelled under it (DELETE, here or on another replica) gets
// the same terminal event.
func (cs *clientStream) endLogLocked() {
	status, e := "failed", apierr.StreamIncomplete("the stream stopped before it ended: its client went away and nobody resumed it in time; send the request again")
	cancelled := errors.Is(context.Cause(cs.ctx), errCancelled)
	if cancelled {
		status, e = "cancelled", nil
	}
	cs.seq = max(cs.seq, cs.rlog.next()) // an event logged but not delivered keeps its number
	ev := cs.logLocked("response.failed", cs.terminalEvent("response.failed", status, e), true)
	if cancelled && !cs.gone {
		_ = cs.eventLocked("response.failed", ev, false) // a failed write marks the client gone
	}
	cs.seq++
}

// answeredJSON records a Responses answer sent as JSON, for GET and
// input_items.
func (h *streamLogs) answeredJSON(req *clientRequest, body []byte) {
	if req.storeFalse {
		return // not kept (README "Privacy")
	}
	root := gjson.ParseBytes(body)
	id := root.Get("id")
	if id.Type != gjson.String || root.Get("object").Str != "response" {
		return
	}
	h.answered(id.Str, req.clientKeyHash, inputItems(req.body), body)
}

// inputItems is the request's input as a list of items (a string input is
// one user message).
func inputItems(body []byte) []byte {
	in := gjson.GetBytes(body, "input")
	switch {
	case in.IsArray():
		return []byte(in.Raw)
	case in.Type == gjson.String:
		b := []byte(`[{"type":"message","role":"user","content":[{"type":"input_text","text":`)
		b = jsonx.AppendQuote(b, in.Str)
		return append(b, `}]}]`...)
	}
	return []byte("[]")
}

// ---- background requests ----

// runBackground answers a background: true request at once with its
// Response (in_progress) and runs it to its end with nobody reading: the
// upstream is asked for a stream, whose events go to the log only. A
// failure before the stream began is answered as usual.
func (s *Server) runBackground(ctx context.Context, w http.ResponseWriter, req *clientRequest, start time.Time) {
	body, err := sjson.SetBytes(req.body, "stream", true) // background itself is taken out by process
	if err != nil {
		apierr.Invalid("", apierr.CodeInvalidJSON, "the request could not be read: %v", err).Write(w)
		return
	}
	// A background run holds no connection, so max_connections does not
	// bound it: it is counted against the same number.
	if s.bgCount.Add(1) > int64(s.opts.MaxConnections) {
		s.bgCount.Add(-1)
		apierr.Overloaded(5*time.Second, "too many background responses are running (%d, limits.max_connections); retry later", s.opts.MaxConnections).Write(w)
		return
	}
	req.body, req.stream, req.unread = body, true, true
	type openedLog struct {
		log  *streamLog
		resp []byte // the Response the log opened with; nil when its first event had none
	}
	opened := make(chan openedLog, 1)
	req.onLog = func(l *streamLog, resp []byte) { opened <- openedLog{l, resp} }
	out := &backgroundResponder{answer: make(chan func(http.ResponseWriter), 1)}
	s.bgRuns.Add(1)
	go func() {
		defer s.bgRuns.Done()
		defer s.bgCount.Add(-1)
		s.process(withoutClientEOF(context.WithoutCancel(ctx)), out, req, start)
		s.backgroundEnded(req.meta) // its end line (accesslog.go): settled by now
	}()
	// detached: the handler answers without the run's outcome, so the run
	// logs its own end line (README "Access log").
	detached := func() {
		if m := req.meta; m != nil {
			m.mu.Lock()
			m.bgDetached = true
			m.mu.Unlock()
		}
	}
	select {
	case o := <-opened:
		// The answer is the response as it opened, queued or in progress,
		// taken on the run's goroutine as the log opened (logLocked).
		resp := o.resp
		if resp == nil {
			resp, _ = o.log.response()
		}
		detached()
		o.log.save()
		resp = withBackground(resp, true)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
		_, _ = w.Write(resp)
	case write := <-out.answer:
		write(w)
	case <-ctx.Done():
		detached()
	}
}

// backgroundResponder is a background request's responder: its stream is
// only logged; an answer before the stream (an error) goes to the waiting
// handler.
type backgroundResponder struct {
	answer chan func(http.ResponseWriter)
}

func (b *backgroundResponder) fail(_ *clientRequest, e *apierr.Error, _ failKind) {
	select {
	case b.answer <- func(w http.ResponseWriter) { e.Write(w) }:
	default:
	}
}

func (b *backgroundResponder) relay(_ *clientRequest, status int, header http.Header, body []byte) {
	select {
	case b.answer <- func(w http.ResponseWriter) {
		copyResponseHeaders(w.Header(), header)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}:
	default:
	}
}

func (b *backgroundResponder) commit(http.Header) eventSink { return discardSink{} }

// discardSink is the sink of a stream nobody reads.
type discardSink struct{}

func (discardSink) Event(string, []byte) error    { return nil }
func (discardSink) Done() error                   { return nil }
func (discardSink) KeepAlive(time.Duration) error { return nil }

// ---- the handlers ----

// lookupStoredLog is a log found in the store (written before a restart,
// or by another replica): found is false when the store has none of the
// caller's. A store that cannot be read is not an answer that no log
// exists: the response may be running on another replica, and a client
// takes a 404 as final. That read is refused with the 503 and Retry-After
// of any resume the store cannot serve (README "Scale-out with Redis"),
// the same on HTTP and on a WebSocket.
func (s *Server) lookupStoredLog(ctx context.Context, id, owner string) (rec store.StreamLog, found bool, aerr *apierr.Error) {
	st := s.logs.opts.Store
	if st == nil {
		return store.StreamLog{}, false, nil
	}
	rec, err := st.GetStreamLog(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		return store.StreamLog{}, false, nil
	case err != nil:
		s.log.Warn("reading a stream log failed", "response_id", LogID(id), "error", err)
		return store.StreamLog{}, false, storeUnreadable(err)
	case rec.Owner != owner:
		return store.StreamLog{}, false, nil
	}
	return rec, true, nil
}

// storeUnreadable is the answer to a resume or retrieve whose record the
// store could not read: the answer a follow-up gets then (README "Scale-out
// with Redis": "owner lookup failed", 503, Retry-After: 2, or no retry for
// a store damaged for good; err says which).
func storeUnreadable(err error) *apierr.Error { return ownerLookupFailed("the response", err) }

const (
	// anchorFreshFor is how young a response's anchor is for its log,
	// missing from a shared store, to be awaited (lateStoredLog): its
	// replica writes the log's first record as the log opens, so a log
	// still missing after this long (replicas' clocks apart included) is
	// not coming.
	anchorFreshFor = 5 * time.Second
	// storedLogWait bounds that wait, and storedLogPollEvery paces it.
	storedLogWait      = time.Second
	storedLogPollEvery = 50 * time.Millisecond
)

// lateStoredLog is lookupStoredLog for a response whose owner is known
// (askOwner) and whose log the store did not have: with durable logs in a
// store replicas share, a response anchored under the caller's key
// moments ago may be one another replica has just opened, and writes the
// log of at once but not synchronously (README "Durable"). Its log is
// looked for every storedLogPollEvery for up to storedLogWait, so that a
// client reconnecting to another replica right after response.created
// follows the live stream rather than being sent to the owner upstream,
// which never heard of a stream the gateway keeps. A response of another
// key is never awaited: the wait tells nothing about it. A store that
// cannot be read meanwhile is lookupStoredLog's 503: the log may be there.
func (s *Server) lateStoredLog(ctx context.Context, id, owner string) (store.StreamLog, bool, *apierr.Error) {
	if s.logs == nil || s.logs.shared() == nil || s.cont == nil {
		return store.StreamLog{}, false, nil
	}
	a, err := s.cont.store.GetAnchor(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		return store.StreamLog{}, false, nil
	case err != nil:
		s.log.Warn("reading a response's anchor failed", "response_id", LogID(id), "error", err)
		return store.StreamLog{}, false, storeUnreadable(err)
	case a.ClientKeyHash != owner || s.cont.now().Sub(a.CreatedAt) >= anchorFreshFor:
		return store.StreamLog{}, false, nil
	}
	deadline := time.NewTimer(storedLogWait)
	defer deadline.Stop()
	poll := time.NewTicker(storedLogPollEvery)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return store.StreamLog{}, false, nil
		case <-deadline.C:
			return store.StreamLog{}, false, nil
		case <-poll.C:
		}
		_, err := s.logs.opts.Store.GetStreamLog(ctx, id)
		if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrStreamLogDeleted) {
			// There (or deleted, or failing): read as any stored log is.
			return s.lookupStoredLog(ctx, id, owner)
		}
	}
}

// resourceID is the {response_id} of a resource call; false when it is
// longer than any id the gateway keeps, answered then with the same 400 as
// such a previous_response_id (it can never be found, and a retry does not
// help).
func resourceID(w http.ResponseWriter, ps httprouter.Params) (string, bool) {
	id := ps.ByName("response_id")
	if aerr := overlongID("response_id", id); aerr != nil {
		aerr.Write(w)
		return "", false
	}
	return id, true
}

func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	id, ok := resourceID(w, ps)
	if !ok {
		return
	}
	owner := clientkey.Hash(r.Header)
	q := r.URL.Query()
	stream := q.Get("stream") == "true"
	if !stream {
		var aerr *apierr.Error
		if stream, aerr = s.streamInBody(w, r); aerr != nil {
			aerr.Write(w)
			return
		}
	}
	after := int64(-1)
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || !validStartingAfter(n) {
			badStartingAfter(v).Write(w)
			return
		}
		after = n
	}
	if s.logs != nil {
		if l := s.logs.current(r.Context(), id, owner); l != nil {
			if stream {
				if aerr := l.unstreamable(after); aerr != nil {
					aerr.Write(w)
					return
				}
				s.resumeSSE(w, func(out resumeSink) error { return l.follow(r.Context(), after, out, s.opts.KeepAlive) })
				return
			}
			resp, _ := l.response()
			writeResponse(w, id, resp, l.background)
			return
		}
		rec, found, aerr := s.lookupStoredLog(r.Context(), id, owner)
		if aerr != nil {
			aerr.Write(w)
			return
		}
		if found {
			s.getStored(w, r, rec, stream, after)
			return
		}
	}
	if stream && q.Get("stream") == "" { // the owner gets it in the query, where the API documents it
		q.Set("stream", "true")
		r.URL.RawQuery = q.Encode()
	}
	s.askOwner(w, r, id, owner, ownerCall{stream: stream, after: after,
		stored: func(rec store.StreamLog) { s.getStored(w, r, rec, stream, after) }})
}

// getStored answers a GET from a log found in the store: a resume follows
// it, else the Response as it stands.
func (s *Server) getStored(w http.ResponseWriter, r *http.Request, rec store.StreamLog, stream bool, after int64) {
	if stream {
		if aerr := s.logs.storedUnstreamable(r.Context(), rec, after); aerr != nil {
			aerr.Write(w)
			return
		}
		s.resumeSSE(w, func(out resumeSink) error { return s.followStored(r.Context(), rec, after, out) })
		return
	}
	resp := rec.Response
	switch {
	case s.logs.abandoned(rec, time.Time{}, s.opts.IdleTimeout):
		resp = s.logs.abandonedStoredResponse(r.Context(), rec)
	case !rec.Ended:
		resp = s.logs.runningStoredResponse(r.Context(), rec)
	}
	writeResponse(w, rec.ResponseID, resp, rec.Background)
}

// resumeSSE answers a resume as an SSE stream. Its 200 is sent with the
// first event or keepalive: a resume of a running stream whose
// starting_after turns out past its end, with nothing sent yet, gets the
// 400 a resume of an ended one gets (README "Resuming a stream").
func (s *Server) resumeSSE(w http.ResponseWriter, follow func(out resumeSink) error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	sink := newSSESink(w, s.opts.ClientWriteTimeout)
	sink.auto = false // follow flushes once per batch of logged events
	s.metrics.resumes.WithLabelValues("sse").Inc()
	out := &writeNotingSink{resumeSink: sink, metrics: s.metrics}
	var aerr *apierr.Error
	switch err := follow(out); {
	case errors.As(err, &aerr) && !out.wrote:
		h.Del("Cache-Control")
		h.Del("X-Accel-Buffering")
		aerr.Write(w)
	case err == nil && !out.wrote:
		w.WriteHeader(http.StatusOK) // an empty stream: nothing follows starting_after
	}
}

// writeNotingSink notes whether anything was written through it (and so
// whether the answer's status is committed), and counts the keepalives it
// writes in sluice_keepalives_total under the surface of the Responses
// stream it resumes, as that stream's own keepalives are counted.
type writeNotingSink struct {
	resumeSink
	metrics *metrics
	wrote   bool
}

func (k *writeNotingSink) Event(name string, data []byte) error {
	k.wrote = true
	return k.resumeSink.Event(name, data)
}

func (k *writeNotingSink) KeepAlive(every time.Duration) error {
	k.wrote = true
	if err := k.resumeSink.KeepAlive(every); err != nil {
		return err
	}
	k.metrics.keptAlive(hostabi.SurfaceResponsesStream)
	return nil
}

// streamInBody reads the {"stream":true} that some clients (the official
// SDKs' GetStreaming) send as the body of the GET instead of the query. The
// body is read as any request body is (readBody: within read_body, 408
// beyond); one that is not JSON asks for no stream.
func (s *Server) streamInBody(w http.ResponseWriter, r *http.Request) (bool, *apierr.Error) {
	if r.Body == nil || r.ContentLength == 0 {
		return false, nil
	}
	b, aerr := s.readBody(w, r)
	if aerr != nil {
		return false, aerr
	}
	return gjson.GetBytes(b, "stream").Type == gjson.True, nil
}

func withBackground(resp []byte, background bool) []byte {
	if !background {
		return resp
	}
	if out, err := sjson.SetBytes(resp, "background", true); err == nil {
		return out
	}
	return resp
}

// writeResponse answers a retrieve or cancel with the Response a stream's
// log holds. A log without one (a stream whose terminal event carried
// none, recorded before the gateway filled it in) gets an OpenAI error,
// never a 200 with an empty body a client cannot decode.
func writeResponse(w http.ResponseWriter, id string, resp []byte, background bool) {
	if len(bytes.TrimSpace(resp)) == 0 {
		(&apierr.Error{Status: http.StatusBadGateway, Type: apierr.TypeServer, Code: apierr.CodeUpstreamError,
			Message: fmt.Sprintf("response '%s' has no Response: its upstream ended it without one", id)}).Write(w)
		return
	}
	writeRaw(w, http.StatusOK, withBackground(resp, background))
}

// writeRaw writes a JSON answer: an owner's (relayOwner), a Response a log
// holds, an input item list.
// Bytes that are not UTF-8 inside its strings become U+FFFD (validText):
// JSON is UTF-8 (RFC 8259), as the POST path relays it (relayJSON).
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	body = validText(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) handleInputItems(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	id, ok := resourceID(w, ps)
	if !ok {
		return
	}
	owner := clientkey.Hash(r.Header)
	var input []byte
	found := false
	if s.logs != nil {
		if l := s.logs.current(r.Context(), id, owner); l != nil {
			input, found = l.input, true
		} else {
			rec, ok, aerr := s.lookupStoredLog(r.Context(), id, owner)
			if aerr != nil {
				aerr.Write(w)
				return
			}
			if ok {
				input, found = rec.Input, true
			}
		}
	}
	if !found {
		s.askOwner(w, r, id, owner, ownerCall{suffix: "/input_items",
			stored: func(rec store.StreamLog) { writeInputItems(w, r, id, rec.Input) }})
		return
	}
	writeInputItems(w, r, id, input)
}

// writeInputItems answers input_items with the request's input items.
func writeInputItems(w http.ResponseWriter, r *http.Request, id string, input []byte) {
	list, aerr := inputItemList(id, input, r.URL.Query())
	if aerr != nil {
		aerr.Write(w)
		return
	}
	writeRaw(w, http.StatusOK, list)
}

// inputItemList renders the spec's ResponseItemList of the input items:
// ids given to items without one, order (desc by default), after, limit.
func inputItemList(id string, input []byte, q map[string][]string) ([]byte, *apierr.Error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	limit := 20
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return nil, apierr.Invalid("limit", apierr.CodeInvalidValue, "limit must be between 1 and 100, got %q", v)
		}
		limit = n
	}
	order := get("order")
	switch order {
	case "":
		order = "desc"
	case "asc", "desc":
	default:
		return nil, apierr.Invalid("order", apierr.CodeInvalidValue, "order must be asc or desc, got %q", order)
	}
	var items []string
	var ids []string
	k := 0
	gjson.ParseBytes(input).ForEach(func(_, it gjson.Result) bool {
		raw := it.Raw
		itemID := it.Get("id").Str
		if itemID == "" {
			itemID = fmt.Sprintf("msg_%s_%d", strings.TrimPrefix(id, "resp_"), k)
			if out, err := sjson.Set(raw, "id", itemID); err == nil {
				raw = out
			}
		}
		if it.Get("type").Str == "" { // an easy input message: the spec's item has a type
			if out, err := sjson.Set(raw, "type", "message"); err == nil {
				raw = out
			}
		}
		typ := it.Get("type").Str
		if typ == "message" || typ == "" {
			// An assistant message is the spec's output message: its text
			// parts are output_text, with every member the spec requires of
			// its parts, as in any Response the gateway renders
			// (sent.CompleteContent).
			assistant := it.Get("role").Str == "assistant"
			if c := gjson.Get(raw, "content"); c.Type == gjson.String { // string content: one text part
				part := []byte(`[{"type":"input_text","text":`)
				if assistant {
					part = []byte(`[{"type":"output_text","text":`)
				}
				part = jsonx.AppendQuote(part, c.Str)
				if out, err := sjson.SetRaw(raw, "content", string(append(part, "}]"...))); err == nil {
					raw = out
				}
			}
			if assistant {
				raw = string(sent.CompleteContent([]byte(raw)))
			}
		}
		// The spec's message and function call items carry a status.
		if (typ == "message" || typ == "" || typ == "function_call" || typ == "function_call_output") && !gjson.Get(raw, "status").Exists() {
			if out, err := sjson.Set(raw, "status", "completed"); err == nil {
				raw = out
			}
		}
		items, ids = append(items, raw), append(ids, itemID)
		k++
		return true
	})
	if order == "desc" {
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
			ids[i], ids[j] = ids[j], ids[i]
		}
	}
	if after := get("after"); after != "" {
		i := slices.Index(ids, after)
		if i < 0 {
			// A cursor naming no item of the list (stale, mistyped, another
			// response's) is refused: listing from the start again would
			// hand a paging client the items it has a second time.
			return nil, apierr.Invalid("after", apierr.CodeInvalidValue, "after names no input item of this response: %q", after)
		}
		items, ids = items[i+1:], ids[i+1:]
	}
	more := len(items) > limit
	if more {
		items, ids = items[:limit], ids[:limit]
	}
	b := []byte(`{"object":"list","data":[`)
	b = append(b, strings.Join(items, ",")...)
	b = append(b, `],"has_more":`...)
	b = strconv.AppendBool(b, more)
	b = append(b, `,"first_id":`...)
	if len(ids) > 0 {
		b = jsonx.AppendQuote(b, ids[0])
		b = append(b, `,"last_id":`...)
		b = jsonx.AppendQuote(b, ids[len(ids)-1])
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	return append(b, '}'), nil
}

func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	id, ok := resourceID(w, ps)
	if !ok {
		return
	}
	owner := clientkey.Hash(r.Header)
	if s.logs != nil {
		l := s.logs.current(r.Context(), id, owner)
		stored := false
		if l == nil { // the store is asked only for a log this process does not hold
			// A store that cannot be read is its 503, not "no such
			// response": a 404 would tell the client the response is gone
			// while its log and conversation are kept (lookupStoredLog).
			var aerr *apierr.Error
			if _, stored, aerr = s.lookupStoredLog(r.Context(), id, owner); aerr != nil {
				aerr.Write(w)
				return
			}
		}
		if l != nil || stored {
			if l != nil && l.stop(errCancelled) { // nothing runs for a deleted response
				// Its turn is written before its terminal event: once the
				// stream ended, deleting the turn is final.
				select {
				case <-l.done:
				case <-time.After(cancelWait):
				case <-r.Context().Done():
				}
			}
			s.deleteLogged(w, r, id, owner)
			return
		}
	}
	if s.deleteKeptTurn(w, r, id, owner) {
		return
	}
	s.askOwner(w, r, id, owner, ownerCall{stored: func(store.StreamLog) { s.deleteLogged(w, r, id, owner) }})
}

// ownerDeleteTimeout bounds the DELETE a response's owner upstream is sent
// after the gateway deleted its own copy: the client's answer waits for it
// no longer.
const ownerDeleteTimeout = 5 * time.Second

// deleteLogged deletes a response whose log the gateway keeps (here, or in
// the store), with its conversation items (README "Privacy") and its
// anchor, and then asks the Responses upstream that owns it to delete its
// copy too. A replica running it learns of the delete from the store (the
// tombstone a shared store keeps) and stops it there. The items go first:
// when the store cannot delete them, the answer says so and the log and
// anchor stay, so the client's retry finds the response again.
func (s *Server) deleteLogged(w http.ResponseWriter, r *http.Request, id, keyHash string) {
	// The client leaving must not leave half a deletion behind.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), anchorWriteTimeout)
	defer cancel()
	var anchor store.Anchor
	owned, turnKept := false, false
	if s.cont != nil {
		var err error
		if anchor, owned, err = s.cont.ownedAnchor(ctx, id, keyHash); err != nil { // before forget drops it
			s.anchorUnreadable(w, id, err)
			return
		}
	}
	if owned && s.pool.Get(anchor.Upstream) == nil {
		turnKept = s.turnKept(ctx, id) // before deleteTurn: what the removed owner was (deleteAtOwner)
	}
	if !s.deleteTurn(ctx, w, id) {
		return
	}
	s.logs.remove(ctx, id)
	if s.cont != nil {
		s.cont.forget(ctx, id)
	}
	if owned {
		s.deleteAtOwners(r, id, anchor, turnKept)
	}
	writeDeleted(w, id)
}

// anchorUnreadable answers a DELETE whose anchor (which upstream owns the
// response) the store could not read, err, before anything is deleted: the
// owner's copy would otherwise stay with nobody told.
func (s *Server) anchorUnreadable(w http.ResponseWriter, id string, err error) {
	s.log.Error("reading a response's anchor failed", "response_id", LogID(id), "error", err)
	storeUnavailable(err, "reading which upstream owns the response failed").Write(w)
}

// turnKept reports whether the store holds conversation items of the
// response id (false too when it cannot be read).
func (s *Server) turnKept(ctx context.Context, id string) bool {
	if s.convs.durable == nil {
		return false
	}
	_, err := s.convs.durable.GetTurn(ctx, id)
	return err == nil
}

// deleteKeptTurn deletes the conversation items kept for the caller's
// response whose log is gone (older than streams.resume_window, or
// never logged), reporting whether it answered. A Chat upstream keeps
// nothing to delete, so the gateway answers for it; a Responses upstream's
// response is deleted by the owner too, whose answer askOwner passes on.
func (s *Server) deleteKeptTurn(w http.ResponseWriter, r *http.Request, id, keyHash string) bool {
	if s.cont == nil || s.convs.durable == nil {
		return false
	}
	anchor, owned, err := s.cont.ownedAnchor(r.Context(), id, keyHash)
	if err != nil {
		s.anchorUnreadable(w, id, err)
		return true
	}
	if !owned {
		return false
	}
	switch _, err = s.convs.durable.GetTurn(r.Context(), id); {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		return false // none kept: the owner answers, as before
	case errors.Is(err, store.ErrCorrupt): // kept, but undecodable: deleted all the same
	case err != nil:
		// Not "none kept": a Chat upstream's response would be a 404
		// while its conversation stays (storeUnavailable).
		s.log.Error("reading a response's conversation items failed", "response_id", LogID(id), "error", err)
		storeUnavailable(err, "reading the response's conversation items failed").Write(w)
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), anchorWriteTimeout)
	defer cancel()
	if !s.deleteTurn(ctx, w, id) {
		return true
	}
	u := s.pool.Get(anchor.Upstream)
	if u != nil && u.Config().Protocol != upstream.ProtocolChat {
		return false
	}
	s.cont.forget(ctx, id)
	// An owner since removed from the config: its copy, if any, stays (and
	// is logged). A continued response's earlier copies are deleted.
	s.deleteAtOwners(r, id, anchor, true)
	writeDeleted(w, id)
	return true
}

// deleteTurn deletes the response's conversation items from the store;
// a later turn chained through them then gets previous_response_not_found
// (its history has a hole, and the gateway never resends deleted text).
// On failure it answers the client and reports false.
func (s *Server) deleteTurn(ctx context.Context, w http.ResponseWriter, id string) bool {
	if s.convs.durable == nil {
		return true
	}
	if err := s.convs.durable.DeleteTurn(ctx, id); err != nil {
		s.log.Error("deleting a response's conversation items failed", "response_id", LogID(id), "error", err)
		storeUnavailable(err, "deleting the response's conversation items failed").Write(w)
		return false
	}
	return true
}

// deleteAtOwners asks every upstream that keeps a copy of a deleted
// response to delete it (deleteAtOwner): its owner (the anchor's Upstream)
// and, for a continued response, the targets it was cut on
// (anchor.Earlier), which keep the request and the answer up to the cut
// under their own ids (README "Continuation"). They are asked at once, so
// the client waits at most ownerDeleteTimeout; each failure is logged, as
// the owner's is.
func (s *Server) deleteAtOwners(r *http.Request, id string, anchor store.Anchor, turnKept bool) {
	var wg sync.WaitGroup
	for _, c := range anchor.Earlier {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.deleteAtOwner(r, id, store.Anchor{Upstream: c.Upstream, UpstreamID: c.ID}, false)
		}()
	}
	s.deleteAtOwner(r, id, anchor, turnKept)
	wg.Wait()
}

// deleteAtOwner asks the Responses upstream that owns a deleted response
// (its anchor) to delete it too, with the credentials a follow-up uses,
// waiting at most ownerDeleteTimeout. Its failure is logged: the gateway's
// own copy is gone either way. A Chat upstream keeps nothing (README
// "Privacy"). turnKept says the gateway held conversation items of the
// response when the DELETE came.
func (s *Server) deleteAtOwner(r *http.Request, id string, anchor store.Anchor, turnKept bool) {
	u := s.pool.Get(anchor.Upstream)
	if u == nil {
		// Removed from the config since (README "The resource API": a
		// failure there is logged). The anchor does not say which protocol
		// it spoke, but without continuity.portable the gateway keeps
		// conversation items only for a Chat upstream's responses: one it
		// held them for kept nothing, and nothing is left there to warn of.
		if turnKept && !s.convs.portable {
			return
		}
		s.log.Warn("deleting a response at its owner failed", "upstream", anchor.Upstream, "response_id", LogID(id),
			"error", "the upstream is no longer configured; a copy it keeps was not deleted")
		return
	}
	if u.Config().Protocol == upstream.ProtocolChat {
		return
	}
	status, _, err := s.deleteAt(r, u, firstNonEmpty(anchor.UpstreamID, id))
	switch {
	case err != nil:
		s.log.Warn("deleting a response at its owner failed", "upstream", u.Name(), "response_id", LogID(id), "error", err)
	case status/100 == 2:
	case status == http.StatusNotFound: // it kept none (store: false) or it expired there
		s.log.Debug("the owner of a deleted response does not have it", "upstream", u.Name(), "response_id", LogID(id))
	default:
		s.log.Warn("deleting a response at its owner failed", "upstream", u.Name(), "response_id", LogID(id), "status", status)
	}
}

// deleteAt sends DELETE /responses/{upID} to u with the credentials a
// follow-up uses, waiting at most ownerDeleteTimeout, and returns its
// status and (bounded, scrubbed) body, or why it did not answer (scrubbed).
func (s *Server) deleteAt(r *http.Request, u *upstream.Upstream, upID string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), ownerDeleteTimeout)
	defer cancel()
	upReq, err := http.NewRequestWithContext(ctx, http.MethodDelete, u.URL("/responses/"+upID), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("building the request: %w", err)
	}
	upReq.Header = upstreamHeaders(&clientRequest{header: r.Header, key: keyOf(r)}, u.Config(), false)
	resp, err := s.client.Do(upReq)
	if err != nil {
		return 0, nil, errors.New(s.scrub.String(upstream.RedactError(err)))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUpstreamErrorBody)) // lets the connection be reused
	return resp.StatusCode, s.scrub.Bytes(body), nil
}

// deleteEarlierCopies deletes, for a DELETE that askOwner passes on to the
// owner of a continued response, the copies the targets it was cut on keep
// (resolution.earlier), before the owner is asked, and reports whether
// they are gone. A copy that cannot be deleted fails the DELETE as the
// owner's failure would (copyNotDeleted: the gateway's error naming the
// client's id, a 502 or the 4xx it answered), before anything else is deleted: the
// anchor stays, so the client's retry reaches every copy again. A 404 there
// is a copy already gone (an earlier DELETE, its own expiry); one on an
// upstream no longer configured, which nothing can reach, is logged
// (deleteAtOwner) and does not hold the DELETE back.
func (s *Server) deleteEarlierCopies(w http.ResponseWriter, r *http.Request, id string, earlier []store.UpstreamCopy) bool {
	for _, c := range earlier {
		u := s.pool.Get(c.Upstream)
		if u == nil {
			s.deleteAtOwner(r, id, store.Anchor{Upstream: c.Upstream, UpstreamID: c.ID}, false)
			continue
		}
		if u.Config().Protocol == upstream.ProtocolChat {
			continue // it keeps nothing
		}
		status, body, err := s.deleteAt(r, u, firstNonEmpty(c.ID, id))
		switch {
		case err != nil:
			s.log.Warn("deleting a continued response's earlier copy failed", "upstream", u.Name(), "response_id", LogID(id), "error", err)
			apierr.UpstreamUnavailable(http.StatusBadGateway, "upstream %q that keeps a copy of the response did not answer: %s", u.Name(), err).Write(w)
			return false
		case status/100 == 2, status == http.StatusNotFound:
			continue
		}
		s.log.Warn("deleting a continued response's earlier copy failed", "upstream", u.Name(), "response_id", LogID(id), "status", status)
		copyNotDeleted(u.Name(), id, status, body).Write(w)
		return false
	}
	return true
}

// writeDeleted is OpenAI's answer to a DELETE of a response.
func writeDeleted(w http.ResponseWriter, id string) {
	b := jsonx.AppendQuote([]byte(`{"id":`), id)
	writeRaw(w, http.StatusOK, append(b, `,"object":"response","deleted":true}`...))
}

func (s *Server) handleCancelResponse(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	id, ok := resourceID(w, ps)
	if !ok {
		return
	}
	owner := clientkey.Hash(r.Header)
	if s.logs != nil {
		if l := s.logs.current(r.Context(), id, owner); l != nil {
			if !l.background {
				apierr.Invalid("response_id", apierr.CodeInvalidValue, "Only responses created with background: true can be cancelled.").Write(w)
				return
			}
			if l.stop(errCancelled) {
				select { // the stream notices at once; wait for its last event
				case <-l.done:
				case <-time.After(cancelWait):
				case <-r.Context().Done():
				}
			}
			resp, _ := l.response()
			writeResponse(w, id, resp, true)
			return
		}
		rec, found, aerr := s.lookupStoredLog(r.Context(), id, owner)
		if aerr != nil { // the response may run on another replica: not a 404
			aerr.Write(w)
			return
		}
		if found {
			s.cancelStored(w, r, rec)
			return
		}
	}
	s.askOwner(w, r, id, owner, ownerCall{suffix: "/cancel", stored: func(rec store.StreamLog) { s.cancelStored(w, r, rec) }})
}

// cancelStored cancels a background response that another replica runs
// (or ran): the cancel flag in its record, which that replica polls, and
// the answer is the response as that replica ended it, as a cancel there
// answers. One that was abandoned is answered failed, as GET answers it;
// when the replica does not write its terminal record within cancelWait,
// the answer says so (the cancel stays asked).
func (s *Server) cancelStored(w http.ResponseWriter, r *http.Request, rec store.StreamLog) {
	id := rec.ResponseID
	switch {
	case !rec.Background:
		apierr.Invalid("response_id", apierr.CodeInvalidValue, "Only responses created with background: true can be cancelled.").Write(w)
		return
	case rec.Ended:
		writeRaw(w, http.StatusOK, withBackground(rec.Response, true))
		return
	case s.logs.abandoned(rec, time.Time{}, s.opts.IdleTimeout):
		writeRaw(w, http.StatusOK, withBackground(s.logs.abandonedStoredResponse(r.Context(), rec), true))
		return
	}
	st := s.logs.opts.Store
	if err := st.CancelStreamLog(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			notResumable(id, s.logs.opts.Window).Write(w)
			return
		}
		s.log.Warn("asking to cancel a response through the store failed", "response_id", LogID(id), "error", err)
		storeUnavailable(err, "asking the gateway running the response to cancel it failed").Write(w)
		return
	}
	deadline := time.NewTimer(cancelWait)
	defer deadline.Stop()
	poll := time.NewTicker(cancelPollEvery)
	defer poll.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-deadline.C:
			if cur, err := st.GetStreamLog(r.Context(), id); err == nil && s.logs.abandoned(cur, time.Time{}, s.opts.IdleTimeout) {
				writeRaw(w, http.StatusOK, withBackground(s.logs.abandonedStoredResponse(r.Context(), cur), true))
				return
			}
			apierr.UpstreamUnavailable(http.StatusGatewayTimeout, "the cancel of response '%s' was passed to the gateway running it, "+
				"which did not report the response ended within %s; the cancel stays asked: retrieve the response for its status", id, cancelWait).Write(w)
			return
		case <-poll.C:
		}
		cur, err := st.GetStreamLog(r.Context(), id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			notResumable(id, s.logs.opts.Window).Write(w)
			return
		case err != nil:
			s.log.Warn("reading a stream log failed", "response_id", LogID(id), "error", err)
			storeUnavailable(err, "the cancel was asked, but reading the response back failed").Write(w)
			return
		case cur.Ended:
			writeRaw(w, http.StatusOK, withBackground(cur.Response, true))
			return
		}
	}
}

// cancelPollEvery is how often a cancel sent to another replica than the
// one running the response reads the record back.
const cancelPollEvery = 100 * time.Millisecond

// abandonedResponse is the Response of a stored log whose gateway gave it
// up (streamLogs.abandoned): failed, with the error a resume of it ends
// with. The record kept the Response as it ran, its open items
// in_progress; a Response that ended shows them closed as incomplete, as
// the gateway's terminal events do (sent.Output.AppendResponse).
func abandonedResponse(resp []byte) []byte {
	out, err := sjson.SetBytes(resp, "status", "failed")
	if err != nil {
		return resp
	}
	e := translate.AppendResponseError(nil, apierr.CodeStreamIncomplete, apierr.TypeServer, abandonedMessage)
	if out, err = sjson.SetRawBytes(out, "error", e); err != nil {
		return resp
	}
	for k, item := range gjson.GetBytes(out, "output").Array() { // read once, before the sets
		if item.Get("status").Str != "in_progress" {
			continue
		}
		if closed, err := sjson.SetBytes(out, "output."+strconv.Itoa(k)+".status", "incomplete"); err == nil {
			out = closed
		}
	}
	return out
}

// ownerCall is a resource call asked of the upstream that owns the
// response.
type ownerCall struct {
	suffix string // after /responses/{id}: "", "/input_items" or "/cancel"
	stream bool   // a resume: GET ?stream=true
	after  int64  // the resume's starting_after (-1: from the first event)
	// stored answers the call from the response's log when the store has
	// it after all (lateStoredLog); nil: the owner is asked.
	stored func(store.StreamLog)
}

// askOwner passes a resource call on to the upstream that owns the
// response (its anchor), or answers 404 when no upstream is known to (or
// the owner is a Chat upstream, which has no such API), and the follow-up's
// 502 when the owner is no longer configured (ownerRemovedAnswer). A
// response another replica has just opened is answered from its log
// instead, once the store has it (lateStoredLog). The
// owner's answer is an upstream's like any other (SECURITY.md,
// "Upstreams"): scrubbed of keys, bounded, and OpenAI-shaped when it is an
// error; a resumed stream ends with one terminal event whatever the owner
// does.
func (s *Server) askOwner(w http.ResponseWriter, r *http.Request, id, hash string, call ownerCall) {
	window := defaultResumeWindow
	if s.logs != nil {
		window = s.logs.opts.Window
	}
	if s.cont == nil {
		notResumable(id, window).Write(w)
		return
	}
	res := s.cont.resolve(r.Context(), hostabi.SurfaceResponsesJSON, id, scopeOf(r.Header, hash))
	if res.err != nil {
		ownerLookupFailed("the response", res.err).Write(w)
		return
	}
	if res.owner != "" && !res.unknownTo(keyOf(r) != nil, hash) && call.stored != nil {
		rec, ok, aerr := s.lateStoredLog(r.Context(), id, hash)
		if aerr != nil {
			aerr.Write(w)
			return
		}
		if ok {
			call.stored(rec)
			return
		}
	}
	if res.owner == "" || res.unknownTo(keyOf(r) != nil, hash) {
		notResumable(id, window).Write(w)
		return
	}
	// A continued response's anchor names the id its finishing target
	// knows it by, or lists the copies of the targets it was cut on; one no
	// target finished keeps the first target as its owner, under the
	// client's id, with only the copies listed (README "Continuation").
	continued := res.upstreamID != "" || len(res.earlier) > 0
	if r.Method != http.MethodDelete && continued {
		// A continued response: no upstream's copy is what the client was
		// sent (each holds its own part under its own id, item ids and
		// numbering; a prefill's target only the rest), so none is passed
		// on as if it were. A DELETE still reaches them all.
		continuedNotReadable(id, s.noLogHeld()).Write(w)
		return
	}
	u := s.pool.Get(res.owner)
	if u == nil {
		s.ownerRemovedAnswer(w, r, id, res)
		return
	}
	if u.Config().Protocol == upstream.ProtocolChat {
		notResumable(id, window).Write(w)
		return
	}
	if r.Method == http.MethodDelete && !s.deleteEarlierCopies(w, r, id, res.earlier) {
		return
	}
	upID := id
	if res.upstreamID != "" {
		upID = res.upstreamID
	}
	// The owner's headers are bounded by the transport (timeouts.header),
	// what follows by its silence (timeouts.idle), as for any attempt: a
	// total deadline would cut a live resumed stream without its terminal
	// event.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stopDrain := context.AfterFunc(s.streamsCtx, func() { cancel(context.Cause(s.streamsCtx)) })
	defer stopDrain()
	path := "/responses/" + upID + call.suffix
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	target := u.URL(path) // after the path, joined to a base_url query
	upReq, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
	if err != nil {
		apierr.UpstreamUnavailable(http.StatusBadGateway, "the request to the owner could not be built: %v", err).Write(w)
		return
	}
	upReq.Header = upstreamHeaders(&clientRequest{header: r.Header, key: keyOf(r)}, u.Config(), call.stream)
	resp, err := s.client.Do(upReq) // the transport bounds the wait for headers (timeouts.header)
	if err != nil {
		apierr.UpstreamUnavailable(http.StatusBadGateway, "upstream %q that owns the response did not answer: %s", u.Name(), s.scrub.String(upstream.RedactError(err))).Write(w)
		return
	}
	defer resp.Body.Close()
	if coding, ok := decodeAnswer(resp); !ok {
		ownerFault(u.Name(), "answered with Content-Encoding %q, which the gateway does not read", s.scrub.String(coding)).Write(w)
		return
	}
	s.scrub.Header(resp.Header)
	idle := newIdleTimer(s.opts.IdleTimeout, func() { cancel(errIdleTimeout) })
	defer idle.stop()
	idle.arm() // the headers are in: from now on, the owner's silence is bounded
	body := &idleReader{r: resp.Body, idle: idle}
	eventStream := strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream")
	switch {
	case resp.StatusCode/100 != 2:
		b, _ := io.ReadAll(io.LimitReader(body, maxUpstreamErrorBody))
		b = s.scrub.Bytes(b)
		if r.Method == http.MethodDelete && continued {
			s.continuedDeleteRefused(w, r, id, u.Name(), resp.StatusCode, b)
			return
		}
		if aerr := ownerError(u.Name(), resp.StatusCode, b, s.opts.MaxJSONDepth); aerr != nil {
			if resp.StatusCode == http.StatusNotFound {
				aerr.Message += "; " + s.noLogHeld()
			}
			aerr.Write(w)
			return
		}
		relayOwner(w, resp, b)
	case call.stream && eventStream:
		// As on a stream the gateway forwards, timeouts.idle counts from the
		// owner's last event: keepalive comments do not hold it open.
		events := idleEvents{src: sse.NewReader(&idleReader{r: resp.Body}, s.opts.MaxEventBytes), idle: idle}
		s.resumeSSE(w, func(out resumeSink) error {
			return s.followOwner(r.Context(), ctx, u, events, call.after, out)
		})
	case resp.StatusCode == http.StatusNoContent && !call.stream:
		copyResponseHeaders(w.Header(), resp.Header) // nothing to check
		w.WriteHeader(http.StatusNoContent)
	case call.stream || eventStream:
		ownerFault(u.Name(), "answered a request with stream=%t with Content-Type %q", call.stream, resp.Header.Get("Content-Type")).Write(w)
	default:
		b, err := s.readAnswer(body)
		switch {
		case err != nil && r.Context().Err() != nil:
			return // the client went away
		case err != nil:
			apierr.StreamIncomplete("%s", s.ownerAnswerBroke(ctx, u, err)).Write(w)
			return
		}
		if valid, object := jsonx.ScanTop(b, s.opts.MaxJSONDepth, func([]byte, int, int) {}); !valid || !object {
			ownerFault(u.Name(), "answered with a body that is not a JSON object (at most %d levels deep)", s.opts.MaxJSONDepth).Write(w)
			return
		}
		if want := ownerAnswerLacks(r.Method, call.suffix, b); want != "" {
			ownerFault(u.Name(), "answered HTTP %d with a JSON object that is not %s", resp.StatusCode, want).Write(w)
			return
		}
		if r.Method == http.MethodDelete && continued {
			// Every copy is gone: the deletion names the client's id (the
			// owner's may be its own, which the client never saw) and the
			// anchor goes, whoever owns the response.
			s.continuedDeleted(w, r, id)
			return
		}
		relayOwner(w, resp, s.scrub.Bytes(b))
	}
}

// ownerAnswerLacks checks the least of an owner's 2xx JSON object answer
// to a resource call (method, with suffix after /responses/{id}) that its
// client can rely on, as OpenAI's API reference gives it: for input_items a
// list (object "list" with a data array), for GET and cancel a Response
// (object "response" with an id), for DELETE a deletion (a boolean
// deleted). It returns what the answer should have been, or "" when it is
// that. Only this is checked: a Response that passes is the owner's and is
// relayed as it came, no field filled in.
func ownerAnswerLacks(method, suffix string, body []byte) string {
	switch {
	case method == http.MethodDelete:
		if d := gjson.GetBytes(body, "deleted"); d.Type == gjson.True || d.Type == gjson.False {
			return ""
		}
		return `a deletion (a boolean "deleted")`
	case suffix == "/input_items":
		if gjson.GetBytes(body, "object").Str == "list" && gjson.GetBytes(body, "data").IsArray() {
			return ""
		}
		return `a list of input items (object "list" with a "data" array)`
	default: // GET and /cancel
		if gjson.GetBytes(body, "object").Str == "response" && gjson.GetBytes(body, "id").Str != "" {
			return ""
		}
		return `a Response (object "response" with an "id")`
	}
}

// continuedDeleted answers the DELETE of a continued response once its
// owner's copy is gone: every copy is, so the anchor goes too (a later
// call is the 404 of an unknown id, as after a DELETE inside
// streams.resume_window), and the deletion object names the client's id.
func (s *Server) continuedDeleted(w http.ResponseWriter, r *http.Request, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), anchorWriteTimeout)
	defer cancel()
	s.cont.forget(ctx, id)
	writeDeleted(w, id)
}

// continuedDeleteRefused answers the DELETE of a continued response whose
// owner answered status (not 2xx). Its body is not passed on: it may name
// the owner's own id, which the client never saw, and its 404 would say
// the response does not exist when the copies before it were just deleted
// (README "The resource API"). A 404 is a copy gone already (as for
// an earlier copy, deleteEarlierCopies): the response is deleted, as inside
// streams.resume_window. Any other failure is the gateway's own error
// naming the client's id, with the status ownerError gives (a 4xx kept,
// otherwise 502) and the owner's code; the anchor stays, so a retry asks
// the owner again.
func (s *Server) continuedDeleteRefused(w http.ResponseWriter, r *http.Request, id, owner string, status int, body []byte) {
	if status == http.StatusNotFound {
		s.continuedDeleted(w, r, id)
		return
	}
	s.log.Warn("deleting a continued response at its owner failed", "upstream", owner, "response_id", LogID(id), "status", status)
	copyNotDeleted(owner, id, status, body).Write(w)
}

// copyNotDeleted is the answer to a DELETE of the continued response id
// when upstream, which keeps a copy of it (its owner or a target it was
// cut on), answered status (neither 2xx nor 404) under the id it knows it
// by: the gateway's own error naming the client's id, since the
// upstream's body may name its own, which the client never saw. A 4xx
// keeps its status and the upstream's code (it refused the call: the key,
// a rate limit) as ownerErrorCode gives it, anything else is 502.
func copyNotDeleted(upstreamName, id string, status int, body []byte) *apierr.Error {
	aerr := apierr.UpstreamUnavailable(http.StatusBadGateway,
		"upstream %q, which keeps a copy of response '%s', answered HTTP %d to its DELETE: that copy was not deleted; a retry asks it again",
		upstreamName, id, status)
	if status/100 == 4 {
		aerr.Status, aerr.Type = status, apierr.TypeInvalidRequest
		aerr.Code = ownerErrorCode(upstreamErrorOf(status, body), status)
	}
	return aerr
}

// ownerErrorCode is the code of the gateway's own error for an upstream's
// failed resource call (ownerError, copyNotDeleted): the upstream's code as
// a client gets it beside status (apierr.ClientCode: a status sent as the
// code, llama.cpp's integer code, is none), else upstream_error.
func ownerErrorCode(perr apierr.Error, status int) string {
	return firstNonEmpty(apierr.ClientCode(perr.Code, status), apierr.CodeUpstreamError)
}

// ownerRemovedAnswer answers a resource call for a response known only to
// its owner upstream (no log here), which is no longer configured, with the
// reason a follow-up on it gets (ownerRemoved), not the 404 of an id the
// gateway does not know. A DELETE still forgets what the gateway keeps of
// it, its anchor (a follow-up then finds none), and the copy the owner
// keeps, which nothing can reach, is logged as not deleted (deleteAtOwner)
// and said in the answer.
func (s *Server) ownerRemovedAnswer(w http.ResponseWriter, r *http.Request, id string, res resolution) {
	aerr := ownerRemoved("the response", res.owner)
	if r.Method == http.MethodDelete {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), anchorWriteTimeout)
		defer cancel()
		s.cont.forget(ctx, id)
		s.deleteAtOwners(r, id, store.Anchor{Upstream: res.owner, UpstreamID: res.upstreamID, Earlier: res.earlier}, false)
		aerr.Message += "; the gateway forgot the response, but the copy the owner keeps could not be deleted"
	}
	aerr.Write(w)
}

// relayOwner passes the owner's answer on: its status and (scrubbed)
// headers, with body, JSON.
func relayOwner(w http.ResponseWriter, resp *http.Response, body []byte) {
	copyResponseHeaders(w.Header(), resp.Header)
	writeRaw(w, resp.StatusCode, body)
}

// ownerError is the gateway error for an owner's non-2xx answer that is no
// OpenAI error nested at most maxDepth deep, by the rule the POST path
// relays upstream error bodies by (relayableError: README "Endpoints",
// errors are OpenAI-shaped everywhere), read as the POST path reads them
// (upstreamErrorOf); nil for one that is, which is passed on. llama.cpp's
// integer code without a param is no such error. A 4xx keeps its status
// (the owner refused the call: unknown id, a bad parameter), anything else
// is a 502.
func ownerError(owner string, status int, body []byte, maxDepth int) *apierr.Error {
	if status/100 == 4 || status/100 == 5 {
		if valid, object := jsonx.ScanTop(body, maxDepth, func([]byte, int, int) {}); valid && object && relayableError(status, body) {
			return nil
		}
	}
	perr := upstreamErrorOf(status, body)
	e := ownerFault(owner, "answered HTTP %d: %s", status, perr.Message)
	if perr.Message == "" { // an empty body: say so, not a message that stops at its colon
		e = ownerFault(owner, "answered HTTP %d %s without an error message", status, http.StatusText(status))
	}
	e.Code = ownerErrorCode(perr, status)
	if status/100 == 4 {
		e.Status, e.Type = status, apierr.TypeInvalidRequest
	}
	return e
}

// noLogHeld says why a call on a response went to its owner: the gateway
// holds no log of it (README "How long": a stream's log is kept
// streams.resume_window after its last event, and logs are off with a
// window of 0). An owner's own 404 then tells a client that the response
// is gone everywhere, not that the gateway lost it.
func (s *Server) noLogHeld() string {
	if s.logs == nil {
		return "the gateway keeps no stream logs (streams.resume_window is 0)"
	}
	return "the gateway holds no log of the response (a stream's log is kept for streams.resume_window, " +
		s.logs.opts.Window.String() + ", after its last event)"
}

// ownerFault is the 502 upstream_error for an owner's answer the gateway
// cannot pass on; format says what the owner did.
func ownerFault(owner, format string, args ...any) *apierr.Error {
	return &apierr.Error{Status: http.StatusBadGateway, Type: apierr.TypeServer, Code: apierr.CodeUpstreamError,
		Message: fmt.Sprintf("upstream %q that owns the response ", owner) + fmt.Sprintf(format, args...)}
}

// followOwner relays the owner's resumed stream to out and ends it with
// one terminal event whatever the owner does: the owner's own terminal (or
// error) event, else the resume's error event (stream_incomplete, as for a
// log that cannot be followed to its end). Events are scrubbed; one that is
// not a JSON object within limits.max_json_depth ends the stream, since a
// stream the gateway did not write is relayed as it is, numbers included.
// While the owner is quiet the client gets keepalives (the owner's own SSE
// comments are not passed on). clientCtx is the client's, upCtx the owner
// call's (its cause says why it stopped).
func (s *Server) followOwner(clientCtx, upCtx context.Context, u *upstream.Upstream, src eventSource, after int64, out resumeSink) error {
	var mu sync.Mutex // out is written by this goroutine and the keepalive timer
	active, stopped := false, false
	var ka *time.Timer
	if every := s.opts.KeepAlive; every > 0 {
		mu.Lock()
		ka = time.AfterFunc(every, func() {
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				return
			}
			if !active && out.KeepAlive(every) != nil {
				return // the client is gone: its context ends the stream
			}
			active = false
			ka.Reset(every)
		})
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if ka != nil {
			ka.Stop()
		}
	}()
	send := func(name string, data []byte) error {
		mu.Lock()
		defer mu.Unlock()
		active = true
		if err := out.Event(name, data); err != nil {
			return err
		}
		return out.Flush()
	}

	next := nextAfter(after) // the number of the owner's next event
	for {
		ev, err := src.Next()
		if err != nil {
			if clientCtx.Err() != nil {
				return clientCtx.Err()
			}
			return send("error", resumeErrorEvent(next, s.ownerAnswerBroke(upCtx, u, err)))
		}
		var why string
		var f eventFields
		data := validText(s.scrub.Bytes(ev.Data)) // as the pump repairs every upstream event
		switch valid, object := f.scan(data, s.opts.MaxJSONDepth); {
		case ev.Error != nil:
			why = fmt.Sprintf("upstream %q that owns the response failed the stream: %s", u.Name(), s.scrub.String(errorMessage(ev)))
		case ev.Done:
			why = fmt.Sprintf("upstream %q that owns the response ended the stream without a terminal event", u.Name())
		case !valid || !object:
			why = fmt.Sprintf("upstream %q that owns the response sent an event that is not a JSON object (at most %d levels deep)", u.Name(), s.opts.MaxJSONDepth)
		}
		if why != "" {
			return send("error", resumeErrorEvent(next, why))
		}
		if f.seq.Type == gjson.Number {
			next = f.seq.Int() + 1
		}
		typ := f.Type.Str
		name := s.scrub.String(ev.Name)
		if name == "" {
			name = typ
		}
		if err := send(name, data); err != nil {
			return err
		}
		if isTerminalType(typ) || typ == "error" {
			return nil
		}
	}
}

// ownerAnswerBroke says why the owner's answer (a JSON body, or a resumed
// stream before its terminal event) stopped before its end; upCtx is the
// owner call's context.
func (s *Server) ownerAnswerBroke(upCtx context.Context, u *upstream.Upstream, err error) string {
	switch cause := context.Cause(upCtx); {
	case errors.Is(cause, errDraining):
		return "the gateway is shutting down; retry the request"
	case errors.Is(cause, errIdleTimeout):
		return fmt.Sprintf("upstream %q that owns the response sent nothing for %s", u.Name(), s.opts.IdleTimeout)
	case errors.Is(err, sse.ErrEventTooLarge):
		return fmt.Sprintf("upstream %q that owns the response sent an event larger than %d bytes", u.Name(), s.opts.MaxEventBytes)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("upstream %q that owns the response closed its answer before the end", u.Name())
	}
	return fmt.Sprintf("the answer of upstream %q that owns the response broke off: %s", u.Name(), s.scrub.String(upstream.RedactError(err)))
}
