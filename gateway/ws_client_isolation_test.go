package gateway_test

import (
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// On an upstream with its own api_key every Sluice key dials with that
// key, so the credential headers alone do not tell two clients apart: two
// keys that send the same x-codex-turn-state still get a socket each, and
// each key's next request reuses its own (SECURITY.md "Client
// credentials"). Before, the socket was keyed by upstream, credential
// headers and turn state only: the second key's request waited behind the
// first's and rode its socket and per-socket upstream state.
func TestWebSocketUpstreamSocketsAreNotSharedAcrossSluiceKeys(t *testing.T) {
	h := newHarness(t, harnessConfig{
		transport: map[string]string{"A": "websocket"},
		keys:      map[string]string{"A": "sk-upstream-key"},
		opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{
			keyRec("team-a", teamAKey, nil, store.KeyLimits{}), keyRec("team-b", teamBKey, nil, store.KeyLimits{})}}},
	})
	clients := []*wsClient{
		h.dialWS(map[string]string{"Authorization": "Bearer " + teamAKey, "X-Codex-Turn-State": "turn_shared"}),
		h.dialWS(map[string]string{"Authorization": "Bearer " + teamBKey, "X-Codex-Turn-State": "turn_shared"}),
	}
	for _, c := range []int{0, 1, 0, 1} {
		if evs := clients[c].turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
			t.Fatalf("client %d: %s", c, evs[len(evs)-1].data)
		}
	}
	reqs := h.ups["A"].Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream requests, want 4", len(reqs))
	}
	for i, r := range reqs {
		if !r.WebSocket || r.Header.Get("Authorization") != "Bearer sk-upstream-key" {
			t.Fatalf("request %d: over a WebSocket %v, Authorization %q; want the upstream's key over a WebSocket", i, r.WebSocket, r.Header.Get("Authorization"))
		}
	}
	if n := h.ups["A"].WebSocketConnects(); n != 2 {
		t.Fatalf("%d upstream sockets, want one per Sluice key, each reused", n)
	}
}
