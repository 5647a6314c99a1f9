package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/logtext"
)

// Errors returned by the store. Callers test for them with errors.Is; the
// returned errors wrap them with context.
var (
	// ErrNotFound means the record does not exist or has expired.
	ErrNotFound = errors.New("store: not found")
	// ErrClosed means the store has been closed.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid means an argument was rejected (empty or overlong id,
	// unknown scope kind, …).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrTooLarge means a turn, chunk, template or history exceeds its cap.
	ErrTooLarge = errors.New("store: too large")
	// ErrExists means CreateInputSession found a live session with that id.
	ErrExists = errors.New("store: already exists")
	// ErrCorrupt means a stored value could not be decoded.
	ErrCorrupt = errors.New("store: corrupt value")
	// ErrConflict means a conditional write (SharedInputSessionStore) found
	// that another writer changed the record since the caller read it.
	ErrConflict = errors.New("store: conflict")
	// ErrUnavailable means the store's server cannot be reached or answered
	// too slowly (RedisStore). It is retryable; the gateway fails closed on it.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrUnavailableUntilRestart, beside ErrUnavailable, means the store is
	// closed for good (a damaged file of the embedded database): no retry
	// brings it back, only an operator and a restart (README "Continuity").
	ErrUnavailableUntilRestart = errors.New("store: unavailable until the gateway restarts")
)

// Store is the continuity store the gateway depends on: response anchors
// and session scopes. It is an interface so that a distributed backend can
// be added later; PebbleStore is the embedded implementation.
type Store interface {
	// PutAnchor stores a's anchor and points a's scope at it, in one
	// synced batch.
	PutAnchor(ctx context.Context, a Anchor) error
	// ReplaceAnchor is PutAnchor over a live anchor of a.ResponseID only:
	// ErrNotFound, writing nothing, when there is none (deleted, expired),
	// so that a write retried after an outage does not bring back a
	// response deleted meanwhile.
	ReplaceAnchor(ctx context.Context, a Anchor) error
	// GetAnchor loads the anchor of responseID; ErrNotFound when absent
	// or expired.
	GetAnchor(ctx context.Context, responseID string) (Anchor, error)
	// DeleteAnchor removes the anchor of responseID and the scope record
	// if it points at responseID. Deleting an absent anchor is not an
	// error.
	DeleteAnchor(ctx context.Context, responseID string) error
	// GetScope loads the scope record of (kind, id); ErrNotFound when
	// absent or expired.
	GetScope(ctx context.Context, kind ScopeKind, id string) (ScopeRecord, error)
	// Sweep removes the records expired at now and returns how many.
	Sweep(ctx context.Context, now time.Time) (removed int, err error)
	// Close releases the store. Later calls return ErrClosed.
	Close() error
}

// ConversationStore keeps conversation items so that previous_response_id
// can be expanded for upstreams that do not keep state.
type ConversationStore interface {
	// PutConversation stores one turn in one synced batch.
	PutConversation(ctx context.Context, t Turn) error
	// GetTurn loads one turn; ErrNotFound when absent or expired.
	GetTurn(ctx context.Context, responseID string) (Turn, error)
	// History returns the items of the conversation ending at responseID,
	// oldest first.
	History(ctx context.Context, responseID string, maxItems, maxBytes int) ([]json.RawMessage, error)
	// DeleteTurn removes one turn (DELETE /v1/responses/{id}). A later
	// turn that chains through it then has a broken chain: History fails
	// for it rather than leaving the deleted items out. Deleting an
	// absent turn is not an error.
	DeleteTurn(ctx context.Context, responseID string) error
}

// InputSessionStore persists streaming-input sessions and their chunks.
type InputSessionStore interface {
	// CreateInputSession stores a new session; ErrExists if a live one
	// has the same id.
	CreateInputSession(ctx context.Context, s InputSession) error
	// GetInputSession loads a session; ErrNotFound when absent or expired.
	GetInputSession(ctx context.Context, id string) (InputSession, error)
	// UpdateInputSession replaces a live session's record.
	UpdateInputSession(ctx context.Context, s InputSession) error
	// PutChunk stores a chunk and the session's new record in one synced
	// batch.
	PutChunk(ctx context.Context, sessionID string, seq uint64, c Chunk, sessionUpdate InputSession) error
	// Chunks returns a live session's chunks in sequence order.
	Chunks(ctx context.Context, sessionID string) ([]Chunk, error)
	// DeleteInputSession removes a session and all its chunks.
	DeleteInputSession(ctx context.Context, id string) error
	// ListInputSessions returns every live session.
	ListInputSessions(ctx context.Context) ([]InputSession, error)
}

