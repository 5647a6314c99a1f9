package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/internal/httpx"
	"github.com/sluice-gw/sluice/internal/redistest"
)

// Tests for gaps a gremlins run over store/ found: mutants no other test
// noticed (README, "Mutation testing"). Each test names the mutants it kills.

// long is a field of n bytes.
func long(n int) string { return strings.Repeat("x", n) }

// TestLongFieldsRoundTrip stores records whose ids are MaxIDLen bytes (the
// longest accepted) and, one at a time, a field far longer than the others,
// and reads them back unchanged. A value's buffer is sized from its fields:
// a sizing term negated (a field's length subtracted) makes it negative and
// panics (records.go encodeAnchor, encodeScope, encodeSession, encodeChunk,
// encodeStreamLog, encodeStreamEvent; keys.go chunkPrefix and
// streamEventPrefix with ids over 11 bytes). The ids at MaxIDLen also pin
// "at most MaxIDLen" (anchors.go: UpstreamID).
func TestLongFieldsRoundTrip(t *testing.T) {
	const n = 2000
	maxID := long(MaxIDLen)
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()

		t.Run("anchor and scope", func(t *testing.T) {
			for i, edit := range []func(*Anchor){
				func(a *Anchor) { a.ResponseID = maxID },
				func(a *Anchor) { a.Upstream = long(n) },
				func(a *Anchor) { a.ClientKeyHash = long(n) },
				func(a *Anchor) { a.ScopeID = maxID },
				func(a *Anchor) { a.Model = long(n) },
				func(a *Anchor) { a.UpstreamID = maxID },
			} {
				s, _ := b.open(t)
				a := anchor("r", "up", "sess")
				edit(&a)
				if err := s.PutAnchor(ctx, a); err != nil {
					t.Fatalf("%d: PutAnchor: %v", i, err)
				}
				got, err := s.GetAnchor(ctx, a.ResponseID)
				if err != nil {
					t.Fatalf("%d: GetAnchor: %v", i, err)
				}
				a.CreatedAt, a.ExpiresAt = t0, t0.Add(DefaultAnchorTTL)
				if !reflect.DeepEqual(got, a) {
					t.Fatalf("%d: GetAnchor = %+v, want %+v", i, got, a)
				}
				sc, err := s.GetScope(ctx, a.ScopeKind, a.ScopeID)
				if err != nil || sc.LatestResponseID != a.ResponseID || sc.Owner != a.Upstream {
					t.Fatalf("%d: GetScope = %+v, %v", i, sc, err)
				}
			}
			s, _ := b.open(t)
			a := anchor("r", "up", "sess")
			a.UpstreamID = maxID + "x"
			wantErr(t, "PutAnchor with an upstream id over MaxIDLen", s.PutAnchor(ctx, a), ErrInvalid)
		})

		t.Run("input session and chunks", func(t *testing.T) {
			const limit = 4096
			for i, edit := range []func(*InputSession, *Chunk){
				func(se *InputSession, _ *Chunk) { se.ID = maxID },
				func(se *InputSession, _ *Chunk) { se.ClientKeyHash = long(n) },
				func(se *InputSession, _ *Chunk) { se.Endpoint = long(n) },
				func(se *InputSession, _ *Chunk) { se.Template = []byte(long(limit)) }, // at the cap
				func(se *InputSession, _ *Chunk) { se.StartPolicy = long(n) },
				func(se *InputSession, _ *Chunk) { se.State = long(n) },
				func(_ *InputSession, c *Chunk) { c.Modality = long(n) },
				func(_ *InputSession, c *Chunk) { c.Payload = []byte(long(limit)) }, // at the cap
			} {
				s, _ := b.open(t, func(o *Options) { o.MaxChunkBytes = limit })
				se := InputSession{ID: "in1", Endpoint: "/v1/responses", State: "receiving"}
				c := Chunk{Modality: "text", Payload: []byte("p")}
				edit(&se, &c)
				if err := s.CreateInputSession(ctx, se); err != nil {
					t.Fatalf("%d: CreateInputSession: %v", i, err)
				}
				if err := s.PutChunk(ctx, se.ID, 7, c, se); err != nil {
					t.Fatalf("%d: PutChunk: %v", i, err)
				}
				got, err := s.GetInputSession(ctx, se.ID)
				if err != nil {
					t.Fatalf("%d: GetInputSession: %v", i, err)
				}
				se.CreatedAt, se.LastActivity, se.ExpiresAt = t0, t0, t0.Add(DefaultInputSessionTTL)
				if !reflect.DeepEqual(got, se) {
					t.Fatalf("%d: GetInputSession = %+v, want %+v", i, got, se)
				}
				chunks, err := s.Chunks(ctx, se.ID)
				c.Seq = 7
				if err != nil || !reflect.DeepEqual(chunks, []Chunk{c}) {
					t.Fatalf("%d: Chunks = %+v, %v; want %+v", i, chunks, err, c)
				}
			}
			// One byte over the cap is refused, for a template and a payload.
			s, _ := b.open(t, func(o *Options) { o.MaxChunkBytes = limit })
			se := InputSession{ID: "in1", Template: []byte(long(limit + 1))}
			wantErr(t, "CreateInputSession over the cap", s.CreateInputSession(ctx, se), ErrTooLarge)
			se.Template = nil
			if err := s.CreateInputSession(ctx, se); err != nil {
				t.Fatal(err)
			}
			wantErr(t, "PutChunk over the cap", s.PutChunk(ctx, se.ID, 0, Chunk{Payload: []byte(long(limit + 1))}, se), ErrTooLarge)
		})

		t.Run("stream log and events", func(t *testing.T) {
			for i, edit := range []func(*StreamLog, *StreamEvent){
				func(l *StreamLog, _ *StreamEvent) { l.ResponseID = maxID },
				func(l *StreamLog, _ *StreamEvent) { l.Owner = long(n) },
				func(l *StreamLog, _ *StreamEvent) { l.Status = long(n) },
				func(l *StreamLog, _ *StreamEvent) { l.Response = []byte(long(n)) },
				func(l *StreamLog, _ *StreamEvent) { l.Input = []byte(long(n)) },
				func(_ *StreamLog, ev *StreamEvent) { ev.Name = long(n) },
				func(_ *StreamLog, ev *StreamEvent) { ev.Data = []byte(long(n)) },
			} {
				s, _ := b.open(t)
				l := StreamLog{ResponseID: "r", Owner: "o", Status: "in_progress", Response: []byte("{}"), Input: []byte("[]"),
					ExpiresAt: t0.Add(time.Hour)}
				ev := StreamEvent{Seq: 0, Name: "e", Data: []byte("{}")}
				edit(&l, &ev)
				if err := s.PutStreamLog(ctx, l); err != nil {
					t.Fatalf("%d: PutStreamLog: %v", i, err)
				}
				if err := s.AppendStreamEvents(ctx, l.ResponseID, 0, []StreamEvent{ev}); err != nil {
					t.Fatalf("%d: AppendStreamEvents: %v", i, err)
				}
				got, err := s.GetStreamLog(ctx, l.ResponseID)
				l.CreatedAt = t0
				if _, shared := s.(SharedStreamLogStore); shared {
					l.SavedAt = t0 // when the store wrote it
				}
				if err != nil || !reflect.DeepEqual(got, l) {
					t.Fatalf("%d: GetStreamLog = %+v, %v; want %+v", i, got, err, l)
				}
				evs, err := s.StreamEvents(ctx, l.ResponseID, -1, 10)
				if err != nil || !reflect.DeepEqual(evs, []StreamEvent{ev}) {
					t.Fatalf("%d: StreamEvents = %+v, %v; want %+v", i, evs, err, ev)
				}
			}
		})
	})
}

