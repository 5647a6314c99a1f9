package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/store"
)

// Usage totals are written to the store in batches (docs/ARCHITECTURE.md §9):
// a request's usage is added to an in-memory total per (day, key, route,
// target, model), and the totals are added to the store usageFlushEvery
// after the first one pending, on GET /admin/usage, and at shutdown. A busy
// gateway then writes each total a few times a second instead of once per
// request (a Pebble read-modify-write, or a Redis script, on the request's
// path). What a crash loses is the last interval's counts, as with any
// unsynced write.
const (
	usageFlushEvery   = 250 * time.Millisecond
	usageRetryBackoff = 10 * time.Second // the longest wait between retries of a failing store
)

// usageKey is what the store keeps one total for.
type usageKey struct{ day, key, route, target, model string }

// usageBatch sums usage records until they are flushed to the store.
type usageBatch struct {
	store store.UsageStore
	log   hclog.Logger
	every time.Duration

	mu      sync.Mutex
	pending map[usageKey]store.UsageRecord
	timer   *time.Timer   // armed while records are pending; nil otherwise
	delay   time.Duration // the next flush's delay: every, doubled while the store fails
	closed  bool

	flushMu sync.Mutex // one flush at a time: a total is never written twice
}

func newUsageBatch(st store.UsageStore, log hclog.Logger, every time.Duration) *usageBatch {
	if every <= 0 {
		every = usageFlushEvery
	}
	return &usageBatch{store: st, log: log, every: every, delay: every, pending: map[usageKey]store.UsageRecord{}}
}

// add sums rec into its pending total and arms the flush timer; after
// close (a request that outlived the drain), it writes at once.
func (b *usageBatch) add(rec store.UsageRecord) {
	b.mu.Lock()
	b.mergeLocked(rec)
	closed := b.closed
	b.armLocked()
	b.mu.Unlock()
	if closed {
		b.flush(context.Background())
	}
}

func (b *usageBatch) mergeLocked(rec store.UsageRecord) {
	k := usageKey{rec.Day, rec.Key, rec.Route, rec.Target, rec.Model}
	cur := b.pending[k]
	cur.Day, cur.Key, cur.Route, cur.Target, cur.Model = rec.Day, rec.Key, rec.Route, rec.Target, rec.Model
	cur.Requests += rec.Requests
	cur.InputTokens += rec.InputTokens
	cur.OutputTokens += rec.OutputTokens
	cur.CachedTokens += rec.CachedTokens
	cur.ReasoningTokens += rec.ReasoningTokens
	b.pending[k] = cur
}

// flush adds every pending total to the store. A total the store refused
// stays pending (summed with what arrives meanwhile) and is retried later,
// the wait doubling up to usageRetryBackoff while the store keeps failing.
func (b *usageBatch) flush(ctx context.Context) {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	recs := b.pending
	b.pending = map[usageKey]store.UsageRecord{}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
	var failed []store.UsageRecord
	for _, rec := range recs {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.store.AddUsage(wctx, rec)
		cancel()
		if err != nil {
			b.log.Warn("recording usage failed; kept for the next try", "key", rec.Key, "day", rec.Day, "error", err)
			failed = append(failed, rec)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, rec := range failed {
		b.mergeLocked(rec)
	}
	if len(failed) > 0 {
		b.delay = min(2*b.delay, usageRetryBackoff)
	} else {
		b.delay = b.every
	}
	if len(b.pending) > 0 {
		b.armLocked()
	}
}

// armLocked schedules the next flush, unless one is scheduled or the batch
// is closed.
func (b *usageBatch) armLocked() {
	if b.timer == nil && !b.closed {
		b.timer = time.AfterFunc(b.delay, func() { b.flush(context.Background()) })
	}
}

// close flushes what is pending, once more and for the last time: no timer
// is armed afterwards (the store closes after the gateway). The writes get
// their own time even when the drain used up ctx's.
func (b *usageBatch) close(ctx context.Context) {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.flush(context.WithoutCancel(ctx))
}
