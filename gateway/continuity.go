package gateway

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/julienschmidt/httprouter"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/logtext"
	"github.com/sluice-gw/sluice/store"
)

// Fail-closed reasons, as counted in continuity_fail_closed_total.
const (
	failPreviousNotFound = "previous_response_not_found"
	// failConversationNotFound: a conversation anchored for another
	// Sluice key (refuseUnknownConversation).
	failConversationNotFound = "conversation_not_found"
	failOwnerUnavailable     = "owner_unavailable"
	failOwnerLookupFailed    = "owner_lookup_failed"
)

// anchorWriteTimeout bounds a background anchor write; a store slower than
// this is failing.
const anchorWriteTimeout = 5 * time.Second

// continuity keeps which upstream owns which response (README, "What it promises"): a
// bounded in-memory cache in front of the durable store.
type continuity struct {
	store store.Store
	cache *anchorCache
	ttl   time.Duration
	log   hclog.Logger
	m     *metrics
	now   func() time.Time

	// Anchors whose write failed are written again later (rewriteLater):
	// retrying holds each one by response id, until it is written, replaced
	// (record) or forgotten, and one goroutine (retryAnchors, while
	// retryLoop) writes them; stop ends the retries (close).
	mu        sync.Mutex
	retrying  map[string]*anchorWrite
	retryLoop bool
	stop      chan struct{} // made with the continuity (server.go)
	pending   sync.WaitGroup

	// A store outage fails every response's anchor: these space the
	// lines that say so (one every 10 s, with a count).
	writeFailLog, notDurableLog, droppedLog logtext.Every
}

const (
	// anchorRetryFirst and anchorRetryMax bound the backoff between the
	// attempts to write the anchors whose write failed.
	anchorRetryFirst = 250 * time.Millisecond
	anchorRetryMax   = 30 * time.Second
	// maxRetryingAnchors bounds the anchors waiting to be written again
	// (a few hundred bytes each): past it, during a long outage, a new
	// failed anchor is not retried (logged and counted).
	maxRetryingAnchors = 100_000
	// continuityLogEvery spaces the lines about anchors not written.
	continuityLogEvery = 10 * time.Second
)

// anchorWrite is an anchor to write. replace: retried only over the
// anchor already stored for its response id (store.ReplaceAnchor), as for
// a continued response whose first owner's anchor was durable: if that is
// gone when the store is back, the response was deleted meanwhile
// (possibly on another replica) and must stay so.
type anchorWrite struct {
	anchor  store.Anchor
	replace bool
}

// put writes w to the store.
func (c *continuity) put(ctx context.Context, w anchorWrite) error {
	if w.replace {
		return c.store.ReplaceAnchor(ctx, w.anchor)
	}
	return c.store.PutAnchor(ctx, w.anchor)
}

// storeReachable is closed when st, found unreachable before, answers again
// (store.ReachabilityNotifier); nil, never ready, for a store that does not
// say. The background writes wait on it beside their backoff, so that they
// land as soon as the store is back: a continued response's anchor still
// waiting would leave other replicas sending its follow-ups to the first
// target meanwhile (README "Scale-out with Redis").
func storeReachable(st any) <-chan struct{} {
	if n, ok := st.(store.ReachabilityNotifier); ok {
		return n.Reachable()
	}
	return nil
}

// waiting is the anchor of responseID still waiting to be written here
// (rewriteLater), if any and not expired: newer than the store's record,
// which is the first owner's for a continued response.
func (c *continuity) waiting(responseID string) (store.Anchor, bool) {
	c.mu.Lock()
	w, ok := c.retrying[responseID]
	c.mu.Unlock()
	if !ok || !c.now().Before(w.anchor.ExpiresAt) {
		return store.Anchor{}, false
	}
	return w.anchor, true
}

