package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A Redis that stalls or stops for a moment, seen through the HTTP surface
// of replicas sharing it. These tests need redis-server (skipped without
// it, failed in CI).

// rawRedis is a plain client of addr, for what a test does to Redis itself.
func rawRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	raw := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// TestSharedLimitSlotFreedAfterARedisStallAtRequestEnd: a request of a key
// with concurrent: 1 that ends while Redis stalls (every command held for
// 3 s, longer than the store's 1 s timeout, as DEBUG SLEEP does) cannot
// release its slot then; the release is retried in the background, so the
// key is admitted again on the other replica soon after Redis answers,
// not after the lease's 15 minutes, and its budget reservation is gone too.
func TestSharedLimitSlotFreedAfterARedisStallAtRequestEnd(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2, up, lims := sharedLimitReplicasOn(t, srv, keyRec("team-a", teamAKey, nil, store.KeyLimits{Concurrent: 1, TokensPerDay: 1_000_000}))
	up.Enqueue(upstreamtest.Script{Text: "slow answer", Deltas: 3, Gap: 300 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(1)
	var status int
	go func() {
		defer wg.Done()
		resp, _ := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		status = resp.StatusCode
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := up.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// CLIENT PAUSE ALL holds every other client's commands, as DEBUG SLEEP
	// does (which redistest's server does not enable). Long enough that
	// the stream (about a second) ends inside it on a loaded machine too:
	// its settlement must be the one Redis does not take in time.
	const pause = 8 * time.Second
	raw := rawRedis(t, srv.Addr)
	paused := time.Now()
	if err := raw.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if time.Since(paused) >= pause-time.Second {
		t.Skip("the stream outlasted the Redis pause: the machine is too loaded for this test's premise")
	}
	if status != http.StatusOK {
		t.Fatalf("the stream: %d", status)
	}
	// Admitted through Redis, not by the replica's own limits while it
	// still takes Redis for down (fail open): no fallback counted.
	eventually(t, "the key admitted again through Redis on the other replica", func() bool {
		fallbacks := lims[1].Fallbacks()
		resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple)
		if resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(string(b), "in flight") {
			t.Fatalf("refused for another reason: %s", b)
		}
		return resp.StatusCode == http.StatusOK && lims[1].Fallbacks() == fallbacks
	})
	eventually(t, "no budget reservation left in Redis", func() bool {
		n, err := raw.ZCard(ctx, store.DefaultRedisKeyPrefix+"rl:team-a:b").Result()
		return err == nil && n == 0
	})
	// The settlement Redis ran after its client gave up may have freed the
	// slot before the retry came round; the retry is logged when it does.
	eventually(t, "the late settlement logged", func() bool {
		return strings.Contains(r1.logs.String(), "settled after all")
	})
}

// TestFollowUpWhileRedisIsDownIsARetryable503: a follow-up (or a resume)
// whose owner cannot be read because Redis is down fails closed with the
// code README "Continuity" documents, as a 503 with a Retry-After: the
// gateway's own store is unavailable for the moment, nothing upstream
// failed.
func TestFollowUpWhileRedisIsDownIsARetryable503(t *testing.T) {
	so := newScaleOut(t, gateway.Options{})
	_, id := so.r1.turn("", nil)
	if id == "" {
		t.Fatal("no response id")
	}
	_ = rawRedis(t, so.s1.Addr()).ShutdownNoSave(context.Background()).Err() // (its reply is the connection closing)
	eventually(t, "Redis stopped", func() bool { return redistest.Ping(so.s1.Addr()) != nil })
	check := func(what string, resp *http.Response) {
		t.Helper()
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d, want 503", what, resp.StatusCode)
		}
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
			t.Fatalf("%s: Retry-After %q, want a few seconds", what, resp.Header.Get("Retry-After"))
		}
		e := readError(t, resp)
		if deref(e.Error.Code) != "upstream_unavailable" || e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "owner lookup failed") {
			t.Fatalf("%s: error %+v", what, e)
		}
	}
	check("follow-up", so.r2.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"`+id+`"}`))
	req, _ := http.NewRequest(http.MethodGet, so.r2.url+"/v1/responses/"+id+"?stream=true", nil)
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	check("resume", resp)
}
