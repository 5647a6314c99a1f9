package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/logtext"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/store"
)

// Resumable streams (docs/ARCHITECTURE.md "Resumable streams", README
// "Resuming a stream"). Every Responses stream the gateway writes keeps its
// client-visible event log — the events exactly as the client got them,
// renumbered and spliced — so that GET /v1/responses/{id}?stream=true&
// starting_after=N (or a response.resume WebSocket frame) can replay what
// came after N and follow the live stream to its terminal event. Logs are
// bounded per response and in total, and expire ResumeOptions.Window after
// their last event; with a StreamLogStore they are also written to the
// store, so a stream can be resumed after a restart and on another replica.

// ResumeOptions configures resumable streams and the responses resource API.
type ResumeOptions struct {
	// Window is how long a log is kept after its last event; default 10m;
	// negative: no logs (resume, background and the resource API for
	// Sluice-served responses are off).
	Window time.Duration
	// MaxBytes bounds one response's log (default 8 MiB): a longer stream
	// can no longer be resumed.
	MaxBytes int64
	// MemoryBytes bounds all logs in memory (default 256 MiB); the oldest
	// ended logs are evicted first.
	MemoryBytes int64
	// Store, when set, keeps the logs durably (streams.durable).
	Store store.StreamLogStore
	// DetachGrace is how long a stream keeps running after its client went
	// away, for the client to resume it (a resumer attached at the end of it
	// keeps it running); 0: the stream is cancelled at once. Background
	// requests always run to their end (or their cancel).
	DetachGrace time.Duration
	// Replica names this gateway in durable logs: a log that another
	// replica is still writing is followed through the store.
	Replica string
}

const (
	defaultResumeWindow   = 10 * time.Minute
	defaultResumeMaxBytes = 8 << 20
	defaultResumeMemory   = 256 << 20
	// durableFlushEvery batches a live log's events into one store write
	// (the first write, as the log opens, goes at once: scheduleFlush).
	durableFlushEvery = 100 * time.Millisecond
	// storePollEvery is how often a resumer following a log through the
	// store (another replica writes it) looks for new events.
	storePollEvery = 200 * time.Millisecond
	// recordSaveEvery is how often a live log's record (the Response so
	// far) is rewritten while events come; another replica reads its age.
	recordSaveEvery = time.Second
	// followRenewEvery is how often a resumer following a log through the
	// store renews its mark (one store write), which holds followLease:
	// the replica running the stream keeps it past detach_grace while the
	// mark holds.
	followRenewEvery = time.Second
	followLease      = 3 * followRenewEvery
	// cancelWait bounds how long a cancel waits for the response's
	// terminal event (on another replica: its terminal record).
	cancelWait = 5 * time.Second
	// storeCheckTimeout bounds a store read made off any request.
	storeCheckTimeout = 5 * time.Second
)

// abandonedMessage says why a stored log that will never end is reported
// failed (a resume's error event, GET, cancel).
const abandonedMessage = "the gateway that ran this response stopped before it ended; send the request again"

// errCancelled is the cause a cancelled background response's work is
// stopped with.
var errCancelled = errors.New("the response was cancelled")

// streamLogs is the set of logs in memory.
type streamLogs struct {
	opts ResumeOptions
	now  func() time.Time
	log  interface {
		Info(string, ...any)
		Warn(string, ...any)
		Error(string, ...any)
	}

	bytes atomic.Int64 // event bytes held by every log
	// writes counts durable writes under way (Shutdown waits for them) and
	// watches cancel-request watchers.
	writes sync.WaitGroup
	// stopping is closed when Shutdown waits for the durable writes: a log
	// whose end is still being written again (resealLater) makes its last
	// attempt then.
	stopping chan struct{}
	stopOnce sync.Once
	// unsealedLog and writeFailLog space the lines about logs not written
	// (ended before they were durable; any write): during a store outage
	// that is every durable stream.
	unsealedLog, writeFailLog logtext.Every

	// mu guards the map; it is taken before a log's own mu, never after.
	mu        sync.Mutex
	logs      map[string]*streamLog
	lastSweep time.Time

	// endedQ holds the logs in the order they ended (about the order of
	// their last event): eviction and expiry take them from the front
	// without scanning every log. qmu is a leaf lock.
	qmu    sync.Mutex
	endedQ []*streamLog
}

func newStreamLogs(opts ResumeOptions, now func() time.Time, log interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
}) *streamLogs {
	if opts.Window < 0 {
		return nil
	}
	setDefault(&opts.Window, defaultResumeWindow)
	setDefault(&opts.MaxBytes, defaultResumeMaxBytes)
	setDefault(&opts.MemoryBytes, defaultResumeMemory)
	return &streamLogs{opts: opts, now: now, log: log, logs: map[string]*streamLog{}, stopping: make(chan struct{}),
		unsealedLog: logtext.Every{Interval: 10 * time.Second}, writeFailLog: logtext.Every{Interval: 10 * time.Second}}
}

// streamLog is one response's log.
type streamLog struct {
	hub        *streamLogs
	id         string
	owner      string // the creating key's hash: only it may read the log
	background bool
	// memoryOnly: the client sent store:false. Nothing of the log (events,
	// record, input items) is written to the store or shared with other
	// replicas, so a restart forgets it (README "Privacy").
	memoryOnly bool
	// forgetAtEnd: store:false without background. The log serves a resume
	// only while the stream runs and is forgotten at its end. A background
	// store:false log is kept in memory for Window after its end like any
	// other, for its client to poll, as OpenAI keeps such a response briefly.
	forgetAtEnd bool
	input       []byte // the request's input items, a JSON array
	created     time.Time

	mu      sync.Mutex
	events  []store.StreamEvent // events[i].Seq == i
	bytes   int64
	dropped bool // outgrew MaxBytes or the memory budget: no longer resumable
	// droppedEnd is, once dropped, the sequence number after the last event
	// logged: a resume at or past the end is answered as for a log that
	// kept its events (unstreamableLocked), not with the dropped error.
	droppedEnd int64
	ended      bool
	lastAt     time.Time
	final      []byte        // the Response object, once ended (or answered as JSON)
	wake       chan struct{} // closed and replaced at the next event once a follower waits on it
	waiting    bool          // a follower holds wake
	done       chan struct{} // closed when the log ends
	followers  int
	// sealing: the terminal event came, and the log ends once the store has
	// it (seal); sealed is that event meanwhile (nil when the log does not
	// keep it), kept out of events so that no resumer sees it before then.
	sealing bool
	sealed  *store.StreamEvent
	// snapshot renders the Response so far (status queued or in_progress,
	// as queued says); nil once ended. It locks the client stream: never
	// call it under mu.
	snapshot func() []byte
	// queued: the last event logged is a lifecycle event whose Response is
	// queued (the upstream has not started the response yet).
	queued bool
	// cancel stops the work feeding the log (a background response's).
	cancel context.CancelCauseFunc
	// detachTimer ends a detached stream's grace.
	detachTimer *time.Timer
	// stored: a write of the record succeeded, so other replicas may know
	// the response. deleted: DELETE forgot it (here or, through the store,
	// on another replica): nothing of it is written to the store again.
	stored, deleted bool

	arena []byte // event data, appended: one allocation per arenaChunk, not per event

	// flushMu: one durable write at a time, in order. It is taken under
	// the client stream's lock (seal) and is never held while taking it:
	// the Response so far is rendered (snapshot) before flushMu.
	flushMu sync.Mutex
	flushed int64     // events already in the store
	savedAt time.Time // when the record was last written (zero: never); under mu
	timer   *time.Timer
	// recordWanted: the next flush writes the record too (touch; under mu).
	recordWanted bool
	// flushBegun: the log's first write was scheduled (under mu). That one
	// goes at once, the later ones every durableFlushEvery.
	flushBegun bool

	// The sequence numbers a durable log's client may have been sent are
	// bounded in its record, ahead of the events (store.StreamLog.
	// IssuedBelow): a replica that finds the log abandoned numbers the
	// error ending a resume past every event the client got, stored or not
	// (followStored). issuedBelow is the bound the next record write
	// carries, raised issueAhead past an event that comes within half of
	// it; confirmedBelow is the bound of the last write that succeeded
	// (every record the store can hold carries at least issueAhead). An
	// event at or past confirmedBelow waits for a write (confirmIssued),
	// unless one failed since the last that succeeded (issueUnconfirmed):
	// a store that is down does not stall the stream. savedResp is the
	// Response so far that write carries again (the last one written; the
	// client stream's lock is held there, so no newer one can be
	// rendered). All under mu.
	issuedBelow, confirmedBelow int64
	issueUnconfirmed            bool
	savedResp                   []byte
}

