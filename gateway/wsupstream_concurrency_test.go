package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// wsFirstByteHarness is upstream A over a WebSocket behind a route whose
// first_byte is routeTimeout.
func wsFirstByteHarness(t *testing.T) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{
		transport: map[string]string{"A": "websocket"},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "A"}}, FirstByte: routeTimeout},
		}},
	})
}

// assertNothingCharged checks that A was neither timed out nor charged a
// failure, and that its circuit is not open.
func assertNothingCharged(t *testing.T, h *harness) {
	t.Helper()
	m := h.metrics()
	if attemptsOf(h, "first_byte_timeout") || strings.Contains(m, `sluice_target_failures_total{`) ||
		strings.Contains(m, `sluice_target_circuit_state{model="gpt-fake-1",upstream="A"} 1`) {
		t.Fatalf("the upstream was charged for the gateway's own wait:\n%s", m)
	}
}

// Concurrent streams of one client key, or of anonymous clients, that need
// no socket-local state (no previous_response_id, no session or turn of
// their own) each get a socket of their own instead of queueing behind one
// another on their scope's socket: they all complete, and the upstream is
// not marked silent for requests it was never sent. Before, they went over
// one socket one at a time, and every request still queued when first_byte
// passed timed the healthy upstream out.
func TestWebSocketUpstreamConcurrentUnscopedStreamsDoNotQueue(t *testing.T) {
	const n = 4
	for name, header := range map[string]map[string]string{
		"anonymous":      nil,
		"one client key": {"Authorization": "Bearer sk-client-secret"},
	} {
		t.Run(name, func(t *testing.T) {
			h := wsFirstByteHarness(t)
			for range n {
				// Each answer takes longer than first_byte: one queued
				// behind it would wait longer than that.
				h.ups["A"].Enqueue(upstreamtest.Script{Latency: 2 * routeTimeout})
			}
			results := make([][]eventLike, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = h.streamWithHeaders(context.Background(), header)
				}()
			}
			wg.Wait()
			for _, evs := range results {
				assertOwnAnswer(t, evs, "resp_none")
			}
			connects := h.ups["A"].WebSocketConnects()
			if connects < 2 {
				t.Fatalf("%d upstream sockets for %d concurrent streams: they were queued on one", connects, n)
			}
			assertNothingCharged(t, h)

			// A later request takes a socket the burst left idle.
			assertOwnAnswer(t, h.streamWithHeaders(context.Background(), header), "resp_none")
			if got := h.ups["A"].WebSocketConnects(); got != connects {
				t.Fatalf("%d upstream sockets after one more request, want the %d idle ones reused", got, connects)
			}
		})
	}
}

// A request that needs its session's socket still waits for the request
// ahead of it, but that wait is the gateway's: it does not count toward
// first_byte, and the upstream is not charged for it. Before, a request
// queued longer than first_byte behind a slow one failed as a silent target.
func TestWebSocketUpstreamSessionWaitIsNotFirstByte(t *testing.T) {
	h := wsFirstByteHarness(t)
	h.ups["A"].Enqueue(upstreamtest.Script{Latency: 2 * routeTimeout}) // holds the session's socket past first_byte
	session := map[string]string{"Session_id": "s1"}
	var first []eventLike
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first = h.streamWithHeaders(context.Background(), session)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	second := h.streamWithHeaders(context.Background(), session)
	wg.Wait()
	assertOwnAnswer(t, first, "resp_none")
	assertOwnAnswer(t, second, "resp_none")
	if n := h.ups["A"].WebSocketConnects(); n != 1 {
		t.Fatalf("%d upstream sockets, want the session's one", n)
	}
	assertNothingCharged(t, h)
}
