package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/store"
)

// stuckUsage is a usage store that keeps flush tokens as Redis does (a
// batch under a token it has is not added again) and fails every write of
// the first batch it is sent after running it once, until released: one
// flush whose reply is lost, and whose retries fail, for a reason that is
// not for good.
type stuckUsage struct {
	mu       sync.Mutex
	stuck    string
	released bool
	ran      map[string]bool
	totals   map[string]store.UsageRecord // by key
}

func (f *stuckUsage) AddUsage(ctx context.Context, u store.UsageRecord) error {
	return f.AddUsages(ctx, "", []store.UsageRecord{u})[0]
}

func (f *stuckUsage) AddUsages(_ context.Context, batch string, us []store.UsageRecord) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stuck == "" {
		f.stuck = batch
	}
	if !f.ran[batch] {
		f.ran[batch] = true
		for _, u := range us {
			sum := f.totals[u.Key]
			sum.AddCounts(u)
			f.totals[u.Key] = sum
		}
	}
	errs := make([]error, len(us))
	if batch == f.stuck && !f.released {
		for i := range errs {
			errs[i] = fmt.Errorf("store: add usage: %w", errors.New("read tcp: i/o timeout"))
		}
	}
	return errs
}

func (f *stuckUsage) Usage(context.Context, string, string, string) ([]store.UsageRecord, error) {
	return nil, nil
}

func (f *stuckUsage) total(key string) store.UsageRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.totals[key]
}

// One flush the store keeps failing (not for good) does not hold later
// usage back: what arrives after it is written by the next flushes while
// it is retried under its token, and once the store takes it, each total
// counts once.
func TestUsageBatchWritesPastAFlushThatKeepsFailing(t *testing.T) {
	st := &stuckUsage{ran: map[string]bool{}, totals: map[string]store.UsageRecord{}}
	b := newUsageBatch(st, hclog.NewNullLogger(), usageFlushEvery)
	b.add(rec("a", 10, 1))
	b.flush(context.Background()) // ran, its reply lost
	b.add(rec("b", 5, 5))
	for range 3 {
		b.flush(context.Background())
	}
	if got := st.total("b"); got.Requests != 1 || got.InputTokens != 5 {
		t.Fatalf("later usage while an earlier flush keeps failing: %+v, want written", got)
	}
	b.add(rec("a", 1, 1))
	b.flush(context.Background())
	if got := st.total("a"); got.Requests != 2 || got.InputTokens != 11 {
		t.Fatalf("key a while its first flush keeps failing: %+v, want the later total written beside it", got)
	}
	st.mu.Lock()
	st.released = true
	st.mu.Unlock()
	b.flush(context.Background())
	if got := st.total("a"); got.Requests != 2 || got.InputTokens != 11 || got.OutputTokens != 2 {
		t.Fatalf("key a once the store takes the failed flush: %+v, want each total once", got)
	}
	if got := st.total("b"); got.Requests != 1 {
		t.Fatalf("key b: %+v, want once", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.inDoubt) != 0 || len(b.pending) != 0 {
		t.Fatalf("left after the store took everything: in doubt %+v, pending %+v", b.inDoubt, b.pending)
	}
}

// While every write fails, at most maxUsageInDoubt flushes are kept under
// their tokens; newer usage waits summed in pending, and all of it is
// written once, when the store answers again.
func TestUsageBatchBoundsTheFlushesInDoubt(t *testing.T) {
	st := &flakyUsage{down: true}
	b := newUsageBatch(st, hclog.NewNullLogger(), usageFlushEvery)
	for range 3 * maxUsageInDoubt {
		b.add(rec("a", 1, 0))
		b.flush(context.Background())
	}
	b.mu.Lock()
	inDoubt, pending := len(b.inDoubt), len(b.pending)
	b.mu.Unlock()
	if inDoubt != maxUsageInDoubt || pending != 1 {
		t.Fatalf("%d flushes in doubt, %d totals pending; want %d and 1", inDoubt, pending, maxUsageInDoubt)
	}
	st.mu.Lock()
	st.down = false
	st.mu.Unlock()
	b.flush(context.Background())
	var sum store.UsageRecord
	st.mu.Lock()
	for _, w := range st.writes {
		sum.AddCounts(w)
	}
	st.mu.Unlock()
	if sum.Requests != 3*maxUsageInDoubt || sum.InputTokens != 3*maxUsageInDoubt {
		t.Fatalf("written once the store answered: %+v, want %d requests", sum, 3*maxUsageInDoubt)
	}
}
