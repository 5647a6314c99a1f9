package store

import (
	"context"
	"errors"
	"testing"
)

// TestRedisAddUsagesOncePerBatch: a batch of usage sent again under its
// token (a retry after a reply lost to a timeout) is added once, by any
// replica; another batch, or a write without a token, is added again; a
// record the store refuses is left out of its batch alone.
func TestRedisAddUsagesOncePerBatch(t *testing.T) {
	srv := redisServer(t)
	open := func() *RedisStore {
		s, err := OpenRedis(context.Background(), RedisOptions{URL: srv.URL, KeyPrefix: "sluicetest:usagebatch:" + t.Name() + ":"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	r1, r2 := open(), open()
	ctx := context.Background()
	rec := func(model string) UsageRecord {
		return UsageRecord{Day: "2026-11-26", Key: "k", Route: "r", Target: "t", Model: model, Requests: 1, InputTokens: 10, OutputTokens: 2}
	}
	for i, write := range []struct {
		s     *RedisStore
		batch string
	}{{r1, "b1"}, {r1, "b1"}, {r2, "b1"}, {r2, "b2"}, {r1, ""}, {r1, ""}} {
		errs := write.s.AddUsages(ctx, write.batch, []UsageRecord{rec("a"), rec("bad\x00model"), rec("b")})
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], ErrInvalid) {
			t.Fatalf("write %d: %v", i, errs)
		}
	}
	got, err := r2.Usage(ctx, "k", "2026-11-26", "2026-11-26")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Model != "a" || got[0].Requests != 4 || got[0].InputTokens != 40 || got[0].OutputTokens != 8 ||
		got[1].Model != "b" || got[1].Requests != 4 {
		t.Fatalf("totals %+v, want 4 requests of each model (b1 once, b2, and two without a token)", got)
	}
}
