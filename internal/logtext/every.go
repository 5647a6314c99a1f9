package logtext

import (
	"sync/atomic"
	"time"
)

// Every lets a log line that can repeat per request (a store outage, a
// full pool, a connection limit) through at most once per Interval, and
// counts the occurrences in between, so an outage is a line every few
// seconds with a count, not one per request. The zero value with an
// Interval set is ready; it is safe for concurrent use.
type Every struct {
	Interval time.Duration
	last     atomic.Int64 // unix ns of the last line let through
	held     atomic.Int64 // occurrences since then
}

// Allow records one occurrence at now. ok says to write the line now; n is
// how many occurrences it stands for, this one included.
func (e *Every) Allow(now time.Time) (n int64, ok bool) {
	n = e.held.Add(1)
	last := e.last.Load()
	if last != 0 && now.UnixNano()-last < int64(e.Interval) || !e.last.CompareAndSwap(last, now.UnixNano()) {
		return 0, false
	}
	e.held.Add(-n)
	return n, true
}
