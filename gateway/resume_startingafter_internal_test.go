package gateway

import (
	"math"
	"testing"
)

// The starting_after a resume takes (SSE and WebSocket alike), and the
// number a follow counts from, which never overflows.
func TestStartingAfterRule(t *testing.T) {
	for _, tc := range []struct {
		after int64
		valid bool
		next  int64
	}{
		{after: math.MinInt64, valid: false, next: 0},
		{after: -2, valid: false, next: 0},
		{after: -1, valid: true, next: 0},
		{after: 0, valid: true, next: 1},
		{after: maxStartingAfter, valid: true, next: maxStartingAfter + 1},
		{after: maxStartingAfter + 1, valid: false, next: maxStartingAfter + 2},
		{after: math.MaxInt64, valid: false, next: math.MaxInt64},
	} {
		if got := validStartingAfter(tc.after); got != tc.valid {
			t.Errorf("validStartingAfter(%d) = %v, want %v", tc.after, got, tc.valid)
		}
		if got := nextAfter(tc.after); got != tc.next {
			t.Errorf("nextAfter(%d) = %d, want %d", tc.after, got, tc.next)
		}
	}
}