// SharedInputSessionStore is an InputSessionStore that several gateway
// replicas share (RedisStore): a session opened on one replica takes chunks
// on another, so writes are conditional on the record the writer last saw,
// and the answer to a session is kept where every replica can read it.
type SharedInputSessionStore interface {
	InputSessionStore
	// PutChunkIf is PutChunk that fails with ErrConflict unless the stored
	// record's LastActivity still equals prev (the record the caller last
	// read or wrote). A retry of a write that already applied succeeds.
	PutChunkIf(ctx context.Context, sessionID string, seq uint64, c Chunk, sessionUpdate InputSession, prev time.Time) error
	// UpdateInputSessionIf is UpdateInputSession under the same condition.
	UpdateInputSessionIf(ctx context.Context, s InputSession, prev time.Time) error
	// AppendResult appends one part of a session's answer, at byte offset
	// off of the parts' data (a part whose offset was already appended is
	// skipped, so a retried append is harmless). It fails with ErrNotFound
	// when the session is gone (deleted by any replica). A session closed
	// with CloseInputSession still takes its answer's parts, for as long
	// as its marker lasts: the replica running the answer ends it, and
	// every replica's readers follow it to that end; the append then
	// fails with an *InputSessionClosedError whose Appended is set.
	AppendResult(ctx context.Context, sessionID string, off int64, p ResultPart) error
	// ReadResult returns the parts after cursor ("" is the beginning),
	// waiting up to wait for one to arrive, and the cursor to read on from.
	// No part within wait is not an error: it returns none and cursor.
	ReadResult(ctx context.Context, sessionID, cursor string, wait time.Duration) ([]ResultPart, string, error)
	// CloseInputSession removes a session and its chunks as
	// DeleteInputSession does and leaves, for ttl, a marker holding why it
	// was closed (reason, the gateway's encoding): the replicas that still
	// hold the session then end it the same way (a read or append of it
	// fails with *InputSessionClosedError) instead of taking it for a
	// delete. The answer's parts stay as long as the marker (AppendResult).
	// The first close stands: closing a session closed before fails with
	// an *InputSessionClosedError holding the first reason, and one gone
	// without a marker (deleted, expired) fails with ErrNotFound.
	CloseInputSession(ctx context.Context, id string, reason []byte, ttl time.Duration) error
}

// InputSessionClosedError is the error (wrapping ErrNotFound) of a read or
// an append of a session closed with CloseInputSession: Reason is what the
// replica that closed it recorded.
type InputSessionClosedError struct {
	ID     string
	Reason []byte
	// Appended is set on the error of an AppendResult: the part was
	// stored all the same.
	Appended bool
}

func (e *InputSessionClosedError) Error() string {
	return "store: input session " + RedactID(e.ID) + " was closed: " + ErrNotFound.Error()
}

func (e *InputSessionClosedError) Unwrap() error { return ErrNotFound }

// ResultPart is one piece of a streaming-input session's answer as the
// replica running it writes it for the others.
type ResultPart struct {
	// Kind is ResultHead (Data: the gateway's encoding of status and
	// headers), ResultData (answer bytes) or ResultEnd (the answer is
	// complete; Data empty).
	Kind byte
	Data []byte
}

// Result part kinds.
const (
	ResultHead byte = 'h'
	ResultData byte = 'd'
	ResultEnd  byte = 'e'
)

// IsShared reports whether st is shared by several gateway replicas
// (RedisStore): a replica must then not serve anything from a local copy
// that another replica may have changed since.
func IsShared(st any) bool {
	sh, ok := st.(interface{ SharedByReplicas() bool })
	return ok && sh.SharedByReplicas()
}

// ReachabilityNotifier is implemented by stores that depend on a server
// (RedisStore): Reachable returns a channel closed the next time the
// server answers again after it was found unreachable, so that writes
// retried with backoff are made at once rather than at the end of a long
// wait.
type ReachabilityNotifier interface {
	Reachable() <-chan struct{}
}

