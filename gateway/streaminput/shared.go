package streaminput

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// Sessions in a store that several replicas share (Redis; Manager.shared).
//
// A load balancer may send each request of a session to another replica, so
// no replica's memory is the truth; the store is:
//
//   - Every REST request first reads the session's record (lookup). A
//     replica that does not hold the session loads it with its chunks
//     (adopt); one whose copy is older than the record (another replica
//     wrote since: its LastActivity differs) reloads it (refresh).
//   - Every write is conditional on the record this replica last saw
//     (PutChunkIf, UpdateInputSessionIf). When another replica wrote in
//     between, the write fails with ErrConflict, the replica reloads and
//     decides again: a chunk is accepted, refused as out of order or
//     recognised as a duplicate on what the store holds, and two replicas
//     never both start the upstream request (the second one's write, which
//     would start it, conflicts, and after reloading it sees it started).
//   - The replica whose write started the request runs it and writes the
//     answer to the store as it comes (mirror); any other replica's readers
//     follow it from there (follow), live, from its first byte. Readers
//     waiting for an answer to start make their replica poll the record
//     (pollShared): no request to it may ever say another one started it.
//     A replica that deletes a session, or closes it because its input
//     failed it, leaves why (CloseInputSession); the first close recorded
//     stands, and a replica whose close came later ends the session with
//     that one (dropStoredLocked). The others see it at their next read of
//     the record; a follower and a mirror check it when the answer has
//     been quiet. The runner ends the answer and writes that end (a closed
//     session's answer stream outlives its record), and every other
//     replica's readers follow it there (followsAfterCloseLocked): one
//     answer ends one way, with the same events, for every reader. A
//     record gone without a recorded close while its answer runs was lost
//     by the store: the answer fails alike everywhere (goneLocked).
//   - The runner keeps the record alive while the answer runs (onIdle,
//     runnerRefreshes times per IdleTimeout): that is its sign of life to
//     the followers (follow), however long or quiet the answer.
//   - A mirror that cannot write keeps what it has not written and retries
//     while the session lives: a store outage delays the answer for the
//     other replicas' readers, it does not cut it.
//   - Closing for idleness lets go of this replica's copy only: the record
//     expires in the store by itself (its key's expiry), and another replica
//     may have kept it alive.
//
// What is not shared: an answer running on a replica that dies is not
// re-sent by another (readers elsewhere get stream_incomplete once its
// record expires; the input stays until the session expires), and the
// session caps (MaxSessions, MaxSessionsPerKey, MaxTotalBytes) are each
// replica's own.

// errChanged is what acceptLocked and finishLocked return when their
// conditional write found the session changed by another replica.
// It never reaches a client: the request reads the session again and retries.
var errChanged = &apierr.Error{Status: http.StatusServiceUnavailable, Type: apierr.TypeServer, Code: apierr.CodeStoreUnavailable,
	Message: "the session was changed by another replica"}

// maxResyncs bounds the reload-and-retry rounds of one request: beyond it,
// other replicas keep changing the session faster than this one decides.
// Every conflict means another replica's write went through, so the
// session always makes progress; a short, growing, jittered pause between
// rounds keeps replicas that write at once from colliding again.
const maxResyncs = 16

// errSharedStore answers a request the shared session store failed for
// (err: why; nil when what it holds could not be used): errStore's rule.
func errSharedStore(err error) *apierr.Error {
	return apierr.StoreUnavailable(apierr.CodeStoreUnavailable, store.ClientRetryAfter(err), "the streaming-input session store is unavailable")
}

// lookup finds the session a REST request names. With a shared store it
// checks the store first: the session may have been created, changed or
// deleted by another replica. A nil session (and error) is a 404.
func (m *Manager) lookup(ctx context.Context, id, keyHash string) (*session, *apierr.Error) {
	if m.shared == nil {
		return m.get(id, keyHash), nil
	}
	m.mu.Lock()
	s := m.sessions[id]
	m.mu.Unlock()
	if s != nil && (s.modeA || s.keyHash != keyHash) {
		return nil, nil
	}
	rec, err := m.shared.GetInputSession(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid):
		if s != nil { // deleted, closed (or expired) through another replica
			s.mu.Lock()
			s.goneLocked(err)
			s.mu.Unlock()
		}
		return nil, nil
	case err != nil:
		m.log.Error("reading a streaming-input session from the shared store failed", "session", store.RedactID(id), "error", err)
		return nil, errSharedStore(err)
	case rec.ClientKeyHash != keyHash:
		return nil, nil
	}
	if s != nil {
		s.mu.Lock()
		if !s.closed {
			var aerr *apierr.Error
			if !s.stored.Equal(rec.LastActivity) {
				aerr = s.refreshLocked(ctx, rec)
			}
			s.mu.Unlock()
			if aerr != nil {
				return nil, aerr
			}
			return s, nil
		}
		s.mu.Unlock() // let go of here: load it again
	}
	return m.adopt(ctx, id, keyHash)
}

