package gateway

import (
	"context"
	"testing"
	"time"
)

// TestSocketWaiterCountsTheHolder: a request that waits for an upstream
// WebSocket another request holds is told one request is pending on that
// connection (the holder), which is what keeps the replay policy from
// retrying it as if the connection were its own.
func TestSocketWaiterCountsTheHolder(t *testing.T) {
	w := newWSUpstreams(nil, 4, time.Hour)
	defer w.close()
	ctx := context.Background()
	first, pending, err := w.acquire(ctx, "A\x00key\x00k1", nil)
	if err != nil || pending != 0 {
		t.Fatalf("first acquire: pending %d, err %v; want 0 and no error", pending, err)
	}
	type got struct {
		sock    *upstreamSocket
		pending int
		err     error
	}
	second := make(chan got, 1)
	go func() {
		s, p, err := w.acquire(ctx, "A\x00key\x00k1", nil)
		second <- got{s, p, err}
	}()
	for {
		w.mu.Lock()
		waiting := first.waiting
		w.mu.Unlock()
		if waiting == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.release(first, true)
	g := <-second
	if g.err != nil || g.pending != 1 {
		t.Fatalf("second acquire: pending %d, err %v; want 1 (the holder) and no error", g.pending, g.err)
	}
	w.release(g.sock, true)
}
