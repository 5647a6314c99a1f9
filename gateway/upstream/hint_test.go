package upstream

import (
	"net/http"
	"testing"
	"time"
)

// A hint of zero ("retry now": Retry-After: 0, retry-after-ms: 0, an
// HTTP-date already past) is a hint, which the replay policy sees as the
// shortest wait it honours (1 ms) and the target's cooldown is none of;
// no hint at all gets the default backoff.
func TestFailureHint(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		header   http.Header
		message  string
		hinted   bool
		millis   int64
		cooldown time.Duration // -1: the default backoff
	}{
		{"none", nil, "", false, 0, -1},
		{"Retry-After: 0", http.Header{"Retry-After": {"0"}}, "", true, 1, 0},
		{"retry-after-ms: 0", http.Header{"Retry-After-Ms": {"0"}}, "", true, 1, 0},
		{"past HTTP-date", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, "", true, 1, 0},
		{"retry-after-ms: 0.4 (rounded up)", http.Header{"Retry-After-Ms": {"0.4"}}, "", true, 1, 400 * time.Microsecond},
		{"Retry-After: 0.5", http.Header{"Retry-After": {"0.5"}}, "", true, 500, 500 * time.Millisecond},
		{"try again in 2s", nil, "Please try again in 2s.", true, 2000, 2 * time.Second},
		{"unreadable", http.Header{"Retry-After": {"soon"}}, "", false, 0, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := Failure{Class: "rate_limited", Backoff: RateLimitBackoff}
			f.TakeHint(tt.header, tt.message, now)
			if f.HasHint() != tt.hinted || f.HintMillis() != tt.millis {
				t.Fatalf("HasHint %v, HintMillis %d; want %v, %d", f.HasHint(), f.HintMillis(), tt.hinted, tt.millis)
			}
			p, m1, _ := newCircuitPool(t, &clock{t: now})
			want := tt.cooldown
			if want < 0 {
				want = RateLimitBackoff // the jitter's middle: the base itself
			}
			if got, _ := p.TargetFailed(m1, f); got != want {
				t.Fatalf("cooldown %s, want %s", got, want)
			}
		})
	}
}
