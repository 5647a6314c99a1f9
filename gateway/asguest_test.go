package gateway_test

import (
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// asFixtureRuntime is the plugin runtime with the AssemblyScript fixture
// (plugins/testdata/asfixture, built with sdk/assemblyscript): rewrite
// renames the model alias "fast" to "gpt-5-mini", stream_event replaces
// "secret" in text deltas.
func asFixtureRuntime(t *testing.T) *plugins.Runtime {
	t.Helper()
	return moduleFileRuntime(t, "asfixture.wasm", filepath.Join("..", "plugins", "testdata", "asfixture.wasm"))
}

// TestASGuestStreamEventAndRewrite: an AssemblyScript guest in a live SSE
// stream through the gateway. Its rewrite hook turns the model alias into
// the real model (the upstream sees the rewritten body and the header the
// guest set), and its stream_event hook redacts a word in the deltas; the
// done text and the terminal response.completed match what the client got,
// as with the WAT guest (TestStreamEventHookRedactsLiveStream).
func TestASGuestStreamEventAndRewrite(t *testing.T) {
	rt := asFixtureRuntime(t)
	if !rt.StreamHookActive() {
		t.Fatal("the AssemblyScript fixture's stream_event hook is not active")
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})
	h.ups["A"].Enqueue(upstreamtest.Answer("the secret plan", 3))

	_, evs := h.streamEvents("/v1/responses", `{"model":"fast","input":"hi","stream":true}`)
	checkRedacted(t, evs)
	reqs := h.ups["A"].Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	if got := gjson.GetBytes(reqs[0].Body, "model").Str; got != "gpt-5-mini" {
		t.Fatalf("upstream saw model %q: %s", got, reqs[0].Body)
	}
	if got := reqs[0].Header.Get("X-Rewritten-By"); got != "asfixture" {
		t.Fatalf("upstream header x-rewritten-by = %q", got)
	}
}
