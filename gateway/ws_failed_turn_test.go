package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestWebSocketFollowUpToAFailedStoreFalseTurn: a store:false turn on a
// client WebSocket that ends response.failed (a plain failure, or a
// continuation that failed after adding text) is remembered by its
// session as failed, so a follow-up on the same socket naming it gets the
// non-retryable 400 previous_response_not_found on previous_response_id,
// saying the response failed, without any upstream being called — not the
// retryable 503 of a chain made on another socket, which no retry could
// ever get past (README "Privacy"). It is no continuity failure, and is
// not counted as one.
func TestWebSocketFollowUpToAFailedStoreFalseTurn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     func(t *testing.T) *harness
		model string
	}{
		{"plain failure", func(t *testing.T) *harness {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(2, "server_error"))
			return h
		}, "gpt-fake-1"},
		{"continuation failed after adding text", func(t *testing.T) *harness {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(2, "server_error"))
			return h
		}, "m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h(t)
			ws := h.dialWS(nil)
			first := ws.turn(`{"type":"response.create","model":"` + tc.model + `","input":"hi","store":false}`)
			last := lastFrame(t, first)
			id := gjson.GetBytes(last.data, "response.id").Str
			if last.typ != "response.failed" || id == "" {
				t.Fatalf("turn 1 ended %s: %s", last.typ, last.data)
			}
			called := 0
			for _, u := range h.ups {
				called += u.RequestCount()
			}
			second := ws.turn(`{"type":"response.create","model":"` + tc.model + `","input":"again","store":false,"previous_response_id":"` + id + `"}`)
			frame := lastFrame(t, second)
			got := gjson.ParseBytes(frame.data)
			if frame.typ != "error" || got.Get("status").Int() != 400 || got.Get("error.type").Str != "invalid_request_error" ||
				got.Get("error.code").Str != "previous_response_not_found" || got.Get("error.param").Str != "previous_response_id" ||
				!strings.Contains(got.Get("error.message").Str, id) || !strings.Contains(got.Get("error.message").Str, "failed") {
				t.Fatalf("the follow-up naming the failed turn got %s; want a 400 previous_response_not_found saying it failed", frame.data)
			}
			after := 0
			for _, u := range h.ups {
				after += u.RequestCount()
			}
			if after != called {
				t.Errorf("the follow-up reached an upstream (%d requests, %d before)", after, called)
			}
			if m := h.metrics(); strings.Contains(m, "continuity_fail_closed_total{") {
				t.Errorf("the refusal was counted as a continuity failure:\n%s", grep(m, "continuity_fail_closed_total"))
			}
		})
	}
}
