package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A client that leaves a stream while its upstream goes on streaming: the
// stream runs on detached for streams.detach_grace (README "The stream goes
// on without its client"), but its client's connection is gone, so it holds
// no limits.max_connections slot (SECURITY.md) and the connections gauge
// does not count it. These tests go over real loopback TCP: the clients
// send their request, read until the first text delta and close.

// steadyStream is an upstream answer whose events keep coming, gap apart,
// for longer than any test waits.
func steadyStream(gap time.Duration) upstreamtest.Script {
	s := upstreamtest.Answer(strings.Repeat("word ", 400), 400)
	s.Gap = gap
	return s
}

// readToFirstDelta reads a raw client's stream until its first text delta.
func readToFirstDelta(t *testing.T, c io.Reader) {
	t.Helper()
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no text delta: %v", err)
		}
		if strings.Contains(line, "response.output_text.delta") {
			return
		}
	}
}

// freshGet GETs path on a connection of its own, closed after the answer
// (no idle keep-alive connection left to count), within timeout.
func freshGet(t *testing.T, h *harness, path string, timeout time.Duration) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(h.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// gaugeValue reads a metric without labels from a /metrics page; -1 when absent.
func gaugeValue(page, name string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}

// waitConnections waits until the gateway counts only the scrape's own
// connection open; the bound (well under the detach grace) only ends a
// broken run. It returns the last page scraped.
func waitConnections(t *testing.T, h *harness) string {
	t.Helper()
	var page string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, page = freshGet(t, h, "/metrics", 5*time.Second)
		if gaugeValue(page, "sluice_client_connections") == 1 {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connections of clients that left are still counted:\n%s", grepLines(page, "sluice_client_connections"))
		}
	}
}

// Clients that fill max_connections with streams and leave do not keep
// the next client (a load balancer's /healthz probe) waiting in the accept
// queue for the detach grace: their connections are closed once the
// gateway notices they left, while their streams run on detached. A
// WebSocket client that drops its socket is no different.
func TestDetachedStreamsGiveBackTheirConnections(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, h *harness) // opens a stream, reads its first text delta and drops the connection
	}{
		{name: "SSE", leave: func(t *testing.T, h *harness) {
			c := sendRaw(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			readToFirstDelta(t, c)
			_ = c.Close()
		}},
		{name: "WebSocket", leave: func(t *testing.T, h *harness) {
			c := h.dialWS(nil)
			c.send(`{"type":"response.create","model":"m","input":"hi"}`)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for {
				_, data, err := c.conn.Read(ctx)
				if err != nil {
					t.Fatalf("no text delta: %v", err)
				}
				if strings.Contains(string(data), "response.output_text.delta") {
					break
				}
			}
			c.conn.CloseNow() // no close frame: the socket just goes
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
			t.Cleanup(a.Close)
			h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a},
				opts: gateway.Options{MaxConnections: n, LifecycleHold: -1, DrainGrace: 100 * time.Millisecond,
					Resume: gateway.ResumeOptions{DetachGrace: time.Hour}}})
			for range n {
				a.Enqueue(steadyStream(50 * time.Millisecond))
			}
			for range n {
				tc.leave(t, h)
			}

			// Every slot was taken by a client that left: without them
			// given back, this waits for the detach grace (an hour), far
			// past the timeout.
			if status, body := freshGet(t, h, "/healthz", 10*time.Second); status != http.StatusOK {
				t.Fatalf("/healthz: %d %s", status, body)
			}
			page := waitConnections(t, h)
			// The streams go on without their clients, and are still counted
			// as served (the gauge's HELP: detached ones included).
			if got := gaugeValue(page, "sluice_active_streams"); got != n {
				t.Errorf("sluice_active_streams = %v, want %d detached streams still served", got, n)
			}
			if got := a.RequestCount(); got != n {
				t.Errorf("the upstream got %d requests, want %d", got, n)
			}
		})
	}
}

// The probes the gateway writes to a client that closed its connection are
// no keepalives: sluice_keepalives_total counts those written while the
// upstream was silent, and this one never was.
func TestClientProbeIsNoKeepalive(t *testing.T) {
	a := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(a.Close)
	for _, detach := range []time.Duration{0, time.Hour} {
		name := "cancelled at once"
		if detach > 0 {
			name = "detached"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a},
				opts: gateway.Options{LifecycleHold: -1, DrainGrace: 100 * time.Millisecond, KeepAlive: time.Hour,
					Resume: gateway.ResumeOptions{DetachGrace: detach}}})
			// Events a little apart, so that the probe that follows the
			// client's close is written before the next event finds it gone.
			a.Enqueue(steadyStream(300 * time.Millisecond))
			c := sendRaw(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			readToFirstDelta(t, c)
			_ = c.Close()

			page := waitConnections(t, h) // the gateway noticed the client left
			if lines := grepLines(page, "sluice_keepalives_total"); lines != "" {
				t.Errorf("keepalives counted for a stream whose upstream was never silent:\n%s", lines)
			}
		})
	}
}
