package upstream

import (
	"testing"
	"time"
)

// Tests that pin behaviour sampled mutation testing found unchecked.

// TestTargetTableFullOfFailures: a new target evicts a clean entry and is
// kept; when every entry is failing, it is not kept and the table does not
// grow.
func TestTargetTableFullOfFailures(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}}, Options{Now: c.now, MaxTargets: 2})
	if err != nil {
		t.Fatal(err)
	}
	u := p.Get("a")
	tg := func(m string) Target { return Target{Upstream: u, Model: m} }
	failures := func() map[string]int {
		m := map[string]int{}
		for _, ts := range p.TargetStatuses() {
			m[ts.Model] = ts.Failures
		}
		return m
	}
	p.TargetFailed(tg("clean"), Failure{Class: "timeout"})
	p.TargetSucceeded(tg("clean"))
	p.TargetFailed(tg("b"), Failure{Class: "timeout"})
	p.TargetFailed(tg("c"), Failure{Class: "timeout"}) // evicts "clean"
	if got := failures(); len(got) != 2 || got["b"] != 1 || got["c"] != 1 {
		t.Fatalf("after evicting a clean target: %v", got)
	}
	p.TargetFailed(tg("d"), Failure{Class: "timeout"}) // b and c are failing: d is not kept
	if got := failures(); len(got) != 2 || got["b"] != 1 || got["c"] != 1 {
		t.Fatalf("a table full of failing targets: %v", got)
	}
}
