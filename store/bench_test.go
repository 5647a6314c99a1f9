package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/redistest"
)

// benchAnchor is an anchor shaped like a real one: a Responses API id, a
// hex client key hash, a UUID session id. perScope anchors share a session.
func benchAnchor(i, perScope int) Anchor {
	scope := i - i%perScope
	return Anchor{
		ResponseID:    fmt.Sprintf("resp_%048x", uint64(i)*0x9e3779b97f4a7c15),
		Upstream:      "primary",
		ClientKeyHash: fmt.Sprintf("%064x", uint64(i%97)*0x2545f4914f6cdd1d),
		ScopeKind:     ScopeSession,
		ScopeID:       fmt.Sprintf("0199a3c4-%04x-7000-8000-%012x", scope%0xffff, scope),
		Model:         "gpt-5-codex",
	}
}

// latencies collects per-operation durations from many goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(ds []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, ds...)
	l.mu.Unlock()
}

// report adds p50 and p99 metrics to b.
func (l *latencies) report(b *testing.B) {
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	q := func(p float64) float64 { return float64(l.all[int(p*float64(len(l.all)-1))].Nanoseconds()) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
}

// BenchmarkPutAnchor measures synced PutAnchor latency with one stream and
// with 200 concurrent streams (Pebble's group commit shares fsyncs between
// them). ns/op is wall time per anchor, so with 200 streams it is the
// inverse of throughput; p50-ns and p99-ns are per-call latencies.
func BenchmarkPutAnchor(b *testing.B) {
	for _, streams := range []int{1, 200} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			s, _ := openTest(b, func(o *Options) { o.Now = time.Now })
			ctx := context.Background()
			var next atomic.Int64
			var lat latencies
			b.SetParallelism((streams + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				local := make([]time.Duration, 0, 1024)
				for pb.Next() {
					a := benchAnchor(int(next.Add(1)), 10)
					start := time.Now()
					if err := s.PutAnchor(ctx, a); err != nil {
						b.Error(err)
						return
					}
					local = append(local, time.Since(start))
				}
				lat.add(local)
			})
			b.StopTimer()
			lat.report(b)
		})
	}
}

// BenchmarkGetAnchor measures GetAnchor on a store of 100k anchors that
// have been flushed and compacted into sstables. warm: a 64 MiB block cache
// that already holds every block. cold: the store reopened with a block
// cache too small to hold any block, so every lookup reads the index, filter
// and data blocks again (from the OS page cache, which the benchmark cannot
// drop).
func BenchmarkGetAnchor(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	putAnchorsDirect(b, s, n, func(i int) Anchor { return benchAnchor(i, 10) })
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Compact([]byte{0}, []byte{0xff}, false); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = benchAnchor(i, 10).ResponseID
	}

	for _, tt := range []struct {
		name      string
		cacheSize int64
		prewarm   bool
	}{
		{"warm", 64 << 20, true},
		{"cold", 1, false},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1, CacheSize: tt.cacheSize})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if tt.prewarm {
				for _, id := range ids {
					if _, err := s.GetAnchor(ctx, id); err != nil {
						b.Fatal(err)
					}
				}
			}
			before := s.Stats()
			rng := rand.New(rand.NewPCG(1, 2))
			var lat latencies
			local := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				id := ids[rng.IntN(n)]
				start := time.Now()
				if _, err := s.GetAnchor(ctx, id); err != nil {
					b.Fatal(err)
				}
				local = append(local, time.Since(start))
			}
			b.StopTimer()
			lat.add(local)
			lat.report(b)
			after := s.Stats()
			hits := after.BlockCacheHits - before.BlockCacheHits
			misses := after.BlockCacheMisses - before.BlockCacheMisses
			if hits+misses > 0 {
				b.ReportMetric(float64(hits)/float64(hits+misses), "cache-hit-ratio")
			}
		})
	}
}

