package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// utilityPaths are the Responses API's endpoints that answer one JSON
// object which is no Response, each with the object its answer names.
var utilityPaths = []struct{ path, object string }{
	{"/v1/responses/compact", "response.compaction"},
	{"/v1/responses/input_tokens", "response.input_tokens"},
}

// POST /v1/responses/compact and /input_tokens go to the model's Responses
// target, a Chat target passed over, and the upstream's answer comes back as
// it was sent: its body byte for byte (the encrypted compaction item
// included), its x-request-id, counted under a surface of its own.
func TestCompactAndInputTokensAreRelayedToTheRoutesResponsesTarget(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "C"}, {Name: "R"}},
		protocol:  map[string]string{"C": "chat"},
		opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"m"},
			Targets: []gateway.RouteTarget{{Upstream: "C", Model: "chat-model"}, {Upstream: "R", Model: "resp-model"}}}}},
	})
	for _, c := range utilityPaths {
		resp, body := send(t, h, http.MethodPost, c.path, "sk-client-secret", `{"model":"m","input":"hi","instructions":"be brief"}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, body)
		}
		if got := gjson.GetBytes(body, "object").Str; got != c.object {
			t.Fatalf("%s: object %q, want %q: %s", c.path, got, c.object, body)
		}
		reqs := h.ups["R"].Requests()
		last := reqs[len(reqs)-1]
		if last.Path != c.path || last.Model != "resp-model" || gjson.GetBytes(last.Body, "instructions").Str != "be brief" {
			t.Fatalf("%s: R got %s model %q body %s", c.path, last.Path, last.Model, last.Body)
		}
		if !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_R_") {
			t.Fatalf("%s: x-request-id %q is not the upstream's", c.path, resp.Header.Get("X-Request-Id"))
		}
		if c.object == "response.compaction" {
			enc := gjson.GetBytes(body, `output.#(type=="compaction").encrypted_content`).Str
			if !strings.HasPrefix(enc, "enc_R_") {
				t.Fatalf("the compaction item did not come through untouched: %s", body)
			}
			// Not a Response: nothing of it is kept for GET /v1/responses/{id}.
			id := gjson.GetBytes(body, "id").Str
			if st, b := send(t, h, http.MethodGet, "/v1/responses/"+id, "sk-client-secret", ""); st.StatusCode != http.StatusNotFound {
				t.Fatalf("GET of the compaction id %s: %d %s", id, st.StatusCode, b)
			}
		}
	}
	if n := h.ups["C"].RequestCount(); n != 0 {
		t.Fatalf("the Chat target got %d requests", n)
	}
	m := h.metrics()
	for _, want := range []string{
		`sluice_requests_total{code="200",surface="responses_compact"} 1`,
		`sluice_requests_total{code="200",surface="responses_input_tokens"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(h.logs.String(), "surface=responses_compact") {
		t.Errorf("no log line names surface responses_compact:\n%s", h.logs.String())
	}
	// JSON only: a stream is refused before any upstream is asked.
	n := h.ups["R"].RequestCount()
	resp, body := send(t, h, http.MethodPost, "/v1/responses/compact", "sk-client-secret", `{"model":"m","input":"hi","stream":true}`)
	if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(body, "error.param").Str != "stream" {
		t.Fatalf("stream:true: %d %s", resp.StatusCode, body)
	}
	if h.ups["R"].RequestCount() != n {
		t.Fatal("a refused stream reached the upstream")
	}
}

// A route whose targets all speak Chat cannot serve these endpoints: the
// client is told so (400 on param model), and no upstream is called.
func TestCompactOnAChatOnlyRouteIsRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "C"}},
		protocol:  map[string]string{"C": "chat"},
		opts:      gateway.Options{Routes: []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "C"}}}}},
	})
	for _, c := range utilityPaths {
		resp, body := send(t, h, http.MethodPost, c.path, "sk-client-secret", `{"model":"m","input":"hi"}`)
		if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(body, "error.param").Str != "model" ||
			!strings.Contains(gjson.GetBytes(body, "error.message").Str, "Chat Completions") {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, body)
		}
	}
	if n := h.ups["C"].RequestCount(); n != 0 {
		t.Fatalf("the Chat upstream got %d requests", n)
	}
}

// A compact naming previous_response_id goes to the upstream that owns that
// response, as a follow-up does, though the model's own choice is another
// upstream (whose StrictPrevious would refuse the id); an id the Sluice key
// does not know is refused before any upstream sees it.
func TestCompactWithPreviousResponseIDGoesToItsOwner(t *testing.T) {
	st := &failingAnchors{PebbleStore: openStore(t, t.TempDir())}
	h := continuityHarness(t, st, gateway.Options{
		Routes: []gateway.Route{
			{Models: []string{"on-b"}, Targets: []gateway.RouteTarget{{Upstream: "B", Model: "gpt-fake-1"}}},
			{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}},
		},
		Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}},
	})
	resp, body := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"on-b","input":"hi"}`)
	id := gjson.GetBytes(body, "id").Str
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(id, "resp_B_") {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	for _, c := range utilityPaths {
		resp, body := send(t, h, http.MethodPost, c.path, teamAKey, `{"model":"gpt-fake-1","previous_response_id":"`+id+`"}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, body)
		}
		reqs := h.ups["B"].Requests()
		if last := reqs[len(reqs)-1]; last.Path != c.path || last.PreviousResponseID != id {
			t.Fatalf("%s: the owner's last request is %s %q", c.path, last.Path, last.PreviousResponseID)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("A, which does not own %s, got %d requests", id, n)
	}
	before := h.ups["A"].RequestCount() + h.ups["B"].RequestCount()
	resp, body = send(t, h, http.MethodPost, "/v1/responses/compact", teamAKey, `{"model":"gpt-fake-1","previous_response_id":"resp_unknown_1"}`)
	if resp.StatusCode != http.StatusBadRequest || codeOf(body) != "previous_response_not_found" {
		t.Fatalf("unknown previous_response_id: %d %s", resp.StatusCode, body)
	}
	// An owner this gateway does not hold in memory cannot be looked up:
	// the request fails closed, no upstream guessed.
	down := error(errors.New("store: unavailable: the anchor store is down"))
	st.failure.Store(&down)
	resp, body = send(t, h, http.MethodPost, "/v1/responses/input_tokens", teamAKey, `{"model":"gpt-fake-1","previous_response_id":"resp_other_replica_1"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || codeOf(body) != "upstream_unavailable" {
		t.Fatalf("owner lookup failed: %d %s", resp.StatusCode, body)
	}
	if after := h.ups["A"].RequestCount() + h.ups["B"].RequestCount(); after != before {
		t.Fatal("a follow-up without a known owner reached an upstream")
	}
}

// The key checks of POST /v1/responses hold: no key is a 401, a model the
// key may not use a 403, and neither reaches the upstream.
func TestCompactAndInputTokensCheckTheKey(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, []string{"gpt-fake-*"}, store.KeyLimits{}))
	for _, c := range utilityPaths {
		if resp, body := send(t, h, http.MethodPost, c.path, "", `{"model":"gpt-fake-1","input":"hi"}`); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s without a key: %d %s", c.path, resp.StatusCode, body)
		}
		if resp, body := send(t, h, http.MethodPost, c.path, teamAKey, `{"model":"gpt-other","input":"hi"}`); resp.StatusCode != http.StatusForbidden || codeOf(body) != "model_not_allowed" {
			t.Fatalf("%s with a model the key may not use: %d %s", c.path, resp.StatusCode, body)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
	if resp, body := send(t, h, http.MethodPost, "/v1/responses/input_tokens", teamAKey, `{"model":"gpt-fake-1","input":"hi"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("allowed: %d %s", resp.StatusCode, body)
	}
}

// POST /v1/responses/{word} for a word that is no endpoint is an unknown
// path (404 not_found), not a 405 for a response id.
func TestUnknownPostUnderResponsesIs404(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	resp, body := send(t, h, http.MethodPost, "/v1/responses/frobnicate", "sk-client-secret", `{"model":"gpt-fake-1","input":"hi"}`)
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusNotFound || e.Error.Code != "not_found" || e.Error.Message != "unknown endpoint POST /v1/responses/frobnicate" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
	// Allow says what each path serves: POST only where it is an endpoint.
	for path, want := range map[string]string{
		"/v1/responses/compact":      "OPTIONS, POST",
		"/v1/responses/input_tokens": "OPTIONS, POST",
		"/v1/responses/resp_x":       "DELETE, GET, HEAD, OPTIONS",
	} {
		resp, body := send(t, h, http.MethodPut, path, "sk-client-secret", "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != want {
			t.Errorf("PUT %s: %d Allow %q, want %q: %s", path, resp.StatusCode, resp.Header.Get("Allow"), want, body)
		}
	}
}