// accountStore is what both backends implement for keys and usage.
type accountStore interface {
	KeyStore
	UsageStore
}

// TestAccountNameBounds pins the documented bounds of key names and usage
// names: 1-256 bytes, no NUL anywhere (the first byte included), on both
// backends. Kills accounts.go validName's and AddUsage's boundary mutants
// (> 256 to >= 256, IndexByte >= 0 to > 0; redis_accounts.go's likewise),
// and the usage key's sizing terms negated (a 256-byte name subtracted
// makes the buffer's capacity negative).
func TestAccountNameBounds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		cs, _ := b.open(t)
		s, ok := cs.(accountStore)
		if !ok {
			t.Fatalf("%T is not a KeyStore and UsageStore", cs)
		}
		hash := strings.Repeat("ab", 32)

		name := long(256)
		if err := s.CreateKey(ctx, KeyRecord{Name: name, SHA256: hash}); err != nil {
			t.Fatalf("CreateKey with a 256-byte name: %v", err)
		}
		if k, err := s.GetKey(ctx, name); err != nil || k.Name != name {
			t.Fatalf("GetKey = %+v, %v", k, err)
		}
		for _, bad := range []string{"", long(257), "\x00k", "k\x00"} {
			wantErr(t, "CreateKey "+strings.ToValidUTF8(bad[:min(len(bad), 4)], "?"), s.CreateKey(ctx, KeyRecord{Name: bad, SHA256: hash}), ErrInvalid)
		}

		day := "2026-03-01"
		for i, edit := range []func(*UsageRecord){
			func(u *UsageRecord) { u.Key = long(256) },
			func(u *UsageRecord) { u.Route = long(256) },
			func(u *UsageRecord) { u.Target = long(256) },
			func(u *UsageRecord) { u.Model = long(256) },
		} {
			u := UsageRecord{Day: day, Requests: 1, InputTokens: int64(i + 1)}
			edit(&u)
			if err := s.AddUsage(ctx, u); err != nil {
				t.Fatalf("%d: AddUsage with a 256-byte name: %v", i, err)
			}
			got, err := s.Usage(ctx, u.Key, day, day)
			if err != nil {
				t.Fatalf("%d: Usage: %v", i, err)
			}
			found := false
			for _, g := range got {
				found = found || g == u
			}
			if !found {
				t.Fatalf("%d: Usage = %+v, want it to hold %+v", i, got, u)
			}
		}
		for i, edit := range []func(*UsageRecord){
			func(u *UsageRecord) { u.Key = long(257) },
			func(u *UsageRecord) { u.Model = long(257) },
			func(u *UsageRecord) { u.Route = "\x00r" },
			func(u *UsageRecord) { u.Target = "\x00" },
		} {
			u := UsageRecord{Day: day, Requests: 1}
			edit(&u)
			if err := s.AddUsage(ctx, u); !errors.Is(err, ErrInvalid) {
				t.Fatalf("%d: AddUsage with a bad name: %v, want ErrInvalid", i, err)
			}
		}
	})
}