// adopt loads a session another replica created (or that this one let go).
func (m *Manager) adopt(ctx context.Context, id, keyHash string) (*session, *apierr.Error) {
	m.adoptMu.Lock()
	defer m.adoptMu.Unlock()
	m.mu.Lock()
	cur := m.sessions[id]
	m.mu.Unlock()
	if cur != nil { // a concurrent request adopted it first
		cur.mu.Lock()
		closed := cur.closed
		cur.mu.Unlock()
		if !closed {
			return cur, nil
		}
	}
	if m.isDraining() {
		return nil, errShutdown()
	}
	rec, err := m.shared.GetInputSession(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		m.log.Error("reading a streaming-input session from the shared store failed", "session", store.RedactID(id), "error", err)
		return nil, errSharedStore(err)
	case rec.ClientKeyHash != keyHash:
		return nil, nil
	}
	s, err := m.restoreOne(ctx, rec)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		m.log.Error("loading a streaming-input session from the shared store failed", "session", store.RedactID(id), "error", err)
		return nil, errSharedStore(err)
	}
	s.mu.Lock()
	s.sharedStateLocked()
	s.mu.Unlock()
	m.log.Debug("streaming-input session loaded from the shared store", "session", store.RedactID(id))
	return s, nil
}

// refreshLocked brings the session up to rec, the record another replica
// wrote: its chunks and state are read again. What this replica runs (its
// answer) stays its own.
func (s *session) refreshLocked(ctx context.Context, rec store.InputSession) *apierr.Error {
	stored, err := s.m.shared.Chunks(ctx, s.id)
	if errors.Is(err, store.ErrNotFound) {
		s.goneLocked(err)
		return errNotFound()
	}
	if err != nil {
		s.m.log.Error("reading a streaming-input session's chunks from the shared store failed", "session", store.RedactID(s.id), "error", err)
		return errSharedStore(err)
	}
	local, started, done, res, saw := s.local, s.started, s.done, s.res, s.saw
	oldHeld := s.held
	if err := s.applyStored(rec, stored); err != nil {
		s.m.log.Error("undecodable streaming-input session in the shared store", "session", store.RedactID(s.id), "error", err)
		return errSharedStore(nil)
	}
	if local {
		s.started, s.done, s.res, s.saw = started, done, res, saw
	} else if res != nil {
		s.res, s.saw = res, saw // already following the answer
	}
	s.sharedStateLocked()
	s.lastActivity, s.expiresAt = rec.LastActivity, rec.ExpiresAt
	if s.idle != nil {
		s.idle.Reset(min(max(time.Millisecond, s.expiresAt.Sub(s.m.now())), s.idleDelayLocked()))
	}
	s.held = int64(len(rec.Template)) + s.received
	s.m.mu.Lock()
	s.m.heldB += s.held - oldHeld
	s.m.mu.Unlock()
	s.notifyLocked()
	return nil
}

// sharedStateLocked adjusts a session just read from the shared store: an
// answer another replica runs (or ran) is in the store, not lost, and this
// replica's readers follow it from there.
func (s *session) sharedStateLocked() {
	if s.local || !s.started {
		return
	}
	s.resultLost = false
	if s.done && s.active {
		s.deactivateLocked()
	}
	if s.res == nil && !s.following {
		s.followLocked()
	}
}