// requestScope is the session scope a request carries, tightest first.
type requestScope struct {
	turnState string // x-codex-turn-state
	session   string // session_id / x-codex-session-id / x-codex-conversation-id
	keyHash   string // the client's credential hash
}

func scopeOf(h http.Header, keyHash string) requestScope {
	rs := requestScope{turnState: h.Get("X-Codex-Turn-State"), keyHash: keyHash}
	for _, k := range []string{"Session_id", "Session-Id", "X-Codex-Session-Id", "X-Codex-Conversation-Id"} {
		if v := h.Get(k); v != "" {
			rs.session = v
			break
		}
	}
	if rs.session == "" {
		if v := h.Values("session_id"); len(v) > 0 {
			rs.session = v[0]
		}
	}
	return rs
}

// overlong refuses a scope id longer than an id may be (store.MaxIDLen):
// it is stored with every anchor the request records.
func (rs requestScope) overlong() *apierr.Error {
	if e := overlongID("X-Codex-Turn-State", rs.turnState); e != nil {
		return e
	}
	return overlongID("session_id", rs.session)
}

// tightest is the scope a new anchor is recorded under.
func (rs requestScope) tightest() (store.ScopeKind, string) {
	switch {
	case rs.turnState != "":
		return store.ScopeTurnState, rs.turnState
	case rs.session != "":
		return store.ScopeSession, rs.session
	case rs.keyHash != "":
		return store.ScopeClientKey, rs.keyHash
	}
	return store.ScopeClientKey, "anonymous"
}

// sees reports whether a request in this scope may use the anchor: its turn
// state matches, else its session matches, else (for a request with neither)
// the anchor came from the same client key. Clients with different turn
// states never see each other's anchors, even under one session id.
func (rs requestScope) sees(a store.Anchor) bool {
	switch a.ScopeKind {
	case store.ScopeTurnState:
		return rs.turnState != "" && a.ScopeID == rs.turnState
	case store.ScopeSession:
		return rs.session != "" && a.ScopeID == rs.session
	}
	if rs.turnState != "" || rs.session != "" {
		return false
	}
	kind, id := rs.tightest()
	return kind == a.ScopeKind && id == a.ScopeID
}

// resolution is the outcome of an owner lookup.
type resolution struct {
	owner  string // upstream name; "" on a miss
	source string // memory or store
	// upstreamID is the id the owner knows the response by when it is not
	// the one asked about (a continued stream's client-visible id).
	upstreamID string
	// earlier are the copies other upstreams keep of a continued response
	// (store.Anchor.Earlier), which a DELETE reaches too.
	earlier []store.UpstreamCopy
	// keyHash is the client key hash the anchor was recorded under, in scope
	// or not; "" when there is no anchor.
	keyHash string
	err     error // the lookup failed: fail closed
}

// unknownTo reports whether the response must be treated as one Sluice
// never anchored, for a request whose credential hashes to keyHash and is a
// Sluice key (sluiceKey). Every Sluice key reaches the upstreams with the
// same credential (the upstream's api_key, or none), so an upstream cannot
// keep keys apart: a key may only use responses anchored under itself and
// in its request's scope (an anchor out of scope resolves with no owner),
// and any other id (another key's, another turn state's, one older than
// Sluice or than anchor_ttl, a typo) gets the one answer of an unknown id,
// so that ids cannot be probed (SECURITY.md, "Stream logs, resume and
// background"). Sent on unpinned instead, another scope's follow-up would
// land on a non-owner at random. Requests without a Sluice key keep their
// own credential's isolation, at the upstream.
func (res resolution) unknownTo(sluiceKey bool, keyHash string) bool {
	return sluiceKey && (res.owner == "" || res.keyHash != keyHash)
}

func (c *continuity) resolve(ctx context.Context, surface, responseID string, rs requestScope) resolution {
	return c.resolveSeen(ctx, surface, responseID, rs.sees)
}