// TestHistoryByteCap pins History's byte bound: a history of exactly
// maxBytes is returned, one byte less fails with ErrTooLarge, and the
// error says after how many turns (conversation.go walkHistory: bytes >
// maxBytes to >= and to <=, len(turns)+1 to -1).
func TestHistoryByteCap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		for _, tr := range []Turn{
			{ResponseID: "r1", Input: items("sys", "u1"), Output: items("a1")}, // 5+4+4 = 13 bytes
			{ResponseID: "r2", ParentID: "r1", Input: items("u2"), Output: items("a2")},
		} {
			if err := s.PutConversation(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.History(ctx, "r2", 0, 21)
		if want := items("sys", "u1", "a1", "u2", "a2"); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("History at exactly maxBytes = %s, %v; want %s", got, err, want)
		}
		_, err = s.History(ctx, "r2", 0, 20)
		wantErr(t, "History one byte over", err, ErrTooLarge)
		if !strings.Contains(err.Error(), "after 2 turns") {
			t.Errorf("error %q does not say after how many turns", err)
		}
		_, err = s.History(ctx, "r2", 0, 7)
		wantErr(t, "History over on the newest turn", err, ErrTooLarge)
		if !strings.Contains(err.Error(), "after 1 turns") {
			t.Errorf("error %q does not say after how many turns", err)
		}
	})
}

