package gateway

import (
	"testing"
	"time"

	"github.com/sluice-gw/sluice/store"
)

// Tests that pin behaviour the third sampled mutation run (README, "Mutation
// testing") found unchecked.

// TestBodyBudgetBoundary: a reservation that fills the budget exactly is
// granted, one byte more is refused and leaves nothing held, and a release
// makes room again.
func TestBodyBudgetBoundary(t *testing.T) {
	b := &bodyBudget{limit: 10}
	for i, step := range []struct {
		reserve, release int64
		want             bool
	}{
		{reserve: 4, want: true},
		{reserve: 6, want: true}, // exactly the limit
		{reserve: 1, want: false},
		{release: 6},
		{reserve: 7, want: false},
		{reserve: 6, want: true},
	} {
		if step.release > 0 {
			b.release(step.release)
			continue
		}
		if got := b.reserve(step.reserve); got != step.want {
			t.Fatalf("step %d: reserve(%d) = %v, want %v (used %d of %d)", i, step.reserve, got, step.want, b.used.Load(), b.limit)
		}
	}
	if b.used.Load() != 10 {
		t.Fatalf("used = %d after the steps, want 10", b.used.Load())
	}
}

// TestAnchorCacheHoldsItsSize: the LRU holds exactly its size, evicts the
// least recently used, and a get refreshes an entry.
func TestAnchorCacheHoldsItsSize(t *testing.T) {
	c := newAnchorCache(3)
	for _, id := range []string{"a", "b", "c"} {
		c.put(store.Anchor{ResponseID: id})
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, ok := c.get(id); !ok {
			t.Fatalf("%s evicted from a cache of 3 holding 3", id)
		}
	}
	c.get("a")                           // b is now the least recently used
	c.put(store.Anchor{ResponseID: "d"}) // evicts b
	for id, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := c.get(id); ok != want {
			t.Fatalf("after a fourth put, get(%s) = %v, want %v", id, ok, want)
		}
	}
}

// TestBucketUntilFull: the reset a key's headers announce is the missing
// tokens at the refill rate (capacity per minute).
func TestBucketUntilFull(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBucket(120, now) // two tokens a second
	if d := b.untilFull(); d != 0 {
		t.Fatalf("a full bucket is full in %v, want 0", d)
	}
	b.take(30, now)
	if d := b.untilFull(); d != 15*time.Second {
		t.Fatalf("30 tokens short at 2/s: full in %v, want 15s", d)
	}
}
