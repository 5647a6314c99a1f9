package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// countingUsage counts the writes that reach a real usage store.
type countingUsage struct {
	store.UsageStore
	writes atomic.Int64
}

func (c *countingUsage) AddUsage(ctx context.Context, u store.UsageRecord) error {
	c.writes.Add(1)
	return c.UsageStore.AddUsage(ctx, u)
}

// TestUsageTotalsAreWrittenInBatches: 40 concurrent requests of one key
// cost the store far fewer than 40 writes (their usage is summed first), GET
// /admin/usage right after the last answer counts all 40 without waiting
// for a flush, and usage that is still pending at shutdown reaches the
// store, even when the drain has used up its time.
func TestUsageTotalsAreWrittenInBatches(t *testing.T) {
	st := openStore(t, t.TempDir())
	usage := &countingUsage{UsageStore: st}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: usage,
		UsageFlushInterval: time.Hour}}}) // only a read or the shutdown flushes
	const n = 40
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Usage is settled just after a request's last byte: wait for the
	// access log's line of each, then read.
	waitAccessLines(t, h, n)
	if w := usage.writes.Load(); w != 0 {
		t.Fatalf("%d store writes before any flush, want 0: usage is written per request", w)
	}
	var rep usageReport
	if code := h.getJSON("/admin/usage?key=team-a", &rep); code != http.StatusOK {
		t.Fatalf("admin/usage: %d", code)
	}
	if rep.Total.Requests != n || rep.Total.InputTokens == 0 {
		t.Fatalf("usage after %d requests: %+v", n, rep.Total)
	}
	if w := usage.writes.Load(); w != 1 {
		t.Fatalf("%d requests of one key cost %d store writes, want 1", n, w)
	}

	// One more request, then shutdown: its usage is in the store.
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, n+1)
	// A drain that used up its time still writes the totals.
	spent, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.gw.Shutdown(spent)
	today := time.Now().UTC().Format(time.DateOnly)
	recs, err := st.Usage(context.Background(), "team-a", today, today)
	if err != nil || len(recs) != 1 || recs[0].Requests != n+1 {
		t.Fatalf("stored after shutdown: %+v %v, want one total of %d requests", recs, err, n+1)
	}
}

// waitAccessLines waits until n requests have ended: each one's usage is
// settled before its access log line is written.
func waitAccessLines(t *testing.T, h *harness, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); strings.Count(h.logs.String(), "access: request") < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests ended, want %d:\n%s", strings.Count(h.logs.String(), "access: request"), n, h.logs.String())
		}
	}
}
