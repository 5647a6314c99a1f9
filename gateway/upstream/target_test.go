package upstream

import (
	"testing"
	"time"
)

func newCircuitPool(t *testing.T, c *clock) (*Pool, Target, Target) {
	t.Helper()
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}},
		Options{Now: c.now, CircuitFailures: 3, CircuitOpenFor: 10 * time.Second, Jitter: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	u := p.Get("a")
	return p, Target{Upstream: u, Model: "m1"}, Target{Upstream: u, Model: "m2"}
}

func circuitOf(p *Pool, t Target) string {
	for _, ts := range p.TargetStatuses() {
		if ts.Upstream == t.Upstream.Name() && ts.Model == t.Model {
			return ts.Circuit
		}
	}
	return "unknown"
}

func TestTargetCircuit(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, m1, m2 := newCircuitPool(t, c)
	fail := Failure{Class: "overloaded", Reason: "HTTP 503"}

	for i := 1; i <= 3; i++ {
		if _, ok, why := p.BeginTarget(m1); !ok {
			t.Fatalf("attempt %d refused: %s", i, why)
		}
		_, opened := p.TargetFailed(m1, fail)
		if opened != (i == 3) {
			t.Fatalf("failure %d: opened=%v", i, opened)
		}
	}
	if ok, _ := p.TargetUsable(m1); ok || circuitOf(p, m1) != "open" {
		t.Fatalf("after 3 failures: usable=%v circuit %s", ok, circuitOf(p, m1))
	}
	// The other model of the same upstream is unaffected.
	if ok, why := p.TargetUsable(m2); !ok {
		t.Fatalf("m2 unusable: %s", why)
	}

	// After the open period: half-open, exactly one probe.
	c.t = c.t.Add(10 * time.Second)
	if circuitOf(p, m1) != "half_open" {
		t.Fatalf("circuit %s, want half_open", circuitOf(p, m1))
	}
	probe, ok, _ := p.BeginTarget(m1)
	if !ok || !probe {
		t.Fatalf("probe: ok=%v probe=%v", ok, probe)
	}
	if _, ok, why := p.BeginTarget(m1); ok {
		t.Fatal("a second request got through while the probe is in flight")
	} else if why == "" {
		t.Fatal("no reason given")
	}
	// A probe that fails opens the circuit again at once.
	if _, opened := p.TargetFailed(m1, fail); !opened || circuitOf(p, m1) != "open" {
		t.Fatalf("failed probe: opened=%v circuit %s", opened, circuitOf(p, m1))
	}
	// A released probe (no verdict) lets the next request probe.
	c.t = c.t.Add(10 * time.Second)
	if probe, ok, _ := p.BeginTarget(m1); !ok || !probe {
		t.Fatal("no probe after the second open period")
	}
	p.TargetReleased(m1)
	probe, ok, _ = p.BeginTarget(m1)
	if !ok || !probe {
		t.Fatal("a released probe was not given back")
	}
	// Success closes it.
	p.TargetSucceeded(m1)
	if circuitOf(p, m1) != "closed" {
		t.Fatalf("after success: %s", circuitOf(p, m1))
	}
	if probe, ok, _ := p.BeginTarget(m1); !ok || probe {
		t.Fatalf("closed circuit: ok=%v probe=%v", ok, probe)
	}
}

func TestTargetCooldownBackoffAndHints(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, m1, m2 := newCircuitPool(t, c)
	// Jitter 0.5 is the middle of ±20%: exactly base·2^n.
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second} {
		d, _ := p.TargetFailed(m1, Failure{Class: "rate_limited", Backoff: RateLimitBackoff})
		if d != want {
			t.Fatalf("backoff %d = %v, want %v", i, d, want)
		}
	}
	if ok, _ := p.TargetUsable(m1); ok {
		t.Fatal("a cooling target is usable")
	}
	// A hint is honoured as it is (clamped), whatever the streak.
	if d, _ := p.TargetFailed(m2, Failure{Class: "rate_limited", Hint: 30 * time.Second, Backoff: RateLimitBackoff}); d != 30*time.Second {
		t.Fatalf("hinted cooldown %v", d)
	}
	if d, _ := p.TargetFailed(m2, Failure{Class: "quota", Hint: time.Hour}); d != MaxCooldown {
		t.Fatalf("clamped cooldown %v", d)
	}
	// Success resets the streak.
	p.TargetSucceeded(m1)
	if d, _ := p.TargetFailed(m1, Failure{Class: "rate_limited", Backoff: RateLimitBackoff}); d != 5*time.Second {
		t.Fatalf("backoff after success %v", d)
	}
	// Connect failures stay on the upstream: Cooldown makes every target of
	// it unusable.
	p.Cooldown(m2.Upstream, time.Minute, "connect")
	if ok, _ := p.TargetUsable(Target{Upstream: m2.Upstream, Model: "m3"}); ok {
		t.Fatal("a target of a cooling upstream is usable")
	}
}

func TestTargetStateIsBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Now: c.now, MaxTargets: 4})
	if err != nil {
		t.Fatal(err)
	}
	u := p.Get("a")
	p.RegisterTarget(Target{Upstream: u, Model: "configured"})
	for i := range 10 {
		tg := Target{Upstream: u, Model: string(rune('a' + i))}
		p.TargetFailed(tg, Failure{Class: "timeout"})
		p.TargetSucceeded(tg) // clean again: evictable
	}
	st := p.TargetStatuses()
	if len(st) > 4 {
		t.Fatalf("%d targets kept, want at most 4", len(st))
	}
	found := false
	for _, ts := range st {
		found = found || (ts.Model == "configured" && ts.Configured)
	}
	if !found {
		t.Fatal("a configured target was evicted")
	}
}

func TestAcceptsPrefill(t *testing.T) {
	no := false
	if !(Config{}).AcceptsPrefill() || (Config{Prefill: &no}).AcceptsPrefill() {
		t.Fatal("prefill defaults to true and false turns it off")
	}
}
