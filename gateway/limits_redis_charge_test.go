package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// The tokens a replica's own limits admitted while Redis was unavailable
// count once in the shared day budget when its counter was lost meanwhile
// (expired, evicted, Redis restarted empty), whether another replica seeds
// the counter again before the charge lands or the charge finds it
// missing: the replica writes that usage to the totals, which a counter is
// seeded from, only after the charge (README "Limits across replicas").
// Each request of simple uses 11 tokens.
func TestSharedBudgetChargeOfALostCounterCountsOnce(t *testing.T) {
	for _, tc := range []struct {
		name            string
		seededElsewhere bool // another replica admits (and seeds the counter) before the charge
		requests        int64
	}{
		{"seeded by another replica before the charge", true, 4},
		{"missing when the charge lands", false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
			t.Cleanup(up.Close)
			hs, scripts, _ := outageReplicas(t, up, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 1000}))
			rs := scripts[1].RedisStore
			ctx := context.Background()
			today := time.Now().UTC().Format(time.DateOnly)
			usageTotal := func() int64 {
				recs, err := rs.Usage(ctx, "team-a", today, today)
				if err != nil {
					t.Fatal(err)
				}
				var n int64
				for _, r := range recs {
					n += r.Tokens()
				}
				return n
			}
			ok := func(h *harness, what string) {
				t.Helper()
				if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
				}
			}
			ok(hs[0], "through Redis")
			waitAccessLines(t, hs[0], 1)
			hs[0].getJSON("/admin/usage?key=team-a", nil) // flushes replica 1's totals
			if n := usageTotal(); n != 11 {
				t.Fatalf("usage totals before the outage: %d, want 11", n)
			}
			scripts[0].down.Store(true)
			ok(hs[0], "with Redis down")
			waitAccessLines(t, hs[0], 2)
			hs[0].getJSON("/admin/usage?key=team-a", nil)
			if _, err := rs.RunScript(ctx, store.NewScript(`return redis.call('DEL', KEYS[1])`),
				[]string{"rl:team-a:d:" + today}); err != nil {
				t.Fatal(err)
			}
			if tc.seededElsewhere {
				ok(hs[1], "replica 2 after the counter was lost")
				waitAccessLines(t, hs[1], 1)
			}
			scripts[0].down.Store(false)
			ok(hs[0], "replica 1 once Redis answers")
			waitAccessLines(t, hs[0], 3)
			want := tc.requests * 11
			eventually(t, "every request's usage in the totals", func() bool { return usageTotal() == want })
			if n := dayCounter(t, rs, "team-a"); n != want {
				t.Fatalf("Redis's day counter: %d, want %d (%d requests, each once)", n, want, tc.requests)
			}
		})
	}
}
