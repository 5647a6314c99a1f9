package gateway

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// failingSettle runs scripts on a Redis store but fails every settlement
// while down is set: before Redis got it, or (ran) after it ran, its reply
// lost.
type failingSettle struct {
	*store.RedisStore
	down atomic.Bool
	ran  bool
}

func (s *failingSettle) RunScript(ctx context.Context, sc *store.Script, keys []string, args ...any) (any, error) {
	if sc != settleScript || !s.down.Load() {
		return s.RedisStore.RunScript(ctx, sc, keys, args...)
	}
	if s.ran {
		if _, err := s.RedisStore.RunScript(ctx, sc, keys, args...); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("store: run script: %w: the test's failure", store.ErrUnavailable)
}

// A request under a budget with an estimate of 0 and no concurrency limit
// (nothing reserved, no slot) whose settlement Redis fails is kept and
// settled once Redis answers: the tokens it used count in the budget once,
// whether its first try ran or not. Until then the key's usage totals wait
// (holdsUsage), as a budget counter may be seeded from them.
// Needs redis-server (skipped without it, failed in CI).
func TestRedisSettlementOfAnUnreservedRequestIsRetried(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	ctx := context.Background()
	for _, ran := range []bool{false, true} {
		t.Run(fmt.Sprintf("first try ran %v", ran), func(t *testing.T) {
			key := fmt.Sprintf("k-%v", ran)
			fs := &failingSettle{RedisStore: rs, ran: ran}
			l := &RedisLimiter{Store: fs}
			lim := store.KeyLimits{TokensPerDay: 1000}
			adm, lerr := l.Admit(ctx, key, lim, 0)
			if lerr != nil {
				t.Fatal(lerr.Message)
			}
			fs.down.Store(true)
			adm.Done(40)
			if !l.holdsUsage(key) {
				t.Fatal("the key's usage is not held while its settlement waits for Redis")
			}
			fs.down.Store(false)
			l.retrySettlements()
			if l.holdsUsage(key) {
				t.Fatal("the key's usage is still held after its settlement landed")
			}
			ks, _, _ := l.keysOf(key, l.now())
			v, err := rs.RunScript(ctx, store.NewScript(`return tonumber(redis.call('GET', KEYS[1]) or -1)`), []string{ks.day})
			if err != nil {
				t.Fatal(err)
			}
			if used, _ := v.(int64); used != 40 {
				t.Fatalf("day used %d, want 40: the tokens of the failed settlement, once", used)
			}
		})
	}
}