// resyncLocked reads the session again after a conditional write found it
// changed, for retry number try.
func (s *session) resyncLocked(ctx context.Context, try int) *apierr.Error {
	if try >= maxResyncs {
		s.m.log.Warn("streaming-input session changed by other replicas on every try", "session", store.RedactID(s.id), "tries", try)
		return errSharedStore(nil)
	}
	time.Sleep(time.Duration(rand.Int64N(int64(try) * int64(time.Millisecond))))
	rec, err := s.m.shared.GetInputSession(ctx, s.id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.goneLocked(err)
		return errNotFound()
	case err != nil:
		s.m.log.Error("reading a streaming-input session from the shared store failed", "session", store.RedactID(s.id), "error", err)
		return errSharedStore(err)
	}
	return s.refreshLocked(ctx, rec)
}

// goneLocked closes this replica's copy of a session the shared store no
// longer has (err: the store's answer), leaving the store alone. One that
// another replica closed for a reason (a delete, a chunk over the byte
// limit there) ends here as there, with the error recorded in the store:
// one response ends one way for every reader.
//
// A record gone without such a close while its answer runs was not deleted
// by anyone (a delete is recorded): here, or before the expiry this replica
// knows of (the runner keeps the record alive while the answer runs), the
// store lost it (a Redis restart without persistence, a FLUSHALL, an
// eviction). Its answer fails, as a gateway fault, with the same error on
// every replica: the runner (which stops the upstream request) and every
// follower conclude it alike. The runner past the expiry of the record as
// it last wrote it could not refresh it (a store outage): the record
// expired, and the answer fails saying so. After that expiry, with the
// answer running on another replica, that replica stopped keeping it
// alive: it died. Otherwise (no answer running) the record was deleted or
// expired.
func (s *session) goneLocked(err error) {
	s.keepStored = true
	if e, reason, ok := closedElsewhere(err); ok {
		s.closeLocked(e, reason)
		return
	}
	now := s.m.now()
	before := now.Before(s.expiresAt)
	switch {
	case s.runsHereLocked() && !s.storedUntil.IsZero() && !now.Before(s.storedUntil):
		s.m.log.Warn("streaming-input session expired from the shared store while its answer ran, its refreshes having failed; failing the answer", "session", store.RedactID(s.id))
		s.closeLocked(errRecordExpiredInOutage(), reasonLost)
	case s.runsHereLocked() || (before && s.runsElsewhereLocked()):
		s.m.log.Warn("streaming-input session lost from the shared store while its answer ran; failing the answer", "session", store.RedactID(s.id))
		s.closeLocked(errRecordLost(), reasonLost)
	case s.runsElsewhereLocked():
		s.closeLocked(errRunnerGone(), "idle")
	case before:
		s.closeLocked(errCancelled(), reasonDeleted)
	default:
		s.closeLocked(errNotFound(), reasonDeleted)
	}
}

// errRecordLost ends the readers of an answer whose session the shared
// store lost while it ran (goneLocked).
func errRecordLost() *apierr.Error {
	return apierr.StreamIncomplete("the gateway lost this streaming-input session from its store while the answer was running")
}

// errRecordExpiredInOutage ends the readers of an answer whose session
// record expired from the shared store while it ran because the runner
// could not refresh it (goneLocked): the store was unavailable, nobody
// lost or deleted it.
func errRecordExpiredInOutage() *apierr.Error {
	return apierr.StreamIncomplete("the gateway could not keep this streaming-input session in its store during an outage, and the store let it expire while the answer was running")
}

// recordMissingLocked handles a write of the session's record that found
// it gone while this replica runs its answer: the store's own read says
// whether another replica closed it (and why) or it was lost (goneLocked).
func (s *session) recordMissingLocked(ctx context.Context) {
	_, err := s.m.shared.GetInputSession(ctx, s.id)
	if errors.Is(err, store.ErrNotFound) && !s.closed {
		s.goneLocked(err)
	}
}

// runsElsewhereLocked tells whether, as far as this replica knows, the
// session's answer is running on another replica.
func (s *session) runsElsewhereLocked() bool {
	return s.started && !s.done && !s.local
}

