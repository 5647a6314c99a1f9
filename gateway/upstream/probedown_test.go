package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbeDownIsSingleFlightAndRateLimited: a flood of requests finding
// their only upstream down makes one probe, not one each; another comes no
// sooner than OnDemandProbeEvery; upstreams that are not down are not probed.
func TestProbeDownIsSingleFlightAndRateLimited(t *testing.T) {
	var probes atomic.Int32
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		time.Sleep(50 * time.Millisecond) // long enough for the flood to find it in flight
		if !up.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"id":"m"}]}`))
	}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p, err := NewPool([]Config{{Name: "a", BaseURL: srv.URL}}, Options{Now: clock, OnDemandProbeEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.ProbeAll(ctx)
	if st := p.Get("a").Status(clock()); st.State != StateDown || st.Reason != "probe: HTTP 502" {
		t.Fatalf("after the first probe: %+v", st)
	}
	probes.Store(0)
	up.Store(true)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !p.ProbeDown(ctx, p.Upstreams()) {
				t.Error("ProbeDown did not wait for a probe")
			}
		}()
	}
	wg.Wait()
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes for 20 concurrent requests; want 1", n)
	}
	if ok, why := p.Get("a").Usable(clock()); !ok {
		t.Fatalf("not usable after a successful on-demand probe: %s", why)
	}
	// Healthy now: nothing to probe.
	if p.ProbeDown(ctx, p.Upstreams()) || probes.Load() != 1 {
		t.Fatalf("a healthy upstream was probed on demand (%d probes)", probes.Load())
	}
	// Down again: the next on-demand probe waits for OnDemandProbeEvery.
	up.Store(false)
	p.ProbeAll(ctx)
	probes.Store(0)
	mu.Lock()
	now = now.Add(500 * time.Millisecond)
	mu.Unlock()
	if p.ProbeDown(ctx, p.Upstreams()) || probes.Load() != 0 {
		t.Fatalf("probed again within OnDemandProbeEvery (%d probes)", probes.Load())
	}
	mu.Lock()
	now = now.Add(600 * time.Millisecond)
	mu.Unlock()
	if !p.ProbeDown(ctx, p.Upstreams()) || probes.Load() != 1 {
		t.Fatalf("no on-demand probe after OnDemandProbeEvery (%d probes)", probes.Load())
	}
}

// TestProbeDownSkipsCoolingAndFailed: only down upstreams (their probe
// failed) are probed on demand; one cooling down after a 429 waits out its
// cooldown, one whose credentials were rejected waits for a periodic probe.
func TestProbeDownSkipsCoolingAndFailed(t *testing.T) {
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	defer srv.Close()
	p, err := NewPool([]Config{{Name: "cool", BaseURL: srv.URL}, {Name: "failed", BaseURL: srv.URL}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.Cooldown(p.Get("cool"), time.Minute, "429")
	p.MarkFailed(p.Get("failed"), "HTTP 401")
	if p.ProbeDown(context.Background(), p.Upstreams()) || probes.Load() != 0 {
		t.Fatalf("probed %d upstreams that are not down", probes.Load())
	}
}
