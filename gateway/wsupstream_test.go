package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream's client error reaches the client the same whichever
// transport the upstream is spoken to over: the upstream's status and
// error body (HTTP), or an error frame with them (WebSocket client).
func TestUpstreamClientErrorSameOverEitherTransport(t *testing.T) {
	upstreamErr := upstreamtest.ErrorBody("bad thing", "invalid_request_error", "invalid_value", "input")
	var want struct{ Error map[string]any }
	if err := json.Unmarshal(upstreamErr, &want); err != nil {
		t.Fatal(err)
	}
	same := func(t *testing.T, got map[string]any) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want.Error)
		if string(g) != string(w) {
			t.Fatalf("error %s, want the upstream's %s", g, w)
		}
	}
	for _, transport := range []string{"http", "websocket"} {
		t.Run("upstream over "+transport, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": transport}})
			t.Run("SSE client", func(t *testing.T) {
				h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Body: upstreamErr})
				resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				var got struct{ Error map[string]any }
				if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &got) != nil {
					t.Fatalf("HTTP %d %s", resp.StatusCode, body)
				}
				same(t, got.Error)
			})
			t.Run("WebSocket client", func(t *testing.T) {
				h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Body: upstreamErr})
				c := h.dialWS(nil)
				evs := c.turn(createFrame(""))
				var got struct {
					Status int
					Error  map[string]any
				}
				_ = json.Unmarshal(evs[0].data, &got)
				if len(evs) != 1 || evs[0].typ != "error" || got.Status != http.StatusBadRequest {
					t.Fatalf("first of %d frames: %s", len(evs), evs[0].data)
				}
				same(t, got.Error)
				// The session's upstream socket keeps working.
				connects := h.ups["A"].WebSocketConnects()
				if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
					t.Fatalf("next request: %s", evs[len(evs)-1].data)
				}
				if transport == "websocket" && h.ups["A"].WebSocketConnects() != connects {
					t.Fatal("the upstream socket was dropped after the error frame")
				}
			})
		})
	}
}

// A 500 from a WebSocket upstream is retried on the same target, as a 500
// from an HTTP upstream is (README "Routes and fallbacks").
func TestWebSocketUpstream500RetriedOnTheSameTarget(t *testing.T) {
	for _, transport := range []string{"http", "websocket"} {
		t.Run("upstream over "+transport, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": transport}})
			h.ups["A"].Enqueue(upstreamtest.Status5xx(http.StatusInternalServerError))
			_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
			if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
				t.Fatalf("terminal %s: %s", last.typ, last.data)
			}
			if n := h.ups["A"].RequestCount(); n != 2 {
				t.Fatalf("%d upstream requests, want the 500 and its retry", n)
			}
		})
	}
}
