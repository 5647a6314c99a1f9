package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/internal/redistest"
)

// Tests of what only the Redis backend has: conditional session writes,
// shared answers, shared target health, expiry as Redis keys, and its
// failure behaviour. They need redis-server (skipped without it, failed in
// CI). The contract it shares with Pebble is tested by the tables run
// through forEachBackend.

func rawClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisConditionalSessionWrites(t *testing.T) {
	s, clk := openRedisTest(t)
	ctx := context.Background()
	if err := s.CreateInputSession(ctx, InputSession{ID: "in1", State: "open"}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.GetInputSession(ctx, "in1")
	if err != nil {
		t.Fatal(err)
	}
	seen := rec.LastActivity

	// Replica A writes chunk 0 on the record it saw.
	clk.Advance(time.Second)
	upA := rec
	upA.NextSeq, upA.LastActivity, upA.ExpiresAt = 1, clk.Now(), time.Time{}
	if err := s.PutChunkIf(ctx, "in1", 0, Chunk{Payload: []byte("a")}, upA, seen); err != nil {
		t.Fatalf("PutChunkIf on the current record: %v", err)
	}
	// The same write retried (its reply was lost) succeeds and changes nothing.
	if err := s.PutChunkIf(ctx, "in1", 0, Chunk{Payload: []byte("a")}, upA, seen); err != nil {
		t.Fatalf("PutChunkIf retried: %v", err)
	}
	// Replica B, which saw the record before A's write, conflicts.
	clk.Advance(time.Second)
	upB := rec
	upB.NextSeq, upB.LastActivity, upB.ExpiresAt = 2, clk.Now(), time.Time{}
	if err := s.PutChunkIf(ctx, "in1", 1, Chunk{Payload: []byte("b")}, upB, seen); !errors.Is(err, ErrConflict) {
		t.Fatalf("PutChunkIf on a stale record: %v, want ErrConflict", err)
	}
	if err := s.UpdateInputSessionIf(ctx, upB, seen); !errors.Is(err, ErrConflict) {
		t.Fatalf("UpdateInputSessionIf on a stale record: %v, want ErrConflict", err)
	}
	if c, err := s.Chunks(ctx, "in1"); err != nil || len(c) != 1 || string(c[0].Payload) != "a" {
		t.Fatalf("a conflicting write left a chunk: %+v, %v", c, err)
	}
	// After reading again, B's write goes through.
	if err := s.PutChunkIf(ctx, "in1", 1, Chunk{Payload: []byte("b")}, upB, upA.LastActivity); err != nil {
		t.Fatalf("PutChunkIf after re-reading: %v", err)
	}
	got, err := s.GetInputSession(ctx, "in1")
	if err != nil || got.NextSeq != 2 || !got.LastActivity.Equal(upB.LastActivity) {
		t.Fatalf("record %+v, %v", got, err)
	}
	// A conditional write to a session that is gone is ErrNotFound.
	if err := s.DeleteInputSession(ctx, "in1"); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateInputSessionIf(ctx, got, got.LastActivity); !errors.Is(err, ErrNotFound) {
		t.Fatalf("UpdateInputSessionIf after delete: %v", err)
	}
}

func TestRedisCreateRetryIsIdempotent(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	sess := InputSession{ID: "in1"}
	s.sessionDefaults(&sess)
	key := []string{s.sessionKey("in1"), s.chunksKey("in1"), s.resultKey("in1"), s.indexKey()}
	args := []any{encodeSession(&sess), stamp(sess.LastActivity), stamp(sess.ExpiresAt), s.pxUntil(sess.ExpiresAt), stamp(s.now()), "in1", "tok-1"}
	for i := range 2 { // the second run is the client library retrying a create whose reply was lost
		if v, err := s.exec(ctx, createSessionScript, key, args...); err != nil || v.(int64) != 1 {
			t.Fatalf("create run %d: %v, %v", i, v, err)
		}
	}
	args[6] = "tok-2" // another create with the same id
	if v, err := s.exec(ctx, createSessionScript, key, args...); err != nil || v.(int64) != 0 {
		t.Fatalf("a second create: %v, %v; want refused", v, err)
	}
}

func TestRedisResults(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	if err := s.AppendResult(ctx, "in1", 0, ResultPart{Kind: ResultHead, Data: []byte("{}")}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("AppendResult without a session: %v", err)
	}
	if err := s.CreateInputSession(ctx, InputSession{ID: "in1"}); err != nil {
		t.Fatal(err)
	}
	parts := []ResultPart{{ResultHead, []byte(`{"status":200}`)}, {ResultData, []byte("data: a\n\n")}, {ResultData, []byte("\x00\xff")}}
	for i, p := range parts {
		if err := s.AppendResult(ctx, "in1", int64(i), p); err != nil {
			t.Fatalf("AppendResult %d: %v", i, err)
		}
	}
	if err := s.AppendResult(ctx, "in1", 1, parts[1]); err != nil { // a retried append
		t.Fatalf("AppendResult retried: %v", err)
	}
	if err := s.AppendResult(ctx, "in1", 5, parts[1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("AppendResult with a gap: %v", err)
	}
	got, cursor, err := s.ReadResult(ctx, "in1", "", 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("ReadResult = %d parts, %v", len(got), err)
	}
	for i := range parts {
		if got[i].Kind != parts[i].Kind || string(got[i].Data) != string(parts[i].Data) {
			t.Errorf("part %d = %q %q", i, got[i].Kind, got[i].Data)
		}
	}
	// Nothing new: a blocking read returns none after its wait.
	start := time.Now()
	if more, c2, err := s.ReadResult(ctx, "in1", cursor, 100*time.Millisecond); err != nil || len(more) != 0 || c2 != cursor {
		t.Fatalf("ReadResult at the end = %v, %q, %v", more, c2, err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("ReadResult did not wait: %v", d)
	}
	// A part appended while a reader waits wakes it.
	done := make(chan []ResultPart, 1)
	go func() {
		more, _, _ := s.ReadResult(ctx, "in1", cursor, 5*time.Second)
		done <- more
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.AppendResult(ctx, "in1", 3, ResultPart{Kind: ResultEnd}); err != nil {
		t.Fatal(err)
	}
	select {
	case more := <-done:
		if len(more) != 1 || more[0].Kind != ResultEnd {
			t.Fatalf("woken reader got %+v", more)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader not woken")
	}
	// The answer goes with its session.
	if err := s.DeleteInputSession(ctx, "in1"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.ReadResult(ctx, "in1", "", 0); err != nil || len(got) != 0 {
		t.Fatalf("ReadResult after delete = %d parts, %v", len(got), err)
	}
}

func TestRedisTargetHealth(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	if d, _, err := s.GetTargetHealth(ctx, "up", "m"); err != nil || d != 0 {
		t.Fatalf("GetTargetHealth of a healthy target = %v, %v", d, err)
	}
	if err := s.PutTargetHealth(ctx, "up", "m", 10*time.Second, "rate_limited: 429"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTargetHealth(ctx, "up", "m", time.Second, "shorter"); err != nil {
		t.Fatal(err)
	}
	d, why, err := s.GetTargetHealth(ctx, "up", "m")
	if err != nil || d < 9*time.Second || d > 10*time.Second || why != "rate_limited: 429" {
		t.Fatalf("GetTargetHealth = %v, %q, %v; want the longer skip kept", d, why, err)
	}
	if d, _, _ := s.GetTargetHealth(ctx, "up", ""); d != 0 {
		t.Errorf("the upstream shares its target's skip: %v", d)
	}
	if err := s.PutTargetHealth(ctx, "up", "short", 50*time.Millisecond, "x"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if d, _, _ := s.GetTargetHealth(ctx, "up", "short"); d != 0 {
		t.Errorf("an ended skip is still there: %v", d)
	}
	if err := s.ClearTargetHealth(ctx, "up", "m"); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := s.GetTargetHealth(ctx, "up", "m"); d != 0 {
		t.Errorf("a cleared skip is still there: %v", d)
	}
}

// TestRedisKeysExpire checks that records are Redis keys expiring with
// their records (no sweeper needed).
func TestRedisKeysExpire(t *testing.T) {
	url := redisServer(t).URL
	s, _ := openRedisTestOn(t, url, func(o *Options) { o.Now = nil; o.AnchorTTL = time.Hour })
	ctx := context.Background()
	raw := rawClient(t, url)
	if err := s.PutAnchor(ctx, anchor("r1", "up1", "s1")); err != nil {
		t.Fatal(err)
	}
	if d := raw.PTTL(ctx, s.anchorKey("r1")).Val(); d < 59*time.Minute || d > time.Hour {
		t.Errorf("anchor key expires in %v, want 1h", d)
	}
	if d := raw.PTTL(ctx, s.scopeKey(ScopeSession, "s1")).Val(); d < DefaultScopeTTL-time.Minute || d > DefaultScopeTTL {
		t.Errorf("scope key expires in %v, want %v", d, DefaultScopeTTL)
	}
	if err := s.CreateInputSession(ctx, InputSession{ID: "in1", ExpiresAt: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChunk(ctx, "in1", 0, Chunk{Payload: []byte("x")}, InputSession{ExpiresAt: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := raw.Exists(ctx, s.sessionKey("in1"), s.chunksKey("in1")).Val(); n != 0 {
		t.Errorf("%d keys of an expired session are left", n)
	}
	if l, err := s.ListInputSessions(ctx); err != nil || len(l) != 0 {
		t.Errorf("ListInputSessions = %+v, %v", l, err)
	}
	if n := raw.SCard(ctx, s.indexKey()).Val(); n != 0 {
		t.Errorf("the index keeps %d expired ids", n)
	}
}

// TestRedisUnavailable stops Redis under the store: operations fail at once
// with ErrUnavailable (never hang, never panic), Health says so, and the
// store recovers by itself when Redis is back, with every acknowledged
// write (appendfsync always).
func TestRedisUnavailable(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsyncAlways: true})
	s, _ := openRedisTestOn(t, srv.URL)
	ctx := context.Background()
	if err := s.PutAnchor(ctx, anchor("r1", "up1", "s1")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateInputSession(ctx, InputSession{ID: "in1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChunk(ctx, "in1", 0, Chunk{Payload: []byte("acked")}, InputSession{NextSeq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health while up: %v", err)
	}
	srv.Kill()

	for i := range 3 {
		start := time.Now()
		_, err := s.GetAnchor(ctx, "r1")
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("GetAnchor %d with Redis down: %v, want ErrUnavailable", i, err)
		}
		if d := time.Since(start); d > 3*DefaultRedisTimeout {
			t.Errorf("GetAnchor %d took %v", i, d)
		}
	}
	if err := s.PutChunk(ctx, "in1", 1, Chunk{}, InputSession{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("PutChunk with Redis down: %v", err)
	}
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("Health with Redis down = %v", err)
	}

	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for s.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store did not notice Redis is back: %v", s.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a, err := s.GetAnchor(ctx, "r1"); err != nil || a.Upstream != "up1" {
		t.Fatalf("acknowledged anchor after the restart: %+v, %v", a, err)
	}
	if c, err := s.Chunks(ctx, "in1"); err != nil || len(c) != 1 || string(c[0].Payload) != "acked" {
		t.Fatalf("acknowledged chunk after the restart: %+v, %v", c, err)
	}
	if err := s.PutAnchor(ctx, anchor("r2", "up1", "s1")); err != nil {
		t.Fatalf("PutAnchor after the restart: %v", err)
	}
}

// TestRedisWaitReplicas: with WaitReplicas and no replica to acknowledge,
// a write is not acknowledged.
func TestRedisWaitReplicas(t *testing.T) {
	srv := redisServer(t)
	s, err := OpenRedis(context.Background(), RedisOptions{URL: srv.URL, KeyPrefix: "sluicetest:wait:", WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.PutAnchor(context.Background(), anchor("r1", "up1", "s1"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 redis replicas") {
		t.Fatalf("PutAnchor without replicas: %v", err)
	}
}

func TestOpenRedisErrors(t *testing.T) {
	ctx := context.Background()
	_, err := OpenRedis(ctx, RedisOptions{URL: "http://user:hunter2@host:1/0"})
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenRedis with a bad scheme: %v", err)
	}
	if _, err := OpenRedis(ctx, RedisOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("OpenRedis without a URL: %v", err)
	}
	// Nothing listens: the store opens, reports itself down and fails fast.
	s, err := OpenRedis(ctx, RedisOptions{URL: "redis://:hunter2@127.0.0.1:1/0", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("OpenRedis with Redis down: %v", err)
	}
	defer s.Close()
	if err := s.Health(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Health = %v", err)
	}
	if _, err := s.GetAnchor(ctx, "r1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("GetAnchor: %v", err)
	}
}

func TestRedisSchemaMismatch(t *testing.T) {
	srv := redisServer(t)
	raw := rawClient(t, srv.URL)
	if err := raw.Set(context.Background(), "sluicetest:schema:meta:schema", "9", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Another Sluice version's keys under the prefix are a configuration
	// error at start (the prefix to change), not an outage.
	_, err := OpenRedis(context.Background(), RedisOptions{URL: srv.URL, KeyPrefix: "sluicetest:schema:"})
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "layout version") ||
		!strings.Contains(err.Error(), "store.redis.key_prefix") {
		t.Fatalf("OpenRedis with another layout: %v, want a config error naming store.redis.key_prefix", err)
	}
}

// TestRedisRunScript is the hook for limits shared by replicas: a fixed
// window counter, counted by two stores (two replicas) on one prefix.
func TestRedisRunScript(t *testing.T) {
	srv := redisServer(t)
	open := func() *RedisStore {
		s, err := OpenRedis(context.Background(), RedisOptions{URL: srv.URL, KeyPrefix: "sluicetest:limits:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	r1, r2 := open(), open()
	window := NewScript(`
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return n`)
	ctx := context.Background()
	for i, s := range []*RedisStore{r1, r2, r1} {
		v, err := s.RunScript(ctx, window, []string{"rpm:team-a"}, 1, 60000)
		if err != nil || v.(int64) != int64(i+1) {
			t.Fatalf("count %d = %v, %v", i, v, err)
		}
	}
	if d := rawClient(t, srv.URL).PTTL(ctx, "sluicetest:limits:rpm:team-a").Val(); d <= 0 || d > time.Minute {
		t.Errorf("window key expires in %v", d)
	}
	r2.Close()
	if _, err := r2.RunScript(ctx, window, []string{"rpm:team-a"}, 1, 60000); !errors.Is(err, ErrClosed) {
		t.Errorf("RunScript after Close: %v", err)
	}
}

// TestRedisKeysAndUsage: the run-time keys and the usage totals, as
// PebbleStore keeps them (accounts_test.go), shared by two replicas.
func TestRedisKeysAndUsage(t *testing.T) {
	srv := redisServer(t)
	open := func() *RedisStore {
		s, err := OpenRedis(context.Background(), RedisOptions{URL: srv.URL, KeyPrefix: "sluicetest:accounts:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s, s2 := open(), open()
	ctx := context.Background()
	k := KeyRecord{Name: "ci", SHA256: strings.Repeat("ab", 32), Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: 5}}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s2.CreateKey(ctx, k); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate through another replica: %v", err)
	}
	k.Limits.RPM = 9
	if err := s.UpdateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if got, err := s2.GetKey(ctx, "ci"); err != nil || got.Limits.RPM != 9 || got.Models[0] != "gpt-5*" {
		t.Fatalf("get through another replica: %+v %v", got, err)
	}
	if err := s.CreateKey(ctx, KeyRecord{Name: "a", SHA256: strings.Repeat("cd", 32)}); err != nil {
		t.Fatal(err)
	}
	if list, err := s2.ListKeys(ctx); err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "ci" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s2.DeleteKey(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if err := s2.DeleteKey(ctx, "ci"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetKey(ctx, "ci"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.UpdateKey(ctx, KeyRecord{Name: "x", SHA256: "short"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad hash: %v", err)
	}

	for i, u := range []UsageRecord{
		{Day: "2026-03-01", Key: "a", Target: "up", Model: "m", Requests: 1, InputTokens: 10, OutputTokens: 5},
		{Day: "2026-03-01", Key: "a", Target: "up", Model: "m", Requests: 1, InputTokens: 1, OutputTokens: 2, CachedTokens: 1},
		{Day: "2026-03-02", Key: "a", Target: "up", Model: "m", Requests: 1, InputTokens: 100},
		{Day: "2026-03-02", Key: "b", Target: "up", Model: "m", Requests: 1, InputTokens: 1000, ReasoningTokens: 7},
	} {
		if err := []*RedisStore{s, s2}[i%2].AddUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Usage(ctx, "a", "2026-03-01", "2026-03-01")
	if err != nil || len(got) != 1 || got[0].Requests != 2 || got[0].InputTokens != 11 || got[0].OutputTokens != 7 || got[0].CachedTokens != 1 {
		t.Fatalf("day 1 of a: %+v %v", got, err)
	}
	if got, _ := s2.Usage(ctx, "a", "2026-03-01", "2026-03-02"); len(got) != 2 || got[0].Day != "2026-03-01" {
		t.Fatalf("two days of a: %+v", got)
	}
	if got, _ := s.Usage(ctx, "", "2026-03-02", "2026-03-02"); len(got) != 2 || got[1].Key != "b" || got[1].ReasoningTokens != 7 {
		t.Fatalf("every key on day 2: %+v", got)
	}
	if _, err := s.Usage(ctx, "", "bad", "2026-03-02"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad day: %v", err)
	}
}