// issueAhead is how far past an event a durable log's record bounds the
// sequence numbers issued (streamLog.issuedBelow): a write per issueAhead/2
// events, off the stream's goroutine while the store keeps up.
const issueAhead = 256

// open starts the log of a response (replacing an older one with the same
// id, e.g. a WebSocket client that re-sent a request). The input items are
// kept when the memory budget has room for them (charged to the log).
// memoryOnly (store:false) keeps the log out of the store (streamLog).
func (h *streamLogs) open(id, owner string, background, memoryOnly bool, input []byte) *streamLog {
	now := h.now()
	l := &streamLog{hub: h, id: id, owner: owner, background: background, memoryOnly: memoryOnly,
		forgetAtEnd: memoryOnly && !background, created: now, lastAt: now,
		wake: make(chan struct{}), done: make(chan struct{}),
		issuedBelow: issueAhead, confirmedBelow: issueAhead}
	if n := int64(len(input)); n <= h.opts.MaxBytes && h.charge(nil, n) {
		l.input, l.bytes = input, n
	}
	h.mu.Lock()
	if old := h.logs[id]; old != nil {
		h.bytes.Add(-old.bytesLocked())
	}
	h.logs[id] = l
	if now.Sub(h.lastSweep) > 10*time.Second {
		h.lastSweep = now
		h.sweepLocked(now)
	}
	h.mu.Unlock()
	// A stream is watched too, not only a background run: a stream finds
	// a DELETE made on another replica at its next write, but one that
	// sends nothing for a while (a continuation that restarts the answer
	// replays what its client already has) would otherwise run on, and
	// keep its upstream generating, until then (README "The resource API").
	if l.durable() && store.IsShared(h.opts.Store) {
		h.writes.Add(1)
		go func() {
			defer h.writes.Done()
			h.watchCancel(l)
		}()
	}
	return l
}

// durable reports whether the log is written to the store: there is one
// (streams.durable) and the client did not send store:false.
func (l *streamLog) durable() bool {
	return l.hub.opts.Store != nil && !l.memoryOnly
}

// cancelCheckEvery is how often a response run on this replica looks for a
// cancel (CancelStreamLog) or a DELETE asked on another one.
const cancelCheckEvery = 250 * time.Millisecond

// watchCancel stops a response when another replica asks the store to
// cancel it (background) or deletes it.
func (h *streamLogs) watchCancel(l *streamLog) {
	t := time.NewTicker(cancelCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
		rec, err := h.opts.Store.GetStreamLog(ctx, l.id)
		cancel()
		switch {
		case err == nil && rec.CancelRequested:
			l.stop(errCancelled)
			return
		case errors.Is(err, store.ErrStreamLogDeleted):
			h.deletedElsewhere(l)
			return
		}
	}
}

// deletedElsewhere stops and forgets a log that another replica deleted
// through the store (README: DELETE "forgets it (and cancels it if it
// still runs)"): this process writes nothing of it back and serves nothing
// of it from memory.
func (h *streamLogs) deletedElsewhere(l *streamLog) {
	l.mu.Lock()
	l.deleted = true
	l.mu.Unlock()
	l.stop(errCancelled)
	h.forget(l)
}

// shared is the store when replicas share it, else nil.
func (h *streamLogs) shared() store.SharedStreamLogStore {
	if sh, ok := h.opts.Store.(store.SharedStreamLogStore); ok && store.IsShared(sh) {
		return sh
	}
	return nil
}

