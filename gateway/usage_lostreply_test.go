package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// errReplyLost is what a write to a Redis that stalled past the timeout
// returns, although Redis runs the write when it resumes.
var errReplyLost = errors.New("store: unavailable: read tcp: i/o timeout")

// lostReplyUsage is a Redis usage store whose write, while loseReply is
// set, runs and then fails, once: the reply lost after the command ran.
type lostReplyUsage struct {
	*store.RedisStore
	loseReply atomic.Bool
}

func (u *lostReplyUsage) AddUsage(ctx context.Context, rec store.UsageRecord) error {
	err := u.RedisStore.AddUsage(ctx, rec)
	if err == nil && u.loseReply.CompareAndSwap(true, false) {
		return errReplyLost
	}
	return err
}

func (u *lostReplyUsage) AddUsages(ctx context.Context, batch string, recs []store.UsageRecord) []error {
	errs := u.RedisStore.AddUsages(ctx, batch, recs)
	if u.loseReply.CompareAndSwap(true, false) {
		for i, err := range errs {
			if err == nil {
				errs[i] = errReplyLost
			}
		}
	}
	return errs
}

// A usage flush whose reply is lost after Redis ran it is retried, and the
// retry does not count its totals a second time: /admin/usage counts each
// request served once.
func TestUsageFlushRetriedAfterALostReplyCountsOnce(t *testing.T) {
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: redistest.Start(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	usage := &lostReplyUsage{RedisStore: rs}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: rs, Usage: usage,
		UsageFlushInterval: time.Hour}}}) // only reads flush
	served := 0
	serve := func(n int) {
		for range n {
			if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
				t.Fatalf("request: %d %s", resp.StatusCode, b)
			}
			served++
			waitAccessLines(t, h, served)
		}
	}
	var rep usageReport
	serve(1)
	usage.loseReply.Store(true)
	h.getJSON("/admin/usage?key=team-a", &rep) // flushes: the write runs, its reply is lost
	if usage.loseReply.Load() {
		t.Fatal("the flush did not write")
	}
	serve(2)
	for range 2 { // each read flushes: the retry, then the later requests
		if code := h.getJSON("/admin/usage?key=team-a", &rep); code != http.StatusOK {
			t.Fatalf("admin/usage: %d", code)
		}
	}
	if rep.Total.Requests != int64(served) {
		t.Fatalf("/admin/usage counts %d requests, %d were served: %+v", rep.Total.Requests, served, rep.Data)
	}
}
