package gateway_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
)

// TestServeAfterShutdownReturns: a gateway shut down before Serve ran (a
// signal during start-up) does not start serving afterwards: Serve returns
// at once and the listener is closed, instead of answering 503 forever.
func TestServeAfterShutdownReturns(t *testing.T) {
	// The upstream is never asked: nothing is served.
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: "http://127.0.0.1:1/v1"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ln) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after Shutdown: %v", err)
		}
	case <-ctx.Done():
		_ = ln.Close()
		<-done
		t.Fatal("Serve kept serving after Shutdown")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after Serve returned")
	}
}