// followedThroughStore reports whether a resumer on another replica
// follows l through the store (its FollowStreamLog mark still holds).
func (h *streamLogs) followedThroughStore(l *streamLog) bool {
	if h.shared() == nil || l.memoryOnly {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
	defer cancel()
	rec, err := h.opts.Store.GetStreamLog(ctx, l.id)
	return err == nil && rec.FollowedUntil.After(h.now())
}

// stop cancels the work feeding a log that has not ended; it reports
// whether there was any.
func (l *streamLog) stop(cause error) bool {
	l.mu.Lock()
	stop := l.cancel
	if l.ended {
		stop = nil
	}
	l.mu.Unlock()
	if stop != nil {
		stop(cause)
	}
	return stop != nil
}

// wait waits for the durable writes under way (Shutdown), up to ctx. The
// logs whose end the store still lacks get one last attempt.
func (h *streamLogs) wait(ctx context.Context) {
	h.stopOnce.Do(func() { close(h.stopping) })
	done := make(chan struct{})
	go func() {
		h.writes.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// sweepLocked forgets ended logs past their window.
func (h *streamLogs) sweepLocked(now time.Time) {
	for {
		l := h.frontEnded()
		if l == nil {
			return
		}
		l.mu.Lock()
		expired := now.Sub(l.lastAt) > h.opts.Window
		l.mu.Unlock()
		if !expired {
			return
		}
		h.popEnded()
		h.forgetLocked(l)
	}
}

// frontEnded is the log that ended first among those queued, or nil.
func (h *streamLogs) frontEnded() *streamLog {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	if len(h.endedQ) == 0 {
		return nil
	}
	return h.endedQ[0]
}

func (h *streamLogs) popEnded() {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	h.endedQ[0] = nil
	h.endedQ = h.endedQ[1:]
}

// forgetLocked drops l from the map unless a newer log took its id.
// forget drops l from memory now, if it is still the log of its id.
func (h *streamLogs) forget(l *streamLog) {
	h.mu.Lock()
	h.forgetLocked(l)
	h.mu.Unlock()
}

func (h *streamLogs) forgetLocked(l *streamLog) {
	if h.logs[l.id] == l {
		h.bytes.Add(-l.bytesLocked())
		delete(h.logs, l.id)
	}
}

// bytesLocked reads l.bytes (h.mu held; l.mu taken).
func (l *streamLog) bytesLocked() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// get returns the live or recent log of id that owner may read.
func (h *streamLogs) get(id, owner string) *streamLog {
	h.mu.Lock()
	l := h.logs[id]
	h.mu.Unlock()
	if l == nil || l.owner != owner {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended && h.now().Sub(l.lastAt) > h.opts.Window {
		return nil
	}
	return l
}

// current is get for a resource call. With a store that replicas share,
// a log this process holds is checked against the store first, so that
// nothing is served from memory that another replica changed
// (docs/ARCHITECTURE.md §7): a log another replica deleted is stopped and
// forgotten here, and so is an ended one the store no longer has (expired,
// or lost); nil then. A live log the store lost is still served (its next
// write puts the record back). When the store does not answer, the log is
// served from memory, ended or not: this process holds it whole, and the
// replica that ran a response reads it as it stood, as other replicas do
// once the store is back (README "Scale-out with Redis").
func (h *streamLogs) current(ctx context.Context, id, owner string) *streamLog {
	l := h.get(id, owner)
	if l == nil || l.memoryOnly || h.shared() == nil {
		return l
	}
	l.mu.Lock()
	stored, ended := l.stored, l.ended
	l.mu.Unlock()
	if !stored { // never written: no other replica knows the response
		return l
	}
	_, err := h.opts.Store.GetStreamLog(ctx, id)
	switch {
	case err == nil:
		return l
	case errors.Is(err, store.ErrStreamLogDeleted):
		h.deletedElsewhere(l)
		return nil
	case !ended:
		return l
	case errors.Is(err, store.ErrNotFound):
		h.forget(l)
		return nil
	}
	h.log.Warn("reading a stream log failed; the response is served from this process's log", "response_id", LogID(id), "error", err)
	return l
}

// remove forgets the log of id (memory and store).
func (h *streamLogs) remove(ctx context.Context, id string) {
	h.mu.Lock()
	l := h.logs[id]
	if l != nil {
		h.bytes.Add(-l.bytesLocked())
		delete(h.logs, id)
	}
	h.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		l.deleted = true
		l.mu.Unlock()
	}
	if h.opts.Store == nil || l != nil && l.memoryOnly {
		return // a memory-only log has nothing in the store to delete
	}
	if l != nil {
		// A write under way lands before the delete, and none after it.
		l.flushMu.Lock()
		defer l.flushMu.Unlock()
	}
	if err := h.opts.Store.DeleteStreamLog(ctx, id); err != nil {
		h.log.Warn("deleting a stream log failed", "response_id", LogID(id), "error", err)
	}
}

// charge accounts n more bytes to the logs in memory; false when the
// budget is spent even after evicting ended logs (the bytes are not
// charged then). Called without any log's mu held.
func (h *streamLogs) charge(except *streamLog, n int64) bool {
	if h.bytes.Add(n) <= h.opts.MemoryBytes {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.bytes.Load() > h.opts.MemoryBytes {
		if !h.evictOldestEndedLocked(except) {
			h.bytes.Add(-n)
			return false
		}
	}
	return true
}

func (h *streamLogs) evictOldestEndedLocked(except *streamLog) bool {
	for {
		o := h.frontEnded()
		if o == nil || o == except {
			return false
		}
		h.popEnded()
		if h.logs[o.id] == o {
			h.forgetLocked(o)
			return true
		}
	}
}

// append adds the event numbered seq; terminal events end the log.
func (l *streamLog) append(seq int64, name string, data []byte, terminal bool) {
	n := int64(len(data) + len(name) + 64)
	charged := l.hub.charge(l, n)
	// The terminal event's Response (GET /v1/responses/{id}) is kept apart
	// from the events, and charged on its own: it outlives a dropped log.
	var final string
	if terminal {
		final = gjson.GetBytes(data, "response").Raw
		if !l.hub.charge(l, int64(len(final))) {
			final = ""
		}
	}
	queued := isLifecycleEvent(name) && gjson.GetBytes(data, "response.status").Str == "queued"
	l.mu.Lock()
	l.queued = queued
	if l.ended || l.sealing {
		l.mu.Unlock()
		l.hub.bytes.Add(-int64(len(final)))
		if charged {
			l.hub.bytes.Add(-n)
		}
		return
	}
	counted := charged // against the memory budget
	if l.deleted {
		// Forgotten while it runs (DELETE): its followers still get the
		// rest, but the memory budget no longer counts it (forgetting it
		// refunded what it held then).
		l.hub.bytes.Add(-int64(len(final)))
		if counted {
			l.hub.bytes.Add(-n)
		}
		charged, counted = true, false
	}
	// A durable log's terminal event is in the store before the log ends,
	// and before the client stream, which logs each event before it writes
	// it, sends it (README "Durable").
	seal := terminal && l.durable() && !l.deleted
	switch {
	case l.dropped || seq != int64(len(l.events)):
		if l.dropped {
			l.droppedEnd = max(l.droppedEnd, seq+1)
		}
		if counted {
			l.hub.bytes.Add(-n)
		}
	case charged && l.bytes+n <= l.hub.opts.MaxBytes:
		if l.events == nil {
			// Even a one-delta answer has about eight events: start there
			// rather than growing through 1, 2 and 4.
			l.events = make([]store.StreamEvent, 0, 8)
		}
		ev := store.StreamEvent{Seq: seq, Name: name, Data: l.keep(data)}
		if seal {
			// A copy, so that only the sealed event is on the heap: the
			// address of ev itself made every event an allocation.
			sealed := ev
			l.sealed = &sealed
		} else {
			l.events = append(l.events, ev)
		}
		l.bytes += n
	default:
		if counted {
			l.hub.bytes.Add(-n)
		}
		l.dropLocked()
		l.droppedEnd = seq + 1
	}
	if terminal {
		l.lastAt = l.hub.now() // the window counts from the end
		l.bytes += int64(len(final))
		if seal {
			l.sealing = true
			if final != "" {
				l.final = []byte(final)
			}
			if l.timer != nil && l.timer.Stop() { // seal writes what it would have
				l.timer = nil
				l.hub.writes.Done()
			}
		} else {
			l.endLocked(final)
		}
	}
	l.wakeLocked()
	ended := l.ended
	var mustConfirm, raised bool
	if !ended && !seal && l.durable() && !l.deleted {
		if seq+issueAhead/2 >= l.issuedBelow {
			l.issuedBelow, l.recordWanted, raised = seq+issueAhead, true, true
			if l.timer != nil && l.timer.Stop() {
				// The raised bound goes out in the flush already due, now
				// rather than at its batch time: the stream waits for it
				// only if the store is slower than its next issueAhead/2
				// events. (A timer that already fired is flushing.)
				l.timer.Reset(0)
			}
		}
		mustConfirm = seq >= l.confirmedBelow && !l.issueUnconfirmed
	}
	l.mu.Unlock()
	switch {
	case l.forgetAtEnd && ended:
		l.hub.forget(l) // its followers keep reading what they hold
	case seal:
		l.seal()
	case l.durable() && !ended:
		if mustConfirm {
			l.confirmIssued(seq)
		}
		l.scheduleFlush(raised)
	}
}

// confirmIssued writes the record now, with issuedBelow past seq, before
// the client is sent event seq: the timed writes, which raise it off the
// stream, fell behind. It runs under the client stream's lock (append), so
// the record carries the Response last written (savedResp). A write that
// fails stops the waits (issueUnconfirmed) until one succeeds: the event
// goes out, and a resumer after a crash may then number its error as an
// event the client got, as without the bound.
func (l *streamLog) confirmIssued(seq int64) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	done, resp := l.confirmedBelow > seq || l.issueUnconfirmed || l.ended || l.deleted, l.savedResp
	l.mu.Unlock()
	if done {
		return
	}
	err := l.hub.persist(l, false, resp)
	switch {
	case err == nil, errors.Is(err, store.ErrStreamLogDeleted):
	default:
		l.mu.Lock()
		l.issueUnconfirmed = true
		l.mu.Unlock()
		l.hub.logWriteFailed(l.id, fmt.Errorf("writing the record ahead of event %d: %w", seq, err))
	}
}

// wakeLocked wakes the followers waiting for an event (l.mu held).
func (l *streamLog) wakeLocked() {
	if l.waiting { // no follower, no channel: nothing allocated per event
		close(l.wake)
		l.wake, l.waiting = make(chan struct{}), false
	}
}

// seal writes the log's new events, its terminal event and its record,
// ended, to the store, and then ends the log here. It runs in append, under
// the client stream's lock, so the client gets the terminal event (and a
// resumer, GET or a cancel sees the response end) only once a restart would
// find it: a client never sees a response complete that reads as failed
// after a crash (README "Durable", docs/ARCHITECTURE.md §7). A write that
// fails is logged, and the terminal event still goes out: the response did
// end so, and its client gets what it was sent, as with an anchor that
// could not be made durable. The store gets the rest of the log later
// (resealLater): until then another replica, or a restart, reads the
// response as it stood before.
func (l *streamLog) seal() {
	h := l.hub
	h.writes.Add(1)
	err := l.write(false)
	h.writes.Done()
	l.mu.Lock()
	if l.sealed != nil {
		l.events = append(l.events, *l.sealed)
		l.sealed = nil
	}
	l.sealing = false
	l.endLocked("") // l.final is set
	l.wakeLocked()
	l.mu.Unlock()
	if err != nil {
		if n, ok := h.unsealedLog.Allow(time.Now()); ok {
			h.log.Error("a stream ended before its log was durable: other replicas, or this one after a restart, read it as unfinished until a retry writes it",
				"response_id", LogID(l.id), "error", err, "streams", n)
		}
		h.writes.Add(1)
		go func() {
			defer h.writes.Done()
			l.resealLater()
		}()
	}
}

const (
	// resealFirst and resealMax bound the backoff between the attempts to
	// write the end of a log whose seal failed (a store briefly down).
	resealFirst = 250 * time.Millisecond
	resealMax   = 30 * time.Second
)

// resealLater writes what the store lacks of an ended log (its last events,
// its ended record) once the store takes it, retrying with backoff for as
// long as this process keeps the log (resume_window, the memory budget, no
// DELETE): otherwise the other replicas sharing the store read a response
// its client saw end as still running, then failed, or not at all (README
// "Durable"). Shutdown makes it try once more and stop.
func (l *streamLog) resealLater() {
	h := l.hub
	wait := resealFirst
	for {
		last := false
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-storeReachable(h.opts.Store):
			// The store is back: other replicas read this response as
			// unfinished, then abandoned, until this write lands.
			t.Stop()
			wait = resealFirst
		case <-h.stopping:
			t.Stop()
			last = true
		}
		if !h.keeps(l) { // expired, evicted or deleted: the store is to have none of it either
			return
		}
		err := l.write(false)
		switch {
		case err == nil && h.keeps(l): // (a DELETE meanwhile writes nothing, and is no success)
			h.log.Info("the end of a stream's log is durable after all", "response_id", LogID(l.id))
			return
		case err == nil:
			return
		case last:
			h.log.Warn("gave up writing the end of a stream's log: the gateway is shutting down", "response_id", LogID(l.id),
				"error", err)
			return
		}
		wait = min(2*wait, resealMax)
	}
}

// logWriteFailed says that a write of a stream log failed, at most every
// 10 s with the number of failures.
func (h *streamLogs) logWriteFailed(id string, err error) {
	if n, ok := h.writeFailLog.Allow(time.Now()); ok {
		h.log.Error("writing a stream log failed", "response_id", LogID(id), "error", err, "failures", n)
	}
}

// keeps reports whether l is still the log of its id here, not deleted
// and within its window.
func (h *streamLogs) keeps(l *streamLog) bool {
	h.mu.Lock()
	current := h.logs[l.id] == l
	h.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return current && !l.deleted && h.now().Sub(l.lastAt) <= h.opts.Window
}

// arenaChunk is the size of the buffers a log copies its events into.
const arenaChunk = 16 << 10

// keep copies data into the log's arena (l.mu held). Earlier events keep
// pointing into the chunks they were copied to.
func (l *streamLog) keep(data []byte) []byte {
	if len(l.arena)+len(data) > cap(l.arena) {
		// Chunks grow from 1 KiB to arenaChunk: a short stream stays small.
		l.arena = make([]byte, 0, max(min(max(2*cap(l.arena), 1<<10), arenaChunk), len(data)))
	}
	at := len(l.arena)
	l.arena = append(l.arena, data...)
	return l.arena[at:len(l.arena):len(l.arena)]
}

// next is the sequence number the log expects next.
func (l *streamLog) next() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.events))
}

