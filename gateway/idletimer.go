package gateway

import (
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
)

// idleTimer calls fn once the upstream has been silent for d. Reads only
// record the time (touch, or resume and pause around a wait: idleEvents
// around the wait for a stream's next event, idleReader around a read of
// a non-streaming body, so that the pump's writes to a slow client in
// between do not count): re-arming a runtime timer on every upstream read
// took a lock and a heap update per event, a visible share of a stream's CPU
// at 1,000 streams (docs/ARCHITECTURE.md §11). Instead the timer, when it
// fires, re-arms itself for what is left of d since the last touch, so fn
// runs d after the last touch, as a timer reset on every read would.
//
// A route's stall bound is one too, counting only while the pump waits for
// the upstream: resume when the wait begins, pause when an event arrives.
// Time spent writing to a slow client is not the upstream's silence.
type idleTimer struct {
	d       time.Duration
	fn      func()
	base    time.Time    // touches are stored as time since base (monotonic)
	last    atomic.Int64 // time since base of the last touch
	stopped atomic.Bool
	paused  atomic.Bool // the count is held: fire only re-arms
	started bool        // resume has armed the runtime timer (the pump's goroutine only)
	t       *time.Timer
}

func newIdleTimer(d time.Duration, fn func()) *idleTimer {
	t := &idleTimer{d: d, fn: fn, base: time.Now()}
	// Made stopped, before anything can fire it: fire reads t.t.
	t.t = time.AfterFunc(time.Hour, t.fire)
	t.t.Stop()
	return t
}

// arm starts the count from now. It is called from the attempt's goroutine,
// before the reads that touch.
func (t *idleTimer) arm() {
	t.stopped.Store(false)
	t.touch()
	t.t.Reset(t.d)
}

// touch records life: the count starts again from now.
func (t *idleTimer) touch() { t.last.Store(int64(time.Since(t.base))) }

// resume starts the count from now after a pause (or for the first time).
// It and pause are called from one goroutine, the pump's: per event they
// store a time and a flag, and never touch the runtime timer after the first
// resume.
func (t *idleTimer) resume() {
	t.touch()
	t.paused.Store(false)
	if !t.started {
		t.started = true
		t.t.Reset(t.d)
	}
}

// pause holds the count until the next resume.
func (t *idleTimer) pause() { t.paused.Store(true) }

// stop disarms the timer; a firing that sees it stopped does nothing (one
// already past its check may still call fn, which cancels an attempt that
// is ending anyway).
func (t *idleTimer) stop() {
	t.stopped.Store(true)
	t.t.Stop()
}

func (t *idleTimer) fire() {
	if t.stopped.Load() {
		return
	}
	if t.paused.Load() {
		t.t.Reset(t.d) // look again later; resume restarts the count anyway
		return
	}
	if rest := t.d - (time.Since(t.base) - time.Duration(t.last.Load())); rest > 0 {
		t.t.Reset(rest)
		return
	}
	if !t.stopped.Load() {
		t.fn()
	}
}

// idleEvents bounds an event stream's silence by timeouts.idle counted from
// its last complete event, not its last byte: the count runs only while
// Next waits for the upstream, so keepalive comments and a partial event
// trickling in do not restart it (README "Failover and replay": headers
// and then no event within timeouts.idle is a silent upstream), and time
// the pump spends between events, writing to a slow client, is not the
// upstream's silence. Per event it stores a time and a flag (resume,
// pause), never touching the runtime timer (docs/ARCHITECTURE.md §11).
type idleEvents struct {
	src  eventSource
	idle *idleTimer
}

func (e idleEvents) Next() (sse.Event, error) {
	e.idle.resume()
	ev, err := e.src.Next()
	e.idle.pause()
	return ev, err
}