// HealthReporter is implemented by stores that depend on a server (RedisStore):
// Health returns nil while it answers, else why not.
type HealthReporter interface {
	Health() error
}

var (
	_ Store             = (*PebbleStore)(nil)
	_ ConversationStore = (*PebbleStore)(nil)
	_ InputSessionStore = (*PebbleStore)(nil)
)

// sessionLockStripes is the number of mutexes that serialize writes to the
// same input session.
const sessionLockStripes = 64

// PebbleStore is the Store backed by a Pebble database on local disk. It is
// safe for concurrent use.
type PebbleStore struct {
	opts Options
	log  hclog.Logger
	dir  string

	// mu guards db, closing and closeStuckLogged. Operations hold it
	// shared for their whole duration, so Close (exclusive) never closes
	// the database under one. Writes that must not interleave with others'
	// read-check-write (DeleteAnchor, the sweeper's delete step) hold it
	// exclusively; they are rare and short.
	mu sync.RWMutex
	db *pebble.DB // nil once closed
	// closing is the result of the failed database's Close while it runs,
	// closeStuckLogged whether its not returning in time was logged
	// (failure.go).
	closing          <-chan error
	closeStuckLogged bool

	// failure is the error every call returns while the database is
	// failed (Pebble's fatal error; failure.go), nil while it works.
	failure atomic.Pointer[error]
	// failedCorrupt says that failure is a corrupt file (failCorrupt),
	// which the recovery loop closes and does not reopen.
	failedCorrupt atomic.Bool
	// backgroundErrLog spaces the lines about Pebble's background errors,
	// which Pebble can repeat without pause (eventListener).
	backgroundErrLog logtext.Every
	// closed is set by Close.
	closed atomic.Bool
	// openedDir is the data dir the database was last opened in (openDB),
	// and dirGone whether Health found it gone since (datadir.go).
	openedDir atomic.Pointer[openedDir]
	dirGone   atomic.Bool

	// bgCtx ends the background goroutines (sweeper, recovery loop) when
	// Close cancels it; bg counts recovery loops; bgMu orders starting one
	// with Close.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bgMu     sync.Mutex
	bg       sync.WaitGroup

	// sessionLocks serialize the read-check-write operations on one input
	// session (create, update, put chunk, delete), striped by session id.
	sessionLocks [sessionLockStripes]sync.Mutex
	// streamLocks serialize the read-check-write operations on one stream
	// log (put, append, cancel, delete), striped by response id.
	streamLocks [sessionLockStripes]sync.Mutex

	sweeperDone chan struct{}

	stats counters
}

// counters are the store's cumulative statistics.
type counters struct {
	anchorsWritten, anchorLookups, anchorHits atomic.Uint64
	anchorsDeleted, scopeLookups              atomic.Uint64
	turnsWritten, historyLookups              atomic.Uint64
	sessionsWritten, chunksWritten            atomic.Uint64
	sweeps, sweepErrors                       atomic.Uint64
	sweptAnchors, sweptScopes                 atomic.Uint64
	sweptTurns, sweptSessions                 atomic.Uint64
	streamLogsWritten, streamEventsWritten    atomic.Uint64
	sweptStreamLogs                           atomic.Uint64
}

// Memtable sizing. Pebble's default stop-writes threshold (2 queued)
// stalls writes as soon as one flush falls behind; a burst of finishing
// streams on a slow disk should not, so up to 4 memtables queue. Each is
// Pebble's default 4 MiB (it starts at 256 KiB and doubles as writes come):
// a gateway's records are small, and a memtable's arena stays resident
// while it fills, so the worst case, their product, is 16 MiB.
const (
	memTableSize       = 4 << 20
	memTableStopWrites = 4
)

