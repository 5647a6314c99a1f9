package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
)

func TestSweep(t *testing.T) {
	const ttl = time.Hour
	ctx := context.Background()
	// Each case writes records at t0 (and maybe later), sweeps at a time
	// and checks what was removed and what survived.
	tests := []struct {
		name    string
		write   func(t *testing.T, s *PebbleStore, clk *fakeClock)
		sweepAt time.Duration // after t0
		want    Stats         // only the Swept* fields are compared
		live    []string      // "a:id", "s:id" (session scope), "t:id", "i:id"
		gone    []string
	}{
		{
			name:    "nothing due",
			write:   func(t *testing.T, s *PebbleStore, _ *fakeClock) { putAll(t, s, "r1") },
			sweepAt: ttl - time.Minute,
			live:    []string{"a:r1", "s:sess-r1", "t:r1", "i:r1"},
		},
		{
			name:    "everything due",
			write:   func(t *testing.T, s *PebbleStore, _ *fakeClock) { putAll(t, s, "r1", "r2") },
			sweepAt: ttl + expiryGranularity,
			want:    Stats{Swept: 8, SweptAnchors: 2, SweptScopes: 2, SweptTurns: 2, SweptSessions: 2},
			gone:    []string{"a:r1", "s:sess-r1", "t:r1", "i:r1", "a:r2", "i:r2"},
		},
		{
			name: "only the expired ones",
			write: func(t *testing.T, s *PebbleStore, clk *fakeClock) {
				putAll(t, s, "old")
				clk.Advance(30 * time.Minute)
				putAll(t, s, "new")
			},
			sweepAt: ttl + expiryGranularity,
			want:    Stats{Swept: 4, SweptAnchors: 1, SweptScopes: 1, SweptTurns: 1, SweptSessions: 1},
			live:    []string{"a:new", "s:sess-new", "t:new", "i:new"},
			gone:    []string{"a:old", "s:sess-old", "t:old", "i:old"},
		},
		{
			name: "a refreshed scope survives its stale index entry",
			write: func(t *testing.T, s *PebbleStore, clk *fakeClock) {
				mustPut(t, s, anchor("r1", "up", "shared"))
				clk.Advance(30 * time.Minute)
				a := anchor("r2", "up", "shared")
				a.ExpiresAt = clk.Now().Add(10 * ttl)
				mustPut(t, s, a)
			},
			sweepAt: ttl + expiryGranularity,
			want:    Stats{Swept: 1, SweptAnchors: 1},
			live:    []string{"a:r2", "s:shared"},
			gone:    []string{"a:r1"},
		},
		{
			name: "an updated session survives",
			write: func(t *testing.T, s *PebbleStore, clk *fakeClock) {
				putAll(t, s, "r1")
				clk.Advance(50 * time.Minute)
				if err := s.PutChunk(ctx, "r1", 1, Chunk{Payload: []byte("more")}, InputSession{}); err != nil {
					t.Fatal(err)
				}
			},
			sweepAt: ttl + expiryGranularity,
			want:    Stats{Swept: 3, SweptAnchors: 1, SweptScopes: 1, SweptTurns: 1},
			live:    []string{"i:r1"},
		},
		{
			name: "deleted records leave only index entries",
			write: func(t *testing.T, s *PebbleStore, _ *fakeClock) {
				putAll(t, s, "r1")
				if err := s.DeleteAnchor(ctx, "r1"); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteInputSession(ctx, "r1"); err != nil {
					t.Fatal(err)
				}
			},
			sweepAt: ttl + expiryGranularity,
			want:    Stats{Swept: 1, SweptTurns: 1},
			gone:    []string{"a:r1", "s:sess-r1", "t:r1", "i:r1"},
		},
		{
			name: "more than one sweep step",
			write: func(t *testing.T, s *PebbleStore, _ *fakeClock) {
				putAnchorsDirect(t, s, 3*sweepBatchSize/2, func(i int) Anchor {
					id := fmt.Sprintf("r%04d", i)
					return anchor(id, "up", "sess-"+id)
				})
			},
			sweepAt: ttl + expiryGranularity,
			want:    Stats{Swept: 2 * 3 * sweepBatchSize / 2, SweptAnchors: 3 * sweepBatchSize / 2, SweptScopes: 3 * sweepBatchSize / 2},
			gone:    []string{"a:r0000", "a:r0191"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := openTest(t, func(o *Options) {
				o.AnchorTTL, o.ScopeTTL, o.TurnTTL, o.InputSessionTTL = ttl, ttl, ttl, ttl
			})
			tt.write(t, s, clk)
			clk.Advance(t0.Add(tt.sweepAt).Sub(clk.Now()))
			n, err := s.Sweep(ctx, clk.Now())
			if err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			st := s.Stats()
			got := Stats{Swept: st.Swept, SweptAnchors: st.SweptAnchors, SweptScopes: st.SweptScopes,
				SweptTurns: st.SweptTurns, SweptSessions: st.SweptSessions}
			if got != tt.want || uint64(n) != tt.want.Swept {
				t.Errorf("Sweep removed %d, stats %+v; want %+v", n, got, tt.want)
			}
			// Rewind the clock so that what survived is visible again: the
			// sweep, not the read-time expiry check, must have removed the
			// rest.
			clk.Advance(t0.Sub(clk.Now()))
			for _, r := range tt.live {
				if err := lookup(s, r); err != nil {
					t.Errorf("%s after sweep: %v", r, err)
				}
			}
			for _, r := range tt.gone {
				if err := lookup(s, r); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s after sweep: %v, want ErrNotFound", r, err)
				}
			}
			// Nothing due is left in the index.
			if n, err := s.Sweep(ctx, t0.Add(tt.sweepAt)); err != nil || n != 0 {
				t.Errorf("second Sweep = %d, %v", n, err)
			}
			if left := countKeys(t, s, []byte{famExpiry}, expiryUpperBound(t0.Add(tt.sweepAt))); left != 0 {
				t.Errorf("%d due index entries left", left)
			}
		})
	}
}