// resolveConversation resolves the owner of a conversation from its anchor
// (conversationAnchor), in whichever scope it was recorded: a conversation
// outlives the session and turn state that first used it. The caller checks
// the client key (Server.pinConversation).
func (c *continuity) resolveConversation(ctx context.Context, surface, conversationID string) resolution {
	return c.resolveSeen(ctx, surface, conversationID, func(store.Anchor) bool { return true })
}

// resolveSeen resolves the owner of id from its anchor, when sees says the
// request may use it.
func (c *continuity) resolveSeen(ctx context.Context, surface, responseID string, sees func(store.Anchor) bool) resolution {
	if a, ok := c.memo().get(responseID); ok && c.now().Before(a.ExpiresAt) {
		return c.decide(surface, "memory", responseID, a, sees)
	}
	if a, ok := c.waiting(responseID); ok {
		return c.decide(surface, "memory", responseID, a, sees)
	}
	a, err := c.store.GetAnchor(ctx, responseID)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		// ErrInvalid: an id the store refuses (over-long, empty) has no anchor;
		// the store is not failing.
		c.m.ownerResolution.WithLabelValues(surface, "store", "miss").Inc()
		c.log.Debug("owner resolution", "surface", surface, "source", "store", "outcome", "miss", "response_id", LogID(responseID))
		return resolution{source: "store"}
	case err != nil:
		c.m.ownerResolution.WithLabelValues(surface, "store", "fail_closed").Inc()
		c.log.Error("owner lookup failed", "surface", surface, "response_id", LogID(responseID), "error", err)
		return resolution{source: "store", err: err}
	}
	c.memo().put(a)
	return c.decide(surface, "store", responseID, a, sees)
}

func (c *continuity) decide(surface, source, responseID string, a store.Anchor, sees func(store.Anchor) bool) resolution {
	if !sees(a) {
		c.m.ownerResolution.WithLabelValues(surface, source, "miss").Inc()
		c.log.Debug("owner resolution", "surface", surface, "source", source, "outcome", "miss", "why", "out of scope", "response_id", LogID(responseID))
		return resolution{source: source, keyHash: a.ClientKeyHash}
	}
	c.m.ownerResolution.WithLabelValues(surface, source, "hit").Inc()
	c.log.Debug("owner resolution", "surface", surface, "source", source, "outcome", "hit", "owner", a.Upstream,
		"scope", a.ScopeKind.String(), "response_id", LogID(responseID))
	return resolution{owner: a.Upstream, source: source, upstreamID: a.UpstreamID, earlier: a.Earlier, keyHash: a.ClientKeyHash}
}

// ownerLookupFailed is the answer to a request that names a response
// (what: "previous_response_id", "the response") whose owner the store
// could not be read for (err: why): failed closed, since no upstream but
// the owner may take it (storeUnavailable).
func ownerLookupFailed(what string, err error) *apierr.Error {
	return storeUnavailable(err, "owner lookup failed: the gateway could not read which upstream owns %s", what)
}

// storeUnavailable is the answer to a request the gateway's store failed
// for (err: why), saying what failed. The store is the gateway's own, so it
// is a 503, as for an owner that is out (failOwnerOut), rather than the 502
// of an upstream that answered badly: a retry with Retry-After while the
// store is out for the moment (a Redis that is down, a full disk, README
// "Scale-out with Redis"), no Retry-After and no "retry" once it is closed
// until the gateway restarts (a damaged file, README "Continuity"). The
// rule is apierr.StoreUnavailable's, which streaming input shares.
func storeUnavailable(err error, format string, args ...any) *apierr.Error {
	return apierr.StoreUnavailable(apierr.CodeUpstreamUnavailable, store.ClientRetryAfter(err), format, args...)
}

// ownerRemoved is the answer to a request that names a response (what:
// "previous_response_id", "the response") whose owner upstream is no longer
// configured: failed closed, since no upstream but the owner has it, and a
// 502, as it stays so until the config changes.
func ownerRemoved(what, owner string) *apierr.Error {
	return apierr.UpstreamUnavailable(http.StatusBadGateway, "upstream %q that owns %s is no longer configured", owner, what)
}