// dropLocked gives up on the log's events: too large to keep.
func (l *streamLog) dropLocked() {
	l.dropped = true
	kept := int64(len(l.input)) // the input items stay (input_items)
	l.hub.bytes.Add(-(l.bytes - kept))
	l.events, l.bytes, l.arena = nil, kept, nil
	l.hub.log.Warn("a stream outgrew its resume log; it can no longer be resumed", "response_id", LogID(l.id),
		"resume_max_bytes", l.hub.opts.MaxBytes)
}

func (l *streamLog) endLocked(final string) {
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	if !l.forgetAtEnd { // forgotten at once (append), not swept after the window
		h := l.hub
		h.qmu.Lock()
		h.endedQ = append(h.endedQ, l)
		h.qmu.Unlock()
	}
	l.snapshot, l.savedResp = nil, nil
	if final != "" {
		l.final = []byte(final)
	}
	if l.detachTimer != nil {
		l.detachTimer.Stop()
	}
}

// answered records a response answered as JSON (no events).
func (h *streamLogs) answered(id, owner string, input, response []byte) {
	n := int64(len(response))
	if n > h.opts.MaxBytes || !h.charge(nil, n) {
		return // no room: the answer is not kept (GET asks the owner, if any)
	}
	l := h.open(id, owner, false, false, input)
	l.mu.Lock()
	l.savedAt = time.Now() // written below, ended
	l.bytes += n
	l.endLocked(string(response))
	l.mu.Unlock()
	if h.opts.Store != nil {
		if err := h.persist(l, true, response); err != nil && !errors.Is(err, store.ErrStreamLogDeleted) {
			h.logWriteFailed(l.id, err)
		}
	}
}

// response is the Response object as it stands: the final one once ended,
// else the snapshot of what was sent so far.
func (l *streamLog) response() (resp []byte, ended bool) {
	l.mu.Lock()
	final, ended, snap := l.final, l.ended, l.snapshot
	l.mu.Unlock()
	if ended || snap == nil {
		return final, ended
	}
	resp = snap()
	// The snapshot waits for the client stream's lock, which a stream
	// ending holds until its log ended (seal): a log that ended meanwhile
	// answers with its final Response, not the snapshot's guess of it.
	l.mu.Lock()
	if l.ended {
		resp, ended = l.final, true
	}
	l.mu.Unlock()
	return resp, ended
}

// ---- durable logs ----

