package upstream_test

// Behaviour a mutation run of this package found unpinned. Judged
// equivalent, so not tested:
//   - cooldown.go:70:7 < -> <=: clampCooldown returns zero for a zero
//     either way.
//   - cooldown.go:73:7 > -> >=: clampCooldown returns MaxCooldown for
//     MaxCooldown either way.
//   - shared.go:73:33 > -> >=: a SharedRefresh of exactly 1s is kept, or
//     replaced by the default, which is 1s.
//   - shared.go:107:9 > -> >=: a zero skip read from the store is kept as
//     one ending at the read; no later check (skip, publish) tells it from
//     none unless Options.Now steps back, which time.Now's monotonic
//     reading never does.
//   - shared.go:131:7 <= -> <: publish is never asked to share a zero
//     skip (Cooldown and TargetFailed both check first).
//   - target.go:252:42 > -> >=: a zero cooldown recorded ends now; no check
//     sees it as cooling unless Options.Now steps back (see above).
//   - target.go:266:29 > -> >=: a zero skip reaches publish, which drops it.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

// TestPickAsksSkipOncePerUpstream: one Pick consults the caller's skip
// about each upstream exactly once (the gateway's skip reads target health,
// possibly from the shared store), whichever upstream the weighted
// round-robin is due to pick.
func TestPickAsksSkipOncePerUpstream(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		var cfgs []upstream.Config
		for i := range n {
			cfgs = append(cfgs, upstream.Config{BaseURL: "http://127.0.0.1:" + string(rune('1'+i)) + "/v1"})
		}
		p, err := upstream.NewPool(cfgs, upstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for pick := range n + 1 { // each upstream's turn, and around again
			asked := map[string]int{}
			if _, err := p.Pick(func(u *upstream.Upstream) bool { asked[u.Name()]++; return false }); err != nil {
				t.Fatal(err)
			}
			for _, u := range p.Upstreams() {
				if asked[u.Name()] != 1 {
					t.Errorf("%d upstreams, pick %d: skip asked about %s %d times, want once (%v)", n, pick, u.Name(), asked[u.Name()], asked)
				}
			}
		}
	}
}

// TestBackoffAtTheCapIsStillJittered: a backoff whose doubling lands exactly
// on MaxCooldown (75s·2^3 = 10m) stops doubling there and still gets its
// ±20% jitter, so replicas do not all retry at the cap together; only the
// upper side is clamped.
func TestBackoffAtTheCapIsStillJittered(t *testing.T) {
	for _, tt := range []struct {
		jitter float64
		want   time.Duration
	}{
		{0, 8 * time.Minute},    // 10m·0.8
		{0.25, 9 * time.Minute}, // 10m·0.9
		{1, upstream.MaxCooldown},
	} {
		now := time.Unix(1000, 0)
		p, err := upstream.NewPool([]upstream.Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}},
			upstream.Options{Now: func() time.Time { return now }, CircuitFailures: 10, Jitter: func() float64 { return tt.jitter }})
		if err != nil {
			t.Fatal(err)
		}
		m := upstream.Target{Upstream: p.Get("a"), Model: "m"}
		var got time.Duration
		for range 5 { // streaks 0..4: the last one is past the cap
			got, _ = p.TargetFailed(m, upstream.Failure{Class: "quota", Reason: "insufficient_quota", Backoff: 75 * time.Second})
		}
		if got != tt.want {
			t.Errorf("jitter %v: fifth backoff from 75s is %s, want %s", tt.jitter, got, tt.want)
		}
	}
}

// TestOnDemandProbeEveryDefault: a zero (or negative) OnDemandProbeEvery
// takes its default of one second between two on-demand probes of a down
// upstream, rather than probing on every request; a set one is kept.
func TestOnDemandProbeEveryDefault(t *testing.T) {
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probes.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	for _, tt := range []struct {
		every, want time.Duration
	}{
		{0, upstream.DefaultOnDemandProbeEvery},
		{-time.Second, upstream.DefaultOnDemandProbeEvery},
		{3 * time.Second, 3 * time.Second},
	} {
		now := time.Unix(1000, 0)
		p, err := upstream.NewPool([]upstream.Config{{Name: "a", BaseURL: srv.URL}},
			upstream.Options{Now: func() time.Time { return now }, OnDemandProbeEvery: tt.every})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		p.ProbeAll(ctx) // down
		if !p.ProbeDown(ctx, p.Upstreams()) {
			t.Fatalf("every %s: no first on-demand probe", tt.every)
		}
		probes.Store(0)
		now = now.Add(tt.want - time.Millisecond)
		if p.ProbeDown(ctx, p.Upstreams()) || probes.Load() != 0 {
			t.Errorf("every %s: probed on demand again %s later, want no sooner than %s", tt.every, tt.want-time.Millisecond, tt.want)
		}
		now = now.Add(time.Millisecond)
		if !p.ProbeDown(ctx, p.Upstreams()) || probes.Load() != 1 {
			t.Errorf("every %s: no on-demand probe %s later (%d probes)", tt.every, tt.want, probes.Load())
		}
	}
}