// closedRecord is why a session was closed, as the replica that closed it
// leaves it in the shared store (store.CloseInputSession) for the others.
type closedRecord struct {
	Reason  string `json:"reason"`
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

// closedElsewhere is the error and close reason another replica recorded
// for a session it closed, if err (a read or append of the session) says so.
func closedElsewhere(err error) (*apierr.Error, string, bool) {
	var ce *store.InputSessionClosedError
	if !errors.As(err, &ce) {
		return nil, "", false
	}
	var r closedRecord
	if json.Unmarshal(ce.Reason, &r) != nil || r.Code == "" || r.Status == 0 || r.Reason == "" {
		return nil, "", false
	}
	return &apierr.Error{Status: r.Status, Type: r.Type, Code: r.Code, Message: r.Message, Param: r.Param}, r.Reason, true
}

// dropStoredLocked removes a closed session from the store, and returns
// the close that stands. With a shared store, a session deleted or closed
// because its input failed it (reasonRejected, reasonTooLarge) leaves why,
// so that the replica running its answer ends it the same way (README: a
// session over its byte limit "fails its running answer"). The first close
// the store records wins: when another replica's delete or close came
// first, its error and reason are returned, and this replica ends the
// session with them too.
func (s *session) dropStoredLocked(ctx context.Context, e *apierr.Error, reason string) (*apierr.Error, string, error) {
	if s.m.shared == nil || !recordedClose(reason) {
		return e, reason, s.m.opts.Store.DeleteInputSession(ctx, s.id)
	}
	why, err := json.Marshal(closedRecord{Reason: reason, Status: e.Status, Type: e.Type, Code: e.Code, Message: e.Message, Param: e.Param})
	if err != nil {
		return e, reason, fmt.Errorf("encoding why the session closed: %w", err)
	}
	err = s.m.shared.CloseInputSession(ctx, s.id, why, s.m.opts.IdleTimeout)
	if first, firstReason, ok := closedElsewhere(err); ok {
		return first, firstReason, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return e, reason, nil // gone already (expired): nothing to remove
	}
	return e, reason, err
}

// recordedClose tells whether a close for reason is recorded in a shared
// store for the other replicas (dropStoredLocked).
func recordedClose(reason string) bool {
	return reason == reasonDeleted || reason == reasonRejected || reason == reasonTooLarge
}

// followsAfterCloseLocked tells whether the copy of an answer another
// replica runs goes on being fed from the store after the session closed
// here: a close recorded in the store ends the answer on the replica
// running it, which writes that end for every replica's readers (follow).
func (s *session) followsAfterCloseLocked() bool {
	return s.following && recordedClose(s.closeReason)
}

// syncShared reads the session's record again, as a REST request does
// (lookup), for a replica that has nothing else to learn from: result
// readers waiting for an answer another replica starts (pollShared), and
// a follower whose answer sends nothing (follow), which would not see the
// session deleted otherwise.
// It reports whether the store still has the session open: while an
// answer runs, its runner keeps the record alive (onIdle), so for a
// follower that is the runner's sign of life.
func (s *session) syncShared(ctx context.Context) (live bool) {
	rec, err := s.m.shared.GetInputSession(ctx, s.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid):
		s.goneLocked(err)
		return false
	case err != nil:
		if s.m.base.Err() == nil {
			s.m.log.Warn("reading a streaming-input session from the shared store failed; retrying", "session", store.RedactID(s.id), "error", err)
		}
		return false
	case !s.stored.Equal(rec.LastActivity):
		_ = s.refreshLocked(ctx, rec) // a failure is logged, and the next read tries again
	}
	return true
}

// sharedPollInterval is how often a replica with result readers waiting for
// an answer that has not started reads the session's record: the answer may
// be started by a request to another replica, and nothing else tells this one.
const sharedPollInterval = 500 * time.Millisecond

// waitSharedLocked counts a result reader waiting for the answer, and starts
// polling the shared store for it unless a poll already runs.
func (s *session) waitSharedLocked() {
	s.waiters++
	if s.polling {
		return
	}
	s.polling = true
	s.m.wg.Add(1)
	go s.pollShared()
}

// pollShared reads the session's record every sharedPollInterval while
// result readers wait here and the answer is neither run here nor followed
// (the follower reads the store then): a start through another replica
// makes this one follow the answer (refreshLocked), a delete closes the
// session.
func (s *session) pollShared() {
	defer s.m.wg.Done()
	t := time.NewTicker(sharedPollInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.m.base.Done():
		}
		s.mu.Lock()
		if s.m.base.Err() != nil || s.waiters == 0 || s.closed || s.res != nil || s.following || s.local {
			s.polling = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(s.m.base, 5*time.Second)
		s.syncShared(ctx)
		cancel()
	}
}

