package streaminput

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// Input states as stored in the record's State field, optionally followed
// by "+started" (the upstream request was sent) or "+done" (its answer
// ended).
const (
	stateOpen     = "open"
	stateFinished = "finished"
	suffixStarted = "+started"
	suffixDone    = "+done"
)

// chunkInfo is what a session remembers of a received chunk.
type chunkInfo struct {
	d    digest
	size int64
	end  bool
	// meta, enc and startsPart bound the chunk's share of the assembled
	// request (reqsize.go): startsPart is false once the chunk before it
	// is known to extend the same content part.
	meta       chunkMeta
	enc        int64
	startsPart bool
}

// upstreamSaw records what the upstream request was assembled from.
type upstreamSaw struct {
	chunks   uint64 // sequence ids 0 … chunks-1
	bytes    int64
	complete bool // the input was finished when the request started
	at       time.Time
}

// session is one streaming-input session. Its chunks are processed one at
// a time (the mutex is held across the synced store write), which is what
// makes ordering and duplicate detection simple and exact.
type session struct {
	m        *Manager
	id       string
	keyHash  string
	durable  bool // chunks and state live in the store
	modeA    bool // a Mode A request's session: not reachable through REST
	tpl      template
	policy   startPolicy
	headers  http.Header // dispatched with the request; persisted
	envelope []byte
	dispatch http.Handler
	created  time.Time
	// onClose runs (under mu) when the session closes; Mode A uses it to
	// stop reading the request body.
	onClose func()
	// client is the Mode A request's own context, which its dispatch
	// carries (ModeAClient); nil for a REST session.
	client context.Context

	mu   sync.Mutex
	cred http.Header // credentials: memory only
	// peer is the client's address, for the gateway's forwarding headers
	// (memory only: a session restored after a restart has none).
	peer         string
	infos        map[uint64]chunkInfo
	mem          map[uint64]chunk // payloads of non-durable sessions
	next         uint64           // next expected sequence id
	maxSeq       uint64           // highest received sequence id (valid when len(infos) > 0)
	endSeq       uint64
	hasEnd       bool
	finished     bool
	contig       int64 // payload bytes of the in-order prefix
	received     int64 // payload bytes of every chunk
	late         int   // chunks accepted after the upstream started
	firstAt      time.Time
	lastActivity time.Time
	expiresAt    time.Time
	started      bool
	done         bool
	resultLost   bool // done before a restart: the answer did not survive
	resent       bool // running when the process stopped: sent again after the restart, its answer a new response
	saw          upstreamSaw
	res          *result
	cancel       context.CancelCauseFunc
	closed       bool
	closeErr     *apierr.Error
	closeReason  string
	active       bool  // counted against the client key's session cap
	held         int64 // bytes counted against Options.MaxTotalBytes (template and payloads)
	changed      chan struct{}
	idle         *time.Timer

	// With a store that several replicas share (shared.go): stored is the
	// LastActivity of the record as this replica last read or wrote it
	// (writes are conditional on it); local is set once this replica runs
	// the upstream request; keepStored closes the session here without
	// deleting it from the store (another replica may still serve it).
	// storedUntil is the expiry of the record as this replica last wrote
	// it: past it with the answer running here, a record gone from the
	// store expired because the refreshes failed (goneLocked).
	stored, storedUntil time.Time
	local               bool
	keepStored          bool
	following           bool // a copy of the answer another replica runs is being fed from the store
	waiters             int  // result readers waiting for the answer to start (waitResult)
	polling             bool // pollShared runs for them

	// reqBase and reqChunks bound the assembled request's size
	// (reqsize.go): the template's share, and the chunks' (payloads
	// encoded, and the parts they start).
	reqBase, reqChunks int64
}

// ack is the outcome of an accepted chunk.
type ack struct {
	duplicate bool
	started   bool
}