// putAll writes an anchor (scope "sess-"+id), a turn and an input session
// with a chunk, all under id.
func putAll(t *testing.T, s *PebbleStore, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		mustPut(t, s, anchor(id, "up", "sess-"+id))
		if err := s.PutConversation(ctx, Turn{ResponseID: id, Input: items("x")}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateInputSession(ctx, InputSession{ID: id}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutChunk(ctx, id, 0, Chunk{Payload: []byte("c")}, InputSession{}); err != nil {
			t.Fatal(err)
		}
	}
}

func mustPut(t *testing.T, s *PebbleStore, a Anchor) {
	t.Helper()
	if err := s.PutAnchor(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// lookup reads the record named "family:id" and returns the error.
func lookup(s *PebbleStore, ref string) error {
	ctx := context.Background()
	id := ref[2:]
	var err error
	switch ref[0] {
	case 'a':
		_, err = s.GetAnchor(ctx, id)
	case 's':
		_, err = s.GetScope(ctx, ScopeSession, id)
	case 't':
		_, err = s.GetTurn(ctx, id)
	case 'i':
		_, err = s.GetInputSession(ctx, id)
		if err == nil {
			var c []Chunk
			c, err = s.Chunks(ctx, id)
			if err == nil && len(c) == 0 {
				err = fmt.Errorf("no chunks")
			}
		}
	}
	return err
}

// countKeys counts the keys in [lower, upper).
func countKeys(t *testing.T, s *PebbleStore, lower, upper []byte) int {
	t.Helper()
	db, release, err := s.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer release(nil)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// putAnchorsDirect writes anchors with PutAnchor's records (anchor, scope
// and their index entries) many per batch and without syncing, to fill a
// store fast. Anchor i is made by mk(i).
func putAnchorsDirect(tb testing.TB, s *PebbleStore, n int, mk func(i int) Anchor) {
	tb.Helper()
	const perBatch = 1000
	now := s.now()
	db, release, err := s.acquire()
	if err != nil {
		tb.Fatal(err)
	}
	defer release(nil)
	for start := 0; start < n; start += perBatch {
		b := db.NewBatch()
		for i := start; i < min(n, start+perBatch); i++ {
			a := mk(i)
			a.CreatedAt, a.ExpiresAt = now, now.Add(s.opts.AnchorTTL)
			sc := ScopeRecord{LatestResponseID: a.ResponseID, Owner: a.Upstream, UpdatedAt: now, ExpiresAt: now.Add(s.opts.ScopeTTL)}
			ak, sk := anchorKey(a.ResponseID), scopeKey(a.ScopeKind, a.ScopeID)
			for _, kv := range [][2][]byte{
				{ak, encodeAnchor(&a)}, {expiryKey(a.ExpiresAt, ak), nil},
				{sk, encodeScope(&sc)}, {expiryKey(sc.ExpiresAt, sk), nil},
			} {
				if err := b.Set(kv[0], kv[1], nil); err != nil {
					tb.Fatal(err)
				}
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			tb.Fatal(err)
		}
		b.Close()
	}
}
