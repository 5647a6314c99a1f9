package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A compact or input_tokens naming a previous_response_id that a Chat
// target answered is pinned to that Chat owner, which has no such
// endpoint: the 400 names previous_response_id and says why, not model,
// whatever the request's model routes to (here a route of Responses
// targets alone), and no upstream is called.
func TestCompactNamingAChatAnsweredResponseIsRefusedOnPreviousResponseID(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "C"}, {Name: "R"}},
		protocol:  map[string]string{"C": "chat"},
		opts: gateway.Options{Store: openStore(t, t.TempDir()), Routes: []gateway.Route{
			{Models: []string{"cr"}, Targets: []gateway.RouteTarget{{Upstream: "C", Model: "chat-model"}, {Upstream: "R", Model: "resp-model"}}},
			{Models: []string{"r-only"}, Targets: []gateway.RouteTarget{{Upstream: "R", Model: "resp-model"}}},
		}},
	})
	resp, body := send(t, h, http.MethodPost, "/v1/responses", "sk-client-secret", `{"model":"cr","input":"hello"}`)
	id := gjson.GetBytes(body, "id").Str
	if resp.StatusCode != http.StatusOK || id == "" || h.ups["C"].RequestCount() != 1 {
		t.Fatalf("create on C: %d %s (C asked %d times)", resp.StatusCode, body, h.ups["C"].RequestCount())
	}
	before := h.ups["C"].RequestCount() + h.ups["R"].RequestCount()
	for _, model := range []string{"cr", "r-only"} {
		for _, c := range utilityPaths {
			resp, body := send(t, h, http.MethodPost, c.path, "sk-client-secret",
				`{"model":"`+model+`","input":"next","previous_response_id":"`+id+`"}`)
			msg := gjson.GetBytes(body, "error.message").Str
			if resp.StatusCode != http.StatusBadRequest || codeOf(body) != "invalid_value" ||
				gjson.GetBytes(body, "error.param").Str != "previous_response_id" ||
				!strings.Contains(msg, "Chat Completions") || !strings.Contains(msg, `upstream "C"`) {
				t.Errorf("%s on %s naming %s: %d %s; want 400 invalid_value on previous_response_id naming the Chat owner", c.path, model, id, resp.StatusCode, body)
			}
		}
	}
	if after := h.ups["C"].RequestCount() + h.ups["R"].RequestCount(); after != before {
		t.Errorf("a refused request reached an upstream (%d requests, was %d)", after, before)
	}
}