func (s *session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// stateLocked is the record's State value.
func (s *session) stateLocked() string {
	st := stateOpen
	if s.finished {
		st = stateFinished
	}
	switch {
	case s.done:
		st += suffixDone
	case s.started:
		st += suffixStarted
	}
	return st
}

func (s *session) recordLocked() store.InputSession {
	return store.InputSession{
		ID: s.id, ClientKeyHash: s.keyHash, Endpoint: s.tpl.endpoint, Template: s.envelopeLocked(),
		StartPolicy: s.policy.String(), State: s.stateLocked(), NextSeq: s.next, ReceivedBytes: s.received,
		CreatedAt: s.created, LastActivity: s.lastActivity, ExpiresAt: s.expiresAt,
	}
}

// envelopeLocked is the record's Template: the envelope, with what the
// upstream was sent and the late chunks once the request started.
func (s *session) envelopeLocked() []byte {
	if !s.started {
		return s.envelope
	}
	a := envelopeAudit{Chunks: s.saw.chunks, Bytes: s.saw.bytes, Complete: s.saw.complete, Late: s.late}
	if !s.saw.at.IsZero() {
		a.At = s.saw.at.UnixNano()
	}
	return withAudit(s.envelope, a)
}

// sawLocked is what an upstream request starting now is assembled from:
// the in-order prefix received so far.
func (s *session) sawLocked(now time.Time) upstreamSaw {
	return upstreamSaw{chunks: s.next, bytes: s.contig, complete: s.finished, at: now}
}

// touchLocked records activity now: the session lives IdleTimeout more.
func (s *session) touchLocked(now time.Time) {
	s.lastActivity, s.expiresAt = now, now.Add(s.m.opts.IdleTimeout)
	if s.idle != nil {
		s.idle.Reset(s.idleDelayLocked())
	}
}

// runnerRefreshes is how many times per IdleTimeout the replica running a
// session's answer writes the session's record while the answer runs. The
// record (and, with Redis, its key) expires IdleTimeout after its last
// write: refreshed only when that time is up, it would be gone first, and a
// long answer (a slow stream, a quiet reasoning model) would lose its
// session in the middle. Each refresh is one record write; the answer's
// own bytes add none.
const runnerRefreshes = 3

// idleDelayLocked is when the idle timer fires next after activity now:
// IdleTimeout, or, while this replica runs the session's answer, the
// interval at which it keeps the record alive (onIdle).
func (s *session) idleDelayLocked() time.Duration {
	if s.runsHereLocked() {
		return s.m.opts.IdleTimeout / runnerRefreshes
	}
	return s.m.opts.IdleTimeout
}

// runsHereLocked tells whether this replica is running the session's answer.
func (s *session) runsHereLocked() bool {
	return s.local && s.started && !s.done
}

// accept applies one chunk: duplicate and conflict detection, ordering,
// the byte cap, the durable write, then the start policy.
func (s *session) accept(ctx context.Context, c chunk) (ack, *apierr.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for try := 1; ; try++ {
		a, aerr := s.acceptLocked(ctx, c)
		if aerr != errChanged {
			return a, aerr
		}
		// Another replica changed the session since this one read it:
		// read it again and decide again.
		if aerr := s.resyncLocked(ctx, try); aerr != nil {
			return ack{}, aerr
		}
	}
}

func (s *session) acceptLocked(ctx context.Context, c chunk) (ack, *apierr.Error) {
	if s.closed {
		return ack{}, errNotFound()
	}
	if s.m.isDraining() {
		return ack{}, errShutdown()
	}
	d := c.digest()
	if info, ok := s.infos[c.seq]; ok {
		if info.d == d {
			s.m.met.chunks.WithLabelValues("duplicate").Inc()
			return ack{duplicate: true}, nil
		}
		s.m.met.chunks.WithLabelValues("rejected").Inc()
		return ack{}, errConflict(CodeSequenceConflict, "sequence_id", "sequence_id %d was already received with a different payload", c.seq)
	}
	if aerr := s.checkLocked(c); aerr != nil {
		s.m.met.chunks.WithLabelValues("rejected").Inc()
		return ack{}, aerr
	}
	size := int64(len(c.payload))
	if s.received+size > s.m.opts.MaxSessionBytes {
		s.m.met.chunks.WithLabelValues("rejected").Inc()
		e := errTooLarge(s.m.opts.MaxSessionBytes)
		s.closeLocked(e, reasonTooLarge)
		return ack{}, e
	}
	info := chunkInfo{d: d, size: size, end: c.meta.end, meta: c.meta, enc: encodedSize(c)}
	cost, joined := s.requestCostLocked(c.seq, &info)
	if s.reqBase+s.reqChunks+cost > s.m.opts.MaxRequestBytes {
		s.m.met.chunks.WithLabelValues("rejected").Inc()
		e := errRequestTooLarge(s.m.opts.MaxRequestBytes)
		s.closeLocked(e, "too_large")
		return ack{}, e
	}
	// The global byte cap refuses the chunk but keeps the session: the
	// client may send it again once other sessions have let go.
	if !s.m.chargeBytes(size) {
		s.m.met.chunks.WithLabelValues("rejected").Inc()
		return ack{}, s.m.errBytesFull()
	}
	s.held += size

	// The state after this chunk, written with it in one synced batch.
	prev := *s.snapshot()
	s.infos[c.seq] = info
	if len(s.infos) == 1 || c.seq > s.maxSeq {
		s.maxSeq = c.seq
	}
	if c.meta.end {
		s.endSeq, s.hasEnd = c.seq, true
	}
	for {
		info, ok := s.infos[s.next]
		if !ok {
			break
		}
		s.contig += info.size
		s.next++
	}
	s.received += size
	s.finished = s.hasEnd && s.next > s.endSeq
	startNow := !s.started && s.policy.holds(s.next, s.contig, s.finished)
	if startNow {
		s.started = true
	}
	now := s.m.now()
	s.touchLocked(now)
	// What the upstream is sent and the late count are written with the
	// chunk, in the record, so that every replica reports them alike.
	if startNow {
		s.saw = s.sawLocked(now)
	} else if s.started {
		s.late++
	}
	if s.durable {
		err := s.putChunkLocked(context.WithoutCancel(ctx), c.seq, store.Chunk{Modality: c.meta.encode(), Payload: c.payload})
		if err != nil {
			s.restore(prev)
			delete(s.infos, c.seq)
			s.held -= size
			s.m.releaseBytes(size)
			if errors.Is(err, store.ErrConflict) {
				return ack{}, errChanged
			}
			s.m.met.chunks.WithLabelValues("rejected").Inc()
			return ack{}, s.storeFailureLocked("put chunk", "store the chunk durably", err)
		}
	} else {
		s.mem[c.seq] = c
	}
	s.reqChunks += cost
	if joined != nil {
		joined.startsPart = false
		s.infos[c.seq+1] = *joined
	}
	if s.firstAt.IsZero() {
		s.firstAt = now
	}
	s.m.met.chunks.WithLabelValues("accepted").Inc()
	s.m.met.bytes.Add(float64(size))
	if startNow {
		s.started = false // startLocked sets it and snapshots what the upstream sees
		s.startLocked()
	}
	return ack{started: startNow}, nil
}

// requestCostLocked is what a chunk not received before adds to the bound
// of the assembled request (reqsize.go), and sets info.startsPart. When the
// chunk after it was counted as starting a part that this chunk now
// extends, joined is that chunk's info (to be updated once this one is
// stored) and its part's share is taken off the cost.
func (s *session) requestCostLocked(seq uint64, info *chunkInfo) (cost int64, joined *chunkInfo) {
	prev, ok := s.infos[seq-1]
	info.startsPart = seq == 0 || !ok || !joinsPart(prev.meta, info.meta)
	cost = info.enc
	if info.startsPart {
		cost += partBound(info.meta)
	}
	if next, ok := s.infos[seq+1]; ok && next.startsPart && joinsPart(info.meta, next.meta) {
		cost -= partBound(next.meta)
		joined = &next
	}
	return cost, joined
}

// checkLocked applies the ordering rules to a chunk not received before.
func (s *session) checkLocked(c chunk) *apierr.Error {
	switch {
	case s.finished:
		return errConflict(CodeSessionFinished, "sequence_id", "the session's input is finished; no chunk is accepted after it")
	case s.hasEnd && c.seq > s.endSeq:
		return errConflict(CodeSessionFinished, "sequence_id", "sequence_id %d is after the end of input (sequence_id %d)", c.seq, s.endSeq)
	case c.meta.end && s.hasEnd:
		return errConflict(CodeSessionFinished, "end_of_input", "end_of_input was already set by sequence_id %d", s.endSeq)
	case c.meta.end && len(s.infos) > 0 && s.maxSeq > c.seq:
		return errConflict(CodeSequenceConflict, "end_of_input", "sequence_id %d cannot end the input: sequence_id %d was already received", c.seq, s.maxSeq)
	case c.seq >= s.next+uint64(s.m.opts.ReorderWindow):
		return errConflict(CodeOutOfWindow, "sequence_id", "sequence_id %d is too far ahead: the next expected is %d and at most %d chunks are buffered out of order",
			c.seq, s.next, s.m.opts.ReorderWindow)
	}
	return nil
}

// snapshotFields are the fields accept may have to roll back.
type snapshotFields struct {
	next, maxSeq, endSeq      uint64
	hasEnd, finished, started bool
	contig, received          int64
	lastActivity, expiresAt   time.Time
	saw                       upstreamSaw
	late                      int
}

func (s *session) snapshot() *snapshotFields {
	return &snapshotFields{next: s.next, maxSeq: s.maxSeq, endSeq: s.endSeq, hasEnd: s.hasEnd, finished: s.finished, started: s.started,
		contig: s.contig, received: s.received, lastActivity: s.lastActivity, expiresAt: s.expiresAt, saw: s.saw, late: s.late}
}

func (s *session) restore(p snapshotFields) {
	s.next, s.maxSeq, s.endSeq, s.hasEnd, s.finished, s.started = p.next, p.maxSeq, p.endSeq, p.hasEnd, p.finished, p.started
	s.contig, s.received, s.lastActivity, s.expiresAt = p.contig, p.received, p.lastActivity, p.expiresAt
	s.saw, s.late = p.saw, p.late
}

// storeFailureLocked maps a failed store write to the client's error; a
// session the store no longer has (expired) is closed.
func (s *session) storeFailureLocked(op, what string, err error) *apierr.Error {
	switch {
	case errors.Is(err, store.ErrNotFound) && s.m.shared != nil && (s.runsHereLocked() || s.runsElsewhereLocked()):
		// A running answer keeps its record alive: closed through another
		// replica, or lost by the store (goneLocked tells which).
		ctx, cancel := context.WithTimeout(s.m.base, 5*time.Second)
		defer cancel()
		s.recordMissingLocked(ctx)
		return errNotFound()
	case errors.Is(err, store.ErrNotFound):
		s.m.log.Info("session expired in the store", "session", store.RedactID(s.id))
		s.closeLocked(errNotFound(), "expired")
		return errNotFound()
	case errors.Is(err, store.ErrTooLarge):
		e := errTooLarge(s.m.opts.MaxSessionBytes)
		s.closeLocked(e, reasonTooLarge)
		return e
	}
	s.m.log.Error("streaming-input store write failed", "op", op, "session", store.RedactID(s.id), "error", err)
	return errStore(what, err)
}

// finish ends the input (POST …/finish). It is idempotent.
func (s *session) finish(ctx context.Context) *apierr.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for try := 1; ; try++ {
		aerr := s.finishLocked(ctx)
		if aerr != errChanged {
			return aerr
		}
		if aerr := s.resyncLocked(ctx, try); aerr != nil {
			return aerr
		}
	}
}

