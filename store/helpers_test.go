package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// t0 is the fake clock's starting time.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is an injectable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openTest opens a store in a fresh temporary directory with a fake clock
// and no background sweeper, and closes it when the test ends. edit may
// change the options first.
func openTest(tb testing.TB, edit ...func(*Options)) (*PebbleStore, *fakeClock) {
	tb.Helper()
	clk := newFakeClock()
	opts := Options{
		Dir:           tb.TempDir(),
		SweepInterval: -1,
		Now:           clk.Now,
		Logger:        hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{tb}}),
	}
	for _, e := range edit {
		e(&opts)
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return s, clk
}

// testWriter sends log output to the test log.
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p))
	return len(p), nil
}

// wantErr fails the test unless err matches want (nil means no error).
func wantErr(tb testing.TB, what string, err, want error) {
	tb.Helper()
	switch {
	case want == nil && err != nil:
		tb.Fatalf("%s: unexpected error: %v", what, err)
	case want != nil && !errors.Is(err, want):
		tb.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// anchor builds a test anchor in a session scope.
func anchor(id, upstream, session string) Anchor {
	return Anchor{
		ResponseID:    id,
		Upstream:      upstream,
		ClientKeyHash: "ckh-1",
		ScopeKind:     ScopeSession,
		ScopeID:       session,
		Model:         "gpt-test",
	}
}
