package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestRequestOneSecondAfterOnlyUpstreamCameUpSucceeds: the gateway starts
// with its only upstream's port closed (the first probe fails: down, logged
// at WARN); the upstream comes up a second later; a request then succeeds at
// once, probing the down upstream itself rather than failing until the next
// periodic probe (a minute away here).
func TestRequestOneSecondAfterOnlyUpstreamCameUpSucceeds(t *testing.T) {
	addr, pool, logs, logger := closedPortPool(t, time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); pool.Run(ctx) }()
	t.Cleanup(func() { stop(); <-runDone })
	deadline := time.Now().Add(5 * time.Second)
	for pool.Get("only").Status(time.Now()).State != upstream.StateDown {
		if time.Now().After(deadline) {
			t.Fatalf("the first probe did not mark the upstream down: %+v", pool.Get("only").Status(time.Now()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "[WARN]  upstream state changed") {
		t.Errorf("up→down not logged at WARN:\n%s", logs.String())
	}

	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	base := serveGateway(t, gw)

	time.Sleep(time.Second)
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "only"})
	uln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the reserved port %s was taken meanwhile: %v", addr, err)
	}
	hs := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(uln) }()
	t.Cleanup(func() { up.Close(); _ = hs.Close() })

	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses",
		strings.NewReader(`{"model":"gpt-fake-1","input":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request a second after the upstream came up: %d %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the request took %s", d)
	}
	if !strings.Contains(logs.String(), "[INFO]  upstream state changed") {
		t.Errorf("down→up not logged at INFO:\n%s", logs.String())
	}
}

// TestNoHealthyUpstreamNamesEachAndItsProbeError: the 503 says which
// upstreams were down and what their last probe said.
func TestNoHealthyUpstreamNamesEachAndItsProbeError(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	h.ups["A"].SetModelsStatus(http.StatusInternalServerError)
	h.ups["B"].SetModelsStatus(http.StatusBadGateway)
	h.pool.ProbeAll(context.Background())
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	defer resp.Body.Close()
	var e struct {
		Error struct{ Message, Code string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "upstream_unavailable" {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
	for _, want := range []string{"A: down: probe: HTTP 500", "B: down: probe: HTTP 502"} {
		if !strings.Contains(e.Error.Message, want) {
			t.Errorf("message %q lacks %q", e.Error.Message, want)
		}
	}
}

// closedPortPool is a pool of one upstream, "only", whose port was
// reserved and left closed (addr, for the test to listen on later), probed
// every interval once run, logging at DEBUG into logs.
func closedPortPool(t *testing.T, interval time.Duration) (addr string, pool *upstream.Pool, logs *syncBuffer, logger hclog.Logger) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // reserve a port, then leave it closed
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	logs = &syncBuffer{}
	logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	pool, err = upstream.NewPool([]upstream.Config{{Name: "only", BaseURL: "http://" + addr + "/v1"}},
		upstream.Options{ProbeInterval: interval, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return addr, pool, logs, logger
}