func (s *session) finishLocked(ctx context.Context) *apierr.Error {
	if s.closed {
		return errNotFound()
	}
	if s.finished {
		return nil
	}
	if s.m.isDraining() {
		return errShutdown()
	}
	if gaps, missing := s.gapsLocked(); missing > 0 {
		return errConflict(CodeSequenceGap, "sequence_id", "the input cannot finish: %s", describeMissing(gaps, missing))
	}
	prev := *s.snapshot()
	s.finished = true
	if s.next > 0 {
		s.endSeq, s.hasEnd = s.next-1, true
	}
	startNow := !s.started && s.policy.holds(s.next, s.contig, true)
	s.started = s.started || startNow
	now := s.m.now()
	s.touchLocked(now)
	if startNow {
		s.saw = s.sawLocked(now) // written with the end of input (envelopeLocked)
	}
	if s.durable {
		if err := s.updateLocked(context.WithoutCancel(ctx)); err != nil {
			s.restore(prev)
			if errors.Is(err, store.ErrConflict) {
				return errChanged
			}
			return s.storeFailureLocked("finish", "store the session's end durably", err)
		}
	}
	if startNow {
		s.started = false
		s.startLocked()
	}
	s.notifyLocked()
	return nil
}

// gapsLocked lists the first missing sequence ids below the highest
// received one (or below the end of input), at most maxListedGaps, and
// counts them all.
func (s *session) gapsLocked() (first []uint64, missing uint64) {
	top := s.next
	if len(s.infos) > 0 && s.maxSeq+1 > top {
		top = s.maxSeq + 1
	}
	if s.hasEnd && s.endSeq+1 > top {
		top = s.endSeq + 1
	}
	var gaps []uint64
	for q := s.next; q < top && len(gaps) < maxListedGaps; q++ {
		if _, ok := s.infos[q]; !ok {
			gaps = append(gaps, q)
		}
	}
	// infos holds every id below next and the buffered ones, all below top.
	return gaps, top - uint64(len(s.infos))
}

