package streaminput

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/store"
)

// Manager owns the streaming-input sessions: it serves the REST API
// (Handler, Routes) and Mode A (ModeA), dispatches assembled requests and
// keeps their answers for the result readers. Create it with New and stop
// it with Close.
type Manager struct {
	opts Options
	log  hclog.Logger
	met  *metrics
	now  func() time.Time

	// base is the parent of every dispatch; Close cancels it with
	// shutdownErr, which is how a dispatch knows it was cut by a shutdown.
	base        context.Context
	stop        context.CancelCauseFunc
	shutdownErr *apierr.Error
	draining    chan struct{} // closed by Drain
	drainOnce   sync.Once
	closing     chan struct{} // closed by Close
	closeOnce   sync.Once
	wg          sync.WaitGroup

	startOnce sync.Once
	restored  []*session // sessions Start sends upstream

	// shared is the store when several replicas share it (Redis): sessions
	// are then loaded on demand and checked against the store on every
	// request (shared.go). Nil with Pebble or no store.
	shared  store.SharedInputSessionStore
	adoptMu sync.Mutex // one load of a session from the shared store at a time
	// sweeping is set while a reclaim of every session (reclaimShared with
	// no key) runs: one at a time, however many requests the full caps refuse.
	sweeping atomic.Bool

	mu       sync.Mutex
	sessions map[string]*session
	perKey   map[string]int // open or running sessions per client key hash
	held     int            // sessions held, all clients (MaxSessions): counted from create until close
	heldB    int64          // bytes the sessions hold, all clients (MaxTotalBytes)
}

// New builds a Manager and restores the sessions in the store: an open
// session resumes where it left off, a session whose start condition holds
// (finished, or started before the restart) is sent upstream by Start, and
// a session whose answer had ended keeps its input until it expires (the
// answer itself is not stored).
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Dispatch == nil {
		return nil, errors.New("streaminput: Options.Dispatch is required")
	}
	opts.setDefaults()
	m := &Manager{
		opts:        opts,
		log:         opts.Logger,
		now:         opts.Now,
		shutdownErr: errShutdown(),
		draining:    make(chan struct{}),
		closing:     make(chan struct{}),
		sessions:    map[string]*session{},
		perKey:      map[string]int{},
	}
	m.base, m.stop = context.WithCancelCause(context.Background())
	m.met = newMetrics(m)
	if opts.Registerer != nil {
		if err := m.met.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("streaminput: registering metrics: %w", err)
		}
	}
	if sh, ok := opts.Store.(store.SharedInputSessionStore); ok && store.IsShared(opts.Store) {
		// Sessions live in the shared store and are loaded by the replica
		// a request reaches (shared.go); none is restored (and re-sent) at
		// start, since another replica may be running it.
		m.shared = sh
	} else if opts.Store != nil {
		if err := m.restore(ctx); err != nil {
			m.stop(m.shutdownErr)
			return nil, err
		}
	}
	return m, nil
}

// Start sends the restored sessions whose start condition holds upstream.
// Call it once Dispatch is ready to serve (every route mounted on its
// router); the first request the Manager serves calls it too. Later calls
// do nothing.
func (m *Manager) Start() {
	m.startOnce.Do(func() {
		if m.isDraining() {
			return // they are sent by the next process
		}
		started := 0
		for _, s := range m.restored {
			s.mu.Lock()
			if !s.closed && !s.done && s.started && s.res == nil {
				s.started = false
				s.saw = s.sawLocked(m.now()) // sent again: all the in-order chunks held now
				s.startLocked()
				started++
			}
			s.mu.Unlock()
		}
		m.restored = nil
		if started > 0 {
			m.log.Info("restored streaming-input sessions sent upstream", "sessions", started)
		}
	})
}

// Drain prepares for a shutdown without cutting running answers: new
// sessions, chunks and finishes are refused with a retryable 503, readers
// waiting for an answer that has not started are released with that error,
// and Mode A requests that are not being answered end. Answers already
// running go on (the gateway's own drain bounds them), and so do their
// readers. Call it before the gateway's Shutdown, and Close after.
func (m *Manager) Drain() {
	m.drainOnce.Do(func() {
		close(m.draining)
		for _, s := range m.all() {
			s.mu.Lock()
			if s.modeA && (!s.started || s.done) {
				s.closeLocked(m.shutdownErr, "shutdown")
			}
			s.mu.Unlock()
		}
	})
}