// cancelAfterFirstCheck is a context that is live for the first Err call
// (the one every operation makes before it starts) and canceled after it,
// as if the caller gave up while the operation was reading.
type cancelAfterFirstCheck struct {
	context.Context
	calls atomic.Int64
}

func (c *cancelAfterFirstCheck) Err() error {
	if c.calls.Add(1) > 1 {
		return context.Canceled
	}
	return nil
}

// TestChunksNoticesCancellation: a caller that gives up while Chunks reads
// a long session gets context.Canceled, not the chunks (input.go Chunks:
// len(chunks)%256 == 255 to *256, which never checks ctx again).
func TestChunksNoticesCancellation(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	se := InputSession{ID: "in1"}
	if err := s.CreateInputSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(300) {
		if err := s.PutChunk(ctx, se.ID, seq, Chunk{Payload: []byte("p")}, se); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Chunks(ctx, se.ID); err != nil || len(got) != 300 {
		t.Fatalf("Chunks = %d chunks, %v", len(got), err)
	}
	got, err := s.Chunks(&cancelAfterFirstCheck{Context: ctx}, se.ID)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Chunks with the caller gone = %d chunks, %v; want context.Canceled", len(got), err)
	}
}

// TestAnchorWithEmptyUpstreamIDIsCorrupt: an anchor value whose kind byte
// announces an upstream id but holds an empty one was not written by this
// package, and reads as ErrCorrupt (records.go decodeAnchor: d.err == nil
// && UpstreamID == "" to d.err != nil).
func TestAnchorWithEmptyUpstreamIDIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := anchor("r", "up", "sess")
	a.CreatedAt, a.ExpiresAt = t0, t0.Add(time.Hour)
	v := encodeAnchor(&a)
	v[1] |= anchorHasUpstreamID
	v = append(v, 0) // an empty string
	if err := db.Set(anchorKey("r"), v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := openTest(t, func(o *Options) { o.Dir = dir })
	got, err := s.GetAnchor(context.Background(), "r")
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetAnchor = %+v, %v; want ErrCorrupt", got, err)
	}
}

