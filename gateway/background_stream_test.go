package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// A streamed background request is run by Sluice (detached, resumable,
// cancellable), so the upstream never sees background: it would otherwise
// run a job of its own that a cancel through Sluice does not stop (README
// "Background responses"), over HTTP and over a WebSocket.
func TestStreamedBackgroundIsNotForwarded(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,"background":true}`)
	if len(evs) == 0 || evs[len(evs)-1].Name != "response.completed" {
		t.Fatalf("%d events", len(evs))
	}
	c := h.dialWS(nil)
	if evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","background":true}`); len(evs) == 0 || evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("WebSocket turn: %v", evs)
	}
	reqs := h.ups["A"].Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if gjson.GetBytes(r.Body, "background").Exists() {
			t.Errorf("the upstream saw background: %s", r.Body)
		}
	}
}

// Load balancers probe with HEAD as well as GET.
func TestHealthAnswersHEAD(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Head(h.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s: %d, want 200", path, resp.StatusCode)
		}
	}
}
