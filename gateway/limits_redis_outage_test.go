package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// outageScripts is the limiter's view of a Redis store that the test takes
// down (every script refused, as while Redis is unavailable) or makes lose
// the reply of one script after it ran (a timeout after Redis got it).
type outageScripts struct {
	*store.RedisStore
	down      atomic.Bool
	loseReply atomic.Bool
}

func (s *outageScripts) RunScript(ctx context.Context, sc *store.Script, keys []string, args ...any) (any, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("store: run script: %w: the test's outage", store.ErrUnavailable)
	}
	v, err := s.RedisStore.RunScript(ctx, sc, keys, args...)
	if err == nil && s.loseReply.CompareAndSwap(true, false) {
		return nil, fmt.Errorf("store: run script: %w: read tcp: i/o timeout", store.ErrUnavailable)
	}
	return v, err
}

// outageReplicas is two replicas of one real Redis whose limiters reach it
// through outageScripts (the usage store stays up).
func outageReplicas(t *testing.T, up *upstreamtest.Server, keys ...store.KeyRecord) (hs [2]*harness, scripts [2]*outageScripts, lims [2]*gateway.RedisLimiter) {
	t.Helper()
	srv := redistest.Start(t)
	for i := range hs {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		scripts[i] = &outageScripts{RedisStore: rs}
		lims[i] = &gateway.RedisLimiter{Store: scripts[i]}
		hs[i] = newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: gateway.Options{Store: rs,
			Accounts: gateway.AccountsOptions{Required: true, Keys: keys, KeyStore: rs, Usage: rs, Limiter: lims[i]}}})
	}
	return hs, scripts, lims
}

// dayCounter is the Redis counter of key's tokens today (-1: none).
func dayCounter(t *testing.T, rs *store.RedisStore, key string) int64 {
	t.Helper()
	v, err := rs.RunScript(context.Background(), store.NewScript(`return tonumber(redis.call('GET', KEYS[1]) or -1)`),
		[]string{"rl:" + key + ":d:" + time.Now().UTC().Format(time.DateOnly)})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := v.(int64)
	return n
}

// Tokens a replica's own limits admitted while Redis was unavailable count
// against the shared budget once Redis answers (README "Limits across
// replicas"): the first request after, on either replica, sees them; a
// charge whose reply was lost after Redis ran it is retried and counted
// once. Each request of simple uses 11 tokens; the budget is 20, so the
// key has spent it with the second request.
func TestSharedBudgetCountsTokensUsedWhileRedisWasDown(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	hs, scripts, lims := outageReplicas(t, up, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 20}))
	if resp, b := send(t, hs[0], http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("through Redis: %d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, hs[0], 1) // settled
	scripts[0].down.Store(true)
	if resp, b := send(t, hs[0], http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("with Redis down (11 of 20 used): %d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, hs[0], 2)
	if lims[0].Fallbacks() == 0 {
		t.Fatal("no fallback counted")
	}
	if n := dayCounter(t, scripts[1].RedisStore, "team-a"); n != 11 {
		t.Fatalf("Redis's counter during the outage: %d, want 11", n)
	}
	// Redis answers again, but loses the reply of the first script (the
	// charge): the request falls back, the charge is retried by itself.
	scripts[0].loseReply.Store(true)
	scripts[0].down.Store(false)
	resp, b := send(t, hs[0], http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
	eventually(t, "the charge retried", func() bool {
		return strings.Contains(hs[0].logs.String(), "tokens used while Redis was unavailable are counted")
	})
	if n := dayCounter(t, scripts[1].RedisStore, "team-a"); n != 22 {
		t.Fatalf("Redis's counter after the outage: %d, want 22 (both requests, once)", n)
	}
	for i, h := range hs { // through Redis
		before := lims[i].Fallbacks()
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		limit(t, resp, b, "insufficient_quota")
		if lims[i].Fallbacks() != before {
			t.Fatalf("replica %d fell back", i+1)
		}
	}
	if n := dayCounter(t, scripts[1].RedisStore, "team-a"); n != 22 {
		t.Fatalf("Redis's counter: %d, want 22", n)
	}
}

// A replica's own limits, used while Redis is unavailable, start from the
// requests it admitted through Redis: with concurrent 1, a stream admitted
// before the outage keeps its replica from admitting another during it
// (README: N replicas admit at most N times a limit).
func TestFallbackCountsRequestsAdmittedThroughRedis(t *testing.T) {
	up := newHeldUpstream(t, 4)
	hs, scripts, _ := outageReplicas(t, up.Server, keyRec("team-a", teamAKey, nil, store.KeyLimits{Concurrent: 1}))
	var wg sync.WaitGroup
	codes := make([]int, 2)
	hold := func(i int, h *harness) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
			codes[i] = resp.StatusCode
		}()
		<-up.arrived // admitted, held at the upstream
	}
	hold(0, hs[0]) // through Redis
	scripts[0].down.Store(true)
	scripts[1].down.Store(true)
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		resp, b := send(t, hs[0], http.MethodPost, "/v1/responses", teamAKey, simple)
		limit(t, resp, b, "rate_limit_exceeded")
	}()
	select {
	case <-refused:
	case <-up.arrived:
		up.release()
		t.Fatal("replica 1 admitted a second request with concurrent 1")
	}
	hold(1, hs[1]) // replica 2's own slot
	up.release()
	wg.Wait()
	if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
		t.Fatalf("held requests: %v", codes)
	}
	if resp, b := send(t, hs[0], http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("replica 1 once its request ended: %d %s", resp.StatusCode, b)
	}
}