// TestDefaultBlockCache: a zero or negative CacheSize means
// DefaultCacheSize, so repeated reads of a table are served from the block
// cache (options.go: CacheSize <= 0 to < 0 and to > 0 leave a zero cache).
// Reopening the store flushes what the WAL held into a table.
func TestDefaultBlockCache(t *testing.T) {
	for _, size := range []int64{0, -1} {
		dir := t.TempDir()
		ctx := context.Background()
		s, _ := openTest(t, func(o *Options) { o.Dir, o.CacheSize = dir, size })
		if err := s.PutAnchor(ctx, anchor("r", "up", "sess")); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, _ = openTest(t, func(o *Options) { o.Dir, o.CacheSize = dir, size })
		for range 3 {
			if _, err := s.GetAnchor(ctx, "r"); err != nil {
				t.Fatal(err)
			}
		}
		if st := s.Stats(); st.BlockCacheHits == 0 {
			t.Errorf("CacheSize %d: no block-cache hits in three reads (%d misses)", size, st.BlockCacheMisses)
		}
	}
}

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// openRedisPrivate opens a RedisStore on srv with ro's Redis options (URL
// defaults to srv's), a fake clock and logs into the returned buffer.
func openRedisPrivate(t *testing.T, srv *redistest.Server, ro RedisOptions) (*RedisStore, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	if ro.URL == "" {
		ro.URL = srv.URL
	}
	ro.Now = newFakeClock().Now
	ro.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: logs})
	s, err := OpenRedis(context.Background(), ro)
	if err != nil {
		t.Fatalf("OpenRedis: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// TestRedisPersistenceWarning: a Redis without AOF gets a warning at open,
// one with appendfsync always does not (redis.go checkPersistence: each of
// its three conditions negated, WaitReplicas > 0 to >= 0).
func TestRedisPersistenceWarning(t *testing.T) {
	for _, aof := range []bool{false, true} {
		srv := redistest.Start(t, redistest.Options{AppendFsyncAlways: aof})
		_, logs := openRedisPrivate(t, srv, RedisOptions{})
		if warned := strings.Contains(logs.String(), "appendonly no"); warned == aof {
			t.Errorf("AOF %v: warned %v; logs:\n%s", aof, warned, logs)
		}
	}
}

// TestRedisHealthPingInterval: with HealthInterval unset the health ping
// runs once a second (DefaultRedisHealthInterval), not in a tight loop
// (redis.go: HealthInterval <= 0 to < 0 and to > 0 leave it zero).
func TestRedisHealthPingInterval(t *testing.T) {
	srv := redistest.Start(t)
	openRedisPrivate(t, srv, RedisOptions{})
	time.Sleep(300 * time.Millisecond)
	info, err := rawClient(t, srv.URL).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := -1
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_ping:calls="); ok {
			calls, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
	}
	if calls < 1 || calls > 3 {
		t.Errorf("%d PINGs in 300ms, want the one at open (and at most a couple more)", calls)
	}
}

// TestRedisWaitReplicasBounds: with WaitReplicas set, a write that too few
// replicas acknowledged within WaitTimeout fails with ErrUnavailable, and
// one that enough acknowledged succeeds; a write's reply is read within
// Timeout plus WaitTimeout. Kills redis.go's WaitTimeout <= 0 (to < 0: an
// unset WaitTimeout blocks WAIT until the read times out; to > 0: a set one
// is replaced by the default), WaitReplicas > 0 to <= 0 where the read
// timeout is extended, and n < WaitReplicas to <=.
func TestRedisWaitReplicasBounds(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t)
	for _, tt := range []struct {
		waitTimeout time.Duration
		want        string
	}{
		{0, "0 of 1 redis replicas acknowledged the write within 1s"},
		{50 * time.Millisecond, "0 of 1 redis replicas acknowledged the write within 50ms"},
	} {
		s, _ := openRedisPrivate(t, primary, RedisOptions{Timeout: 500 * time.Millisecond, WaitReplicas: 1, WaitTimeout: tt.waitTimeout})
		err := s.PutAnchor(ctx, anchor("r", "up", "sess"))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("WaitTimeout %v without replicas: PutAnchor = %v, want ErrUnavailable: %s", tt.waitTimeout, err, tt.want)
		}
	}

	// Sync the replica at once (Redis waits 5s for more replicas).
	if err := rawClient(t, primary.URL).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	replica := redistest.Start(t)
	rc := rawClient(t, replica.URL)
	host, port, _ := strings.Cut(primary.Addr, ":")
	if err := rc.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not connect: %v\n%s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s, _ := openRedisPrivate(t, primary, RedisOptions{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	if err := s.PutAnchor(ctx, anchor("r", "up", "sess")); err != nil {
		t.Fatalf("PutAnchor with its one replica connected: %v", err)
	}
	if _, err := s.GetAnchor(ctx, "r"); err != nil {
		t.Fatal(err)
	}
}

// TestRedisSlowerThanTimeout: a Redis slower than Timeout fails a write
// with ErrUnavailable (the gateway fails closed); without WaitReplicas the
// read timeout is not extended by WaitTimeout (redis.go: WaitReplicas > 0
// to >= 0).
func TestRedisSlowerThanTimeout(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := openRedisPrivate(t, srv, RedisOptions{Timeout: 100 * time.Millisecond, WaitTimeout: 5 * time.Second})
	ctx := context.Background()
	if err := rawClient(t, srv.URL).Do(ctx, "CLIENT", "PAUSE", 1500, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := s.PutAnchor(ctx, anchor("r", "up", "sess"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("PutAnchor on a Redis paused for 1.5s, Timeout 100ms: %v after %v, want ErrUnavailable", err, time.Since(start))
	}
}

// TestRedisCredentials: Username and Password replace the URL's, and the
// URL's are used when they are unset (redis.go redisClientOptions: both
// conditions negated). A user who may not run WAIT can write while
// WaitReplicas is 0 (redis.go exec: WaitReplicas > 0 to >= 0 sends WAIT
// 0), and with WaitReplicas its write fails even though its script ran
// (exec: cmd.Err() != nil to == nil, which returns no error).
func TestRedisCredentials(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	const pass = "s3cr:t/@?#"
	admin := rawClient(t, srv.URL)
	if err := admin.Do(ctx, "ACL", "SETUSER", "alice", "on", ">"+pass, "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	// The default user has a password of its own: logging in as it with
	// alice's fails.
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "resetpass", ">other").Err(); err != nil {
		t.Fatal(err)
	}
	host := srv.Addr
	for _, ro := range []RedisOptions{
		{URL: "redis://" + host + "/0", Username: "alice", Password: pass},
		{URL: "redis://alice:wrong@" + host + "/0", Username: "alice", Password: pass},
		{URL: "redis://alice:" + url.QueryEscape(pass) + "@" + host + "/0"},
	} {
		s, _ := openRedisPrivate(t, srv, ro)
		if err := s.PutAnchor(ctx, anchor("r", "up", "sess")); err != nil {
			t.Errorf("%s: PutAnchor: %v", httpx.RedactURL(ro.URL), err)
		}
	}
	ro := RedisOptions{URL: "redis://" + host + "/0", Username: "alice", Password: pass, WaitReplicas: 1}
	s, _ := openRedisPrivate(t, srv, ro)
	if err := s.PutAnchor(ctx, anchor("r2", "up", "sess")); err == nil {
		t.Error("PutAnchor succeeded though its WAIT was refused")
	}
}

// TestRedisUsageSpan: RedisStore.Usage reads at most MaxUsageDays days
// after the first at once (UsageRangeAllowed: <= to <).
func TestRedisUsageSpan(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	first := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	u := UsageRecord{Day: first.AddDate(0, 0, 30).Format(time.DateOnly), Key: "k", Model: "m", Requests: 1}
	if err := s.AddUsage(ctx, u); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		days    int
		wantErr error
	}{{30, nil}, {MaxUsageDays, nil}, {MaxUsageDays + 1, ErrInvalid}} {
		got, err := s.Usage(ctx, "k", first.Format(time.DateOnly), first.AddDate(0, 0, tt.days).Format(time.DateOnly))
		wantErr(t, fmt.Sprintf("Usage over %d days", tt.days), err, tt.wantErr)
		if tt.wantErr == nil && (len(got) != 1 || got[0] != u) {
			t.Errorf("Usage over %d days = %+v, want %+v", tt.days, got, u)
		}
	}
}

// redisClock returns a raw client of the test's Redis and a reader of
// Redis's own clock in milliseconds.
func redisClock(t *testing.T) (*redis.Client, func() int64) {
	c := rawClient(t, redisServer(t).URL)
	return c, func() int64 {
		now, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMilli()
	}
}

// TestRedisKeyExpiry: a record's Redis key expires at its ExpiresAt, the
// time left counted on the store's clock and rounded up to a millisecond
// (redis.go pxUntil: + time.Millisecond to -, which ends the key 2ms
// early; - 1 to + 1, which keeps it 1ms late). The bounds hold whatever
// the machine's load; only a write slower than a millisecond or two can
// let those mutants through.
func TestRedisKeyExpiry(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	c, ms := redisClock(t)
	a := anchor("r", "up", "sess")
	a.ExpiresAt = t0.Add(time.Hour) // the fake clock stands at t0
	before := ms()
	if err := s.PutAnchor(ctx, a); err != nil {
		t.Fatal(err)
	}
	after := ms()
	exp, err := c.PExpireTime(ctx, s.anchorKey("r")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, hour := exp.Milliseconds(), time.Hour.Milliseconds(); got < before+hour || got > after+hour {
		t.Errorf("the anchor's key expires at %d ms, want between %d and %d", got, before+hour, after+hour)
	}
}

// TestAnchorsDeletedStat: Stats.AnchorsDeleted counts the DeleteAnchor
// calls that removed an anchor, not those that found none
// (redis_records.go DeleteAnchor: n > 0 to <= 0).
func TestAnchorsDeletedStat(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		if err := s.PutAnchor(ctx, anchor("r", "up", "sess")); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.DeleteAnchor(ctx, "r"); err != nil {
				t.Fatal(err)
			}
			if n := s.Stats().AnchorsDeleted; n != 1 {
				t.Fatalf("AnchorsDeleted = %d, want 1", n)
			}
		}
	})
}

