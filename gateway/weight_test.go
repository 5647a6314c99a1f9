package gateway_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Sequential requests, none overlapping another, are shared between two
// upstreams of weights 3 and 1 as 15 and 5 out of 20 (README: `weight`):
// with nothing in flight every upstream is equally loaded, and the weights
// still decide.
func TestWeightSharesSequentialRequests(t *testing.T) {
	heavy := upstreamtest.NewServer(upstreamtest.Options{Name: "heavy"})
	t.Cleanup(heavy.Close)
	light := upstreamtest.NewServer(upstreamtest.Options{Name: "light"})
	t.Cleanup(light.Close)
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	pool, err := upstream.NewPool([]upstream.Config{
		{Name: "heavy", BaseURL: heavy.URL, Weight: 3},
		{Name: "light", BaseURL: light.URL, Weight: 1},
	}, upstream.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	pool.ProbeAll(context.Background())
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: serveGateway(t, gw), logs: logs}

	const n = 20
	for i := range n {
		resp := h.post("/v1/responses", `{"model":"gpt-5","input":"x"}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		// The next request starts once this one has released its upstream
		// (its access line is written after), so it is truly sequential.
		waitAccessLines(t, h, i+1)
	}
	if got, want := [2]int{heavy.RequestCount(), light.RequestCount()}, [2]int{15, 5}; got != want {
		t.Fatalf("20 sequential requests to weights 3 and 1: heavy %d, light %d; want %d and %d", got[0], got[1], want[0], want[1])
	}
}
