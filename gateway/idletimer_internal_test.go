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
	select {
	case at := <-fired:
		if gap := at.Sub(last); gap < d {
			t.Fatalf("fired %v after the last touch, before %v", gap, d)
		}
	case <-time.After(10 * d):
		t.Fatal("never fired after the touches stopped")
	}
	select {
	case <-fired:
		t.Fatal("fired twice")
	case <-time.After(2 * d):
	}

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
	resumed := time.Now()
	select {
	case at := <-fired:
		if gap := at.Sub(resumed); gap < d {
			t.Fatalf("fired %v after resume, before %v", gap, d)
		}
	case <-time.After(10 * d):
		t.Fatal("never fired after resume")
	}
	select {
	case <-fired:
		t.Fatal("fired twice")
	case <-time.After(2 * d):
	}
}