// putChunkLocked stores a chunk with the session's record: conditionally on
// the record this replica last saw when the store is shared.
func (s *session) putChunkLocked(ctx context.Context, seq uint64, c store.Chunk) error {
	rec := s.recordLocked()
	var err error
	if s.m.shared != nil {
		err = s.m.shared.PutChunkIf(ctx, s.id, seq, c, rec, s.stored)
	} else {
		err = s.m.opts.Store.PutChunk(ctx, s.id, seq, c, rec)
	}
	if err == nil {
		s.stored, s.storedUntil = rec.LastActivity, rec.ExpiresAt
	}
	return err
}

// updateLocked writes the session's record (conditionally, when shared).
func (s *session) updateLocked(ctx context.Context) error {
	rec := s.recordLocked()
	var err error
	if s.m.shared != nil {
		err = s.m.shared.UpdateInputSessionIf(ctx, rec, s.stored)
	} else {
		err = s.m.opts.Store.UpdateInputSession(ctx, rec)
	}
	if err == nil {
		s.stored, s.storedUntil = rec.LastActivity, rec.ExpiresAt
	}
	return err
}

// writeRecordLocked writes the record of what this replica decided alone
// (its answer ended, it is still running): when another replica wrote in
// between, it reads the session again and writes once more.
func (s *session) writeRecordLocked(ctx context.Context) error {
	for try := 1; ; try++ {
		err := s.updateLocked(ctx)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if aerr := s.resyncLocked(ctx, try); aerr != nil {
			return errors.New(aerr.Message)
		}
	}
}

// idleSharedLocked runs when the idle timer fires on a session this replica
// is not running an answer for: the record may have been kept alive by
// another replica; otherwise this replica lets go of its copy, and the
// store's expiry removes the data.
func (s *session) idleSharedLocked() {
	now := s.m.now()
	if rem := s.expiresAt.Sub(now); rem > 0 {
		s.idle.Reset(rem)
		return
	}
	ctx, cancel := context.WithTimeout(s.m.base, 5*time.Second)
	rec, err := s.m.shared.GetInputSession(ctx, s.id)
	cancel()
	if err == nil && rec.ExpiresAt.After(now) {
		s.lastActivity, s.expiresAt = rec.LastActivity, rec.ExpiresAt
		s.idle.Reset(rec.ExpiresAt.Sub(now))
		return
	}
	s.keepStored = true
	if s.runsElsewhereLocked() {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			// The record could not be read: the store, not the replica
			// running the answer, is what failed.
			s.closeLocked(errStoreUnreadable(), "idle")
			return
		}
		// The answer was running on another replica, which would have kept
		// the record alive while it ran (onIdle): that replica died. Readers
		// here end as a follower's do (README "Several replicas"), not as
		// if the session had received nothing.
		s.closeLocked(errRunnerGone(), "idle")
		return
	}
	s.closeLocked(errIdle(), "idle")
}

// errRunnerGone ends the readers of an answer whose replica stopped
// sending it (it died): the answer is not re-sent by another replica.
func errRunnerGone() *apierr.Error {
	return apierr.StreamIncomplete("the replica running this session's answer stopped sending it")
}

// errStoreUnreadable ends the readers of an answer another replica runs
// when, for the session's idle timeout, neither the answer nor the
// session's record could be read from the shared store (an outage): the
// store failed, not the replica running the answer, which may still be
// sending it.
func errStoreUnreadable() *apierr.Error {
	return apierr.StreamIncomplete("the gateway could not read this streaming-input session's answer from its store for the session's idle timeout")
}

// resultHead is the first part of an answer in the store: what a reader on
// another replica needs before the bytes.
type resultHead struct {
	Status   int         `json:"status"`
	Header   http.Header `json:"header"`
	Chunks   uint64      `json:"chunks"`
	Bytes    int64       `json:"bytes"`
	Complete bool        `json:"complete"`
	At       int64       `json:"started_at"` // Unix nanoseconds; 0 if unknown
}

// mirror writes an answer this replica runs to the shared store, in order,
// off the answer's path: taps queue (data coalesced), one goroutine appends.
type mirror struct {
	s    *session
	saw  upstreamSaw
	wake chan struct{}

	mu     sync.Mutex
	q      []store.ResultPart
	broken bool
}

// maxMirrorPart is the most answer bytes one appended part carries.
const maxMirrorPart = 256 << 10