// refuseUnknownPrevious answers a request whose previous_response_id is
// unknown to its Sluice key (resolution.unknownTo) without calling any
// upstream: the 400 previous_response_not_found OpenAI's API gives an
// unknown id, which is also what a Chat upstream's conversation store
// answers (chatbridge.go).
func (s *Server) refuseUnknownPrevious(out responder, req *clientRequest) {
	s.metrics.failClosed.WithLabelValues(req.surface(), failPreviousNotFound).Inc()
	out.fail(req, notFound(req.previousResponseID), failInvalid)
}

// refuseUnknownConversation answers a request whose conversation Sluice
// anchored for another Sluice key without calling any upstream: the 404
// OpenAI's API gives a conversation it does not hold, so that ids cannot be
// probed (SECURITY.md, "Stream logs, resume and background").
func (s *Server) refuseUnknownConversation(out responder, req *clientRequest) {
	s.metrics.failClosed.WithLabelValues(req.surface(), failConversationNotFound).Inc()
	out.fail(req, conversationNotFound(req.conversationID), failInvalid)
}

// conversationNotFound is OpenAI's answer to a conversation it does not
// hold: a 404 with no code.
func conversationNotFound(id string) *apierr.Error {
	return &apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Param: "conversation",
		Message: fmt.Sprintf("Conversation with id '%s' not found.", id)}
}

// recordServed records the anchor of responseID, served by upstreamName for
// req, and, when req named a conversation, the conversation's anchor
// (conversationAnchor): the upstream that took a response in it holds it.
// The pending write is both's.
func (c *continuity) recordServed(req *clientRequest, responseID, upstreamName string) *pendingAnchor {
	p := c.recordAsync(c.anchorFor(req, responseID, upstreamName))
	if req.conversationID == "" || req.previousResponseID != "" {
		// With previous_response_id too the owner refuses the pair; it did
		// not serve the conversation.
		return p
	}
	conv := c.recordAsync(c.conversationAnchor(req, upstreamName))
	both := &pendingAnchor{done: make(chan struct{})}
	go func() {
		defer close(both.done)
		<-p.done
		<-conv.done
		both.err = errors.Join(p.err, conv.err)
	}()
	return both
}

// conversationAnchor is the anchor of the conversation req names, held by
// upstreamName: an anchor keyed by the conversation id (OpenAI's conv_…
// and resp_… ids do not meet), recorded for the client key and resolved in
// every scope (resolveConversation). Each response served in it renews it.
func (c *continuity) conversationAnchor(req *clientRequest, upstreamName string) store.Anchor {
	a := c.anchorFor(req, req.conversationID, upstreamName)
	a.ScopeKind, a.ScopeID = store.ScopeClientKey, firstNonEmpty(req.clientKeyHash, "anonymous")
	return a
}

// anchorFor builds the anchor of a response served by upstream for req.
func (c *continuity) anchorFor(req *clientRequest, responseID, upstreamName string) store.Anchor {
	kind, id := req.scope.tightest()
	now := c.now()
	return store.Anchor{ResponseID: responseID, Upstream: upstreamName, ClientKeyHash: req.clientKeyHash,
		ScopeKind: kind, ScopeID: id, Model: req.model, CreatedAt: now, ExpiresAt: now.Add(c.ttl)}
}

// pendingAnchor is an anchor write in flight.
type pendingAnchor struct {
	done chan struct{}
	err  error
}

// wait blocks until the write is durable (or failed, or ctx ends).
func (p *pendingAnchor) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordAsync makes the anchor visible in memory at once and durable in the
// background, so recording never delays the client's first byte.
func (c *continuity) recordAsync(a store.Anchor) *pendingAnchor {
	return c.writeAsync(anchorWrite{anchor: a})
}

