package upstream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// SharedHealth shares what one gateway replica learned about a target's
// health with the others (store.RedisStore implements it, with one key per
// target that expires when the skip ends). The model "" stands for the
// whole upstream (a connect-failure cooldown). The reason it keeps is
// opaque to it: the pool's encoding of why and of the upstream's capacity
// code (sharedRecord).
type SharedHealth interface {
	// PutTargetHealth records that the target is to be skipped for d
	// (a longer skip already recorded is kept).
	PutTargetHealth(ctx context.Context, upstream, model string, d time.Duration, reason string) error
	// GetTargetHealth returns how long the target is still to be skipped
	// (0: not at all) and the reason recorded with it.
	GetTargetHealth(ctx context.Context, upstream, model string) (time.Duration, string, error)
	// ClearTargetHealth forgets the target's skip.
	ClearTargetHealth(ctx context.Context, upstream, model string) error
}

// Defaults of the shared-health cache.
const (
	// DefaultSharedRefresh is how long a replica trusts what it last read
	// of a target's shared health: a cooldown another replica reports is
	// honoured here at most this much later.
	DefaultSharedRefresh = time.Second
	// DefaultSharedTimeout bounds one read or write of the shared health on
	// the request path; a store that cannot answer in time is ignored (the
	// local state still applies).
	DefaultSharedTimeout = 100 * time.Millisecond

	maxSharedEntries = 4096
)

// sharedKey names a target (model "" the whole upstream).
type sharedKey struct{ upstream, model string }

// sharedRecord is what one replica tells the others about a target's skip:
// why, and, when a capacity failure (a 429, a quota code) started it, the
// upstream's code and error type (Failure.Code, Failure.Type). With them
// every replica answers a request that finds no target usable with that
// 429, as the replica that saw the failure does (README "Failover and
// replay", "Scale-out with Redis": the same semantics), not with 503
// upstream_unavailable.
type sharedRecord struct {
	reason    string
	code, typ string
}

// sharedRecordSep separates the reason, the code and the type in the
// stored value: the ASCII unit separator, which no reason, code or type
// carries (encode drops it from them).
const sharedRecordSep = "\x1f"

// encode is the value stored for r. A record without a code is its bare
// reason, the value replicas of earlier versions wrote and read (which show
// a record with a code as its reason followed by the separated code and
// type; a "circuit open" reason still starts the value).
func (r sharedRecord) encode() string {
	clean := func(s string) string { return strings.ReplaceAll(s, sharedRecordSep, " ") }
	if r.code == "" {
		return clean(r.reason)
	}
	return clean(r.reason) + sharedRecordSep + clean(r.code) + sharedRecordSep + clean(r.typ)
}

// decodeSharedRecord reads a stored value (encode); a value without the
// separator, as earlier versions wrote it, is a reason without a code.
func decodeSharedRecord(v string) sharedRecord {
	reason, rest, ok := strings.Cut(v, sharedRecordSep)
	if !ok {
		return sharedRecord{reason: v}
	}
	code, typ, _ := strings.Cut(rest, sharedRecordSep)
	return sharedRecord{reason: reason, code: code, typ: typ}
}

// sharedEntry is what a replica last read (or wrote) of a target's shared
// health.
type sharedEntry struct {
	fetched  time.Time
	fetching bool
	until    time.Time
	rec      sharedRecord
}

// sharedCache reads the shared health of a target on selection, at most
// once per refresh period per target, and publishes this replica's
// cooldowns and open circuits. Why keys read on selection rather than
// pub/sub: a key's expiry is the end of the skip, so there is nothing to
// clear and nothing to miss while disconnected; a replica that starts (or
// reconnects) reads the current state on its next selection, and the cost
// is one small read per target per second per replica.
type sharedCache struct {
	h       SharedHealth
	refresh time.Duration
	timeout time.Duration
	p       *Pool

	mu sync.Mutex
	m  map[sharedKey]*sharedEntry
}

func newSharedCache(p *Pool) *sharedCache {
	if p.opts.Shared == nil {
		return nil
	}
	c := &sharedCache{h: p.opts.Shared, refresh: p.opts.SharedRefresh, timeout: p.opts.SharedTimeout, p: p, m: map[sharedKey]*sharedEntry{}}
	if c.refresh <= 0 || c.refresh > time.Second {
		c.refresh = DefaultSharedRefresh
	}
	if c.timeout <= 0 {
		c.timeout = DefaultSharedTimeout
	}
	return c
}