// persist writes l's record, with resp as its Response (ended: the final
// one), to the store. On a shared store a record another replica deleted is
// not written back: the log is stopped and forgotten here too
// (deletedElsewhere) and the error is ErrStreamLogDeleted. The caller logs
// other failures.
func (h *streamLogs) persist(l *streamLog, ended bool, resp []byte) error {
	rec := store.StreamLog{ResponseID: l.id, Owner: l.owner, Background: l.background, Ended: ended, Response: resp,
		Input: l.input, Status: gjson.GetBytes(resp, "status").Str, CreatedAt: l.created,
		ExpiresAt: h.now().Add(h.opts.Window + time.Hour)}
	if ended {
		// The window counts from the log's end, also for an end written late
		// (resealLater): the store keeps it no longer than this process.
		l.mu.Lock()
		rec.ExpiresAt = l.lastAt.Add(h.opts.Window)
		l.mu.Unlock()
	}
	if rec.Status == "" {
		rec.Status = "in_progress"
	}
	l.mu.Lock()
	rec.IssuedBelow = l.issuedBelow
	l.mu.Unlock()
	put := h.opts.Store.PutStreamLog
	if sh := h.shared(); sh != nil {
		put = sh.PutStreamLogUnlessDeleted
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := put(ctx, rec); err != nil {
		if errors.Is(err, store.ErrStreamLogDeleted) {
			h.deletedElsewhere(l)
		}
		return err
	}
	l.mu.Lock()
	l.stored = true
	l.confirmedBelow, l.issueUnconfirmed = max(l.confirmedBelow, rec.IssuedBelow), false
	if !ended && resp != nil {
		l.savedResp = resp
	}
	l.mu.Unlock()
	return nil
}

// scheduleFlush writes the log's new events to the store soon (its end is
// written by seal), at once when now (a raised issued bound). The first
// write goes at once too, off the client stream:
// another replica that a client resumes on right after response.created
// finds the log in the store (README "Durable"), rather than an anchor
// without one until the first batch.
func (l *streamLog) scheduleFlush(now bool) {
	h := l.hub
	l.mu.Lock()
	if l.timer == nil {
		wait := durableFlushEvery
		if !l.flushBegun || now {
			wait, l.flushBegun = 0, true
		}
		h.writes.Add(1)
		l.timer = time.AfterFunc(wait, func() {
			defer h.writes.Done()
			l.mu.Lock()
			l.timer = nil
			l.mu.Unlock()
			l.flush(false)
		})
	}
	l.mu.Unlock()
}

// recordDue reports whether a flush writes the record of a log that runs:
// the first time (events need it), when asked (save), at each flush once
// the log dropped its events (the record is all the store gets), and else
// at most every recordSaveEvery, so that a poll on another replica sees the
// output grow. A log that ends writes its record in the flush itself.
func (l *streamLog) recordDue(now bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.sealing {
		return false
	}
	wanted := l.recordWanted
	l.recordWanted = false
	return now || wanted || l.dropped || l.savedAt.IsZero() || time.Since(l.savedAt) > recordSaveEvery
}

// touch has the next flush (within durableFlushEvery, off the caller's
// goroutine) write the record of a durable log that runs, though no event
// came: another replica takes a shared log whose record and events are
// both older than timeouts.idle for one its gateway gave up
// (streamLogs.abandoned), and a continuation that passes through targets
// which fail before adding anything sends no event while it runs. The
// continuation touches the log as each of its attempts begins (forward).
func (l *streamLog) touch() {
	if l == nil || !l.durable() {
		return
	}
	l.mu.Lock()
	l.recordWanted = true
	l.mu.Unlock()
	l.scheduleFlush(false)
}

// flush is write for a log that runs: a failure is logged, and the next
// flush writes what this one could not.
func (l *streamLog) flush(saveRecord bool) {
	if err := l.write(saveRecord); err != nil {
		l.hub.logWriteFailed(l.id, err)
	}
}

// write writes the log's new events to the store, after its record when one
// is due (recordDue; saveRecord: now). Once the log ends (it ended, or its
// terminal event is being sealed) the events include the terminal one and
// the record is written again after them, ended, with the final Response.
// It returns the error of a write that failed; a log deleted, here or
// elsewhere, is not written, and is no error.
func (l *streamLog) write(saveRecord bool) error {
	// The Response so far is rendered before flushMu: rendering it locks the
	// client stream, which holds that lock while seal waits for flushMu.
	var sofar []byte
	if l.recordDue(saveRecord) {
		sofar, _ = l.response()
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	pending := l.events[min(l.flushed, int64(len(l.events))):]
	if l.sealed != nil {
		pending = append(pending[:len(pending):len(pending)], *l.sealed)
	}
	dropped := l.dropped
	// A flush timer that fires after the log ended (or began to) writes the
	// record ended too: never back to running, which a replica or a
	// restarted gateway would take for a gateway that stopped mid-stream.
	final := l.ended || l.sealing
	resp := sofar
	if final {
		resp = l.final
	}
	// An ended log whose record never reached the store (it ended while the
	// store was down) needs the record before its events too.
	first := l.savedAt.IsZero() || final && !l.stored
	deleted := l.deleted
	l.mu.Unlock()
	if deleted {
		return nil // DELETE forgot it: nothing is written back
	}
	h := l.hub
	// The record goes first (events need it, and a stream that ended before
	// its first timed flush has none yet).
	if first || !final && sofar != nil {
		err := h.persist(l, false, resp)
		l.mu.Lock()
		l.savedAt = time.Now()
		l.mu.Unlock()
		switch {
		case errors.Is(err, store.ErrStreamLogDeleted):
			return nil
		case err != nil:
			return fmt.Errorf("writing the record: %w", err)
		}
	}
	if len(pending) > 0 && !dropped {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.opts.Store.AppendStreamEvents(ctx, l.id, pending[0].Seq, pending)
		cancel()
		switch {
		case errors.Is(err, store.ErrStreamLogDeleted):
			h.deletedElsewhere(l)
			return nil
		case errors.Is(err, store.ErrNotFound):
			// The store lost the record, not by a DELETE (its tombstone would
			// say so): a restart without persistence, an eviction. This
			// process has every event, so the next write puts the record
			// back and all of them, rather than leaving a response its
			// client saw unknown to every replica.
			l.mu.Lock()
			l.stored, l.savedAt, l.flushed = false, time.Time{}, 0
			l.mu.Unlock()
			return fmt.Errorf("writing events from %d: the store lost the log; it is written again: %w", pending[0].Seq, err)
		case err != nil:
			return fmt.Errorf("writing events from %d: %w", pending[0].Seq, err)
		}
		l.mu.Lock()
		l.flushed = pending[len(pending)-1].Seq + 1
		l.mu.Unlock()
	}
	if !final {
		return nil
	}
	if err := h.persist(l, true, resp); err != nil && !errors.Is(err, store.ErrStreamLogDeleted) {
		return fmt.Errorf("writing the ended record: %w", err)
	}
	return nil
}

// save writes the record now (a background response, before its id is
// answered: any replica can then find it); a memory-only log is not.
func (l *streamLog) save() {
	if l.durable() {
		l.flush(true)
	}
}

// ---- followers ----

// resumeSink is where a resumer's events go: SSE (flushed once per batch of
// logged events, not per event) or WebSocket frames.
type resumeSink interface {
	Event(name string, data []byte) error
	Flush() error
	KeepAlive(timeout time.Duration) error
}

// follow writes the events after `after` to out, then the live ones until
// the terminal event; it returns when the log ended, ctx is done or a write
// fails. out gets a keepalive once nothing was written for `every`. A log
// that ends before `after` (past its last event) returns that
// *apierr.Error when nothing was written yet, for the caller to answer
// with, and ends what was written with an error event otherwise.
func (l *streamLog) follow(ctx context.Context, after int64, out resumeSink, every time.Duration) error {
	l.addFollowers(1)
	defer l.addFollowers(-1)
	next := nextAfter(after)
	sent := false // anything written: the answer's status is committed
	ka := time.NewTicker(every)
	defer ka.Stop()
	for {
		p := l.pendingFrom(next)
		batch, ended, wake, nothing, lost := p.batch, p.ended, p.wake, p.nothing, p.lost
		for _, ev := range batch {
			if err := out.Event(ev.Name, ev.Data); err != nil {
				return err
			}
			next, sent = ev.Seq+1, true
		}
		if lost {
			if err := out.Event("error", resumeErrorEvent(next, "the stream outgrew the gateway's resume log (streams.resume_max_bytes); it cannot be resumed further")); err != nil {
				return err
			}
			return out.Flush()
		}
		if nothing != nil { // a resumer that came before the end
			if !sent {
				// Nothing was written yet: the caller answers with the
				// error itself (a 400, a WebSocket error frame), as for a
				// resume of a stream that had already ended.
				return nothing
			}
			return endWith(out, errorEventOf(next, nothing))
		}
		if len(batch) > 0 {
			// A keepalive comes once nothing was written for a period
			// (README "Continuation"), not every period while events flow.
			ka.Reset(every)
			continue // more may have come meanwhile
		}
		if err := out.Flush(); err != nil || ended {
			return err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-ka.C:
			if err := out.KeepAlive(every); err != nil {
				return err
			}
			sent = true
		}
	}
}

// isQueued reports whether the response has not been started yet: its
// Response so far is queued.
func (l *streamLog) isQueued() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued
}

// isLifecycleEvent reports whether name is that of an event that only
// says a response's status (no output).
func isLifecycleEvent(name string) bool {
	switch name {
	case "response.created", "response.queued", "response.in_progress":
		return true
	}
	return false
}

// addFollowers counts resumers following l (detachLocked keeps a followed
// stream going). Each locked section a follower runs is a function of its
// own that unlocks by defer, so that nothing it does, even a panic, leaves
// mu held: that would stop the stream's writer and every other follower
// and reader of the response for good.
func (l *streamLog) addFollowers(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.followers += n
}

// followState is what a follower at next reads of its log in one look.
type followState struct {
	batch []store.StreamEvent // the events from next on, logged so far
	ended bool
	wake  chan struct{} // closed at the next event or the end
	// nothing: the log ended with nothing from next on to send, ever (the
	// 400 a resume from next-1 gets), nil otherwise.
	nothing *apierr.Error
	// lost: the next event is one the log gave up (it outgrew MaxBytes). A
	// resumer at or past the end of a dropped log is not: it gets what any
	// resumer there gets (nothing, or the 400), since it misses no event.
	lost bool
}

// pendingFrom reads, under mu, what follow has to send from next on, and
// marks the log waited on.
func (l *streamLog) pendingFrom(next int64) followState {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p followState
	if next >= 0 && next < int64(len(l.events)) {
		p.batch = l.events[next:]
	}
	p.ended, p.wake = l.ended, l.wake
	if p.ended && len(p.batch) == 0 {
		p.nothing = l.unstreamableLocked(next - 1)
	}
	p.lost = p.nothing == nil && l.dropped && next < l.droppedEnd
	l.waiting = true
	return p
}

// maxStartingAfter is the largest starting_after a resume takes, over SSE
// and WebSocket alike: the largest integer a JSON number holds exactly
// (2^53-1, the most a JavaScript client can send), far past any stream's
// last event. Bounding it keeps the number of the event after it, which a
// follow counts from, a sequence number too (nextAfter).
const maxStartingAfter = 1<<53 - 1

// badStartingAfter is the 400 for a starting_after that is no sequence
// number (raw as the client sent it); validStartingAfter tells.
func badStartingAfter(raw string) *apierr.Error {
	return apierr.Invalid("starting_after", apierr.CodeInvalidValue,
		"starting_after must be a sequence number, an integer from -1 to %d, got %q", maxStartingAfter, raw)
}

// validStartingAfter reports whether n can be a resume's starting_after:
// -1 (from the first event) or a sequence number up to maxStartingAfter.
func validStartingAfter(n int64) bool {
	return n >= -1 && n <= maxStartingAfter
}

// nextAfter is the sequence number of the event after `after`, saturating
// rather than overflowing for an `after` no parser should have let in.
func nextAfter(after int64) int64 {
	if after == math.MaxInt64 {
		return math.MaxInt64
	}
	return max(after, -1) + 1
}

// resumeErrorEvent is the spec's error event ending a resumed stream that
// cannot be followed to its terminal event.
func resumeErrorEvent(seq int64, message string) []byte {
	return errorEventOf(seq, apierr.StreamIncomplete("%s", message))
}

// readFailedEvent ends a follow whose read of the store failed (the stream
// may still run).
func readFailedEvent(next int64) []byte {
	return resumeAgainEvent(next, "reading the stream's log failed; resume it")
}

// drainedFollowEvent ends, at the drain grace, a follow of a stream that
// another replica runs: the response goes on there, so no terminal event
// of it is made up here; the client resumes it on another instance.
func drainedFollowEvent(next int64) []byte {
	return resumeAgainEvent(next, errDraining.Error()+"; resume the response on another instance")
}

// resumeAgainEvent ends a follow of a stream that may still run with the
// error event saying why (it ends "resume it" or the like): numbered
// next, as every event the resume writes, but the response's own event
// next is still to come, so the message names the starting_after that
// resumes without skipping it (the last event this resume sent), not this
// error's number.
func resumeAgainEvent(next int64, why string) []byte {
	from := "from its start (without starting_after)"
	if next > 0 {
		from = fmt.Sprintf("with starting_after=%d, the last event of the response this stream sent (this error's own sequence_number is not one)", next-1)
	}
	return resumeErrorEvent(next, why+" "+from)
}

// errorEventOf is the spec's error event carrying e, numbered seq.
func errorEventOf(seq int64, e *apierr.Error) []byte {
	b := []byte(`{"type":"error","code":`)
	b = jsonx.AppendQuote(b, e.Code)
	b = append(b, `,"message":`...)
	b = jsonx.AppendQuote(b, e.Message)
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonx.AppendQuote(b, e.Param)
	}
	b = append(b, `,"sequence_number":`...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, '}')
}