func (c *continuity) writeAsync(w anchorWrite) *pendingAnchor {
	a := w.anchor
	c.memo().put(a)
	p := &pendingAnchor{done: make(chan struct{})}
	c.mu.Lock()
	c.unretryLocked(a.ResponseID) // this anchor replaces one still being retried
	c.mu.Unlock()
	go func() {
		defer close(p.done)
		ctx, cancel := context.WithTimeout(context.Background(), anchorWriteTimeout)
		defer cancel()
		// The first attempt writes as ever (the store was just read by the
		// stream's own request); only a retry after a failure is
		// conditional (anchorWrite.replace).
		p.err = c.store.PutAnchor(ctx, a)
		if p.err != nil {
			if n, ok := c.writeFailLog.Allow(time.Now()); ok {
				c.log.Error("recording anchor failed; retrying in the background", "response_id", LogID(a.ResponseID),
					"owner", a.Upstream, "error", p.err, "failures", n)
			}
			c.rewriteLater(w)
		}
	}()
	return p
}

// replacedNothing drops a, a replacing anchor whose response has no anchor
// any more: it was deleted (or expired), and writing a would bring it back.
func (c *continuity) replacedNothing(a store.Anchor) {
	c.memo().remove(a.ResponseID)
	c.log.Info("anchor not written: the response was deleted meanwhile", "response_id", LogID(a.ResponseID), "owner", a.Upstream)
}

// logNotDurable says that a response went to its client without a durable
// anchor (msg names the path); during an outage that is every response, so
// the line comes at most every continuityLogEvery, with a count.
func (c *continuity) logNotDurable(msg, responseID string, err error) {
	if n, ok := c.notDurableLog.Allow(time.Now()); ok {
		c.log.Error(msg, "response_id", LogID(responseID), "error", err, "responses", n)
	}
}

// rewriteLater writes a, an anchor whose write failed (a store down for a
// moment), once the store takes it: retrying with backoff until a expires,
// another anchor of its response replaces it, or it is forgotten, and once
// more when the gateway shuts down. Without it, a response its client saw
// complete while the store was down could never be continued, on any
// replica (README "Continuity"). The client's terminal event does not wait
// for these attempts. One goroutine writes every waiting anchor, and at
// most maxRetryingAnchors wait: an outage costs memory in proportion to
// that bound, not to its length.
func (c *continuity) rewriteLater(w anchorWrite) {
	a := w.anchor
	c.mu.Lock()
	if c.retrying == nil {
		c.retrying = map[string]*anchorWrite{}
	}
	if _, ok := c.retrying[a.ResponseID]; !ok && len(c.retrying) >= maxRetryingAnchors {
		c.mu.Unlock()
		c.m.anchorsNotRetried.Inc()
		if n, ok := c.droppedLog.Allow(time.Now()); ok {
			c.log.Error("an anchor whose write failed is not retried: too many are waiting for the store", "response_id", LogID(a.ResponseID),
				"waiting", maxRetryingAnchors, "not_retried", n)
		}
		return
	}
	// Held by pointer: the retries tell the write they took from a newer
	// one of the same response by identity (store.Anchor holds a slice, so
	// it has no ==).
	c.retrying[a.ResponseID] = &w
	c.m.anchorsWaiting.Set(float64(len(c.retrying)))
	start := !c.retryLoop
	c.retryLoop = true
	c.mu.Unlock()
	if start {
		c.pending.Add(1)
		go c.retryAnchors()
	}
}