func (m *Manager) isDraining() bool {
	select {
	case <-m.draining:
		return true
	default:
		return false
	}
}

// Close stops the Manager (after a Drain, which it implies): running answers are cut (their readers get a
// terminal event saying the gateway is shutting down), waiting readers are
// released and Mode A requests end. Durable sessions stay in the store and
// resume in the next Manager; a cut answer is requested again then. Close
// waits for the dispatches to return or ctx to end.
func (m *Manager) Close(ctx context.Context) error {
	m.Drain()
	m.closeOnce.Do(func() {
		close(m.closing)
		m.stop(m.shutdownErr)
		for _, s := range m.all() {
			s.mu.Lock()
			if s.idle != nil {
				s.idle.Stop()
			}
			if s.durable {
				s.notifyLocked()
			} else {
				s.closeLocked(m.shutdownErr, "shutdown")
			}
			s.mu.Unlock()
		}
	})
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("streaminput: close: %w", ctx.Err())
	}
}

func (m *Manager) isClosing() bool {
	select {
	case <-m.closing:
		return true
	default:
		return false
	}
}

func (m *Manager) all() []*session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s)
	}
	return out
}

// get returns a REST-visible session owned by the key hash.
func (m *Manager) get(id, keyHash string) *session {
	m.mu.Lock()
	s := m.sessions[id]
	m.mu.Unlock()
	if s == nil || s.modeA || s.keyHash != keyHash {
		return nil
	}
	return s
}

// forget drops a closed session and gives back what it held of the global
// caps. closeLocked calls it once per session.
func (m *Manager) forget(s *session, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[s.id] == s {
		delete(m.sessions, s.id)
	}
	m.held--
	m.heldB -= bytes
}

// chargeBytes takes n bytes of MaxTotalBytes; false when they are not left.
// With a shared store, the callers that can have already reclaimed the
// sessions other replicas ended (makeRoomForChunk); a refusal still starts
// one (reclaimInBackground): the caller holds its session's lock, which
// the reclaim needs, and the refusal says to retry.
func (m *Manager) chargeBytes(n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n > 0 && m.heldB+n > m.opts.MaxTotalBytes {
		m.reclaimInBackground()
		return false
	}
	m.heldB += n
	return true
}

func (m *Manager) releaseBytes(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.heldB -= n
}

// full reports whether MaxSessions is reached: a cheap early refusal,
// before a create's body is read (create checks again). With a shared
// store it first lets go of the sessions other replicas ended
// (reclaimShared), as create does.
func (m *Manager) full() bool { return m.refusesAfterReclaim(m.atSessionCap) }

// makeRoomForChunk runs before a chunk of n payload bytes is accepted:
// when it would cross MaxTotalBytes, the sessions other replicas ended are
// let go of first (README "Several replicas": the replica checks the
// sessions it counts against the store before a cap refuses), so that
// chargeBytes, which decides under the session's lock, counts only live
// ones.
func (m *Manager) makeRoomForChunk(n int64) {
	m.refusesAfterReclaim(func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return n > 0 && m.heldB+n > m.opts.MaxTotalBytes
	})
}

// refusesAfterReclaim reports whether the cap check refuses refuses; with
// a shared store, asked again once the sessions other replicas ended are
// let go of (reclaimShared, bounded by sharedReclaimTimeout).
// The caller must hold no session's lock.
func (m *Manager) refusesAfterReclaim(refuses func() bool) bool {
	if !refuses() {
		return false
	}
	if m.shared == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(m.base, sharedReclaimTimeout)
	defer cancel()
	m.reclaimShared(ctx, "")
	return refuses()
}

func (m *Manager) atSessionCap() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held >= m.opts.MaxSessions
}

// sharedReclaimTimeout bounds a reclaim that no client request carries.
const sharedReclaimTimeout = 5 * time.Second

