package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream bills a WebSocket's requests to the credentials it was
// opened with, and keeps its previous_response_id state per socket: each
// request reaches the upstream over a socket opened with its own credential
// headers (the client's key on an upstream without api_key, its
// OpenAI-Project with forward_headers), whether it takes a free socket or
// its session's, and one client's consecutive requests still share one.
// Before, sockets were kept per upstream and session only, and client B's
// request ran over the socket client A had opened.
func TestWebSocketUpstreamSocketsAreNotSharedAcrossCredentials(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hc      harnessConfig
		header  string // the credential header that differs between the clients
		clients [2]string
	}{
		{
			name:    "client keys, upstream without api_key",
			hc:      harnessConfig{transport: map[string]string{"A": "websocket"}},
			header:  "Authorization",
			clients: [2]string{"Bearer sk-client-aaaa", "Bearer sk-client-bbbb"},
		},
		{
			name: "OpenAI-Project in forward_headers",
			hc: harnessConfig{transport: map[string]string{"A": "websocket"}, keys: map[string]string{"A": "sk-upstream-key"},
				forward: map[string][]string{"A": {"OpenAI-Project"}}},
			header:  "OpenAI-Project",
			clients: [2]string{"proj_aaaa", "proj_bbbb"},
		},
	} {
		for _, session := range []string{"", "shared-session"} {
			name := tc.name + ", no session"
			if session != "" {
				name = tc.name + ", one session_id"
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t, tc.hc)
				order := []int{0, 1, 0, 1}
				for _, c := range order {
					header := map[string]string{tc.header: tc.clients[c]}
					if tc.header != "Authorization" {
						header["Authorization"] = "Bearer sk-client-secret"
					}
					if session != "" {
						header["Session_id"] = session
					}
					assertOwnAnswer(t, h.streamWithHeaders(context.Background(), header), "resp_none")
				}
				reqs := h.ups["A"].Requests()
				if len(reqs) != len(order) {
					t.Fatalf("%d upstream requests, want %d", len(reqs), len(order))
				}
				for i, r := range reqs {
					if !r.WebSocket {
						t.Fatalf("request %d did not go over a WebSocket", i)
					}
					if got, want := r.Header.Get(tc.header), tc.clients[order[i]]; got != want {
						t.Fatalf("request %d of %s went over a socket opened with %s %q", i, want, tc.header, got)
					}
				}
				if n := h.ups["A"].WebSocketConnects(); n != 2 {
					t.Fatalf("%d upstream sockets, want one per client, each reused", n)
				}
			})
		}
	}
}

// Reaching limits.upstream_sockets fails the attempt, not the request: the
// route's next target serves it, and the WebSocket upstream is not charged.
// Before, the request ended with a 503 and the next target was never tried.
func TestUpstreamSocketsCapMovesToTheNextTarget(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		transport: map[string]string{"A": "websocket"},
		opts: gateway.Options{UpstreamSockets: 1, Routes: []gateway.Route{
			{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}},
		}},
	})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(2)) // holds the only socket until its client leaves
	holder, leave := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.sessionStream(holder, "s1")
	}()
	defer wg.Wait()
	defer leave()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}

	assertOwnAnswer(t, h.sessionStream(context.Background(), "s2"), "resp_none")
	if n := h.ups["B"].RequestCount(); n != 1 {
		t.Fatalf("%d requests reached the next target, want 1", n)
	}
	m := h.metrics()
	if attemptsOf(h, "transport_error") || strings.Contains(m, `sluice_target_failures_total{`) {
		t.Fatalf("the cap was charged to the upstream:\n%s", m)
	}
}

