package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// Limits shared through Redis (gateway.RedisLimiter): two replicas in this
// process, one redis-server (skipped without it, failed in CI), one fake
// upstream. A limit of N holds across both, not N per replica.

func sharedLimitReplicas(t *testing.T, keys ...store.KeyRecord) (r1, r2 *harness, up *upstreamtest.Server) {
	t.Helper()
	r1, r2, up, _ = sharedLimitReplicasOn(t, redistest.Start(t), keys...)
	return r1, r2, up
}

func sharedLimitReplicasOn(t *testing.T, srv *redistest.Server, keys ...store.KeyRecord) (r1, r2 *harness, up *upstreamtest.Server, lims [2]*gateway.RedisLimiter) {
	t.Helper()
	up = upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	replica := func(i int) *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		lims[i] = &gateway.RedisLimiter{Store: rs}
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: gateway.Options{Store: rs,
			Accounts: gateway.AccountsOptions{Required: true, Keys: keys, KeyStore: rs, Usage: rs, Limiter: lims[i]}}})
	}
	return replica(0), replica(1), up, lims
}

func TestSharedLimitRequestsPerMinuteAcrossReplicas(t *testing.T) {
	const n = 4
	r1, r2, _ := sharedLimitReplicas(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: n}), keyRec("team-b", teamBKey, nil, store.KeyLimits{RPM: n}))
	replicas := []*harness{r1, r2}
	for i := range n {
		resp, b := send(t, replicas[i%2], http.MethodPost, "/v1/responses", teamAKey, simple)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d (replica %d): %d %s", i, i%2+1, resp.StatusCode, b)
		}
		if resp.Header.Get("X-Ratelimit-Limit-Requests") != "4" {
			t.Fatalf("request %d headers: %v", i, resp.Header)
		}
		if got, want := resp.Header.Get("X-Ratelimit-Remaining-Requests"), []string{"3", "2", "1", "0"}[i]; got != want {
			t.Fatalf("request %d: remaining %s, want %s", i, got, want)
		}
	}
	for i, h := range replicas { // the N+1th, on either replica
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		limit(t, resp, b, "rate_limit_exceeded")
		if resp.Header.Get("X-Ratelimit-Limit-Requests") != "4" || resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" ||
			resp.Header.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Fatalf("replica %d 429 headers: %v", i+1, resp.Header)
		}
	}
	if resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamBKey, simple); resp.StatusCode != 200 {
		t.Fatalf("team-b: %d %s", resp.StatusCode, b)
	}
}

func TestSharedLimitConcurrentAcrossReplicas(t *testing.T) {
	r1, r2, up := sharedLimitReplicas(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{Concurrent: 1}))
	up.Enqueue(upstreamtest.Script{Text: "slow answer", Deltas: 3, Gap: 300 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		send(t, r1, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := up.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	wg.Wait()
	// Done released the slot in Redis: the other replica admits again.
	if resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("after the first ended: %d %s", resp.StatusCode, b)
	}
}

func TestSharedLimitTokensPerMinuteSettlesAcrossReplicas(t *testing.T) {
	r1, r2, _ := sharedLimitReplicas(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TPM: 1000}))
	// ~500 tokens reserved each; settled to the real (few) tokens, so four pass.
	body := `{"model":"gpt-fake-1","input":"` + strings.Repeat("x", 1960) + `"}`
	for i := range 4 {
		resp, b := send(t, []*harness{r1, r2}[i%2], http.MethodPost, "/v1/responses", teamAKey, body)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		if resp.Header.Get("X-Ratelimit-Limit-Tokens") != "1000" {
			t.Fatalf("headers: %v", resp.Header)
		}
	}
	// A request estimated at the whole minute's tokens passes on neither replica now.
	big := `{"model":"gpt-fake-1","input":"` + strings.Repeat("x", 4400) + `"}`
	for i, h := range []*harness{r1, r2} {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, big)
		limit(t, resp, b, "rate_limit_exceeded")
		if resp.Header.Get("X-Ratelimit-Remaining-Tokens") == "" || resp.Header.Get("X-Ratelimit-Reset-Tokens") == "" {
			t.Fatalf("replica %d headers: %v", i+1, resp.Header)
		}
	}
}

func TestSharedBudgetTokensPerDayAcrossReplicas(t *testing.T) {
	r1, r2, _ := sharedLimitReplicas(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 5}))
	if resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
}

// TestSharedLimitFailsOpenWhileRedisIsDown: without Redis, each replica
// enforces the limits itself (fail open to local limits), and says so.
func TestSharedLimitFailsOpenWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2, _, lims := sharedLimitReplicasOn(t, srv, keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 1}))
	if resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	srv.Kill()
	// Each replica now has its own bucket of 1: one request each passes, the next does not.
	for i, h := range []*harness{r1, r2} {
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
			t.Fatalf("replica %d with Redis down: %d %s", i+1, resp.StatusCode, b)
		}
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		limit(t, resp, b, "rate_limit_exceeded")
		if lims[i].Fallbacks() == 0 {
			t.Fatalf("replica %d: no fallback counted", i+1)
		}
	}
	if !strings.Contains(r1.logs.String(), "shared rate limits unavailable") {
		t.Fatal("the fallback was not logged")
	}
}