// Open opens (creating if needed) the store in opts.Dir and starts the
// background sweeper unless opts.SweepInterval is negative.
//
// A directory that cannot be used — a file in the way, no permission, or a
// database locked by another process — is reported as an error that names
// the directory.
func Open(ctx context.Context, opts Options) (*PebbleStore, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: open %q: %w", opts.Dir, err)
	}
	log := opts.Logger.Named("store")
	// The store holds conversation content: keep the directory private when
	// creating it (Pebble would create it world-readable).
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: open %q: %w", opts.Dir, err)
	}

	s := &PebbleStore{opts: opts, log: log, dir: opts.Dir, sweeperDone: make(chan struct{})}
	s.backgroundErrLog.Interval = backgroundErrorLogEvery
	s.bgCtx, s.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	db, err := s.openDB()
	if err != nil {
		s.bgCancel()
		return nil, err
	}
	// Under the lock: Pebble may already have failed the store (a corrupt
	// table met by a background job), and the recovery loop reads s.db.
	s.mu.Lock()
	s.db = db
	s.mu.Unlock()
	if opts.SweepInterval > 0 {
		go s.sweepLoop(s.bgCtx, opts.SweepInterval)
	} else {
		close(s.sweeperDone)
	}
	log.Debug("store opened", "dir", opts.Dir, "sweep_interval", opts.SweepInterval)
	return s, nil
}

// openDB opens the Pebble database in s.dir and checks its schema. Open and
// the recovery loop (failure.go) use it.
func (s *PebbleStore) openDB() (_ *pebble.DB, err error) {
	cache := pebble.NewCache(s.opts.CacheSize)
	defer cache.Unref()
	plog := s.log.Named("pebble")
	popts := &pebble.Options{
		FS:                          s.opts.fs,
		Cache:                       cache,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		FormatMajorVersion:          pebble.FormatVirtualSSTables,
		Logger:                      pebbleLogger{l: plog, onFatal: func(err error) { s.fail(err) }},
		EventListener:               s.eventListener(plog),
	}
	// A fatal error while opening (the schema write on a full disk) is the
	// open's error. A database it leaves open is closed (within
	// closeBound), or its LOCK file would refuse every later open.
	var db *pebble.DB
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(*pebbleFatal)
			if !ok {
				panic(r)
			}
			if db != nil {
				select {
				case <-s.closeDB(db):
				case <-time.After(closeBound):
				}
			}
			err = fmt.Errorf("store: open %q: %w", s.dir, f)
		}
	}()
	db, err = pebble.Open(s.dir, popts)
	if err != nil {
		if isLockError(err) {
			return nil, fmt.Errorf("store: open %q: database is locked (is another gateway using this data dir?): %w", s.dir, err)
		}
		return nil, fmt.Errorf("store: open %q: %w", s.dir, err)
	}
	if err := checkSchema(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %q: %w", s.dir, err)
	}
	s.noteOpenedDir()
	return db, nil
}

// isLockError reports whether err came from locking the database's LOCK
// file: Pebble returns the bare errno of fcntl(F_SETLK) when another process
// holds the lock (a path error means something else, such as a permission
// problem), and a plain message when this process already has it open.
func isLockError(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return false
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
}

