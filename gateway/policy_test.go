package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/policies"
)

// wasmPolicies loads the embedded first-party policies in the real runtime.
func wasmPolicies(t *testing.T, config map[string]json.RawMessage) *plugins.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{Embedded: policies.Defaults(), Config: config, Logger: hclog.NewNullLogger(), CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("loading policies: %v", err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	if !rt.Ready() {
		t.Fatal("runtime not ready")
	}
	return rt
}

func TestWasmPoliciesDriveTheGateway(t *testing.T) {
	rt := wasmPolicies(t, map[string]json.RawMessage{
		"rewrite": json.RawMessage(`{"model_aliases":{"fast":"gpt-fake-1"},"strip_tool_types":["web_search_preview"]}`),
	})
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Store: st},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	t.Run("rewrite edits what the upstream receives", func(t *testing.T) {
		resp := h.post("/v1/responses", `{"model":"fast","input":"hi","tools":[{"type":"web_search_preview"},{"type":"function","name":"f","parameters":{}}],"x_keep":1}`)
		resp.Body.Close()
		var got struct {
			Model string
			Tools []struct{ Type string }
			XKeep int `json:"x_keep"`
		}
		reqs := append(h.ups["A"].Requests(), h.ups["B"].Requests()...)
		_ = json.Unmarshal(reqs[len(reqs)-1].Body, &got)
		if got.Model != "gpt-fake-1" || len(got.Tools) != 1 || got.Tools[0].Type != "function" || got.XKeep != 1 {
			t.Fatalf("upstream received %s", reqs[len(reqs)-1].Body)
		}
	})

	t.Run("recover turns a lost previous response into stream_incomplete", func(t *testing.T) {
		_, id := h.turn("", nil)
		own := owner(id)
		h.ups[own].Enqueue(upstreamtest.PreviousNotFound(upstreamtest.ShapeStatus))
		evs, _ := h.turn(id, nil)
		if last := assertOneTerminal(t, evs); last.code != "stream_incomplete" {
			t.Fatalf("%s", last.data)
		}
	})

	t.Run("pass forwards a near miss unchanged", func(t *testing.T) {
		body := upstreamtest.ErrorBody("Previous response with id 'x' not found.", "invalid_request_error", "invalid_request_error", "input")
		release := h.pool.Get("B").Acquire() // A is picked
		defer release()
		h.ups["A"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, 400, body))
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x"}`)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || string(got) != string(body) {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
	})

	t.Run("replay sends a quota failure before created elsewhere", func(t *testing.T) {
		release := h.pool.Get("B").Acquire() // A is picked first
		defer release()
		h.ups["A"].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed))
		_, evs := h.responsesStream(respBody)
		var text string
		for _, ev := range evs {
			var v struct{ Type, Delta string }
			_ = json.Unmarshal(ev.data, &v)
			text += v.Delta
		}
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" || text != "Hello from B" {
			t.Fatalf("%s %q", last.typ, text)
		}
	})

	var calls int64
	for _, ps := range rt.Status() {
		b, _ := json.Marshal(ps)
		if strings.Contains(string(b), `"state":"active"`) {
			var v struct{ Calls int64 }
			_ = json.Unmarshal(b, &v)
			calls += v.Calls
		}
	}
	if calls == 0 {
		t.Fatal("no policy calls counted: the gateway did not go through the Wasm runtime")
	}
}