func (s *session) mirrorLocked(res *result) {
	mi := &mirror{s: s, saw: s.saw, wake: make(chan struct{}, 1)}
	res.tap = mi.tap
	s.m.wg.Add(1)
	go mi.run()
}

func (mi *mirror) tap(kind byte, status int, header http.Header, p []byte) {
	part := store.ResultPart{Kind: kind}
	switch kind {
	case store.ResultHead:
		h := resultHead{Status: status, Header: header, Chunks: mi.saw.chunks, Bytes: mi.saw.bytes, Complete: mi.saw.complete}
		if !mi.saw.at.IsZero() {
			h.At = mi.saw.at.UnixNano()
		}
		part.Data, _ = json.Marshal(h)
	case store.ResultData:
		if len(p) == 0 {
			return
		}
	}
	mi.mu.Lock()
	defer mi.mu.Unlock()
	if mi.broken {
		return
	}
	if n := len(mi.q); kind == store.ResultData && n > 0 && mi.q[n-1].Kind == store.ResultData && len(mi.q[n-1].Data)+len(p) <= maxMirrorPart {
		mi.q[n-1].Data = append(mi.q[n-1].Data, p...)
	} else {
		if kind == store.ResultData {
			part.Data = append(make([]byte, 0, max(len(p), 4<<10)), p...)
		}
		mi.q = append(mi.q, part)
	}
	select {
	case mi.wake <- struct{}{}:
	default:
	}
}

// mirrorWatch is how long a mirror may go without appending before it
// checks that the session still exists: a delete through another replica
// is otherwise noticed at the next append only, and an upstream that sends
// nothing would keep the answer, and its readers here, waiting.
const mirrorWatch = 2 * time.Second

// Retries of a store write the answer's readers on other replicas depend
// on (the mirror's appends, the record of the answer's end): the first
// after mirrorRetryFirst, doubling up to mirrorRetryMax, for as long as the
// session lives. A Redis outage must delay the answer for them, not lose it.
const (
	mirrorRetryFirst = 100 * time.Millisecond
	mirrorRetryMax   = 5 * time.Second
)

// run appends the queued parts in order. A part the store fails to take
// stays first in line, and the mirror tries again with backoff while the
// session lives (mirrorGivesUp): what it holds is bounded by the answer,
// whose bytes the session limits bound. Only the session gone from the
// store (deleted, closed or expired) stops it early.
func (mi *mirror) run() {
	s := mi.s
	defer s.m.wg.Done()
	watch := time.NewTicker(mirrorWatch)
	defer watch.Stop()
	var pending []store.ResultPart // taken from the queue, not yet appended
	n, appended := int64(0), false
	closed := false // the session was closed through another replica
	backoff, failing := mirrorRetryFirst, false
	var retry <-chan time.Time
	for {
		select {
		case <-mi.wake:
			if failing {
				continue // the retry timer resumes appending
			}
		case <-retry:
			retry = nil
		case <-watch.C:
			if !appended && !failing && !closed {
				if gone, err := mi.gone(); gone {
					if !mi.closedElsewhere(err) {
						return
					}
					closed = true
				}
			}
			appended = false
			continue
		}
		mi.mu.Lock()
		pending = append(pending, mi.q...)
		mi.q = nil
		mi.mu.Unlock()
		for len(pending) > 0 {
			part := pending[0]
			err := mi.append(n, part)
			var ce *store.InputSessionClosedError
			if errors.As(err, &ce) && ce.Appended {
				// Closed through another replica, and the part stored all
				// the same: the answer's end follows it (closedElsewhere).
				if !closed {
					closed = true
					if !mi.closedElsewhere(err) {
						return
					}
				}
				err = nil
			}
			if errors.Is(err, store.ErrNotFound) {
				mi.closedElsewhere(err)
				return
			}
			if err != nil {
				if mi.givesUp() {
					mi.stop()
					s.m.log.Error("sharing a streaming-input answer with the other replicas failed; their readers will not see it end",
						"session", store.RedactID(s.id), "error", err)
					return
				}
				if !failing {
					s.m.log.Warn("sharing a streaming-input answer with the other replicas failed; retrying",
						"session", store.RedactID(s.id), "error", err)
				}
				failing = true
				retry = time.After(backoff)
				backoff = min(2*backoff, mirrorRetryMax)
				break
			}
			if failing {
				s.m.log.Info("sharing a streaming-input answer with the other replicas works again", "session", store.RedactID(s.id))
			}
			failing, backoff = false, mirrorRetryFirst
			pending = pending[1:]
			n, appended = n+1, true
			if part.Kind == store.ResultEnd {
				return
			}
		}
	}
}