// unstreamable is the 400 for a resume from after that can never send an
// event, nil otherwise: the response was answered as JSON (its log holds
// no events), or after is past the last event of an ended stream.
// starting_after at the terminal event itself is a resume with nothing
// left, answered with an empty stream: the client has the terminal event.
func (l *streamLog) unstreamable(after int64) *apierr.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unstreamableLocked(after)
}

func (l *streamLog) unstreamableLocked(after int64) *apierr.Error {
	end := int64(len(l.events)) // the sequence number after the last event
	if l.dropped {
		end = l.droppedEnd
	}
	switch {
	case !l.ended:
		return nil
	case end == 0:
		return notStreamed(l.id)
	case after >= end:
		return apierr.PastLastEvent(l.id, after)
	}
	return nil
}

// storedUnstreamable is unstreamable for an ended log in the store: its
// first event, and the one at after, tell.
func (h *streamLogs) storedUnstreamable(ctx context.Context, rec store.StreamLog, after int64) *apierr.Error {
	if !rec.Ended {
		return nil
	}
	st := h.opts.Store
	evs, err := st.StreamEvents(ctx, rec.ResponseID, -1, 1)
	if err != nil || len(evs) == 0 {
		if err == nil {
			return notStreamed(rec.ResponseID)
		}
		return nil // followStored reports it
	}
	if after < 0 {
		return nil
	}
	if evs, err = st.StreamEvents(ctx, rec.ResponseID, after-1, 1); err == nil && len(evs) == 0 {
		return apierr.PastLastEvent(rec.ResponseID, after)
	}
	return nil
}