// checkSchema records the schema version in a new database and refuses a
// database written with another one.
func checkSchema(db *pebble.DB) error {
	v, closer, err := db.Get(metaSchemaKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := db.Set(metaSchemaKey, []byte{schemaVersion}, pebble.Sync); err != nil {
			return fmt.Errorf("write schema version: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read schema version: %w", err)
	}
	defer closer.Close()
	if len(v) != 1 || v[0] != schemaVersion {
		return fmt.Errorf("schema version %x, want %d: %w", v, schemaVersion, ErrCorrupt)
	}
	return nil
}

// Close stops the background sweeper and the recovery loop, waits for them
// and for in-flight operations, and closes the database. Calling Close again
// returns an error wrapping ErrClosed.
//
// A failed database (failure.go) is closed without waiting for the lock
// (a call may be stuck in it) nor longer than closeBound.
func (s *PebbleStore) Close() error {
	if s.closed.Swap(true) {
		return fmt.Errorf("store: close %q: %w", s.dir, ErrClosed)
	}
	s.bgMu.Lock()
	s.bgCancel()
	s.bgMu.Unlock()
	<-s.sweeperDone
	s.bg.Wait()

	if s.failure.Load() != nil {
		if !s.mu.TryLock() {
			return fmt.Errorf("store: close %q: a call is still inside the failed database; its files are released when the process exits: %w", s.dir, ErrUnavailable)
		}
		defer s.mu.Unlock()
		if err := s.closeBroken(); err != nil {
			return fmt.Errorf("store: close %q: failed database: %w", s.dir, err)
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure.Load() != nil {
		if err := s.closeBroken(); err != nil {
			return fmt.Errorf("store: close %q: failed database: %w", s.dir, err)
		}
		return nil
	}
	err := <-s.closeDB(s.db)
	s.db = nil
	if err != nil {
		return fmt.Errorf("store: close %q: %w", s.dir, err)
	}
	s.log.Debug("store closed", "dir", s.dir)
	return nil
}

// usable returns why the store cannot be used now (closed, or failed), or
// nil. It reads no lock, so a failed store answers at once.
func (s *PebbleStore) usable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if errp := s.failure.Load(); errp != nil {
		return *errp
	}
	return nil
}

// acquire returns the open database and holds s.mu shared until release is
// called, or returns ErrClosed or the store's failure.
//
// release is the store's guard against Pebble's fatal errors, so every call
// into Pebble runs between acquire and a deferred release(&err), with err
// the call's named error result: release recovers the pebbleFatal that
// pebbleLogger.Fatalf raises and sets err to the store's failure
// (failure.go); a nil errp is allowed where there is no error to return.
func (s *PebbleStore) acquire() (db *pebble.DB, release func(errp *error), err error) {
	if err := s.usable(); err != nil {
		return nil, nil, err
	}
	s.mu.RLock()
	if err := s.usable(); err != nil || s.db == nil {
		s.mu.RUnlock()
		return nil, nil, cmp.Or(err, ErrClosed)
	}
	return s.db, func(errp *error) {
		r := recover()
		s.mu.RUnlock()
		s.settle(r, errp)
	}, nil
}

// acquireExclusive is acquire with s.mu held exclusively.
func (s *PebbleStore) acquireExclusive() (db *pebble.DB, release func(errp *error), err error) {
	if err := s.usable(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if err := s.usable(); err != nil || s.db == nil {
		s.mu.Unlock()
		return nil, nil, cmp.Or(err, ErrClosed)
	}
	return s.db, func(errp *error) {
		r := recover()
		s.mu.Unlock()
		s.settle(r, errp)
	}, nil
}

// begin checks ctx and acquires the database for one operation.
func (s *PebbleStore) begin(ctx context.Context) (*pebble.DB, func(errp *error), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	return s.acquire()
}

// sessionLock returns the mutex that serializes writes to one session.
func (s *PebbleStore) sessionLock(id string) *sync.Mutex {
	return &s.sessionLocks[lockStripe(id)]
}

// streamLock returns the mutex that serializes writes to one stream log.
func (s *PebbleStore) streamLock(responseID string) *sync.Mutex {
	return &s.streamLocks[lockStripe(responseID)]
}

// lockStripe picks the stripe of id: FNV-1a, inline to avoid allocating a
// hash.Hash per call.
func lockStripe(id string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return h % sessionLockStripes
}

// now is the store's clock.
func (s *PebbleStore) now() time.Time { return s.opts.Now() }

// get reads key and hands the value to decode before the value's memory is
// released. It returns pebble.ErrNotFound unchanged.
func get(db *pebble.DB, key []byte, decode func([]byte) error) error {
	v, closer, err := db.Get(key)
	if err != nil {
		return err
	}
	defer closer.Close()
	return decode(v)
}

// Stats is a snapshot of the store's counters and Pebble's metrics, for
// export by the gateway's metrics endpoint.
type Stats struct {
	// AnchorsWritten counts successful PutAnchor calls.
	AnchorsWritten uint64
	// AnchorLookups counts GetAnchor calls that reached the database;
	// AnchorHits those that found a live anchor.
	AnchorLookups, AnchorHits uint64
	// AnchorsDeleted counts DeleteAnchor calls that removed an anchor.
	AnchorsDeleted uint64
	// ScopeLookups counts GetScope calls that reached the database.
	ScopeLookups uint64
	// TurnsWritten counts successful PutConversation calls.
	TurnsWritten uint64
	// HistoryLookups counts History calls that reached the database.
	HistoryLookups uint64
	// SessionsWritten counts input-session records written (create,
	// update and the session half of PutChunk).
	SessionsWritten uint64
	// ChunksWritten counts successful PutChunk calls.
	ChunksWritten uint64
	// StreamLogsWritten counts stream-log records written (PutStreamLog,
	// CancelStreamLog); StreamEventsWritten the events AppendStreamEvents
	// stored (retried ones it skipped not counted).
	StreamLogsWritten, StreamEventsWritten uint64
	// Sweeps counts sweeps (background and explicit); SweepErrors those
	// that failed.
	Sweeps, SweepErrors uint64
	// Swept counts expired records removed, in total and by family.
	Swept, SweptAnchors, SweptScopes, SweptTurns, SweptSessions uint64
	// SweptStreamLogs counts expired stream logs removed (with their
	// events); Swept includes it.
	SweptStreamLogs uint64
	// DiskBytes is the space the database uses on disk (WAL, tables,
	// manifest), as Pebble reports it. Zero once closed.
	DiskBytes uint64
	// MemtableBytes is the size of Pebble's memtables.
	MemtableBytes uint64
	// ReadAmp is Pebble's read amplification (sublevels and levels a read
	// may consult).
	ReadAmp int
	// BlockCacheHits and BlockCacheMisses count Pebble block-cache
	// lookups.
	BlockCacheHits, BlockCacheMisses int64
}

// Stats returns the store's statistics. It is cheap enough for a metrics
// scrape and works after Close (Pebble's fields are then zero).
func (s *PebbleStore) Stats() Stats {
	c := &s.stats
	st := Stats{
		AnchorsWritten:  c.anchorsWritten.Load(),
		AnchorLookups:   c.anchorLookups.Load(),
		AnchorHits:      c.anchorHits.Load(),
		AnchorsDeleted:  c.anchorsDeleted.Load(),
		ScopeLookups:    c.scopeLookups.Load(),
		TurnsWritten:    c.turnsWritten.Load(),
		HistoryLookups:  c.historyLookups.Load(),
		SessionsWritten: c.sessionsWritten.Load(),
		ChunksWritten:   c.chunksWritten.Load(),
		Sweeps:          c.sweeps.Load(),
		SweepErrors:     c.sweepErrors.Load(),
		SweptAnchors:    c.sweptAnchors.Load(),
		SweptScopes:     c.sweptScopes.Load(),
		SweptTurns:      c.sweptTurns.Load(),
		SweptSessions:   c.sweptSessions.Load(),

		StreamLogsWritten:   c.streamLogsWritten.Load(),
		StreamEventsWritten: c.streamEventsWritten.Load(),
		SweptStreamLogs:     c.sweptStreamLogs.Load(),
	}
	st.Swept = st.SweptAnchors + st.SweptScopes + st.SweptTurns + st.SweptSessions + st.SweptStreamLogs
	db, release, err := s.acquire()
	if err != nil {
		return st
	}
	defer release(nil)
	m := db.Metrics()
	st.DiskBytes = m.DiskSpaceUsage()
	st.MemtableBytes = m.MemTable.Size
	st.ReadAmp = m.ReadAmp()
	st.BlockCacheHits = m.BlockCache.Hits
	st.BlockCacheMisses = m.BlockCache.Misses
	return st
}

// RedactID renders an id or key for logs and errors without revealing it:
// "sha256:" and the first 12 hex digits of its SHA-256.
func RedactID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// validID checks an id used as (part of) a key.
func validID(what, id string) error {
	if id == "" {
		return fmt.Errorf("empty %s: %w", what, ErrInvalid)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%s of %d bytes exceeds %d: %w", what, len(id), MaxIDLen, ErrInvalid)
	}
	return nil
}

// backgroundErrorLogEvery spaces the lines about Pebble's background errors
// (README "Continuity": during an outage the log says so once every 10 s,
// with a count).
const backgroundErrorLogEvery = 10 * time.Second

// eventListener logs the Pebble events an operator should see. Pebble
// retries a failed compaction or table-statistics job at once and without
// end, so a background error can come thousands of times a second: it is
// logged at most once per backgroundErrorLogEvery, with the count. One
// that says a file is damaged (a table whose checksum does not match)
// fails the store (failCorrupt): it does not clear by itself, and reads
// that reach the file fail too.
func (s *PebbleStore) eventListener(l hclog.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			// Pebble may hold its own lock here: failCorrupt only marks
			// the store and starts the goroutine that closes the database.
			if pebble.IsCorruptionError(err) {
				s.failCorrupt(err)
			}
			if n, ok := s.backgroundErrLog.Allow(time.Now()); ok {
				l.Error("background error", "error", err, "errors", n)
			}
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			l.Warn("disk slow", "info", info.String())
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			l.Warn("write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			l.Info("write stall ended")
		},
	}
}