// BenchmarkStoreSize writes one million anchors (with PutAnchor's records:
// anchor, scope record, two expiry index entries), flushes and compacts,
// and reports the space per anchor. own-scope gives every anchor its
// own session (the worst case); 10-per-scope models sessions of ten turns.
// It ignores b.N and is skipped with -short.
func BenchmarkStoreSize(b *testing.B) {
	if testing.Short() {
		b.Skip("writes a million anchors")
	}
	const n = 1_000_000
	for _, tt := range []struct {
		name     string
		perScope int
	}{
		{"own-scope", 1},
		{"10-per-scope", 10},
	} {
		b.Run(tt.name, func(b *testing.B) {
			// Bulk loading stalls writes by design; keep those warnings out.
			s, _ := openTest(b, func(o *Options) { o.Logger = hclog.NewNullLogger() })
			b.ResetTimer()
			putAnchorsDirect(b, s, n, func(i int) Anchor { return benchAnchor(i, tt.perScope) })
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := s.db.Compact([]byte{0}, []byte{0xff}, false); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			m := s.db.Metrics()
			var tables int64
			for _, l := range m.Levels {
				tables += l.Size
			}
			// table-bytes: the live sstables, the steady-state footprint.
			// disk-MiB: everything Pebble counts, including the WAL, WAL
			// files kept for recycling and tables awaiting deletion.
			b.ReportMetric(float64(tables)/n, "table-bytes/anchor")
			b.ReportMetric(float64(m.DiskSpaceUsage())/(1<<20), "disk-MiB")
		})
	}
}

// BenchmarkHistory50Turns expands a 50-turn conversation (one ~300-byte
// input item and two output items of ~800 and ~600 bytes per turn).
func BenchmarkHistory50Turns(b *testing.B) {
	const turns = 50
	s, _ := openTest(b)
	ctx := context.Background()
	item := func(kind string, size int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"type":%q,"text":%q}`, kind, strings.Repeat("x", size)))
	}
	parent := ""
	for i := range turns {
		id := fmt.Sprintf("resp_%048d", i)
		t := Turn{
			ResponseID: id, ParentID: parent,
			Input:  []json.RawMessage{item("message", 300)},
			Output: []json.RawMessage{item("reasoning", 800), item("message", 600)},
		}
		if err := s.PutConversation(ctx, t); err != nil {
			b.Fatal(err)
		}
		parent = id
	}
	var size int
	b.ResetTimer()
	for range b.N {
		h, err := s.History(ctx, parent, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(h) != 3*turns {
			b.Fatalf("History returned %d items", len(h))
		}
		size = 0
		for _, it := range h {
			size += len(it)
		}
	}
	b.ReportMetric(float64(size), "history-bytes")
}

// BenchmarkBackends compares the two backends on the operations on a
// request's path: an anchor write (made durable before response.completed)
// and an owner lookup (GetAnchor, for every follow-up), one caller at a
// time, with per-call p50/p99. The Redis backend runs on a local
// redis-server without persistence (the WAIT/AOF cost is Redis's own); it
// is skipped without redis-server.
func BenchmarkBackends(b *testing.B) {
	aof := backend{name: "redis-appendfsync-always", open: func(tb testing.TB, edit ...func(*Options)) (contractStore, *fakeClock) {
		srv := redistest.Start(tb, redistest.Options{AppendFsyncAlways: true})
		return openRedisTestOn(tb, srv.URL, edit...)
	}}
	for _, be := range append(allBackends, aof) {
		b.Run(be.name, func(b *testing.B) {
			if be.name != "pebble" && !redisAvailable() {
				b.Skip("needs redis-server")
			}
			b.Run("put-anchor", func(b *testing.B) {
				s, _ := be.open(b, func(o *Options) { o.Now = time.Now })
				ctx := context.Background()
				var lat latencies
				local := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := range b.N {
					a := benchAnchor(i, 10)
					start := time.Now()
					if err := s.PutAnchor(ctx, a); err != nil {
						b.Fatal(err)
					}
					local = append(local, time.Since(start))
				}
				b.StopTimer()
				lat.add(local)
				lat.report(b)
			})
			b.Run("get-anchor", func(b *testing.B) {
				const n = 10_000
				s, _ := be.open(b, func(o *Options) { o.Now = time.Now })
				ctx := context.Background()
				ids := make([]string, n)
				for i := range ids {
					a := benchAnchor(i, 10)
					ids[i] = a.ResponseID
					if err := s.PutAnchor(ctx, a); err != nil {
						b.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(1, 2))
				var lat latencies
				local := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					id := ids[rng.IntN(n)]
					start := time.Now()
					if _, err := s.GetAnchor(ctx, id); err != nil {
						b.Fatal(err)
					}
					local = append(local, time.Since(start))
				}
				b.StopTimer()
				lat.add(local)
				lat.report(b)
			})
		})
	}
}
