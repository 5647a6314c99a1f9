package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// Sluice keys (README, "Keys, limits and usage"). A client presents its key
// as Authorization: Bearer <key> (or Api-Key: <key>); the gateway hashes it
// with SHA-256 and looks the hash up among the keys of the config and those
// created at run time (kept hashed in the store, so replicas sharing it
// agree and they survive restarts). The secret itself is never stored,
// logged or forwarded upstream.

// Error codes of Sluice keys and limits (defined, with every other code the
// gateway emits, in apierr).
const (
	CodeInvalidAPIKey     = apierr.CodeInvalidAPIKey
	CodeModelNotAllowed   = apierr.CodeModelNotAllowed
	CodeRateLimitExceeded = apierr.CodeRateLimitExceeded
	CodeInsufficientQuota = apierr.CodeInsufficientQuota
)

// AccountsOptions configure Sluice keys, limits, usage accounting and the
// access log. The zero value: no keys, the client's credential passes
// through, usage counted in metrics only.
type AccountsOptions struct {
	// Required makes every /v1/ request carry a known Sluice key (401
	// invalid_api_key otherwise). Without it, a request that presents a
	// known key is still identified (its models, limits and usage apply)
	// and any other credential passes through as before.
	Required bool
	// Keys are the config's keys (hashed; never the secret).
	Keys []store.KeyRecord
	// KeyStore keeps the keys created at run time (POST /admin/keys); nil:
	// the config's keys only, and the admin API cannot create keys.
	KeyStore store.KeyStore
	// Usage keeps per-day usage totals (GET /admin/usage, budgets across
	// restarts); nil: metrics only.
	Usage store.UsageStore
	// Limiter enforces the keys' limits; nil: a LocalLimiter (this process).
	Limiter Limiter
	// Pricing is per model, per 1M tokens: usage reports carry cost.
	Pricing map[string]Price
	// UsageFlushInterval is how long a request's usage may wait, summed
	// with others', before it is added to Usage (default 250ms; GET
	// /admin/usage and Shutdown flush at once).
	UsageFlushInterval time.Duration
	// KeyRefresh is how old the keys read from the store may get before a
	// request reads them again (keys created, changed or deleted by another
	// replica); default 5s.
	KeyRefresh time.Duration
	// AccessLog writes one INFO line per request (default on; see
	// accesslog.go). Set DisableAccessLog to turn it off.
	DisableAccessLog bool
}

// Price is a model's price per 1M tokens. CachedInput is the price as
// given, 0 included (free cache hits): the config's "defaults to input" is
// resolved before (config.Price.CachedInputPrice).
type Price struct {
	Input, Output, CachedInput float64
}

// keyEntry is one known key, as the gateway uses it.
type keyEntry struct {
	name string
	// limitKey is what its limits and budgets are kept under (limitKey).
	limitKey   string
	sum        [32]byte
	models     []string
	limits     store.KeyLimits
	fromConfig bool
	created    time.Time
}

// allows reports whether the key may use model (its patterns; none: all).
func (k *keyEntry) allows(model string) bool {
	if len(k.models) == 0 {
		return true
	}
	for _, p := range k.models {
		if p == model {
			return true
		}
		if ok, err := path.Match(p, model); err == nil && ok {
			return true
		}
	}
	return false
}

// keyring holds the known keys by hash and by name.
type keyring struct {
	st      store.KeyStore
	refresh time.Duration
	config  []*keyEntry
	// log, when set, tells the operator about stored keys the config's
	// keys hide (nil: not told).
	log hclog.Logger
	// forget, when set, is told the limitKeys of keys gone from the store
	// (deleted, here or on another replica): the limiter's state of a key
	// that is gone is never used again (limitKey), so it is dropped.
	forget func(limitKey string)

	mu       sync.RWMutex
	bySum    map[[32]byte]*keyEntry
	byName   map[string]*keyEntry
	loadedAt time.Time // when the installed keys were read
	failedAt time.Time // when a read last failed
	readAt   time.Time // when freshRead last began a read
	missAt   time.Time // the last reload caused by an unknown key not in Sluice's format
	// Reloads may overlap (a background refresh, an admin change, an
	// unknown key) and finish in any order. Each takes a generation before
	// it reads the store, and a snapshot is installed only if no later
	// read's is already: a reload that read the keys before a DELETE can
	// never put the deleted key back after one that read them after it.
	reads     uint64          // the generation of the last read begun
	installed uint64          // the generation of the keys in bySum and byName
	finished  uint64          // the generation of the last read ended (installed or failed)
	finishErr error           // why the read of generation finished failed (nil: it did not)
	inFlight  chan struct{}   // closed when the read in flight for freshRead ends
	hidden    map[string]bool // stored keys the config hides, told once
}