// givesUp tells the mirror to stop retrying: the gateway shuts down (Close
// must not be held up), or the session is over here and its record has
// expired in the store by now, so no reader can follow the answer any more.
func (mi *mirror) givesUp() bool {
	s := mi.s
	if s.m.isClosing() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.now().After(s.expiresAt) || (s.closed && !s.keepStored)
}

// gone tells whether the store no longer has the session, and the store's
// answer that says so (a store that cannot answer is not taken for one that
// lost it).
func (mi *mirror) gone() (bool, error) {
	ctx, cancel := context.WithTimeout(mi.s.m.base, 5*time.Second)
	defer cancel()
	_, err := mi.s.m.shared.GetInputSession(ctx, mi.s.id)
	return errors.Is(err, store.ErrNotFound), err
}

// closedElsewhere ends an answer whose session was deleted (or closed)
// through another replica, as a delete (or the same close) here would: its
// readers get the cancellation, or the error the other replica recorded.
// A close recorded in the store still takes the answer's parts, the end
// included, which every replica's readers follow (closeSessionScript): it
// reports that the mirror goes on. A session gone without a record of why
// has lost its answer's parts too: the mirror stops.
func (mi *mirror) closedElsewhere(err error) (goesOn bool) {
	_, _, goesOn = closedElsewhere(err)
	if !goesOn {
		mi.stop()
	}
	mi.s.mu.Lock()
	defer mi.s.mu.Unlock()
	if !mi.s.closed {
		if goesOn {
			mi.s.m.log.Info("streaming-input session deleted or closed through another replica; ending its answer", "session", store.RedactID(mi.s.id))
		}
		mi.s.goneLocked(err) // without a recorded close: the store lost it
	}
	return goesOn
}

// append writes one part (an append already applied is skipped by the
// store, so retrying one is harmless).
func (mi *mirror) append(n int64, part store.ResultPart) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return mi.s.m.shared.AppendResult(ctx, mi.s.id, n, part)
}

// retryRecordEnd writes the record of an answer's end that dispatchDone
// could not write, with the mirror's backoff, until it is written, the
// session is gone, or retrying no longer serves anyone (the gateway shuts
// down, the session closed or expired). Other replicas report the answer's
// state from that record.
func (s *session) retryRecordEnd() {
	defer s.m.wg.Done()
	backoff := mirrorRetryFirst
	for {
		select {
		case <-time.After(backoff):
		case <-s.m.base.Done():
			return
		}
		backoff = min(2*backoff, mirrorRetryMax)
		s.mu.Lock()
		if s.closed || s.m.isClosing() || s.m.now().After(s.expiresAt) {
			s.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(s.m.base, 5*time.Second)
		err := s.writeRecordLocked(ctx)
		cancel()
		s.mu.Unlock()
		if err == nil || errors.Is(err, store.ErrNotFound) {
			if err == nil {
				s.m.log.Info("recorded the end of the answer after retrying", "session", store.RedactID(s.id))
			}
			return
		}
	}
}

func (mi *mirror) stop() {
	mi.mu.Lock()
	mi.broken, mi.q = true, nil
	mi.mu.Unlock()
}

// followLocked gives the session a copy of the answer another replica
// runs, fed from the store. The copy becomes the session's result once its
// head (status, headers, what the upstream saw) has arrived, so readers
// see the same headers as on the replica running it.
func (s *session) followLocked() {
	res := newResult(s.tpl, s.m.opts.ResultBuffer, s.m.opts.MaxJSONDepth)
	s.following = true
	s.m.wg.Add(1)
	go s.follow(res)
}

// followHeadWait bounds how long a status request waits for the head of
// an answer another replica runs (awaitFollowedHead).
const followHeadWait = 2 * time.Second

// awaitFollowedHead waits, at most followHeadWait, for the head of an
// answer this replica has just begun to follow: a replica that loads a
// session to answer GET …/{id} starts following its answer then, and the
// answer's state (and what the upstream saw, should the record not hold
// it) is in the head. An answer whose runner has no head yet stays pending.
func (s *session) awaitFollowedHead(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, followHeadWait)
	defer cancel()
	for {
		s.mu.Lock()
		waiting, ch := s.following && s.res == nil && !s.closed, s.changed
		s.mu.Unlock()
		if !waiting {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-s.m.base.Done():
			return
		}
	}
}

