package upstream

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Behaviour that the whole mutation run of this package found unpinned
// (README, "Mutation testing"). The survivors judged equivalent are listed
// in mutation_gaps3_test.go.

// gapsLogger is a pool logger whose lines the test can read.
func gapsLogger() (hclog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug}), &buf
}

// TestRetryAfterZeroAndNone: an explicit zero Retry-After (or -Ms) is a
// hint to retry at once; a "try again in 0s" phrase is no hint.
func TestRetryAfterZeroAndNone(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tt := range []struct {
		name   string
		header http.Header
		msg    string
		want   time.Duration
		ok     bool
	}{
		{"retry-after-ms 0", http.Header{"Retry-After-Ms": {"0"}}, "", 0, true},
		{"retry-after 0", http.Header{"Retry-After": {"0"}}, "", 0, true},
		{"retry-after-ms 0 wins over retry-after", http.Header{"Retry-After-Ms": {"0"}, "Retry-After": {"9"}}, "", 0, true},
		{"try again in 0s", nil, "Please try again in 0s.", 0, false},
		{"try again in 1s", nil, "Please try again in 1s.", time.Second, true},
	} {
		d, ok := RetryAfter(tt.header, tt.msg, now)
		if d != tt.want || ok != tt.ok {
			t.Errorf("%s: RetryAfter = %s, %v; want %s, %v", tt.name, d, ok, tt.want, tt.ok)
		}
	}
}

// TestBaseURLSchemes: http and https base URLs with a host are accepted,
// anything else is refused.
func TestBaseURLSchemes(t *testing.T) {
	for raw, ok := range map[string]bool{
		"http://127.0.0.1:1/v1": true, "https://api.example.com/v1": true,
		"ftp://example.com/v1": false, "http:///v1": false, "example.com/v1": false,
	} {
		if err := CheckBaseURL(raw); (err == nil) != ok {
			t.Errorf("CheckBaseURL(%q) = %v, want accepted %v", raw, err, ok)
		}
	}
}

// TestOptionDefaults: zero options take their documented defaults, and
// set ones are kept.
func TestOptionDefaults(t *testing.T) {
	cfgs := []Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}
	p, err := NewPool(cfgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.opts.ProbeInterval != DefaultProbeInterval || p.opts.OnDemandProbeEvery != DefaultOnDemandProbeEvery ||
		p.opts.CircuitOpenFor != 30*time.Second {
		t.Fatalf("zero options became probe %s, on-demand every %s, circuit open %s", p.opts.ProbeInterval,
			p.opts.OnDemandProbeEvery, p.opts.CircuitOpenFor)
	}
	set := Options{ProbeInterval: 7 * time.Second, OnDemandProbeEvery: 3 * time.Second, CircuitOpenFor: 11 * time.Second}
	if p, err = NewPool(cfgs, set); err != nil {
		t.Fatal(err)
	}
	if p.opts.ProbeInterval != set.ProbeInterval || p.opts.OnDemandProbeEvery != set.OnDemandProbeEvery || p.opts.CircuitOpenFor != set.CircuitOpenFor {
		t.Fatalf("set options became probe %s, on-demand every %s, circuit open %s", p.opts.ProbeInterval,
			p.opts.OnDemandProbeEvery, p.opts.CircuitOpenFor)
	}
}

// TestConfigDefaults: an upstream without protocol or transport speaks
// Responses over HTTP; set ones are kept.
func TestConfigDefaults(t *testing.T) {
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"},
		{Name: "b", BaseURL: "http://127.0.0.1:2/v1", Protocol: ProtocolChat, Transport: TransportWebSocket}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Get("a").Config(); c.Protocol != ProtocolResponses || c.Transport != TransportHTTP {
		t.Errorf("defaults: protocol %q transport %q", c.Protocol, c.Transport)
	}
	if c := p.Get("b").Config(); c.Protocol != ProtocolChat || c.Transport != TransportWebSocket {
		t.Errorf("set: protocol %q transport %q", c.Protocol, c.Transport)
	}
}

// TestPickDividesLoadByWeight: an upstream of weight 3 with two requests in
// flight is less loaded than one of weight 1 with one.
func TestPickDividesLoadByWeight(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := newTestPool(t, c, Config{Name: "heavy", BaseURL: "http://127.0.0.1:1/v1", Weight: 3}, Config{Name: "light", BaseURL: "http://127.0.0.1:2/v1"})
	for _, u := range p.Upstreams() {
		u.mu.Lock()
		u.state = StateHealthy
		u.mu.Unlock()
	}
	p.Get("heavy").Acquire()
	p.Get("heavy").Acquire()
	p.Get("light").Acquire()
	for range 4 { // the weighted round-robin among equals never overrides a lower load
		if u, err := p.Pick(nil); err != nil || u.Name() != "heavy" {
			t.Fatalf("picked %v (%v), want heavy (2/3 < 1/1)", u, err)
		}
	}
}

