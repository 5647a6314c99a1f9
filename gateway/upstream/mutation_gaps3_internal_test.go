package upstream

import (
	"strings"
	"testing"
	"time"
)

// TestSharedReasonOfAnOpeningFailure: when a failure opens a target's
// circuit, the other replicas are told "circuit open" only while the open
// period outlasts the failure's own cooldown; a cooldown at least as long
// (a Retry-After or quota wait that sets the open period) is shared under
// the failure's own reason.
func TestSharedReasonOfAnOpeningFailure(t *testing.T) {
	for _, tt := range []struct {
		hint time.Duration
		want string
	}{
		{5 * time.Second, "circuit open after 3 consecutive failures (last: rate_limited: HTTP 429)"},
		{10 * time.Second, "(target state shared by the replicas): rate_limited: HTTP 429"}, // CircuitOpenFor
		{time.Minute, "(target state shared by the replicas): rate_limited: HTTP 429"},
	} {
		c := &clock{t: time.Unix(1000, 0)}
		a, b, ta, tb := twoReplicas(t, c, newMemHealth(c))
		for range 2 {
			a.TargetFailed(ta, Failure{Class: "overloaded", Reason: "HTTP 503"})
		}
		if _, opened := a.TargetFailed(ta, Failure{Class: "rate_limited", Reason: "HTTP 429", Hint: tt.hint}); !opened {
			t.Fatalf("hint %s: the third failure did not open the circuit", tt.hint)
		}
		ok, why := b.TargetUsable(tb)
		if ok || !strings.Contains(why, tt.want) {
			t.Errorf("hint %s: the other replica sees usable=%v %q, want it skipped with %q", tt.hint, ok, why, tt.want)
		}
	}
}