// maxListedGaps is how many missing sequence ids a sequence_gap message
// lists; it says how many more there are.
const maxListedGaps = 10

// describeMissing says which sequence ids are missing: first lists the
// lowest of them (at most maxListedGaps), missing counts them all. A
// client that resends only the listed ids must learn that more are
// missing, and how many.
func describeMissing(first []uint64, missing uint64) string {
	parts := make([]string, len(first))
	for i, q := range first {
		parts[i] = fmt.Sprint(q)
	}
	switch {
	case missing == 1 && len(first) == 1:
		return "sequence id " + parts[0] + " is missing"
	case missing <= uint64(len(first)):
		return "sequence ids " + strings.Join(parts, ", ") + " are missing"
	}
	return fmt.Sprintf("%d sequence ids are missing: %s and %d more", missing, strings.Join(parts, ", "), missing-uint64(len(first)))
}

// startLocked sends the in-order prefix that s.saw describes upstream
// (the caller sets it: sawLocked, before the write that records the start).
func (s *session) startLocked() {
	now := s.m.now()
	s.started, s.local = true, true
	if !s.firstAt.IsZero() {
		s.m.met.startDelay.Observe(now.Sub(s.firstAt).Seconds())
	}
	if s.idle != nil {
		s.idle.Reset(s.idleDelayLocked()) // the record is kept alive while the answer runs
	}
	ctx, cancel := context.WithCancelCause(s.m.base)
	s.cancel = cancel
	if s.client != nil {
		ctx = context.WithValue(ctx, modeAClientKey{}, s.client)
	}
	s.res = newResult(s.tpl, s.m.opts.ResultBuffer, s.m.opts.MaxJSONDepth)
	if s.durable && s.m.shared != nil {
		s.mirrorLocked(s.res) // the other replicas' readers follow the answer through the store
	}
	var mem []chunk
	if !s.durable {
		mem = make([]chunk, 0, s.next)
		for q := uint64(0); q < s.next; q++ {
			mem = append(mem, s.mem[q])
		}
	}
	headers := s.headers.Clone()
	for k, v := range s.cred {
		headers[k] = v
	}
	s.m.wg.Add(1)
	go s.run(ctx, s.res, s.saw.chunks, mem, headers)
	s.notifyLocked()
}