// TestZeroCooldownIsNothing: a cooldown of zero neither cools nor logs.
func TestZeroCooldownIsNothing(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	log, buf := gapsLogger()
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Now: c.now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	p.Cooldown(p.Get("a"), 0, "nothing")
	if strings.Contains(buf.String(), "cooling down") {
		t.Fatalf("a zero cooldown was logged:\n%s", buf.String())
	}
}

// TestStateChangesLoggedOnceAtTheirLevel: a probe logs a state change once
// (not again while the state holds), as a warning when the upstream goes
// down and as info when it comes back.
func TestStateChangesLoggedOnceAtTheirLevel(t *testing.T) {
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"id":"m"}]}`))
	}))
	defer srv.Close()
	log, buf := gapsLogger()
	p, err := NewPool([]Config{{Name: "a", BaseURL: srv.URL}}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.Probe(ctx, p.Get("a"))
	up.Store(true)
	for range 3 {
		p.Probe(ctx, p.Get("a"))
	}
	var changes []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "upstream state changed") {
			changes = append(changes, l)
		}
	}
	if len(changes) != 2 || !strings.Contains(changes[0], "[WARN]") || !strings.Contains(changes[0], "to=down") ||
		!strings.Contains(changes[1], "[INFO]") || !strings.Contains(changes[1], "to=healthy") {
		t.Fatalf("state change lines:\n%s", strings.Join(changes, "\n"))
	}
}

// TestOnDemandProbeAtExactlyTheInterval: a down upstream is probed on
// demand again once OnDemandProbeEvery has passed, the boundary included.
func TestOnDemandProbeAtExactlyTheInterval(t *testing.T) {
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probes.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	c := &clock{t: time.Unix(1000, 0)}
	p, err := NewPool([]Config{{Name: "a", BaseURL: srv.URL}}, Options{Now: c.now, OnDemandProbeEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.ProbeAll(ctx) // down
	if !p.ProbeDown(ctx, p.Upstreams()) {
		t.Fatal("no first on-demand probe")
	}
	c.t = c.t.Add(time.Second)
	probes.Store(0)
	if !p.ProbeDown(ctx, p.Upstreams()) || probes.Load() != 1 {
		t.Fatalf("no on-demand probe exactly OnDemandProbeEvery later (%d probes)", probes.Load())
	}
}

// TestHintCountsTowardsTheBackoffStreak: a failure with a Retry-After hint
// still lengthens the next failure's backoff.
func TestHintCountsTowardsTheBackoffStreak(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, m1, _ := newCircuitPool(t, c)
	p.TargetFailed(m1, Failure{Class: "rate_limited", Reason: "HTTP 429", Hint: time.Second})
	c.t = c.t.Add(2 * time.Second)
	got, _ := p.TargetFailed(m1, Failure{Class: "rate_limited", Reason: "HTTP 429", Backoff: time.Second})
	if got != 2*time.Second {
		t.Fatalf("backoff after a hinted failure %s, want 2s (base·2^1)", got)
	}
}

// TestBackoffJitterRange: the backoff's jitter spans 0.8–1.2 of the delay.
func TestBackoffJitterRange(t *testing.T) {
	for _, tt := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 800 * time.Millisecond}, {1, 1200 * time.Millisecond}} {
		p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Jitter: func() float64 { return tt.jitter }})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.backoff(time.Second, 0); got != tt.want {
			t.Errorf("jitter %v: backoff %s, want %s", tt.jitter, got, tt.want)
		}
	}
}

// TestTargetFailureLogs: a failure that cools its target down is logged
// with the cooldown; one that does not (no hint, no backoff) is not.
func TestTargetFailureLogs(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	log, buf := gapsLogger()
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}},
		Options{Now: c.now, Logger: log, CircuitFailures: 10, Jitter: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	m := Target{Upstream: p.Get("a"), Model: "m"}
	p.TargetFailed(m, Failure{Class: "server_error", Reason: "HTTP 500"})
	if strings.Contains(buf.String(), "target cooling down") {
		t.Fatalf("a failure without cooldown was logged as one:\n%s", buf.String())
	}
	p.TargetFailed(m, Failure{Class: "rate_limited", Reason: "HTTP 429", Backoff: time.Second})
	if !strings.Contains(buf.String(), "target cooling down") {
		t.Fatalf("a cooldown was not logged:\n%s", buf.String())
	}
}

// TestTargetStatusOpenForOnlyWhenOpen: /admin/upstreams shows open_for for
// an open circuit only.
func TestTargetStatusOpenForOnlyWhenOpen(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, m1, m2 := newCircuitPool(t, c)
	p.RegisterTarget(m2)
	for range 3 {
		p.TargetFailed(m1, Failure{Class: "server_error", Reason: "HTTP 500"})
	}
	for _, st := range p.TargetStatuses() {
		open := st.Model == m1.Model
		if (st.OpenFor != "") != open || (st.Circuit == "open") != open {
			t.Errorf("%s: circuit %s open_for %q", st.Model, st.Circuit, st.OpenFor)
		}
	}
}

// TestSharedOptionDefaults: the shared health's refresh (at most 1s) and
// timeout take their defaults when unset or out of range, and set ones are
// kept.
func TestSharedOptionDefaults(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	for _, tt := range []struct {
		refresh, timeout         time.Duration
		wantRefresh, wantTimeout time.Duration
	}{
		{0, 0, DefaultSharedRefresh, DefaultSharedTimeout},
		{2 * time.Second, -time.Millisecond, DefaultSharedRefresh, DefaultSharedTimeout},
		{time.Second, time.Millisecond, time.Second, time.Millisecond},
		{300 * time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond, 50 * time.Millisecond},
	} {
		p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}},
			Options{Now: c.now, Shared: newMemHealth(c), SharedRefresh: tt.refresh, SharedTimeout: tt.timeout})
		if err != nil {
			t.Fatal(err)
		}
		if p.shared.refresh != tt.wantRefresh || p.shared.timeout != tt.wantTimeout {
			t.Errorf("refresh %s timeout %s became %s and %s, want %s and %s", tt.refresh, tt.timeout,
				p.shared.refresh, p.shared.timeout, tt.wantRefresh, tt.wantTimeout)
		}
	}
}

// TestSharedTableBound: the table of shared target states holds at most
// maxSharedEntries targets (clients choose model names), then starts over.
func TestSharedTableBound(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Now: c.now, Shared: newMemHealth(c)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxSharedEntries {
		p.shared.skip(sharedKey{"a", "m" + strconv.Itoa(i)}, c.now())
	}
	if n := len(p.shared.m); n != maxSharedEntries {
		t.Fatalf("%d entries after %d targets", n, maxSharedEntries)
	}
	p.shared.skip(sharedKey{"a", "one-more"}, c.now())
	if n := len(p.shared.m); n != 1 {
		t.Fatalf("%d entries after one more than the bound, want the table started over", n)
	}
}

// gapsDownHealth is a shared store that refuses every call.
type gapsDownHealth struct{}

func (gapsDownHealth) PutTargetHealth(context.Context, string, string, time.Duration, string) error {
	return errors.New("store down")
}

func (gapsDownHealth) GetTargetHealth(context.Context, string, string) (time.Duration, string, error) {
	return 0, "", errors.New("store down")
}

func (gapsDownHealth) ClearTargetHealth(context.Context, string, string) error {
	return errors.New("store down")
}

// TestSharedWriteFailuresLogged: a cooldown or a clear the shared store
// refuses is logged as a warning; one it takes is not.
func TestSharedWriteFailuresLogged(t *testing.T) {
	for _, failing := range []bool{false, true} {
		c := &clock{t: time.Unix(1000, 0)}
		var h SharedHealth = newMemHealth(c)
		if failing {
			h = gapsDownHealth{}
		}
		log, buf := gapsLogger()
		p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Now: c.now, Shared: h, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		k := sharedKey{"a", "m"}
		p.shared.publish(k, c.now(), time.Second, sharedRecord{reason: "test"})
		p.shared.clear(k, c.now())
		for _, what := range []string{"sharing a target's cooldown", "clearing a target's shared cooldown"} {
			if logged := strings.Contains(buf.String(), what); logged != failing {
				t.Errorf("store failing %v: %q logged %v:\n%s", failing, what, logged, buf.String())
			}
		}
	}
}

// TestSharedClearEndsTheLocalSkip: a clear (the circuit closed here) ends
// this replica's cached skip at once, and clearing a target never seen is
// harmless.
func TestSharedClearEndsTheLocalSkip(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Now: c.now, Shared: newMemHealth(c)})
	if err != nil {
		t.Fatal(err)
	}
	k := sharedKey{"a", "m"}
	p.shared.publish(k, c.now(), time.Minute, sharedRecord{reason: "test"})
	if skip, _ := p.shared.skip(k, c.now()); !skip {
		t.Fatal("a published cooldown is not skipped")
	}
	p.shared.clear(k, c.now())
	if skip, why := p.shared.skip(k, c.now()); skip {
		t.Fatalf("still skipped after clear: %s", why)
	}
	p.shared.clear(sharedKey{"a", "never-seen"}, c.now())
}