// notStreamed is the 400 for a stream=true GET of a response that was
// answered as JSON. OpenAI's API streams only background responses back;
// Sluice streams back any response it streamed, and has no events of this
// one to send.
func notStreamed(id string) *apierr.Error {
	return apierr.Invalid("stream", apierr.CodeInvalidValue,
		"Response '%s' was answered as JSON, not streamed, so it has no events to stream; retrieve it without stream=true.", id)
}

// followStored is streamLogs.followStored for a resumer of this server:
// the follow ends when the drain grace does (README "Running it"), as
// every stream this process writes does, with drainedFollowEvent. It is
// not ended by a terminal event of its own, as a stream running here is:
// the drain ends nothing on the replica running the response.
func (s *Server) followStored(ctx context.Context, rec store.StreamLog, after int64, out resumeSink) error {
	ctx, stop := s.untilDrained(ctx)
	defer stop()
	return s.logs.followStored(ctx, rec, after, out, s.opts.IdleTimeout, s.opts.KeepAlive)
}

// followStored follows a log that this process does not hold: written
// before a restart, or by another replica (Redis). It polls the store
// until the log's record ends; a record that is not ended and was
// abandoned by the process writing it ends the resume with an error
// event, the log's terminal one (abandonedTerminalSeq: a resume from it
// gets nothing more, one past it the 400 of a resume past the last event),
// and so does a log whose events are not contiguous from after+1:
// the store lost some (a flush, a restart without persistence, eviction),
// and a resumer never gets a stream with a hole. Following a live stream
// on a shared store, it marks the log followed (FollowStreamLog, every
// followRenewEvery), so the replica running it keeps it past detach_grace.
// A ctx cancelled with errDraining ends it with drainedFollowEvent; any
// other end of ctx (the client left) returns ctx's error. out gets a
// keepalive once nothing was written for `every` (timeouts.keepalive), as a
// follower of a log held here does (follow).
func (h *streamLogs) followStored(ctx context.Context, rec store.StreamLog, after int64, out resumeSink, idle, every time.Duration) error {
	st := h.opts.Store
	sh := h.shared()
	next := nextAfter(after)
	// When a new event came last. The events there already when the
	// resume began are not (they may be old): until one comes, the
	// record's SavedAt tells (a record that does not say counts from now).
	var lastNew time.Time
	if rec.SavedAt.IsZero() {
		lastNew = time.Now()
	}
	caughtUp := false
	sent := false           // anything written (events, keepalives): the answer's status is committed
	lastWrite := time.Now() // events or a keepalive
	var marked time.Time    // when this resumer last marked the log followed
	for {
		if sh != nil && !rec.Ended && !rec.Background && time.Since(marked) >= followRenewEvery {
			marked = time.Now()
			h.markFollowed(ctx, sh, rec.ResponseID)
		}
		evs, err := st.StreamEvents(ctx, rec.ResponseID, next-1, 1000)
		switch {
		case ctx.Err() != nil:
			return stoppedFollowing(ctx, out, next)
		case errors.Is(err, store.ErrNotFound): // the log was there when the resume began
			return endWith(out, resumeErrorEvent(next, goneWhileFollowed))
		case err != nil:
			return endWith(out, readFailedEvent(next))
		}
		for _, ev := range evs {
			if ev.Seq != next {
				h.log.Warn("a stored stream log lost events; the resume ends with an error event", "response_id", LogID(rec.ResponseID),
					"missing_from", next, "missing_to", ev.Seq-1)
				return endWith(out, resumeErrorEvent(next, fmt.Sprintf(
					"the store lost events %d to %d of this stream (it was flushed, restarted without persistence, or evicted keys); send the request again",
					next, ev.Seq-1)))
			}
			if err := out.Event(ev.Name, ev.Data); err != nil {
				return err
			}
			next, sent = ev.Seq+1, true
			if isTerminalType(gjson.GetBytes(ev.Data, "type").Str) {
				return out.Flush()
			}
		}
		if len(evs) > 0 {
			if caughtUp {
				lastNew = time.Now()
			}
			lastWrite = time.Now() // a keepalive comes once nothing was written for a period (README "Continuation")
			continue
		}
		caughtUp = true
		if err := out.Flush(); err != nil {
			return err
		}
		cur, err := st.GetStreamLog(ctx, rec.ResponseID)
		switch {
		case ctx.Err() != nil:
			return stoppedFollowing(ctx, out, next)
		case errors.Is(err, store.ErrNotFound): // ErrStreamLogDeleted too
			return endWith(out, resumeErrorEvent(next, goneWhileFollowed))
		case err != nil:
			return endWith(out, readFailedEvent(next))
		case cur.Ended:
			if more, err := st.StreamEvents(ctx, rec.ResponseID, next-1, 1); err == nil && len(more) > 0 {
				rec.Ended = true
				continue // the last events landed with the record
			}
			if next > 0 { // resumed after the terminal event itself: nothing is left to send
				if last, err := st.StreamEvents(ctx, rec.ResponseID, next-2, 1); err == nil && len(last) == 1 &&
					last[0].Seq == next-1 && isTerminalType(gjson.GetBytes(last[0].Data, "type").Str) {
					return out.Flush()
				}
			}
			// Nothing to send: the rule the SSE resume answers with a 400
			// before it begins (a JSON answer, or starting_after past the
			// last event), here for a log that ended while it was followed
			// or a WebSocket resume, as an error event.
			if aerr := h.storedUnstreamable(ctx, cur, next-1); aerr != nil {
				if !sent {
					// Nothing was written: the 400 (a WebSocket error
					// frame) the replica running it answers, not an
					// error event numbered as no event of the stream.
					return aerr
				}
				return endWith(out, errorEventOf(next, aerr))
			}
			return endWith(out, resumeErrorEvent(next, "the stream's log ends without a terminal event"))
		case h.abandoned(cur, lastNew, idle):
			terminal, err := h.abandonedTerminalSeq(ctx, cur)
			switch {
			case ctx.Err() != nil:
				return stoppedFollowing(ctx, out, next)
			case err != nil:
				return endWith(out, readFailedEvent(next))
			case next <= terminal:
				return endWith(out, resumeErrorEvent(terminal, abandonedMessage))
			case next == terminal+1: // resumed after the terminal event itself: nothing is left to send
				return out.Flush()
			case !sent:
				// Past the last event: the 400 (a WebSocket error frame) an
				// ended stream's resume gets before it begins.
				return apierr.PastLastEvent(rec.ResponseID, next-1)
			}
			return endWith(out, errorEventOf(next, apierr.PastLastEvent(rec.ResponseID, next-1)))
		}
		if every > 0 && time.Since(lastWrite) >= every {
			lastWrite = time.Now()
			if err := out.KeepAlive(every); err != nil {
				return err
			}
			sent = true
		}
		select {
		case <-ctx.Done():
			return stoppedFollowing(ctx, out, next)
		case <-time.After(storePollEvery):
		}
	}
}

// abandonedTerminalSeq is the sequence number of the error event that ends
// an abandoned stored log (abandoned): past every event its gateway may have
// sent a client (IssuedBelow) and every event the store holds, so that it is
// never a number a client already holds for another event. It is read from
// the log alone, not from the resume asking, so that every resume, on every
// replica, sends that terminal event under the same number, and one from it
// or past it is answered as for an ended stream (README "Resuming a stream").
// Events past IssuedBelow are stored only by a writer whose record writes
// failed (confirmIssued); a record without the bound (0) is read through.
func (h *streamLogs) abandonedTerminalSeq(ctx context.Context, rec store.StreamLog) (int64, error) {
	end := rec.IssuedBelow
	for {
		evs, err := h.opts.Store.StreamEvents(ctx, rec.ResponseID, end-1, storedEventsPage)
		if err != nil {
			return 0, fmt.Errorf("reading the events of %s past %d: %w", LogID(rec.ResponseID), end-1, err)
		}
		if len(evs) == 0 {
			return end, nil
		}
		end = evs[len(evs)-1].Seq + 1
	}
}