func newKeyring(cfg []store.KeyRecord, st store.KeyStore, refresh time.Duration) (*keyring, error) {
	kr := &keyring{st: st, refresh: refresh, hidden: map[string]bool{}}
	bySum := map[[32]byte]*keyEntry{}
	for _, k := range cfg {
		e, err := entryOf(k)
		if err != nil {
			return nil, fmt.Errorf("gateway: key %q: %w", k.Name, err)
		}
		if other, dup := bySum[e.sum]; dup {
			// One secret, one key: otherwise the later key would silently
			// take the secret over, and the earlier one's models and
			// limits would never apply.
			return nil, fmt.Errorf("gateway: keys %q and %q have the same secret", other.name, e.name)
		}
		bySum[e.sum] = e
		e.fromConfig = true
		kr.config = append(kr.config, e)
	}
	kr.install(nil, 0)
	return kr, nil
}

func entryOf(k store.KeyRecord) (*keyEntry, error) {
	b, err := hex.DecodeString(strings.TrimSpace(k.SHA256))
	if err != nil || len(b) != 32 {
		return nil, errors.New("key_sha256 is not 64 hex digits")
	}
	e := &keyEntry{name: k.Name, limitKey: limitKey(k.Name, k.ID), models: k.Models, limits: k.Limits, created: k.CreatedAt}
	copy(e.sum[:], b)
	return e, nil
}

// HashKey is the hex SHA-256 of a Sluice key's secret (what key_sha256
// holds).
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// install replaces the store's keys with stored, read by the reload of
// generation gen, unless a later reload's keys are installed already. The
// config's keys win a clash of name or of secret: a stored key with a
// config key's name or secret is left out (and the operator told), never
// put in the config key's place.
func (kr *keyring) install(stored []store.KeyRecord, gen uint64) {
	bySum := map[[32]byte]*keyEntry{}
	byName := map[string]*keyEntry{}
	for _, e := range kr.config {
		bySum[e.sum], byName[e.name] = e, e
	}
	type hiddenKey struct{ name, by, why string }
	var hidden []hiddenKey
	for _, k := range stored {
		if c, taken := byName[k.Name]; taken {
			if c.fromConfig {
				hidden = append(hidden, hiddenKey{k.Name, c.name, "its name"})
			}
			continue
		}
		e, err := entryOf(k)
		if err != nil {
			continue
		}
		if c, taken := bySum[e.sum]; taken {
			if c.fromConfig {
				hidden = append(hidden, hiddenKey{k.Name, c.name, "its secret"})
			}
			continue
		}
		bySum[e.sum], byName[e.name] = e, e
	}
	kr.mu.Lock()
	if gen < kr.installed {
		kr.mu.Unlock()
		return
	}
	var gone []string
	for name, e := range kr.byName {
		if now := byName[name]; now == nil || now.limitKey != e.limitKey {
			gone = append(gone, e.limitKey)
		}
	}
	kr.bySum, kr.byName, kr.installed = bySum, byName, gen
	var tell []hiddenKey
	for _, h := range hidden {
		if !kr.hidden[h.name] {
			kr.hidden[h.name] = true
			tell = append(tell, h)
		}
	}
	kr.mu.Unlock()
	if kr.forget != nil {
		for _, k := range gone {
			kr.forget(k)
		}
	}
	if kr.log != nil {
		for _, h := range tell {
			kr.log.Warn("a stored key is ignored: the config has a key with "+h.why+"; the config's key applies",
				"stored_key", h.name, "config_key", h.by)
		}
	}
}