// follow feeds res from the store until the answer ends. The runner's
// sign of life is the session's record, which it keeps alive while the
// answer runs (onIdle), not the answer's bytes: an upstream may be quiet
// for long (a reasoning model, with the idle timeout raised for it). The
// follower reads the record whenever a wait brings no part, and at least
// as often as the runner refreshes it; a record that expired while the
// answer ran here tells that the runner died, one gone earlier that the
// store lost it (goneLocked), and either ends the copy with
// stream_incomplete. So does IdleTimeout with neither a part nor a record
// read (the store unreachable), saying so (errStoreUnreadable). After a close recorded in the store, the copy still
// follows the runner to the end it writes: the readers here get the same
// events, and the same terminal event, as the runner's. The runner hears
// of the close at its next append, or when it checks after mirrorWatch of
// quiet; one that cannot reach the store meanwhile (a partition, a frozen
// Redis) writes its end once it can, even an end it gave its own readers
// before it heard, so the copy waits for it as long as for any runner:
// IdleTimeout of silence, after which it ends with the close's own error.
func (s *session) follow(res *result) {
	defer s.m.wg.Done()
	published := false
	publish := func() {
		if published {
			return
		}
		published = true
		s.mu.Lock()
		if s.res == nil {
			s.res = res
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
	defer publish()
	const wait = 2 * time.Second
	cursor, last, backoff := "", time.Now(), 100*time.Millisecond
	synced := time.Now() // the last read of the record
	for {
		if s.m.base.Err() != nil {
			res.finish(s.m.shutdownErr)
			return
		}
		s.mu.Lock()
		closed, closeErr, followsOn := s.closed, s.closeErr, s.followsAfterCloseLocked()
		s.mu.Unlock()
		if closed && !followsOn {
			res.finish(closeErr)
			return
		}
		if time.Since(last) > s.m.opts.IdleTimeout {
			if closed {
				res.finish(closeErr)
			} else {
				// A runner that died is told by its record expiring
				// (goneLocked); here not even the record could be read.
				res.finish(errStoreUnreadable())
			}
			return
		}
		ctx, cancel := context.WithTimeout(s.m.base, wait+5*time.Second)
		parts, next, err := s.m.shared.ReadResult(ctx, s.id, cursor, wait)
		cancel()
		if err != nil {
			if s.m.base.Err() == nil {
				s.m.log.Warn("following a streaming-input answer from the shared store failed; retrying", "session", store.RedactID(s.id), "error", err)
			}
			select {
			case <-time.After(backoff):
			case <-s.m.base.Done():
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		cursor = next
		if len(parts) > 0 {
			last = time.Now()
		}
		if len(parts) == 0 || time.Since(synced) >= s.m.opts.IdleTimeout/runnerRefreshes {
			// Nothing within the wait: a session deleted through another
			// replica gets no part any more (its runner's appends fail), so
			// only its record tells; and the record is the runner's sign of
			// life, read as often as the runner refreshes it.
			ctx, cancel := context.WithTimeout(s.m.base, 5*time.Second)
			if s.syncShared(ctx) {
				last = time.Now()
			}
			cancel()
			synced = time.Now()
		}
		for _, p := range parts {
			switch p.Kind {
			case store.ResultHead:
				var h resultHead
				if err := json.Unmarshal(p.Data, &h); err != nil || h.Status == 0 {
					res.finish(errSharedStore(nil))
					return
				}
				s.mu.Lock()
				s.saw = upstreamSaw{chunks: h.Chunks, bytes: h.Bytes, complete: h.Complete}
				if h.At != 0 {
					s.saw.at = time.Unix(0, h.At)
				}
				s.mu.Unlock()
				for k, v := range h.Header {
					res.Header()[k] = v
				}
				res.WriteHeader(h.Status)
				publish()
			case store.ResultData:
				_, _ = res.Write(p.Data)
			case store.ResultEnd:
				res.end()
				return
			}
		}
	}
}
