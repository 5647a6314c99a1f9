package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
// path). A flush is one synced write where the store offers it
// (usageBatchAdder), so what a crash loses is the counts not yet flushed:
// the last interval's, or more while the store refuses writes.
const (
	usageFlushEvery   = 250 * time.Millisecond
	usageRetryBackoff = 10 * time.Second // the longest wait between retries of a failing store
	// maxUsageInDoubt bounds the flushes kept to be retried under their
	// tokens. Past it the store is failing every write, not one: newer
	// usage waits, summed per total in pending, rather than each flush
	// adding a batch to memory.
	maxUsageInDoubt = 8
)

// usageBatchAdder is a usage store that adds many totals in one synced
// write (store.PebbleStore, store.RedisStore); one error per record, as
// their AddUsages say. batch is the flush's idempotency token: a flush
// retried after an error is sent again with the same token and the same
// totals, and a store whose write may have run although it failed (Redis:
// a reply lost to a timeout after the command was sent) adds them once.
// Other stores get one AddUsage per total, which a retry may add twice.
type usageBatchAdder interface {
	AddUsages(ctx context.Context, batch string, us []store.UsageRecord) []error
}

// usageFlush is one write of totals and its idempotency token.
type usageFlush struct {
	batch string
	recs  []store.UsageRecord
}

// usageKey is what the store keeps one total for.
type usageKey struct{ day, key, route, target, model, keyID string }

// usageBatch sums usage records until they are flushed to the store.
type usageBatch struct {
	store store.UsageStore
	log   hclog.Logger
	every time.Duration

	// holds reports whether a key's usage must wait (nil: none does): the
	// shared limiter has not counted its tokens in the budgets yet
	// (RedisLimiter.holdsUsage). It is given the key's limitKey.
	holds func(key string) bool

	mu      sync.Mutex
	pending map[usageKey]store.UsageRecord
	// inDoubt are the flushes the store failed, which it may have written
	// all the same: each is retried as it was, under its token, and
	// newer usage is written beside them under its own, so that one flush
	// the store keeps failing does not hold back every later total (at
	// most maxUsageInDoubt are kept).
	inDoubt []usageFlush
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
	k := usageKey{rec.Day, rec.Key, rec.Route, rec.Target, rec.Model, rec.KeyID}
	cur := b.pending[k]
	cur.Day, cur.Key, cur.Route, cur.Target, cur.Model, cur.KeyID = rec.Day, rec.Key, rec.Route, rec.Target, rec.Model, rec.KeyID
	addUsageCounts(&cur, rec)
	b.pending[k] = cur
}

// addUsageCounts adds rec's counters to sum's, each held at MaxInt64
// rather than wrapping (addTokens): a total that overflowed would turn
// negative in /admin/usage.
func addUsageCounts(sum *store.UsageRecord, rec store.UsageRecord) {
	sum.Requests = addTokens(sum.Requests, rec.Requests)
	sum.InputTokens = addTokens(sum.InputTokens, rec.InputTokens)
	sum.OutputTokens = addTokens(sum.OutputTokens, rec.OutputTokens)
	sum.CachedTokens = addTokens(sum.CachedTokens, rec.CachedTokens)
	sum.ReasoningTokens = addTokens(sum.ReasoningTokens, rec.ReasoningTokens)
}

