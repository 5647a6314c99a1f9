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
	r1, r2, lims = sharedLimitReplicasOf(t, srv, up, keys...)
	return r1, r2, up, lims
}

// sharedLimitReplicasOf is two replicas sharing srv in front of up.
func sharedLimitReplicasOf(t *testing.T, srv *redistest.Server, up *upstreamtest.Server, keys ...store.KeyRecord) (r1, r2 *harness, lims [2]*gateway.RedisLimiter) {
	t.Helper()
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
	return replica(0), replica(1), lims
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
		limitType(t, b, "tokens")
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
// enforces the limits itself (fail open to local limits), and says so;
// each starts from what it admitted through Redis, so two replicas admit
// at most twice a limit, the requests before the outage included.
func TestSharedLimitFailsOpenWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2, _, lims := sharedLimitReplicasOn(t, srv, keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 1}))
	if resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	srv.Kill()
	// Each replica now has its own bucket of 1: replica 1 used its own
	// through Redis, replica 2 has one request left.
	resp, b = send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	if resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("replica 2 with Redis down: %d %s", resp.StatusCode, b)
	}
	resp, b = send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	for i := range lims {
		if lims[i].Fallbacks() == 0 {
			t.Fatalf("replica %d: no fallback counted", i+1)
		}
	}
	if !strings.Contains(r1.logs.String(), "shared rate limits unavailable") {
		t.Fatal("the fallback was not logged")
	}
}

// TestSharedBudgetStaysSpentWhileRedisIsDown: a key that spent its daily
// budget through Redis stays refused on every replica once Redis stops
// answering: each replica's fallback starts from the totals it last saw
// in Redis, not from the usage store that is down with it.
func TestSharedBudgetStaysSpentWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2, _, lims := sharedLimitReplicasOn(t, srv, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 5}))
	if resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	for i, h := range []*harness{r1, r2} {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		if resp.StatusCode != http.StatusTooManyRequests || codeOf(b) != "insufficient_quota" {
			t.Fatalf("replica %d with Redis up: %d %s, want 429 insufficient_quota", i+1, resp.StatusCode, b)
		}
	}
	srv.Kill()
	for round := range 2 {
		for i, h := range []*harness{r1, r2} {
			resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
			if resp.StatusCode != http.StatusTooManyRequests || codeOf(b) != "insufficient_quota" {
				t.Fatalf("replica %d with Redis down (request %d): %d %s, want 429 insufficient_quota", i+1, round+1, resp.StatusCode, b)
			}
			if lims[i].Fallbacks() == 0 {
				t.Fatalf("replica %d: no fallback counted", i+1)
			}
		}
	}
}

// TestSharedBudgetHoldsUnderConcurrentRequestsAcrossReplicas: requests
// arriving together at two replicas count each other's estimates against
// the key's budget in Redis. Each body is 4000 bytes (1000 tokens
// estimated), the budget 5000: of 20 requests at once, 5 are admitted
// across both replicas, before any has ended.
func TestSharedBudgetHoldsUnderConcurrentRequestsAcrossReplicas(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits store.KeyLimits
	}{
		{"day", store.KeyLimits{TokensPerDay: 5000}},
		{"month", store.KeyLimits{TokensPerMonth: 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20
			up := newHeldUpstream(t, n)
			r1, r2, lims := sharedLimitReplicasOf(t, redistest.Start(t), up.Server, keyRec("team-a", teamAKey, nil, tc.limits))
			reached, results := sendAllAtOnce(t, []*harness{r1, r2}, up, n, teamAKey, sizedBody(t, 4000, false))
			checkBudgetRace(t, reached, results, 5)
			if f := lims[0].Fallbacks() + lims[1].Fallbacks(); f != 0 {
				t.Fatalf("%d admissions fell back to the replicas' own limits", f)
			}
			// Settled with their real (few) tokens, the reservations are gone.
			if resp, b := send(t, r2, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
				t.Fatalf("after they ended: %d %s", resp.StatusCode, b)
			}
		})
	}
}

// TestRedisLimiterBudgetsCountRequestsInFlight: the shared limiter keeps
// the rule of the local one (budgetInFlightCases).
func TestRedisLimiterBudgetsCountRequestsInFlight(t *testing.T) {
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: redistest.Start(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	for _, tc := range budgetInFlightCases {
		t.Run(tc.name, func(t *testing.T) {
			lim := &gateway.RedisLimiter{Store: rs}
			runLimiterSteps(t, lim, tc.limits, tc.steps, func(time.Duration) { t.Fatal("the shared limiter runs on Redis's clock") })
			if lim.Fallbacks() != 0 {
				t.Fatalf("%d admissions fell back to the local limits", lim.Fallbacks())
			}
		})
	}
}

// TestRedisLimiterLimitChanges: in Redis, a budget set later is seeded
// from the usage totals (its counter does not exist until then), and
// changing a key's limits leaves a spent rpm or tpm bucket spent: the
// state is kept per key, not per limits.
func TestRedisLimiterLimitChanges(t *testing.T) {
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: redistest.Start(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	lim := &gateway.RedisLimiter{Store: rs, Seed: func(context.Context, string, string, string) (int64, error) { return 500, nil }}
	rpm := gateway.CodeRateLimitExceeded
	for _, tc := range []struct {
		name   string
		limits store.KeyLimits
		steps  []limiterStep
	}{
		{"a budget set later counts the period's usage", store.KeyLimits{RPM: 100}, []limiterStep{
			{}, {done: 1, used: 10},
			{limits: keyLimits(store.KeyLimits{RPM: 100, TokensPerDay: 300})},
			{wantCode: gateway.CodeInsufficientQuota},
		}},
		{"rpm unchanged, another limit changed", store.KeyLimits{RPM: 3}, []limiterStep{
			{}, {}, {}, {wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{RPM: 3, Concurrent: 50})},
			{wantCode: rpm},
		}},
		{"rpm raised", store.KeyLimits{RPM: 3}, []limiterStep{
			{}, {}, {}, {wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{RPM: 6})},
			{wantCode: rpm},
		}},
		{"tpm unchanged, another limit changed", store.KeyLimits{TPM: 100}, []limiterStep{
			{admit: 100}, {done: 1, used: 100},
			{admit: 10, wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{TPM: 100, RPM: 50})},
			{admit: 10, wantCode: rpm},
		}},
		{"tpm raised", store.KeyLimits{TPM: 100}, []limiterStep{
			{admit: 100}, {done: 1, used: 100},
			{limits: keyLimits(store.KeyLimits{TPM: 100000})},
			{admit: 90000, wantCode: rpm},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runLimiterSteps(t, lim, tc.limits, tc.steps, func(time.Duration) { t.Fatal("the shared limiter runs on Redis's clock") })
		})
	}
}