// reclaimShared lets go of the sessions this replica counts against its caps
// that another replica deleted or closed (their record is gone from the
// shared store), and brings the others up to their record (one whose answer
// ended elsewhere leaves its key's cap). Only this replica's requests and
// timers touch its copies otherwise, so without it a session deleted
// through another replica would hold its slot here until its idle timer
// fired, although the README says a session counts until it is deleted,
// closed or expires. The caps refuse before it runs, so it costs store
// reads only when one would refuse: those of keyHash's counted sessions,
// or of every session when keyHash is "" (one such sweep at a time; a
// request refused meanwhile stays refused). A store failure ends it: the
// refusal stands.
func (m *Manager) reclaimShared(ctx context.Context, keyHash string) {
	if keyHash == "" {
		if !m.sweeping.CompareAndSwap(false, true) {
			return
		}
		defer m.sweeping.Store(false)
	}
	for _, s := range m.all() {
		s.mu.Lock()
		skip := s.closed || s.modeA || !s.durable || keyHash != "" && (s.keyHash != keyHash || !s.active)
		s.mu.Unlock()
		if skip {
			continue
		}
		rec, err := m.shared.GetInputSession(ctx, s.id)
		gone := errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid)
		if err != nil && !gone {
			if m.base.Err() == nil {
				m.log.Warn("checking streaming-input sessions against the shared store failed; the session caps count them still", "error", err)
			}
			return
		}
		s.mu.Lock()
		switch {
		case s.closed:
		case gone: // deleted or closed through another replica (lookup's rule)
			s.goneLocked(err)
		case !s.stored.Equal(rec.LastActivity):
			_ = s.refreshLocked(ctx, rec) // a failure is logged; the session counts still
		}
		s.mu.Unlock()
	}
}

// reclaimInBackground runs reclaimShared over every session, for a caller
// that cannot wait for it (it holds a session's lock).
func (m *Manager) reclaimInBackground() {
	if m.shared == nil || m.sweeping.Load() || m.base.Err() != nil {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.base, sharedReclaimTimeout)
		defer cancel()
		m.reclaimShared(ctx, "")
	}()
}

func (m *Manager) errTooManySessions() *apierr.Error {
	return errOverloaded("the gateway holds its limit of %d streaming-input sessions; retry later", m.opts.MaxSessions)
}

func (m *Manager) errBytesFull() *apierr.Error {
	return errOverloaded("the streaming-input sessions hold the gateway's limit of %d bytes; retry later", m.opts.MaxTotalBytes)
}

func (m *Manager) release(keyHash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.perKey[keyHash]--; m.perKey[keyHash] <= 0 {
		delete(m.perKey, keyHash)
	}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sis_" + hex.EncodeToString(b[:])
}

// sessionParams describe a new session.
type sessionParams struct {
	tpl     template
	policy  startPolicy
	header  http.Header // the client's request headers
	modeA   bool
	onClose func()
	peer    string // the client's address (r.RemoteAddr)
	// client is a Mode A request's own context: its dispatch carries it
	// (ModeAClient). Nil for a REST session.
	client context.Context
}

// create opens a session, counting it against its client key's cap and
// the global caps (MaxSessions, and MaxTotalBytes for its template).
func (m *Manager) create(ctx context.Context, p sessionParams) (*session, *apierr.Error) {
	kh := clientkey.Hash(p.header)
	keep, cred := splitHeaders(p.header)
	durable := !p.modeA && m.opts.Store != nil
	var env []byte
	size := int64(len(p.tpl.body))
	if durable {
		env = encodeEnvelope(p.tpl, keep)
		size = int64(len(env))
	}
	switch {
	case int64(len(p.tpl.body)) > m.opts.MaxTemplateBytes:
		return nil, m.errTemplateTooLarge(p.modeA)
	case size > m.opts.MaxTotalBytes:
		// No session ending elsewhere could make room: not a retryable 503.
		e := apierr.TooLarge(m.opts.MaxTotalBytes)
		e.Param = "template"
		e.Message = fmt.Sprintf("the template (%d bytes as the session holds it) is larger than the gateway's limit of %d bytes "+
			"for all streaming-input sessions together; it can never be accepted", size, m.opts.MaxTotalBytes)
		return nil, e
	}
	refusal, perKey := m.reserve(kh, size)
	if refusal != nil && m.shared != nil && !m.isDraining() {
		// Sessions deleted or ended through another replica may still be
		// counted here: let go of them, and try once more.
		if perKey {
			m.reclaimShared(ctx, kh)
		} else {
			m.reclaimShared(ctx, "")
		}
		refusal, _ = m.reserve(kh, size)
	}
	if refusal != nil {
		return nil, refusal
	}
	unreserve := func() {
		m.release(kh)
		m.mu.Lock()
		m.held--
		m.heldB -= size
		m.mu.Unlock()
	}

	now := m.now()
	s := &session{
		m: m, id: newID(), keyHash: kh, durable: durable, modeA: p.modeA,
		tpl: p.tpl, policy: p.policy, headers: keep, dispatch: m.opts.Dispatch, onClose: p.onClose, created: now,
		cred: cred, peer: p.peer, client: p.client, infos: map[uint64]chunkInfo{}, active: true, changed: make(chan struct{}), held: size,
		reqBase: requestBase(ctx, p.tpl, m.opts.MaxJSONDepth),
	}
	if !s.durable {
		s.mem = map[uint64]chunk{}
	}
	s.lastActivity, s.expiresAt = now, now.Add(m.opts.IdleTimeout)
	if s.durable {
		s.envelope = env
		s.tpl.body = envelopeTemplate(s.envelope) // one copy of the template, not two
		if err := m.opts.Store.CreateInputSession(ctx, s.recordLocked()); err != nil {
			unreserve()
			if errors.Is(err, store.ErrTooLarge) {
				return nil, apierr.Invalid("template", apierr.CodePayloadTooLarge, "the template is too large to store")
			}
			m.log.Error("creating a streaming-input session failed", "error", err)
			return nil, errStore("store the session durably", err)
		}
		s.stored = s.lastActivity
	}
	m.mu.Lock()
	m.sessions[s.id] = s
	m.mu.Unlock()
	s.mu.Lock()
	s.idle = time.AfterFunc(m.opts.IdleTimeout, s.onIdle)
	s.mu.Unlock()
	return s, nil
}

