package upstream

import (
	"testing"
	"time"
)

// TestZeroCircuitFailuresMeansThree: an unset (zero) CircuitFailures takes
// its default: a target's circuit opens at the third consecutive failure,
// not the first.
func TestZeroCircuitFailuresMeansThree(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p, err := NewPool([]Config{{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}},
		Options{Now: c.now, CircuitOpenFor: 10 * time.Second, Jitter: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	m := Target{Upstream: p.Get("a"), Model: "m"}
	for i := 1; i <= 3; i++ {
		if _, ok, why := p.BeginTarget(m); !ok {
			t.Fatalf("attempt %d refused: %s", i, why)
		}
		if _, opened := p.TargetFailed(m, Failure{Class: "overloaded", Reason: "HTTP 503"}); opened != (i == 3) {
			t.Fatalf("failure %d: circuit opened %v; want it to open at the third", i, opened)
		}
	}
}