// flush adds every pending total to the store. A total the store could not
// write is retried later, the wait doubling up to usageRetryBackoff while
// the store keeps failing: as it was, in the same batch (inDoubt), so that
// a failed write the store ran all the same is not counted twice; what
// arrived meanwhile is written beside it in a batch of its own. A total
// the store refuses for good (refusedForGood) is dropped with a warning:
// retried, it would fail forever and hold every other key's totals to the
// longest wait. A key the shared limiter holds (holds) stays pending.
func (b *usageBatch) flush(ctx context.Context) {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	closed := b.closed
	retry := b.inDoubt
	b.inDoubt = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
	var inDoubt []usageFlush
	for _, f := range retry {
		if failed := b.writeBatch(ctx, f.batch, f.recs, closed); len(failed) > 0 {
			inDoubt = append(inDoubt, usageFlush{batch: f.batch, recs: failed})
		}
	}
	failures := len(inDoubt) > 0
	if len(inDoubt) < maxUsageInDoubt || closed { // the last flush tries everything
		f := usageFlush{batch: newUsageBatchToken(), recs: b.takePending(closed)}
		if f.recs = b.writeBatch(ctx, f.batch, f.recs, closed); len(f.recs) > 0 {
			inDoubt = append(inDoubt, f)
			failures = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !closed {
		b.inDoubt = inDoubt
	}
	if failures {
		b.delay = min(2*b.delay, usageRetryBackoff)
	} else {
		b.delay = b.every
	}
	if len(b.pending) > 0 || len(b.inDoubt) > 0 {
		b.armLocked()
	}
}

// takePending removes from pending and returns the totals to write now:
// all of them when closed, else those of keys the shared limiter does not
// hold (holds), which wait for the next flush.
func (b *usageBatch) takePending(closed bool) []store.UsageRecord {
	held := map[string]bool{}
	b.mu.Lock()
	defer b.mu.Unlock()
	recs := make([]store.UsageRecord, 0, len(b.pending))
	for k, rec := range b.pending {
		if b.holds != nil && !closed {
			lk := limitKey(k.key, k.keyID)
			h, seen := held[lk]
			if !seen {
				h = b.holds(lk)
				held[lk] = h
			}
			if h {
				continue
			}
		}
		recs = append(recs, rec)
		delete(b.pending, k)
	}
	return recs
}

// writeBatch writes recs under the token batch and returns those to try
// again: the ones that failed, unless refused for good (dropped) or closed
// (lost, logged).
func (b *usageBatch) writeBatch(ctx context.Context, batch string, recs []store.UsageRecord, closed bool) []store.UsageRecord {
	var failed []store.UsageRecord
	for i, err := range b.write(ctx, batch, recs) {
		rec := recs[i]
		switch {
		case err == nil:
		case refusedForGood(err):
			b.log.Warn("usage total refused by the store; dropped", "key", rec.Key, "model", rec.Model, "day", rec.Day,
				"requests", rec.Requests, "tokens", rec.Tokens(), "error", err)
		case closed:
			// After close no flush is armed: what fails now is lost
			// (a request that outlived the drain).
			b.logLost(rec, err)
		default:
			b.log.Warn("recording usage failed; kept for the next try", "key", rec.Key, "day", rec.Day, "error", err)
			failed = append(failed, rec)
		}
	}
	return failed
}

// newUsageBatchToken names one flush for the store (usageBatchAdder).
func newUsageBatchToken() string {
	var t [16]byte
	_, _ = rand.Read(t[:])
	return hex.EncodeToString(t[:])
}

// write adds recs to the store and returns each one's error: in one synced
// write when the store can (usageBatchAdder), else one AddUsage each.
func (b *usageBatch) write(ctx context.Context, batch string, recs []store.UsageRecord) []error {
	if len(recs) == 0 {
		return nil // nothing pending: no write, no fsync
	}
	if ba, ok := b.store.(usageBatchAdder); ok {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return ba.AddUsages(wctx, batch, recs)
	}
	errs := make([]error, len(recs))
	for i, rec := range recs {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		errs[i] = b.store.AddUsage(wctx, rec)
		cancel()
	}
	return errs
}

// refusedForGood reports whether the store will never take a total: a name
// it does not accept, or a stored total it cannot read.
func refusedForGood(err error) bool {
	return errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrCorrupt)
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

// logLost reports a total the store did not take before shutdown: it is
// lost with the process, so it is logged, total by total, for an operator
// to add back, rather than left at "kept for the next try".
func (b *usageBatch) logLost(rec store.UsageRecord, err error) {
	b.log.Error("usage total not recorded: the store did not take it before shutdown", "key", rec.Key, "day", rec.Day,
		"route", rec.Route, "target", rec.Target, "model", rec.Model, "requests", rec.Requests,
		"input_tokens", rec.InputTokens, "output_tokens", rec.OutputTokens, "cached_tokens", rec.CachedTokens,
		"reasoning_tokens", rec.ReasoningTokens, "error", err)
}
