package gateway

import (
	"context"
	"testing"

	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// TestRedisSettlementRetryCountsOnce: a settlement retried after its first
// try (whose reply may have been lost after it ran) releases what is still
// held and counts the tokens used once, whether the first try ran or not.
// Needs redis-server (skipped without it, failed in CI).
func TestRedisSettlementRetryCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		firstRan bool // the first try reached Redis before the retry
	}{
		{"first try lost", false},
		{"first try ran, its reply lost", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &RedisLimiter{Store: rs}
			key := "k-" + map[bool]string{false: "lost", true: "ran"}[tc.firstRan]
			lim := store.KeyLimits{Concurrent: 1, TokensPerDay: 1000}
			adm, lerr := l.Admit(ctx, key, lim, 100)
			if lerr != nil {
				t.Fatal(lerr.Message)
			}
			a := adm.(*redisAdmission)
			now := l.now()
			ks, dayEnd, monthEnd := l.keysOf(key, now)
			st := settlement{key: key, lim: lim, keys: ks, dayEnd: dayEnd, monthEnd: monthEnd, refund: a.estimate - 40,
				lease: a.lease, used: 40, reservation: a.reservation, leaseEnds: a.leaseEnds, periodsAt: now}
			if tc.firstRan {
				if err := l.settle(ctx, st, false); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.settle(ctx, st, true); err != nil {
				t.Fatal(err)
			}
			if err := l.settle(ctx, st, true); err != nil { // once more: still nothing counted twice
				t.Fatal(err)
			}
			v, err := rs.RunScript(ctx, store.NewScript(`return tonumber(redis.call('GET', KEYS[1]) or -1)`), []string{ks.day})
			if err != nil {
				t.Fatal(err)
			}
			if used, _ := v.(int64); used != 40 {
				t.Fatalf("day used %d, want 40", used)
			}
			if _, lerr := l.Admit(ctx, key, lim, 100); lerr != nil { // the slot and the reservation are free
				t.Fatalf("after the settlement: %s", lerr.Message)
			}
			if l.Fallbacks() != 0 {
				t.Fatalf("%d fallbacks", l.Fallbacks())
			}
		})
	}
}