// A late event of the response a reused socket served last (a delta naming
// one of its items), arriving within the next response, is never relayed
// into that response: the socket is out of step and is closed (README
// "WebSocket"), the stream ends with one terminal event, and the next
// request gets a new socket. Before, only lifecycle events were checked
// once the response had begun, and the stale text reached the next client.
func TestWebSocketUpstreamLateDeltaOfThePreviousResponseIsDropped(t *testing.T) {
	const stale = "STALE-FROM-FIRST"
	first := upstreamtest.ResponsesEvents("resp_first", "gpt-fake-1", "first answer", 2)
	var firstItem string
	for _, ev := range first {
		if gjson.GetBytes(ev, "type").Str == "response.output_item.added" {
			firstItem = gjson.GetBytes(ev, "item.id").Str
		}
	}
	if firstItem == "" {
		t.Fatal("the first response adds no item")
	}
	lateDelta := []byte(`{"type":"response.output_text.delta","item_id":"` + firstItem + `","output_index":0,"content_index":0,"delta":"` + stale + `","sequence_number":2}`)
	// The upstream sends the first response's stray delta after its
	// terminal event, once the second response has begun on the socket.
	second := upstreamtest.ResponsesEvents("resp_second", "gpt-fake-1", "second answer", 2)
	var secondFrames []upstreamtest.Frame
	for i, ev := range second {
		secondFrames = append(secondFrames, upstreamtest.SSEEvent(ev))
		if i == 0 {
			secondFrames = append(secondFrames, upstreamtest.SSEEvent(lateDelta))
		}
	}
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_first", "gpt-fake-1", "first answer", 2)},
		upstreamtest.Script{Frames: secondFrames})

	assertOwnAnswer(t, h.sessionStream(context.Background(), "s1"), stale)
	got := h.sessionStream(context.Background(), "s1")
	assertOneTerminal(t, got)
	for _, ev := range got {
		if strings.Contains(string(ev.data), stale) || strings.Contains(string(ev.data), firstItem) {
			t.Fatalf("an event of the previous response reached the client: %s", ev.data)
		}
	}
	if n := h.ups["A"].WebSocketConnects(); n != 1 {
		t.Fatalf("%d upstream sockets before the third request, want the reused one", n)
	}
	assertOwnAnswer(t, h.sessionStream(context.Background(), "s1"), stale)
	if n := h.ups["A"].WebSocketConnects(); n != 2 {
		t.Fatalf("%d upstream sockets, want a new one after the out-of-step socket was closed", n)
	}
}

// A transport: websocket upstream that refuses the upgrade with 426 does not
// offer the WebSocket mode at all: the attempt fails as a refused
// connection would, the route's next target serves the request, and the
// client, which never asked for a WebSocket, is never told to upgrade.
// Before, the 426 reached the client and the next target was never tried.
func TestWebSocketUpstreamRefusedUpgradeMovesToTheNextTarget(t *testing.T) {
	route := func(targets ...string) gateway.Options {
		r := gateway.Route{Models: []string{"gpt-fake-1"}}
		for _, u := range targets {
			r.Targets = append(r.Targets, gateway.RouteTarget{Upstream: u})
		}
		return gateway.Options{Routes: []gateway.Route{r}}
	}
	t.Run("with a next target", func(t *testing.T) {
		h := newHarness(t, harnessConfig{
			upstreams: []upstreamtest.Options{{Name: "A", DisableWebSocket: true}, {Name: "B"}},
			transport: map[string]string{"A": "websocket"},
			opts:      route("A", "B"),
		})
		assertOwnAnswer(t, h.sessionStream(context.Background(), ""), "resp_none")
		if h.ups["A"].WebSocketRefused() == 0 || h.ups["B"].RequestCount() != 1 {
			t.Fatalf("A refused %d upgrades, B got %d requests: want A tried, then B", h.ups["A"].WebSocketRefused(), h.ups["B"].RequestCount())
		}
		c := h.dialWS(nil)
		if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
			t.Fatalf("a WebSocket client: %s", evs[len(evs)-1].data)
		}
	})
	t.Run("without one", func(t *testing.T) {
		h := newHarness(t, harnessConfig{
			upstreams: []upstreamtest.Options{{Name: "A", DisableWebSocket: true}},
			transport: map[string]string{"A": "websocket"},
			opts:      route("A"),
		})
		// A stream request (a JSON one goes over HTTP) opens before its
		// first event, so the 426 would have been its status.
		resp := h.post("/v1/responses", wsSyncBody)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d %s, want the stream's failure", resp.StatusCode, body)
		}
		last := assertOneTerminal(t, h.sessionStream(context.Background(), ""))
		if last.typ != "response.failed" || !strings.Contains(gjson.GetBytes(last.data, "response.error.message").Str, "upstream_unavailable") {
			t.Fatalf("a stream: %s %s, want response.failed upstream_unavailable", last.typ, last.data)
		}
	})
}
