package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/store"
)

// flakyUsage is a usage store that refuses writes while down and keeps the
// totals it accepted.
type flakyUsage struct {
	mu     sync.Mutex
	down   bool
	writes []store.UsageRecord
}

func (f *flakyUsage) AddUsage(_ context.Context, u store.UsageRecord) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("store unavailable")
	}
	f.writes = append(f.writes, u)
	return nil
}

func (f *flakyUsage) Usage(context.Context, string, string, string) ([]store.UsageRecord, error) {
	return nil, nil
}

func rec(key string, in, out int64) store.UsageRecord {
	return store.UsageRecord{Day: "2026-11-26", Key: key, Route: "r", Target: "t", Model: "m", Requests: 1, InputTokens: in, OutputTokens: out}
}

// TestUsageBatchKeepsWhatTheStoreRefused: totals are summed per key; a
// flush the store refuses loses nothing (the refused totals, and later
// usage, are written once it recovers, and the retry waits longer each
// time, up to usageRetryBackoff); after close, usage is written at once.
func TestUsageBatchKeepsWhatTheStoreRefused(t *testing.T) {
	st := &flakyUsage{down: true}
	b := newUsageBatch(st, hclog.NewNullLogger(), usageFlushEvery)
	b.add(rec("a", 10, 1))
	b.add(rec("a", 20, 2))
	b.add(rec("b", 5, 5))
	b.flush(context.Background())
	if len(st.writes) != 0 {
		t.Fatalf("writes while the store is down: %+v", st.writes)
	}
	if delay, armed := b.state(); delay != 2*usageFlushEvery || !armed {
		t.Fatalf("after a refused flush: next in %v (armed %v), want %v and armed", delay, armed, 2*usageFlushEvery)
	}
	for range 10 {
		b.flush(context.Background())
	}
	if delay, _ := b.state(); delay != usageRetryBackoff {
		t.Fatalf("retry delay %v after many failures, want the cap %v", delay, usageRetryBackoff)
	}

	b.add(rec("a", 1, 1))
	st.mu.Lock()
	st.down = false
	st.mu.Unlock()
	b.flush(context.Background())
	st.mu.Lock()
	got := map[string]store.UsageRecord{}
	for _, w := range st.writes {
		sum := got[w.Key]
		sum.AddCounts(w)
		got[w.Key] = sum
	}
	if len(got) != 2 || got["a"].Requests != 3 || got["a"].InputTokens != 31 || got["a"].OutputTokens != 4 ||
		got["b"].Requests != 1 || got["b"].InputTokens != 5 {
		t.Fatalf("written once the store recovered: %+v", st.writes)
	}
	st.mu.Unlock()
	if delay, armed := b.state(); delay != usageFlushEvery || armed {
		t.Fatalf("after a good flush: delay %v, timer armed %v", delay, armed)
	}

	b.close(context.Background())
	b.add(rec("c", 7, 7))
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := len(st.writes); n == 0 || st.writes[n-1].Key != "c" {
		t.Fatalf("usage after close: %+v, want written at once", st.writes)
	}
	if _, armed := b.state(); armed {
		t.Fatal("a flush timer armed after close")
	}
}

// state is the batch's next flush delay and whether a flush is armed.
func (b *usageBatch) state() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delay, b.timer != nil
}

// Totals the store still refuses when the gateway shuts down are lost with
// the process; each is logged at ERROR with its counts, so that an operator
// can add it back, and one the store took is not.
func TestUsageBatchCloseLogsWhatIsLost(t *testing.T) {
	st := &flakyUsage{down: true}
	var logs lockedBuffer
	b := newUsageBatch(st, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), usageFlushEvery)
	b.add(rec("lost", 10, 3))
	b.close(context.Background())
	b.add(rec("late", 4, 1)) // a request that outlived the drain
	out := logs.String()
	for _, want := range []string{"key=lost", "input_tokens=10", "output_tokens=3", "key=late", "input_tokens=4"} {
		if !strings.Contains(grepErrorLines(out), want) {
			t.Fatalf("no ERROR line with %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "kept for the next try") {
		t.Fatalf("a total lost at shutdown was said to be kept:\n%s", out)
	}
}

// grepErrorLines is the ERROR lines of a log.
func grepErrorLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "[ERROR]") && strings.Contains(l, "usage total not recorded") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
