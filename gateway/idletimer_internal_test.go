package gateway

import (
	"testing"
	"time"
)

// TestIdleTimerFiresAfterTheLastTouch: touches inside the window push the
// call back; it comes d after the last touch, once; stop prevents it.
func TestIdleTimerFiresAfterTheLastTouch(t *testing.T) {
	withRoomFor(t, func(d time.Duration) (overran bool) {
		fired := make(chan time.Time, 4)
		it := newIdleTimer(d, func() { fired <- time.Now() })
		defer it.stop()
		// Taken before each touch, so that a firing d after the touch is
		// never less than d after it.
		last := time.Now()
		it.arm()
		for range 5 { // 5 × 2d/5: well past d in total
			time.Sleep(d * 2 / 5)
			select {
			case at := <-fired:
				if gap := at.Sub(last); gap < d {
					t.Fatalf("fired %v after a touch, inside the %v window", gap, d)
				}
				return true
			default:
			}
			if time.Since(last) >= d {
				return true
			}
			last = time.Now()
			it.touch()
		}
		firesOnceAfter(t, fired, last, d, "the last touch")

		armed := time.Now()
		it.arm()
		it.stop()
		if time.Since(armed) >= d {
			return true // it may have fired before stop
		}
		select {
		case <-fired:
			t.Fatal("fired after stop")
		case <-time.After(2 * d):
		}
		return false
	})
}

// TestIdleTimerCountsOnlyWhileResumed: the stall bound's use. A pause
// longer than d (the pump writing to a slow client) does not fire it; after
// resume it fires d later, once.
func TestIdleTimerCountsOnlyWhileResumed(t *testing.T) {
	withRoomFor(t, func(d time.Duration) (overran bool) {
		fired := make(chan time.Time, 4)
		it := newIdleTimer(d, func() { fired <- time.Now() })
		defer it.stop()
		select {
		case <-fired:
			t.Fatal("fired before the first resume")
		case <-time.After(2 * d):
		}
		for range 3 { // waits shorter than d, each followed by a pause of 2d
			resumed := time.Now()
			it.resume()
			time.Sleep(d / 3)
			it.pause()
			if time.Since(resumed) >= d {
				return true // the count ran a whole d: firing is right
			}
			select {
			case at := <-fired:
				t.Fatalf("fired %v into a pause", time.Since(at))
			case <-time.After(2 * d):
			}
		}
		resumed := time.Now()
		it.resume()
		firesOnceAfter(t, fired, resumed, d, "resume")
		return false
	})
}

// withRoomFor runs attempt with a window d until an attempt reports that
// none of its sleeps overran the window it was meant to end inside. The
// windows are real time: on a loaded machine (the race detector on CI's two
// cores) a sleep of a fraction of d can last longer than d, and then a
// firing is right, so the attempt proves nothing either way. Each retry
// doubles d.
func withRoomFor(t *testing.T, attempt func(d time.Duration) (overran bool)) {
	t.Helper()
	d := 150 * time.Millisecond
	for range 5 {
		if !attempt(d) {
			return
		}
		t.Logf("a wait meant to end inside the %v window overran it: again with %v", d, 2*d)
		d *= 2
	}
	t.Fatalf("every attempt overran its window, the last %v: the machine is too busy to judge the timer", d/2)
}

// firesOnceAfter waits for the timer's call: not before d has passed since
// from (taken before the last touch or resume, named by what), and only
// once. The bound on the wait only ends a test whose timer never fires, so
// it is generous: a loaded machine can run the timer's goroutine late.
func firesOnceAfter(t *testing.T, fired <-chan time.Time, from time.Time, d time.Duration, what string) {
	t.Helper()
	select {
	case at := <-fired:
		if gap := at.Sub(from); gap < d {
			t.Fatalf("fired %v after %s, before %v", gap, what, d)
		}
	case <-time.After(max(10*d, 10*time.Second)):
		t.Fatalf("never fired after %s", what)
	}
	select {
	case <-fired:
		t.Fatal("fired twice")
	case <-time.After(2 * d):
	}
}
