package gateway

import (
	"testing"
	"time"
)

// TestIdleTimerFiresAfterTheLastTouch: touches inside the window push the
// call back; it comes d after the last touch, once; stop prevents it.
func TestIdleTimerFiresAfterTheLastTouch(t *testing.T) {
	const d = 150 * time.Millisecond
	fired := make(chan time.Time, 4)
	it := newIdleTimer(d, func() { fired <- time.Now() })
	defer it.stop()
	it.arm()
	var last time.Time
	for range 5 { // 5 × 60 ms: well past d in total
		time.Sleep(60 * time.Millisecond)
		select {
		case at := <-fired:
			t.Fatalf("fired %v after a touch, inside the window", at.Sub(last))
		default:
		}
		it.touch()
		last = time.Now()
	}
	firesOnceAfter(t, fired, last, d, "the last touch")

	it.arm()
	it.stop()
	select {
	case <-fired:
		t.Fatal("fired after stop")
	case <-time.After(2 * d):
	}
}

// TestIdleTimerCountsOnlyWhileResumed: the stall bound's use. A pause
// longer than d (the pump writing to a slow client) does not fire it; after
// resume it fires d later, once.
func TestIdleTimerCountsOnlyWhileResumed(t *testing.T) {
	const d = 150 * time.Millisecond
	fired := make(chan time.Time, 4)
	it := newIdleTimer(d, func() { fired <- time.Now() })
	defer it.stop()
	select {
	case <-fired:
		t.Fatal("fired before the first resume")
	case <-time.After(2 * d):
	}
	for range 3 { // waits shorter than d, each followed by a pause of 2d
		it.resume()
		time.Sleep(d / 3)
		it.pause()
		select {
		case at := <-fired:
			t.Fatalf("fired %v into a pause", time.Since(at))
		case <-time.After(2 * d):
		}
	}
	it.resume()
	firesOnceAfter(t, fired, time.Now(), d, "resume")
}

// firesOnceAfter waits for the timer's call: not before d has passed since
// from (the last touch or resume, named by what), within 10d, and only once.
func firesOnceAfter(t *testing.T, fired <-chan time.Time, from time.Time, d time.Duration, what string) {
	t.Helper()
	select {
	case at := <-fired:
		if gap := at.Sub(from); gap < d {
			t.Fatalf("fired %v after %s, before %v", gap, what, d)
		}
	case <-time.After(10 * d):
		t.Fatalf("never fired after %s", what)
	}
	select {
	case <-fired:
		t.Fatal("fired twice")
	case <-time.After(2 * d):
	}
}