// run assembles the request, dispatches it, and makes sure the captured
// answer ends properly whatever happens.
func (s *session) run(ctx context.Context, res *result, upto uint64, mem []chunk, headers http.Header) {
	defer s.m.wg.Done()
	fail := func(e *apierr.Error) {
		if cause := context.Cause(ctx); cause != nil {
			var ce *apierr.Error
			if errors.As(cause, &ce) {
				e = ce
			}
		}
		res.finish(e)
		s.dispatchDone(ctx)
	}
	chunks := mem
	if s.durable {
		all, err := s.m.opts.Store.Chunks(ctx, s.id)
		if err != nil {
			s.m.log.Error("loading the session's chunks failed", "session", store.RedactID(s.id), "error", err)
			fail(errStore("read the session's chunks", err))
			return
		}
		chunks = make([]chunk, 0, upto)
		for _, sc := range all {
			if sc.Seq >= upto {
				break
			}
			meta, err := decodeMeta(sc.Modality)
			if err != nil {
				s.m.log.Error("undecodable stored chunk", "session", store.RedactID(s.id), "seq", sc.Seq, "error", err)
				fail(errStore("read the session's chunks", nil))
				return
			}
			chunks = append(chunks, chunk{seq: sc.Seq, meta: meta, payload: sc.Payload})
		}
		if uint64(len(chunks)) != upto {
			s.m.log.Error("stored chunks are missing", "session", store.RedactID(s.id), "want", upto, "have", len(chunks))
			fail(errStore("read the session's chunks", nil))
			return
		}
	}
	body, aerr := assemble(ctx, s.tpl.chat, s.tpl.body, chunks, s.m.opts.MaxJSONDepth)
	chunks = nil
	if aerr != nil {
		fail(aerr)
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.tpl.endpoint, bytes.NewReader(body))
	if err != nil {
		fail(&apierr.Error{Status: http.StatusInternalServerError, Type: apierr.TypeServer, Code: apierr.CodeInternalError, Message: "the gateway could not build the request"})
		return
	}
	req.Header = headers
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(body))
	req.RequestURI = s.tpl.endpoint
	// The gateway sets X-Forwarded-For from RemoteAddr and believes a
	// client's forwarding headers only from a trusted proxy: dispatch as the
	// original client. A restored session no longer knows it, so its stored
	// forwarding headers are not believed either.
	req.RemoteAddr = s.peer
	if req.RemoteAddr == "" {
		req.RemoteAddr = "127.0.0.1:0"
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", "X-Real-Ip"} {
			req.Header.Del(k)
		}
	}
	s.m.log.Debug("dispatching streaming-input session", "session", store.RedactID(s.id), "chunks", upto, "bytes", len(body))
	panicked := func() (p bool) {
		defer func() {
			if v := recover(); v != nil {
				s.m.log.Error("dispatch panicked", "session", store.RedactID(s.id), "panic", fmt.Sprint(v))
				p = true
			}
		}()
		s.dispatch.ServeHTTP(res, req)
		return false
	}()
	e := apierr.StreamIncomplete("the gateway ended the answer without a terminal event")
	if panicked {
		e = &apierr.Error{Status: http.StatusInternalServerError, Type: apierr.TypeServer, Code: apierr.CodeStreamIncomplete, Message: "the gateway hit an internal error while answering"}
	}
	fail(e)
}