// skip reports whether another replica (or this one) recorded that the
// target must be skipped at now.
func (c *sharedCache) skip(k sharedKey, now time.Time) (bool, string) {
	un, out := c.skipFor(k, now)
	return out, un.Why
}

// skipFor is skip with how much longer the target is to be skipped and the
// capacity code the skip is for; out is false when it need not be.
func (c *sharedCache) skipFor(k sharedKey, now time.Time) (un Unavailability, out bool) {
	c.mu.Lock()
	e := c.m[k]
	if e == nil {
		if len(c.m) >= maxSharedEntries {
			c.m = map[sharedKey]*sharedEntry{} // clients choose model names: bound the table
		}
		e = &sharedEntry{}
		c.m[k] = e
	}
	stale := !e.fetching && (e.fetched.IsZero() || now.Sub(e.fetched) >= c.refresh || now.Before(e.fetched))
	if stale {
		e.fetching = true
	}
	c.mu.Unlock()
	if stale {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		d, reason, err := c.h.GetTargetHealth(ctx, k.upstream, k.model)
		cancel()
		c.mu.Lock()
		e.fetching, e.fetched = false, now
		if err == nil {
			e.until, e.rec = time.Time{}, sharedRecord{}
			if d > 0 {
				e.until, e.rec = now.Add(d), decodeSharedRecord(reason)
			}
		} else {
			// Keep what was known: the local state still applies, and a
			// store that is down is not asked again before refresh.
			c.p.opts.Logger.Debug("reading shared target health failed", "upstream", k.upstream, "model", k.model, "error", err)
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(e.until) {
		what := "target"
		if k.model == "" {
			what = "upstream"
		}
		left := e.until.Sub(now)
		return Unavailability{Why: fmt.Sprintf("cooling down for %s (%s state shared by the replicas): %s", left.Round(time.Millisecond), what, e.rec.reason),
			RetryIn: left, Code: e.rec.code, Type: e.rec.typ}, true
	}
	return Unavailability{}, false
}

// sharedSkip is a skip this replica knows of from the shared health.
type sharedSkip struct {
	until  time.Time
	reason string
}

// skipsOf is what this replica last read (or wrote) of upstream's shared
// skips that last past now, by model ("" the whole upstream), without
// reading the store: an admin view or a metrics scrape must not wait on
// it. Nil without a shared cache.
func (c *sharedCache) skipsOf(upstream string, now time.Time) map[string]sharedSkip {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[string]sharedSkip
	for k, e := range c.m {
		if k.upstream != upstream || !now.Before(e.until) {
			continue
		}
		if out == nil {
			out = map[string]sharedSkip{}
		}
		out[k.model] = sharedSkip{until: e.until, reason: e.rec.reason}
	}
	return out
}

// publish records a skip of d for every replica.
func (c *sharedCache) publish(k sharedKey, now time.Time, d time.Duration, rec sharedRecord) {
	if d <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	err := c.h.PutTargetHealth(ctx, k.upstream, k.model, d, rec.encode())
	cancel()
	if err != nil {
		c.p.opts.Logger.Warn("sharing a target's cooldown with the other replicas failed", "upstream", k.upstream, "model", k.model, "error", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil {
		e = &sharedEntry{}
		c.m[k] = e
	}
	if until := now.Add(d); until.After(e.until) {
		e.until, e.rec = until, rec
	}
	e.fetched = now
}

// clear forgets the target's skip everywhere (its circuit closed here).
func (c *sharedCache) clear(k sharedKey, now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	err := c.h.ClearTargetHealth(ctx, k.upstream, k.model)
	cancel()
	if err != nil {
		c.p.opts.Logger.Warn("clearing a target's shared cooldown failed", "upstream", k.upstream, "model", k.model, "error", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[k]; e != nil {
		e.until, e.rec, e.fetched = time.Time{}, sharedRecord{}, now
	}
}

// sharedUsable checks the shared health of t and of its upstream.
func (p *Pool) sharedUsable(t Target, now time.Time) (bool, string) {
	un, out := p.sharedUnavailable(t, now)
	return !out, un.Why
}

// sharedUnavailable is sharedUsable with how long the skip lasts and the
// upstream's capacity code it is for.
func (p *Pool) sharedUnavailable(t Target, now time.Time) (Unavailability, bool) {
	if p.shared == nil {
		return Unavailability{}, false
	}
	for _, k := range []sharedKey{{t.Upstream.cfg.Name, ""}, {t.Upstream.cfg.Name, t.Model}} {
		if un, out := p.shared.skipFor(k, now); out {
			return un, true
		}
	}
	return Unavailability{}, false
}