// retryAnchors writes the anchors in c.retrying, backing off while the
// store refuses them, until none is left; at close it tries each once more.
func (c *continuity) retryAnchors() {
	defer c.pending.Done()
	for wait := anchorRetryFirst; ; {
		last := false
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-storeReachable(c.store):
			t.Stop()
			wait = anchorRetryFirst
		case <-c.stop:
			t.Stop()
			last = true
		}
		c.mu.Lock()
		batch := make([]*anchorWrite, 0, len(c.retrying))
		for _, w := range c.retrying {
			batch = append(batch, w)
		}
		c.mu.Unlock()
		written, failed := 0, 0
		var lastErr error
		for _, w := range batch {
			if !c.now().Before(w.anchor.ExpiresAt) {
				c.dropRetry(w) // expired: nothing to write
				continue
			}
			if lastErr != nil {
				failed++ // the store refused the one before: wait
				continue
			}
			c.mu.Lock()
			current := c.retrying[w.anchor.ResponseID] == w
			c.mu.Unlock()
			if !current {
				continue // replaced or forgotten since the batch was taken
			}
			ctx, cancel := context.WithTimeout(context.Background(), anchorWriteTimeout)
			err := c.put(ctx, *w)
			cancel()
			switch {
			case w.replace && errors.Is(err, store.ErrNotFound):
				c.dropRetry(w)
				c.replacedNothing(w.anchor)
				continue
			case err != nil:
				lastErr = err
				failed++
				continue
			}
			c.dropRetry(w)
			written++
		}
		if written > 0 {
			c.log.Info("anchors recorded after all", "anchors", written)
		}
		if last {
			if failed > 0 {
				c.log.Warn("gave up recording anchors: the gateway is shutting down", "anchors", failed, "error", lastErr)
			}
			c.mu.Lock()
			c.retryLoop = false // a later failure tries once, at once (stop is closed)
			c.mu.Unlock()
			return
		}
		if lastErr != nil {
			wait = min(2*wait, anchorRetryMax)
		} else {
			wait = anchorRetryFirst
		}
		c.mu.Lock()
		if len(c.retrying) == 0 {
			c.retryLoop = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// dropRetry removes w from the anchors waiting to be written, unless a
// newer anchor of its response replaced it meanwhile.
func (c *continuity) dropRetry(w *anchorWrite) {
	c.mu.Lock()
	if c.retrying[w.anchor.ResponseID] == w {
		c.unretryLocked(w.anchor.ResponseID)
	}
	c.mu.Unlock()
}

// unretryLocked removes the anchor of responseID from the anchors waiting
// to be written (c.mu held).
func (c *continuity) unretryLocked(responseID string) {
	if _, ok := c.retrying[responseID]; ok {
		delete(c.retrying, responseID)
		c.m.anchorsWaiting.Set(float64(len(c.retrying)))
	}
}

// close makes the anchor writes still being retried try once more, and
// waits for them up to ctx (Shutdown: before the store closes).
func (c *continuity) close(ctx context.Context) {
	c.mu.Lock()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// record writes the anchor and waits until it is durable.
func (c *continuity) record(ctx context.Context, a store.Anchor) error {
	return c.recordAsync(a).wait(ctx)
}

// replace is record whose retries, if the first write fails, write only
// over the anchor stored for a's response (anchorWrite.replace).
func (c *continuity) replace(ctx context.Context, a store.Anchor) error {
	return c.writeAsync(anchorWrite{anchor: a, replace: true}).wait(ctx)
}

// forget drops a stale anchor (the owner said it no longer has the response).
func (c *continuity) forget(ctx context.Context, responseID string) {
	c.memo().remove(responseID)
	c.mu.Lock()
	c.unretryLocked(responseID) // not to be written back
	c.mu.Unlock()
	if err := c.store.DeleteAnchor(ctx, responseID); err != nil {
		c.log.Warn("clearing stale anchor failed", "response_id", LogID(responseID), "error", err)
	}
}

// ownedAnchor is the anchor of responseID when it was recorded for the
// client key keyHash, in whichever scope: a DELETE of the key's own
// response reaches its owner upstream. ok is false for another key's
// anchor or a missing one; err is the store's when it cannot read it (the
// caller answers storeUnavailable: deleting the gateway's copy then would
// leave the owner's without a word).
func (c *continuity) ownedAnchor(ctx context.Context, responseID, keyHash string) (_ store.Anchor, ok bool, err error) {
	a, ok := c.memo().get(responseID)
	if !ok {
		a, ok = c.waiting(responseID) // newer than the store's (a continued response's owner)
	}
	if !ok {
		if a, err = c.store.GetAnchor(ctx, responseID); err != nil {
			if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
				err = nil
			}
			return store.Anchor{}, false, err
		}
	}
	return a, a.ClientKeyHash == keyHash, nil
}

// handleAnchor is GET /admin/continuity/{response_id}.
func (s *Server) handleAnchor(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	id := ps.ByName("response_id")
	if aerr := overlongID("response_id", id); aerr != nil {
		aerr.Write(w)
		return
	}
	a, err := s.cont.store.GetAnchor(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		(&apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound, Param: "response_id",
			Message: "no anchor for that response id"}).Write(w)
		return
	case err != nil:
		// The store's error stays in the log: it names paths and internals.
		s.log.Error("admin anchor lookup failed", "response_id", LogID(id), "error", err)
		apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the anchor store could not be read; see the gateway log").Write(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"response_id": a.ResponseID, "owner": a.Upstream, "scope_kind": a.ScopeKind.String(), "scope_id": LogID(a.ScopeID),
		"model": a.Model, "upstream_id": LogID(a.UpstreamID), "created_at": a.CreatedAt.UTC().Format(time.RFC3339), "expires_at": a.ExpiresAt.UTC().Format(time.RFC3339),
		"age_seconds": int64(s.cont.now().Sub(a.CreatedAt).Seconds()),
	})
}