// errTemplateTooLarge refuses a template over Options.MaxTemplateBytes (at
// most the request limit, limits.max_body_bytes): the assembled request
// could never be sent, so the session is refused when it is created
// rather than at its first chunk (README "Limits"). modeA: it came in a
// Mode A request's header line.
func (m *Manager) errTemplateTooLarge(modeA bool) *apierr.Error {
	what := "the template"
	if modeA {
		what = "the template in the header line"
	}
	e := apierr.TooLarge(m.opts.MaxTemplateBytes)
	e.Param = "template"
	e.Message = fmt.Sprintf("%s is larger than the gateway limit of %d bytes for a request template; "+
		"the assembled request could never be sent", what, m.opts.MaxTemplateBytes)
	return e
}

// reserve counts a new session of key hash kh holding size bytes against the
// caps, or says which one refuses it (perKey: the key's own cap).
func (m *Manager) reserve(kh string, size int64) (refusal *apierr.Error, perKey bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.isDraining():
		return errShutdown(), false
	case m.held >= m.opts.MaxSessions:
		return m.errTooManySessions(), false
	case m.perKey[kh] >= m.opts.MaxSessionsPerKey:
		return &apierr.Error{Status: http.StatusTooManyRequests, Type: apierr.TypeInvalidRequest, Code: CodeTooManySessions,
			Message: fmt.Sprintf("this key already has %d streaming-input sessions open or running; finish, delete or let one end first", m.opts.MaxSessionsPerKey)}, true
	case m.heldB+size > m.opts.MaxTotalBytes:
		return m.errBytesFull(), false
	}
	m.perKey[kh]++
	m.held++
	m.heldB += size
	return nil, false
}

// restore loads the store's sessions after a restart.
func (m *Manager) restore(ctx context.Context) error {
	recs, err := m.opts.Store.ListInputSessions(ctx)
	if err != nil {
		return fmt.Errorf("streaminput: restoring sessions: %w", err)
	}
	resumed, pending := 0, 0
	for _, rec := range recs {
		s, err := m.restoreOne(ctx, rec)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("streaminput: restoring sessions: %w", ctx.Err())
			}
			m.log.Error("cannot restore a streaming-input session; it is left to expire", "session", store.RedactID(rec.ID), "error", err)
			continue
		}
		resumed++
		s.mu.Lock()
		// Started before the restart: its readers may have seen part of
		// an answer that is lost, and the request is sent again.
		s.resent = s.started && !s.done
		if !s.started && !s.done && s.policy.holds(s.next, s.contig, s.finished) {
			s.started = true
		}
		if s.started && !s.done {
			// Sent by Start; until then the session reads as started, with
			// its result pending.
			m.restored = append(m.restored, s)
			pending++
		}
		s.mu.Unlock()
	}
	if len(recs) > 0 {
		m.log.Info("streaming-input sessions restored", "sessions", resumed, "to_send", pending)
	}
	return nil
}