// dispatchDone records that the answer ended.
func (s *session) dispatchDone(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	s.deactivateLocked()
	s.notifyLocked()
	failedInDrain := false
	if s.m.isDraining() && s.res != nil {
		status, _, _ := s.res.state()
		failedInDrain = status == "failed"
	}
	if s.closed || context.Cause(ctx) == s.m.shutdownErr || failedInDrain {
		// Closed: nothing left to record. Cut by a shutdown (ours, or the
		// gateway's drain): the record keeps "+started", so the request is
		// sent again after the restart and its readers can attach again.
		return
	}
	s.touchLocked(s.m.now()) // the answer is kept IdleTimeout from now
	if s.durable {
		if err := s.writeRecordLocked(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.m.log.Warn("could not record the end of the answer; retrying", "session", store.RedactID(s.id), "error", err)
			s.m.wg.Add(1)
			go s.retryRecordEnd() // shared.go: other replicas read the answer's state from the record
		}
	}
}

// onIdle runs when the idle timer fires.
func (s *session) onIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.m.isClosing() {
		return
	}
	if s.m.shared != nil && !s.runsHereLocked() {
		s.idleSharedLocked() // shared.go: another replica may have kept it alive
		return
	}
	now := s.m.now()
	if s.started && !s.done {
		// The answer is still running: keep the session (and its record)
		// alive, well before the record expires (runnerRefreshes). With a
		// shared store the refresh is also the runner's sign of life to the
		// replicas following its answer (follow).
		s.touchLocked(now)
		if s.durable {
			ctx, cancel := context.WithTimeout(s.m.base, 5*time.Second)
			defer cancel()
			if err := s.writeRecordLocked(ctx); err != nil {
				s.m.log.Warn("could not extend a running session", "session", store.RedactID(s.id), "error", err)
				if s.m.shared != nil && errors.Is(err, store.ErrNotFound) {
					s.recordMissingLocked(ctx) // shared.go: closed elsewhere, or lost
				}
			}
		}
		return
	}
	if rem := s.expiresAt.Sub(now); rem > 0 {
		s.idle.Reset(rem)
		return
	}
	s.m.log.Info("streaming-input session idle; closing", "session", store.RedactID(s.id))
	s.closeLocked(errIdle(), "idle")
}