// reload reads the store's keys.
func (kr *keyring) reload(ctx context.Context) error {
	_, err := kr.read(ctx)
	return err
}

// read reads and installs the store's keys, under the generation it
// returns (taken before the read begins).
func (kr *keyring) read(ctx context.Context) (uint64, error) {
	kr.mu.Lock()
	kr.reads++
	gen := kr.reads
	kr.mu.Unlock()
	if kr.st == nil {
		return gen, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	recs, err := kr.st.ListKeys(ctx)
	if err != nil {
		kr.mu.Lock()
		kr.failedAt = time.Now()
		kr.mu.Unlock()
		return gen, err
	}
	kr.install(recs, gen)
	kr.mu.Lock()
	if start.After(kr.loadedAt) {
		kr.loadedAt = start
	}
	kr.mu.Unlock()
	return gen, nil
}

// freshRead returns once a read of the store's keys that began after it
// was called has ended: what the store held when the caller asked is
// installed, or the error is why the store could not be read. Callers at
// once share reads, one in flight at a time, so a burst costs a read or
// two, not one each.
func (kr *keyring) freshRead() error {
	if kr.st == nil {
		return nil
	}
	kr.mu.Lock()
	need := kr.reads + 1
	for kr.finished < need {
		if ch := kr.inFlight; ch != nil { // began before the call, maybe: wait, then look again
			kr.mu.Unlock()
			<-ch
			kr.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		kr.inFlight = ch
		wait := freshReadGap - time.Since(kr.readAt)
		kr.mu.Unlock()
		if wait > 0 { // a burst of unknown keys costs a read per gap, not one each
			time.Sleep(wait)
		}
		kr.mu.Lock()
		kr.readAt = time.Now()
		kr.mu.Unlock()
		gen, err := kr.read(context.Background())
		kr.mu.Lock()
		if gen >= kr.finished {
			kr.finished, kr.finishErr = gen, err
		}
		kr.inFlight = nil
		close(ch)
	}
	err := kr.finishErr
	kr.mu.Unlock()
	return err
}

// freshReadGap is the least time between two reads freshRead begins.
const freshReadGap = 50 * time.Millisecond

// stale reports whether the installed keys were read more than refresh ago
// and no read failed in the last second: while the store fails, requests
// are judged by the keys last read (as the README says, a replica keeps
// serving while Redis is down) instead of each trying the store again.
func (kr *keyring) stale() bool {
	if kr.st == nil {
		return false
	}
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return time.Since(kr.loadedAt) > kr.refresh && time.Since(kr.failedAt) > time.Second
}

// readIfStale reads the keys again when they are stale (freshRead), and
// reports whether it did, with why that read failed (nil: it did not).
func (kr *keyring) readIfStale() (bool, error) {
	if !kr.stale() {
		return false, nil
	}
	return true, kr.freshRead()
}

// sluiceKeyPrefix starts every key the gateway makes (newSecret).
const sluiceKeyPrefix = "sk-sluice-"

// lookup finds the known keys among secrets (the credentials one request
// presents), each once. Keys read more than refresh ago are read again
// first, on the request's path (one read shared by the requests at once),
// so that no request is judged by a key set older than that: a key deleted
// or changed on another replica stops working there within refresh
// (README: "within 5s"). When none is known and one is in Sluice's own
// format, the keys are looked for in a read that began after the request
// arrived, so a key just created on another replica works at once and is
// never taken for a pass-through credential (and forwarded upstream);
// other unknown credentials (a pass-through client's own keys) read the
// store at most once a second. A request reads the store at most once,
// however many credentials it presents. When that read failed and none is
// known but one is in Sluice's format, the error says why: the gateway
// cannot tell whether the credential is one of its keys, so it may neither
// forward it as a pass-through credential (README: "A Sluice key is never
// forwarded upstream") nor call it invalid.
func (kr *keyring) lookup(secrets ...string) ([]*keyEntry, error) {
	sums := make([][32]byte, 0, len(secrets))
	ours := false
	for _, s := range secrets {
		if s != "" {
			sums = append(sums, sha256.Sum256([]byte(s)))
			ours = ours || strings.HasPrefix(s, sluiceKeyPrefix)
		}
	}
	if len(sums) == 0 {
		return nil, nil
	}
	find := func() []*keyEntry {
		var found []*keyEntry
		kr.mu.RLock()
		defer kr.mu.RUnlock()
		for _, sum := range sums {
			e := kr.bySum[sum]
			if e != nil && subtle.ConstantTimeCompare(e.sum[:], sum[:]) == 1 && !slices.Contains(found, e) {
				found = append(found, e)
			}
		}
		return found
	}
	fresh, err := kr.readIfStale()
	if found := find(); len(found) > 0 || fresh { // a fresh read began after this request arrived
		if len(found) > 0 || !ours {
			err = nil
		}
		return found, err
	}
	switch {
	case ours:
		err = kr.freshRead()
	case kr.missedLately():
		return nil, nil
	default:
		_ = kr.reload(context.Background())
	}
	found := find()
	if len(found) > 0 || !ours {
		err = nil
	}
	return found, err
}

// missedLately reports whether an unknown credential read the store less
// than a second ago, and otherwise notes that one does now.
func (kr *keyring) missedLately() bool {
	if kr.st == nil {
		return true
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	if now := time.Now(); now.Sub(kr.missAt) > time.Second {
		kr.missAt = now
		return false
	}
	return true
}

// current is the key k is now, with its models and limits as they are
// since any change, or nil when it was deleted. It finds k by its secret's
// hash, as a request presenting the secret would: a key deleted and created
// again under its name has another secret. A client WebSocket resolves the
// key of its upgrade again for every frame with it, so that a change or a
// revocation applies to an open socket too (README: "other replicas see a
// change within 5s").
func (kr *keyring) current(k *keyEntry) *keyEntry {
	_, _ = kr.readIfStale() // a failed read leaves the keys last read in force
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return kr.bySum[k.sum]
}

func (kr *keyring) get(name string) *keyEntry {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return kr.byName[name]
}

func (kr *keyring) list() []*keyEntry {
	kr.mu.RLock()
	out := make([]*keyEntry, 0, len(kr.byName))
	for _, e := range kr.byName {
		out = append(out, e)
	}
	kr.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// presentedKeys yields every credential a request presents, with the
// header carrying it: each word (split where config.IsCredentialSeparator
// says: at commas and white space, quotes and semicolons) of every
// value of every credential header (hostabi.CredentialHeader), so that a
// Sluice key is found in a repeated Authorization or Api-Key, in a
// comma-joined value or in X-Api-Key as well as in the first value. The
// scheme's name ("Bearer") is a word too and matches no key.
func presentedKeys(h http.Header) iter.Seq2[string, string] {
	return func(yield func(header, secret string) bool) {
		for name, values := range h {
			// Cookie is never forwarded (upstreamHeaders): a key there
			// cannot leak, and a browser's cookies are no credentials to
			// count against the bound.
			if lower := strings.ToLower(name); lower == "cookie" || !hostabi.CredentialHeader(lower) {
				continue
			}
			for _, v := range values {
				basic := false
				for _, word := range strings.FieldsFunc(v, config.IsCredentialSeparator) {
					if !yield(name, word) {
						return
					}
					if basic {
						for _, part := range basicParts(word) {
							if !yield(name, part) {
								return
							}
						}
					}
					basic = strings.EqualFold(word, "basic")
				}
			}
		}
	}
}

// basicParts are the user and password of a Basic credential's token
// (base64 of "user:password", padded or not), or the whole decoded token
// when it has no colon; none when it is not base64.
func basicParts(token string) []string {
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(token, "="))
	if err != nil || len(raw) == 0 {
		return nil
	}
	user, pass, found := bytes.Cut(raw, []byte(":"))
	if !found {
		return []string{string(raw)}
	}
	var parts []string
	for _, p := range [][]byte{user, pass} {
		if len(p) > 0 {
			parts = append(parts, string(p))
		}
	}
	return parts
}

// maxPresentedCredentials bounds the words of a request's credential
// headers that authenticate looks up ("Bearer" and the token are two).
const maxPresentedCredentials = 16

// carriedBy reports whether secret, one credential a request presents
// (presentedKeys), is k's.
func (k *keyEntry) carriedBy(secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(k.sum[:], sum[:]) == 1
}

// authenticate identifies the client's key: the known Sluice key among the
// credentials it presents (presentedKeys), in whichever credential header
// and position. A request that presents two different known keys is a 401
// invalid_api_key: which key's models, limits and usage apply would be a
// guess. With auth required, a missing or unknown key is a 401 too; without,
// it is nil (pass-through). Once a key is identified, Authorization, Api-Key
// and every credential header carrying it stay with the gateway
// (upstreamHeaders): a Sluice key beside another credential is not forwarded
// either.
func (a *accounts) authenticate(h http.Header) (*keyEntry, *apierr.Error) {
	var secrets []string
	for _, secret := range presentedKeys(h) {
		if len(secrets) == maxPresentedCredentials {
			// Each is hashed: a megabyte of words would cost the gateway
			// more than the request is worth.
			return nil, &apierr.Error{Status: http.StatusUnauthorized, Type: apierr.TypeInvalidRequest, Code: CodeInvalidAPIKey,
				Message: fmt.Sprintf("the request's credential headers hold more than %d credentials: send one", maxPresentedCredentials)}
		}
		secrets = append(secrets, secret)
	}
	found, err := a.keys.lookup(secrets...)
	switch {
	case err != nil:
		// Retryable, like every request the store failed for: the key may
		// well be valid, and a 401 would make the client drop it.
		return nil, storeUnavailable(err, "the gateway could not read its keys to check the Sluice key presented")
	case len(found) > 1:
		return nil, &apierr.Error{Status: http.StatusUnauthorized, Type: apierr.TypeInvalidRequest, Code: CodeInvalidAPIKey,
			Message: "the request carries more than one Sluice key: send one"}
	case len(found) == 1:
		return found[0], nil
	case a.opts.Required:
		return nil, errInvalidAPIKey()
	}
	return nil, nil
}

// errInvalidAPIKey is the 401 of a request without a known Sluice key.
func errInvalidAPIKey() *apierr.Error {
	return &apierr.Error{Status: http.StatusUnauthorized, Type: apierr.TypeInvalidRequest, Code: CodeInvalidAPIKey,
		Message: "a valid Sluice key is required: send Authorization: Bearer <key>"}
}

// modelAllowed is the 403 for a model the key may not use, or nil.
func modelAllowed(k *keyEntry, model string) *apierr.Error {
	if k == nil || k.allows(model) {
		return nil
	}
	return &apierr.Error{Status: http.StatusForbidden, Type: apierr.TypeInvalidRequest, Code: CodeModelNotAllowed, Param: "model",
		Message: fmt.Sprintf("the key %q may not use the model %q", k.name, model)}
}

type keyCtxKey struct{}

// gate authenticates every /v1/ request before it is routed (the HTTP API,
// the WebSocket upgrade, streaming-input sessions, /v1/models): with auth
// required, a request without a known key gets 401 before its body is read.
// The key rides in the request's context; requests outside /v1/ pass. The
// request assembled from a Mode A request is that client request sent on
// (streaminput.ModeAClient): it takes over the client request's key and
// record, so that one client request is counted and logged once (README
// "Observability"), with the x-request-id its client got.
func (s *Server) gate(next http.Handler) http.Handler {
	a := s.acct
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, seen := r.Context().Value(keyCtxKey{}).(*keyEntry); seen {
			next.ServeHTTP(w, r) // re-dispatched (streaming input): checked already
			return
		}
		// Every path's answer, an error or not, must not wait on a body
		// its handler does not read (declaredBody).
		r, body := trackBody(r)
		defer func() { body.finish(w, r) }() // body as it is then: see the upgrade below
		route := next
		if encodedSeparator(r) {
			// The /v1/ test below, the router and the admin guard read the
			// decoded path, which has the segments the client sent only
			// without an encoded "/": one is never routed as a separator.
			route = http.HandlerFunc(s.serveEncodedSeparator)
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			if body != nil {
				w = &statusWriter{ResponseWriter: w, body: body}
			}
			route.ServeHTTP(w, r)
			return
		}
		if m := modeAClientMeta(r); m != nil && m.takeOver() {
			w.Header().Set("X-Request-Id", m.requestID)
			s.serveGated(route, w, r, m, true, nil)
			return
		}
		m := newReqMeta(r)
		// Every answer carries an x-request-id; a relayed upstream answer
		// replaces it with the upstream's own (copyResponseHeaders).
		m.requestID = newRequestID()
		w.Header().Set("X-Request-Id", m.requestID)
		// refuse answers r with aerr at once: what the client sent of a
		// body is read after (finish), so that the close does not reset
		// the answer.
		refuse := func(k *keyEntry, aerr *apierr.Error) {
			body.answerBegins(w.Header())
			aerr.Write(w)
			s.countRequest(r, aerr.Status)
			m.status, m.code = aerr.Status, aerr.Code
			s.accessLog(m)
			s.traceAnswered(r, k, m.start, aerr.Status, aerr.Code)
		}
		k, aerr := a.authenticate(r.Header)
		if aerr != nil {
			// Its span (README "Tracing": every request is one) names no
			// key: the credential it presented is not one.
			refuse(nil, aerr)
			return
		}
		m.key = k
		if isUpgrade(r) && body != nil {
			// A handshake carries no body (RFC 6455 §4.1), and once a
			// request switched protocols its connection is the WebSocket
			// library's, so a declared body could be neither tracked nor
			// read: net/http would wait for it with no deadline.
			refuse(k, apierr.Invalid("", apierr.CodeInvalidBody, "a request asking to upgrade to a WebSocket carries no body; send it without Content-Length or Transfer-Encoding"))
			return
		}
		s.serveGated(route, w, r, m, false, body)
	})
}

// serveGated serves r with the key and record m, then counts and logs it
// unless a handler did (or, for a Mode A client request whose assembled
// request took m over, that request's gate does: dispatched is true there).
func (s *Server) serveGated(next http.Handler, w http.ResponseWriter, r *http.Request, m *reqMeta, dispatched bool, body *declaredBody) {
	ctx := context.WithValue(r.Context(), keyCtxKey{}, m.key)
	ctx = context.WithValue(ctx, metaCtxKey{}, m)
	sw := w
	var rec *statusWriter
	if !isUpgrade(r) {
		rec = &statusWriter{ResponseWriter: w, errorCodeOf: m, body: body}
		sw = rec
	}
	next.ServeHTTP(sw, r.WithContext(ctx))
	if !dispatched && !m.letGo() {
		return // taken over: its assembled request may still be running
	}
	if rec != nil && !m.ws && !m.counted { // e.g. a 426, /v1/models, a streaming-input session
		s.countRequest(r, rec.status)
	}
	if m.ws || m.logged {
		return // WebSocket frames and API requests log their own lines
	}
	if rec != nil {
		m.status = rec.status
	}
	s.accessLog(m)
}

// modeAClientMeta is the record of the Mode A client request r was
// assembled from (streaminput.ModeAClient), nil when r is not such a
// request or its client request has none (no gate in front of Mode A).
func modeAClientMeta(r *http.Request) *reqMeta {
	c := streaminput.ModeAClient(r.Context())
	if c == nil {
		return nil
	}
	m, _ := c.Value(metaCtxKey{}).(*reqMeta)
	return m
}

// takeOver hands the record to the request assembled from its Mode A
// client request, reporting whether it could (the client request's gate
// has not let go of it).
func (m *reqMeta) takeOver() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.takenOver || m.letGone {
		return false
	}
	m.takenOver = true
	return true
}

// letGo is the client request's gate done with the record: it reports
// whether the gate is to count and log it (no assembled request took it
// over, and none can from now on).
func (m *reqMeta) letGo() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.letGone = true
	return !m.takenOver
}

// A HEAD asks for no protocol switch: it is answered as a GET without an
// upgrade (getForHead).
func isUpgrade(r *http.Request) bool {
	return r.Method != http.MethodHead && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// keyOf is the key gate found for r (nil: none, or no gate).
func keyOf(r *http.Request) *keyEntry {
	k, _ := r.Context().Value(keyCtxKey{}).(*keyEntry)
	return k
}