func (m *Manager) restoreOne(ctx context.Context, rec store.InputSession) (*session, error) {
	tpl, headers, err := decodeEnvelope(ctx, rec.Endpoint, rec.Template, m.opts.MaxJSONDepth)
	if err != nil {
		return nil, err
	}
	policy, aerr := parsePolicy(rec.StartPolicy)
	if aerr != nil {
		return nil, aerr
	}
	stored, err := m.opts.Store.Chunks(ctx, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("loading chunks: %w", err)
	}
	s := &session{
		m: m, id: rec.ID, keyHash: rec.ClientKeyHash, durable: true, tpl: tpl, policy: policy, headers: headers,
		envelope: rec.Template, dispatch: m.opts.Dispatch, created: rec.CreatedAt, infos: map[uint64]chunkInfo{},
		changed: make(chan struct{}), lastActivity: rec.LastActivity, expiresAt: rec.ExpiresAt,
		reqBase: requestBase(ctx, tpl, m.opts.MaxJSONDepth),
	}
	if err := s.applyStored(rec, stored); err != nil {
		return nil, err
	}
	// Restored sessions count against the global caps (they may exceed
	// them, after a restart with lower caps: creates wait until they end).
	s.held = int64(len(rec.Template)) + s.received
	m.mu.Lock()
	m.sessions[s.id] = s
	m.held++
	m.heldB += s.held
	if !s.done {
		s.active = true
		m.perKey[s.keyHash]++
	}
	m.mu.Unlock()
	s.mu.Lock()
	s.idle = time.AfterFunc(max(time.Millisecond, s.expiresAt.Sub(m.now())), s.onIdle)
	s.mu.Unlock()
	return s, nil
}

// applyStored sets what a session knows of its chunks and state from the
// store: the chunk digests and sizes, the in-order prefix, the end of input,
// and whether the request was started or its answer ended. restoreOne uses
// it after a restart, and a replica that shares the store after another
// replica changed the session (shared.go).
func (s *session) applyStored(rec store.InputSession, stored []store.Chunk) error {
	s.infos, s.received, s.maxSeq, s.endSeq, s.hasEnd, s.next, s.contig = map[uint64]chunkInfo{}, 0, 0, 0, false, 0, 0
	s.started, s.done, s.resultLost, s.saw, s.late = false, false, false, upstreamSaw{}, 0
	for _, sc := range stored {
		meta, err := decodeMeta(sc.Modality)
		if err != nil {
			return fmt.Errorf("chunk %d: %w", sc.Seq, err)
		}
		c := chunk{seq: sc.Seq, meta: meta, payload: sc.Payload}
		s.infos[sc.Seq] = chunkInfo{d: c.digest(), size: int64(len(sc.Payload)), end: meta.end, meta: meta, enc: encodedSize(c)}
		s.received += int64(len(sc.Payload))
		s.maxSeq = max(s.maxSeq, sc.Seq)
		if meta.end {
			s.endSeq, s.hasEnd = sc.Seq, true
		}
	}
	for info, ok := s.infos[s.next]; ok; info, ok = s.infos[s.next] {
		s.contig += info.size
		s.next++
	}
	s.reqChunks = 0
	for q, info := range s.infos {
		prev, ok := s.infos[q-1]
		info.startsPart = q == 0 || !ok || !joinsPart(prev.meta, info.meta)
		s.reqChunks += info.enc
		if info.startsPart {
			s.reqChunks += partBound(info.meta)
		}
		s.infos[q] = info
	}
	input, suffix, _ := strings.Cut(rec.State, "+")
	s.finished = input == stateFinished || s.hasEnd && s.next > s.endSeq
	if s.finished && !s.hasEnd && s.next > 0 {
		s.endSeq, s.hasEnd = s.next-1, true
	}
	switch "+" + suffix {
	case suffixStarted:
		s.started = true
	case suffixDone:
		s.started, s.done, s.resultLost = true, true, true
		s.saw = upstreamSaw{chunks: s.next, bytes: s.contig, complete: s.finished}
	}
	if a := auditOf(rec.Template); s.started && a != nil {
		// Written by the replica (or process) that sent the request.
		s.saw, s.late = upstreamSaw{chunks: a.Chunks, bytes: a.Bytes, complete: a.Complete}, a.Late
		if a.At != 0 {
			s.saw.at = time.Unix(0, a.At)
		}
	}
	s.stored = rec.LastActivity
	return nil
}