// ErrSessionDeleted is in the cause (context.Cause, errors.Is) with which a
// session's upstream request is cancelled when its client deletes the
// session: the client asked for the request to stop, so a dispatcher that
// keeps a stream running after its client went away (the gateway's
// resumable streams) should cancel the response at once instead, as a
// DELETE of the response would.
var ErrSessionDeleted = errors.New("the streaming-input session was deleted")

// ErrInputFailed is in the cause (context.Cause, errors.Is) with which a
// session's upstream request is cancelled when the session's own input
// failed it: a bad Mode A line (README "Mode A": "a bad line fails the
// request"), a chunk over the session's byte limit; and when the gateway
// lost the session while its answer ran (its record vanished from a shared
// store, reasonLost), which fails the request as well. The request has failed,
// and its client is still there: a dispatcher that keeps a stream running
// after its client went away should instead end it at once, with the
// session's error as its answer (the cause holds it: errors.As to
// *apierr.Error), and stop the upstream.
var ErrInputFailed = errors.New("the streaming-input session's input failed the request")

// reasonDeleted is the close reason of a session its client deleted (here
// or, with a shared store, through another replica).
const reasonDeleted = "deleted"

// Close reasons of a session whose input failed its request
// (ErrInputFailed): a line or chunk refused, a session over its byte limit.
const (
	reasonRejected = "rejected"
	reasonTooLarge = "too_large"
)

// reasonLost is the close reason of a session whose record vanished from
// a shared store while its answer ran, without a close recorded there (a
// Redis restart without persistence, a FLUSHALL, an eviction): the gateway
// failed the answer, nobody cancelled it (goneLocked).
const reasonLost = "lost"

// markedCause cancels a session's dispatch with its readers' error, marked
// for the dispatcher with why the session closed (ErrSessionDeleted,
// ErrInputFailed).
type markedCause struct {
	e    *apierr.Error
	mark error
}

func (c markedCause) Error() string   { return c.e.Error() }
func (c markedCause) Unwrap() []error { return []error{c.e, c.mark} }

// close closes the session (see closeLocked).
func (s *session) close(e *apierr.Error, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(e, reason)
}

// closeLocked ends the session for good: it cancels a running answer (whose
// readers then get a terminal event carrying e), wakes waiting readers,
// releases the session's data in memory and in the store, and forgets it.
// A session closed for reasonDeleted cancels its answer with a cause that
// also says so (ErrSessionDeleted): the dispatcher cancels the response
// rather than keep it running for its readers. One whose input failed
// (reasonRejected, reasonTooLarge) says so too (ErrInputFailed): the
// dispatcher fails the request at once. The store hears of the close
// before the answer is cancelled: with a shared store, a session another
// replica closed first ends with that close instead (dropStoredLocked), so
// that one answer ends one way for every reader.
func (s *session) closeLocked(e *apierr.Error, reason string) {
	if s.closed {
		return
	}
	if e == nil {
		e = errCancelled()
	}
	if s.durable && !s.keepStored {
		var err error
		if e, reason, err = s.dropStoredLocked(context.WithoutCancel(s.m.base), e, reason); err != nil {
			s.m.log.Error("could not delete a closed session's data", "session", store.RedactID(s.id), "error", err)
		}
	}
	s.closed, s.closeErr, s.closeReason = true, e, reason
	if s.cancel != nil {
		var cause error = e
		switch reason {
		case reasonDeleted:
			cause = markedCause{e, ErrSessionDeleted}
		case reasonRejected, reasonTooLarge, reasonLost:
			cause = markedCause{e, ErrInputFailed}
		}
		s.cancel(cause)
	}
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.onClose != nil {
		s.onClose()
	}
	s.deactivateLocked()
	s.infos, s.mem = nil, nil
	s.notifyLocked()
	s.m.forget(s, s.held)
	s.held = 0
	s.m.met.closed.WithLabelValues(reason).Inc()
}