// stoppedFollowing is how a follow through the store whose ctx ended
// returns: the drain's end gets drainedFollowEvent, numbered next; a
// client that left, nothing more.
func stoppedFollowing(ctx context.Context, out resumeSink, next int64) error {
	if errors.Is(context.Cause(ctx), errDraining) {
		return endWith(out, drainedFollowEvent(next))
	}
	return ctx.Err()
}

// goneWhileFollowed ends a resume through the store whose log vanished
// (DELETE on any replica, or its expiry): retrying cannot find it either.
const goneWhileFollowed = "the response's log expired or was deleted while it was followed"

// markFollowed tells the replica running a stream that a resumer follows
// it through the store, for followLease.
func (h *streamLogs) markFollowed(ctx context.Context, sh store.SharedStreamLogStore, id string) {
	err := sh.FollowStreamLog(ctx, id, h.now().Add(followLease))
	if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
		h.log.Warn("marking a stream log followed failed; the gateway running the stream may stop it after detach_grace",
			"response_id", LogID(id), "error", err)
	}
}

// abandoned reports whether the gateway writing a stored log that has not
// ended gave it up. On a store that no other process writes (Pebble) it
// did: the log is from before a restart. On a shared one, when neither an
// event (lastEvent: the latest a resumer saw) nor a write of the record
// (SavedAt) came for timeouts.idle, as a stream whose upstream is that
// silent is failed by its gateway. A resume, GET and cancel apply this
// same rule.
func (h *streamLogs) abandoned(rec store.StreamLog, lastEvent time.Time, idle time.Duration) bool {
	switch {
	case rec.Ended:
		return false
	case !store.IsShared(h.opts.Store):
		return true
	}
	last := lastEvent
	if !rec.SavedAt.IsZero() {
		// The record is rewritten with the events, at most every
		// recordSaveEvery: the latest event may be that much younger.
		if saved := rec.SavedAt.Add(recordSaveEvery + durableFlushEvery); saved.After(last) {
			last = saved
		}
	}
	return !last.IsZero() && time.Since(last) > idle
}

// abandonedStoredResponse is the Response GET and cancel answer for a
// stored log its gateway gave up (abandoned): failed, with the output its
// stored events hold. The record's Response is rewritten at most every
// recordSaveEvery while the events go every durableFlushEvery (write), so
// after a crash the events may hold up to a second more output than the
// record, output the client already had and a resume replays (README
// "Durable"). The Response is rebuilt from them at read time, by the rule
// that renders a live log's Response (streamLog.response: the client
// stream's sent.Output fed each event it logged), rather than writing the
// record with every batch. The record stays the answer when the events do
// not go further (a log that outgrew resume_max_bytes is written as its
// record alone) or cannot be read.
func (h *streamLogs) abandonedStoredResponse(ctx context.Context, rec store.StreamLog) []byte {
	resp := rec.Response
	if rebuilt, ok := h.responseOfEvents(ctx, rec); ok && outputReach(rebuilt) > outputReach(resp) {
		resp = rebuilt
	}
	return abandonedResponse(resp)
}

// runningStoredResponse is the Response GET answers for a stored log that
// still runs elsewhere: the record's Response, rewritten at most every
// recordSaveEvery, or, when the stored events (written every
// durableFlushEvery) go further, the Response they show, as a resume on
// this replica delivers it; rebuilt by the rule abandonedStoredResponse
// follows, so that the output a poller sees does not trail what a streamer
// gets. A record with no output beyond it (a queued response) keeps its own
// status.
func (h *streamLogs) runningStoredResponse(ctx context.Context, rec store.StreamLog) []byte {
	if rebuilt, ok := h.responseOfEvents(ctx, rec); ok && outputReach(rebuilt) > outputReach(rec.Response) {
		return rebuilt
	}
	return rec.Response
}

// storedEventsPage is how many stored events one read takes when a
// Response is rebuilt from them.
const storedEventsPage = 1000

// responseOfEvents renders the Response, as it ran, that rec's stored
// events show, up to the first hole in them; the fields its output does not
// give (model, the request's echo, usage) are the record's. ok is false
// when the events cannot be read or there are none.
func (h *streamLogs) responseOfEvents(ctx context.Context, rec store.StreamLog) (resp []byte, ok bool) {
	record := gjson.ParseBytes(rec.Response)
	var out sent.Output
	if u := record.Get("usage"); u.IsObject() {
		out.Usage = []byte(u.Raw)
	}
	next := int64(0)
read:
	for {
		evs, err := h.opts.Store.StreamEvents(ctx, rec.ResponseID, next-1, storedEventsPage)
		if err != nil {
			return nil, false
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Seq != next {
				break read // a hole (followStored): what follows it is not the client's next event
			}
			if f, ok := scanEvent(ev.Data); ok {
				out.Track(&f.Fields)
			}
			next = ev.Seq + 1
		}
	}
	if next == 0 {
		return nil, false
	}
	r := sent.Response{ID: rec.ResponseID, Status: "in_progress", From: record}
	return out.AppendResponse(nil, &r), true
}

// outputReach measures how far a Response's output got, to tell which of
// two renderings of one response's output is further: its items, each
// part, the text, refusal and arguments they hold, and the items and parts
// done. An open item is rendered in_progress and a done one by its done
// event, so neither the JSON's length nor its status words alone grow
// with the stream.
func outputReach(resp []byte) int {
	n := 0
	gjson.GetBytes(resp, "output").ForEach(func(_, item gjson.Result) bool {
		n += 1 + len(item.Get("arguments").Str) + len(item.Get("input").Str)
		if item.Get("status").Str != "in_progress" {
			n++
		}
		for _, parts := range []string{"content", "summary"} {
			item.Get(parts).ForEach(func(_, part gjson.Result) bool {
				n += 1 + len(part.Get("text").Str) + len(part.Get("refusal").Str)
				return true
			})
		}
		return true
	})
	return n
}

// endWith writes a resumed stream's last event.
func endWith(out resumeSink, ev []byte) error {
	if err := out.Event("error", ev); err != nil {
		return err
	}
	return out.Flush()
}

// continuedNotReadable is the 404 for a call other than DELETE on a
// continued response whose log the gateway no longer holds (noLogHeld says
// why): shaped as notResumable, since the response can no longer be read
// here, and saying why its owner is not asked (README "The resource API").
func continuedNotReadable(id, why string) *apierr.Error {
	return &apierr.Error{Status: 404, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound, Param: "response_id",
		Message: "Response '" + id + "' can no longer be read here: it was continued on another target after a failure, " + why +
			", and no upstream's copy is the response as it was sent (each keeps its own part under its own id); DELETE still deletes every copy."}
}

// notResumable is the 404 for a response the caller cannot resume or read.
func notResumable(id string, window time.Duration) *apierr.Error {
	return &apierr.Error{Status: 404, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound, Param: "response_id",
		Message: "No response with id '" + id + "' can be read here: it is unknown to this gateway, was created with another key, " +
			"or its log expired (streams.resume_window is " + window.String() + ")."}
}