// TestSessionErrorsNameTheSession: an error about an input session names
// it, redacted, whatever the write (redis_records.go writeSession: c ==
// nil to != nil drops the id from session-only writes).
func TestSessionErrorsNameTheSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		err := s.UpdateInputSession(ctx, InputSession{ID: "nope"})
		wantErr(t, "UpdateInputSession of an unknown session", err, ErrNotFound)
		if msg := err.Error(); !strings.Contains(msg, RedactID("nope")) || strings.Count(msg, "sha256:") != 1 {
			t.Errorf("UpdateInputSession error %q does not name the session once", msg)
		}
		err = s.PutChunk(ctx, "nope", 3, Chunk{}, InputSession{})
		wantErr(t, "PutChunk to an unknown session", err, ErrNotFound)
		if msg := err.Error(); !strings.Contains(msg, RedactID("nope")+"/3") || strings.Count(msg, "sha256:") != 1 {
			t.Errorf("PutChunk error %q does not name the session and chunk once", msg)
		}
	})
}

// TestRedisChunksOfAClobberedKey: when the chunks key holds something else
// (written by another program under the prefix), Chunks fails instead of
// reporting no chunks (redis_records.go Chunks: err == nil || redis.Nil,
// first test negated, drops the error of the chunks read).
func TestRedisChunksOfAClobberedKey(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	if err := s.CreateInputSession(ctx, InputSession{ID: "in1"}); err != nil {
		t.Fatal(err)
	}
	if err := rawClient(t, redisServer(t).URL).Set(ctx, s.chunksKey("in1"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Chunks(ctx, "in1"); err == nil {
		t.Fatalf("Chunks over a clobbered key = %+v, nil; want an error", got)
	}
}

// TestRedisTargetHealthExpiry: a target's skip ends d after it was
// recorded, rounded up to a millisecond (redis_records.go PutTargetHealth:
// + time.Millisecond to -, 2ms short; - 1 to + 1, 1ms long). As in
// TestRedisKeyExpiry, only a write slower than a millisecond or two can let
// those mutants through.
func TestRedisTargetHealthExpiry(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	c, ms := redisClock(t)
	before := ms()
	if err := s.PutTargetHealth(ctx, "up", "m", 10*time.Second, "429"); err != nil {
		t.Fatal(err)
	}
	after := ms()
	exp, err := c.PExpireTime(ctx, s.targetKey("up", "m")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := exp.Milliseconds(); got < before+10000 || got > after+10000 {
		t.Errorf("the skip ends at %d ms, want between %d and %d", got, before+10000, after+10000)
	}
}

// TestRedisStreamEventsOfAClobberedKey: when the events key holds
// something else, StreamEvents fails instead of reporting no events
// (redis_streamlog.go StreamEvents: err == nil || redis.Nil, first test
// negated).
func TestRedisStreamEventsOfAClobberedKey(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := rawClient(t, redisServer(t).URL).Set(ctx, s.streamEventsKey("r"), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.StreamEvents(ctx, "r", -1, 0); err == nil {
		t.Fatalf("StreamEvents over a clobbered key = %+v, nil; want an error", got)
	}
}

// TestStreamSeqBounds: sequence numbers run 0..maxStreamSeq inclusive, and
// an append that would pass the end is refused with an error naming its
// range (streamlog_pebble.go validStreamAppend: first > maxStreamSeq to >=;
// the range's end first+n-1 to first-n-1 or first+n+1).
func TestStreamSeqBounds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		ev := StreamEvent{Name: "e", Data: []byte("{}")}
		if err := s.AppendStreamEvents(ctx, "r", maxStreamSeq, []StreamEvent{ev}); err != nil {
			t.Fatalf("AppendStreamEvents at maxStreamSeq: %v", err)
		}
		got, err := s.StreamEvents(ctx, "r", maxStreamSeq-1, 0)
		if ev.Seq = maxStreamSeq; err != nil || !reflect.DeepEqual(got, []StreamEvent{ev}) {
			t.Fatalf("StreamEvents = %+v, %v; want %+v", got, err, ev)
		}
		err = s.AppendStreamEvents(ctx, "r", maxStreamSeq-1, []StreamEvent{ev, ev, ev})
		wantErr(t, "AppendStreamEvents past maxStreamSeq", err, ErrInvalid)
		if want := fmt.Sprintf("sequence numbers %d..%d", maxStreamSeq-1, maxStreamSeq+1); !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	})
}

// TestStreamEventsNoticesCancellation: a caller that gives up while
// StreamEvents reads a long log gets context.Canceled, not the events
// (streamlog_pebble.go StreamEvents: len(events)%256 == 255 to *256).
func TestStreamEventsNoticesCancellation(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	evs := make([]StreamEvent, 300)
	if err := s.AppendStreamEvents(ctx, "r", 0, evs); err != nil {
		t.Fatal(err)
	}
	if got, err := s.StreamEvents(ctx, "r", -1, 0); err != nil || len(got) != 300 {
		t.Fatalf("StreamEvents = %d events, %v", len(got), err)
	}
	got, err := s.StreamEvents(&cancelAfterFirstCheck{Context: ctx}, "r", -1, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StreamEvents with the caller gone = %d events, %v; want context.Canceled", len(got), err)
	}
}

// TestSweptCountsStreamLogs: Stats.Swept is the total of the per-family
// counts, stream logs included (store.go Stats: + SweptStreamLogs to -).
func TestSweptCountsStreamLogs(t *testing.T) {
	s, clk := openTest(t)
	ctx := context.Background()
	if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", ExpiresAt: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if n, err := s.Sweep(ctx, clk.Now()); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if st := s.Stats(); st.SweptStreamLogs != 1 || st.Swept != 1 {
		t.Errorf("Stats: SweptStreamLogs %d, Swept %d; want 1 and 1", st.SweptStreamLogs, st.Swept)
	}
}

// TestSweepErrorsStat: Stats.SweepErrors counts the sweeps that failed,
// not those that succeeded (sweep.go Sweep: err != nil to == nil).
func TestSweepErrorsStat(t *testing.T) {
	s, clk := openTest(t)
	ctx := context.Background()
	if _, err := s.Sweep(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Sweeps != 1 || st.SweepErrors != 0 {
		t.Fatalf("after a sweep: Sweeps %d, SweepErrors %d; want 1 and 0", st.Sweeps, st.SweepErrors)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Sweep(canceled, clk.Now()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with a canceled context: %v", err)
	}
	if st := s.Stats(); st.Sweeps != 2 || st.SweepErrors != 1 {
		t.Errorf("after a failed sweep: Sweeps %d, SweepErrors %d; want 2 and 1", st.Sweeps, st.SweepErrors)
	}
}