// deactivateLocked releases the session's slot in its key's session cap.
func (s *session) deactivateLocked() {
	if s.active {
		s.active = false
		s.m.release(s.keyHash)
	}
}

// adoptCredentials gives a session restored after a restart the client's
// credentials again (they are never stored).
func (s *session) adoptCredentials(h http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cred) > 0 {
		return
	}
	_, cred := splitHeaders(h)
	s.cred = cred
}

// waitResult waits until the session's answer has started (or the session
// is gone). A nil result with a nil error means ctx ended.
func (s *session) waitResult(ctx context.Context) (*result, *apierr.Error) {
	s.mu.Lock()
	// The answer may start on another replica: poll the store while this
	// reader waits for it (shared.go).
	polls := s.m.shared != nil && s.durable && s.res == nil && !s.closed
	if polls {
		s.waitSharedLocked()
	}
	s.mu.Unlock()
	if polls {
		defer func() {
			s.mu.Lock()
			s.waiters--
			s.mu.Unlock()
		}()
	}
	for {
		s.mu.Lock()
		res, closed, closeErr, lost, ch := s.res, s.closed, s.closeErr, s.resultLost, s.changed
		// A copy of an answer another replica runs is followed to its end
		// after a close (followsAfterCloseLocked): it becomes the result.
		following := s.followsAfterCloseLocked()
		s.mu.Unlock()
		switch {
		case res != nil:
			return res, nil
		case closed && !following:
			return nil, closeErr
		case lost:
			return nil, &apierr.Error{Status: http.StatusGone, Type: apierr.TypeInvalidRequest, Code: CodeResultGone,
				Message: "the answer to this session was lost in a gateway restart; its input is intact until the session expires"}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil
		case <-s.m.draining:
			// Give a start that is racing with the drain its chance.
			s.mu.Lock()
			res = s.res
			s.mu.Unlock()
			if res != nil {
				return res, nil
			}
			return nil, errShutdown()
		}
	}
}

// resentRefusal is the error for a reader that resumes (after >= 0) the
// answer to a request sent again after a restart, nil otherwise. Its
// sequence number may count in the answer lost with the old process,
// which was another response: the events of the new one that follow that
// number would be spliced onto an answer they do not continue. Nothing
// tells which answer a number counts in, so every such reader reads the
// new answer from its start.
func (s *session) resentRefusal(after int64) *apierr.Error {
	s.mu.Lock()
	resent := s.resent
	s.mu.Unlock()
	if after < 0 || !resent || !s.tpl.stream || s.tpl.chat {
		return nil // starting_after does not apply, or counts in this answer
	}
	return &apierr.Error{Status: http.StatusGone, Type: apierr.TypeInvalidRequest, Code: CodeResultGone, Param: "starting_after",
		Message: "starting_after cannot be applied: the gateway restarted while this session's answer was running and sent the request again, " +
			"so the answer is a new response; read it from its start, without starting_after"}
}

// sawHeaders are the response headers that tell a result reader what the
// upstream request was assembled from.
func (s *session) sawHeaders() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := http.Header{}
	if !s.modeA {
		h.Set("X-Streaming-Input-Session", s.id)
	}
	h.Set("X-Streaming-Input-Chunks", fmt.Sprint(s.saw.chunks))
	h.Set("X-Streaming-Input-Bytes", fmt.Sprint(s.saw.bytes))
	h.Set("X-Streaming-Input-Complete", fmt.Sprint(s.saw.complete))
	return h
}

// bufferedLocked lists the sequence ids received out of order.
func (s *session) bufferedLocked() []uint64 {
	out := []uint64{}
	for q := range s.infos {
		if q >= s.next {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out
}