// overlongID is the 400 for a response id longer than any the store keeps
// (store.MaxIDLen), given as param; nil when id fits. No such id can have
// an anchor or a log, and no retry makes it one.
func overlongID(param, id string) *apierr.Error {
	if len(id) <= store.MaxIDLen {
		return nil
	}
	return apierr.Invalid(param, apierr.CodeInvalidValue, "%s is %d bytes; the longest accepted is %d", param, len(id), store.MaxIDLen)
}

// memo is the anchor cache, or nil when the store is shared by several
// replicas (store.IsShared: Redis). There the cache is off, not invalidated:
// another replica may delete an anchor (its owner said the response is
// gone) or replace it at any time, and a local copy would then send the
// follow-up to a stale owner. Invalidation by pub/sub would need a version
// check on every hit anyway (a message can be lost while disconnected),
// which costs the same round trip as reading the anchor itself, so every
// lookup reads the store: one GET on loopback-class networks (see the
// benchmark in the README's scale-out section).
func (c *continuity) memo() *anchorCache {
	if c.cache == nil || store.IsShared(c.store) {
		return nil
	}
	return c.cache
}

// anchorCache is a bounded LRU of anchors by response id. A nil
// *anchorCache holds nothing.
type anchorCache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[string]*list.Element
}

func newAnchorCache(max int) *anchorCache {
	return &anchorCache{max: max, ll: list.New(), items: make(map[string]*list.Element)}
}

func (c *anchorCache) get(id string) (store.Anchor, bool) {
	if c == nil {
		return store.Anchor{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[id]
	if !ok {
		return store.Anchor{}, false
	}
	c.ll.MoveToFront(el)
	return el.Value.(store.Anchor), true
}

func (c *anchorCache) put(a store.Anchor) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[a.ResponseID]; ok {
		el.Value = a
		c.ll.MoveToFront(el)
		return
	}
	c.items[a.ResponseID] = c.ll.PushFront(a)
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(store.Anchor).ResponseID)
	}
}

func (c *anchorCache) remove(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[id]; ok {
		c.ll.Remove(el)
		delete(c.items, id)
	}
}
