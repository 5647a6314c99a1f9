package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/store"
)

// batchUsage is a usage store that adds a flush in one call (AddUsages),
// refuses for good a total whose model starts with "bad", and fails the
// others of key "down" while down is set.
type batchUsage struct {
	flakyUsage
	calls [][]store.UsageRecord // one per AddUsages call
}

func (f *batchUsage) AddUsages(_ context.Context, _ string, us []store.UsageRecord) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, us)
	errs := make([]error, len(us))
	for i, u := range us {
		switch {
		case strings.HasPrefix(u.Model, "bad"):
			errs[i] = fmt.Errorf("store: add usage: %w: names must be at most 256 bytes without NUL", store.ErrInvalid)
		case f.down && u.Key == "down":
			errs[i] = errors.New("store unavailable")
		default:
			f.writes = append(f.writes, u)
		}
	}
	return errs
}

// refusingUsage is a usage store without AddUsages that refuses for good
// the totals whose model starts with "bad".
type refusingUsage struct{ flakyUsage }

func (f *refusingUsage) AddUsage(ctx context.Context, u store.UsageRecord) error {
	if strings.HasPrefix(u.Model, "bad") {
		return fmt.Errorf("store: add usage: %w", store.ErrInvalid)
	}
	return f.flakyUsage.AddUsage(ctx, u)
}

// lockedBuffer is a log sink safe for the batch's timer goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func withModel(r store.UsageRecord, model string) store.UsageRecord {
	r.Model = model
	return r
}

// TestUsageBatchDropsWhatTheStoreRefusesForGood: a flush is one AddUsages
// call when the store has it; a total the store refuses for good is dropped
// with one warning naming its key and model, while the others are written
// and the next flush keeps its usual delay; a total that failed otherwise is
// kept and retried later, as before.
func TestUsageBatchDropsWhatTheStoreRefusesForGood(t *testing.T) {
	st := &batchUsage{}
	logs := &lockedBuffer{}
	b := newUsageBatch(st, hclog.New(&hclog.LoggerOptions{Output: logs}), time.Hour) // only the test flushes
	b.add(rec("a", 10, 1))
	b.add(rec("b", 5, 5))
	b.add(withModel(rec("c", 1, 1), "bad-model"))
	b.flush(context.Background())
	if len(st.calls) != 1 || len(st.calls[0]) != 3 || len(st.writes) != 2 {
		t.Fatalf("one flush: AddUsages calls %+v, writes %+v; want one call of 3 totals, 2 written", st.calls, st.writes)
	}
	if n := strings.Count(logs.String(), "[WARN]"); n != 1 ||
		!strings.Contains(logs.String(), "refused by the store; dropped: key=c model=bad-model") {
		t.Fatalf("want one warning naming key c and its model:\n%s", logs)
	}
	if delay, armed := b.state(); delay != time.Hour || armed {
		t.Fatalf("after a refused total: next flush in %v (armed %v), want %v and nothing pending", delay, armed, time.Hour)
	}
	b.flush(context.Background())
	if len(st.calls) != 1 || strings.Count(logs.String(), "[WARN]") != 1 {
		t.Fatalf("the refused total was tried again: calls %+v\n%s", st.calls, logs)
	}

	// A total that could not be written this time is kept; a refused one
	// in the same flush is still dropped.
	st.down = true
	b.add(rec("down", 3, 3))
	b.add(withModel(rec("c", 1, 1), "bad-again"))
	b.flush(context.Background())
	if delay, armed := b.state(); delay == time.Hour || !armed {
		t.Fatalf("after a failed write: next flush in %v (armed %v), want a retry with backoff", delay, armed)
	}
	st.down = false
	b.flush(context.Background())
	if last := st.calls[len(st.calls)-1]; len(last) != 1 || last[0].Key != "down" || st.writes[len(st.writes)-1].Key != "down" {
		t.Fatalf("retry: %+v, want only the failed total, written", last)
	}
	if _, armed := b.state(); armed {
		t.Fatal("a flush is armed with nothing pending")
	}
}

// TestUsageBatchDropsWhatAStoreWithoutAddUsagesRefuses: the same rule when
// the store adds one total per call.
func TestUsageBatchDropsWhatAStoreWithoutAddUsagesRefuses(t *testing.T) {
	st := &refusingUsage{}
	logs := &lockedBuffer{}
	b := newUsageBatch(st, hclog.New(&hclog.LoggerOptions{Output: logs}), time.Hour)
	b.add(rec("a", 10, 1))
	b.add(withModel(rec("c", 1, 1), "bad-model"))
	b.flush(context.Background())
	if len(st.writes) != 1 || st.writes[0].Key != "a" {
		t.Fatalf("writes %+v, want a's total", st.writes)
	}
	if n := strings.Count(logs.String(), "[WARN]"); n != 1 || !strings.Contains(logs.String(), "key=c model=bad-model") {
		t.Fatalf("want one warning naming key c and its model:\n%s", logs)
	}
	if delay, armed := b.state(); delay != time.Hour || armed {
		t.Fatalf("next flush in %v (armed %v), want %v and nothing pending", delay, armed, time.Hour)
	}
}

// TestLabelDropsControlCharacters: label values keep printable text only,
// so a NUL a client put in a model name does not reach the usage store.
func TestLabelDropsControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"gpt-x\x00z":            "gpt-xz",
		"a\tb\nc\rd\x7fe\u0085": "abcde",
		"m\xff":                 "m\uFFFD",
		"gpt-5.1 mini":          "gpt-5.1 mini",
		strings.Repeat("\x00", 300) + strings.Repeat("x", 200): strings.Repeat("x", 128),
	} {
		if got := label(in); got != want {
			t.Errorf("label(%q) = %q, want %q", in, got, want)
		}
	}
}
