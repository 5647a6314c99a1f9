package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestWebSocketFramesCountedWithTheirAnswer: each response.create frame is
// counted in sluice_requests_total once, with the status its answer stands
// for, as its access line says: a refused model 403, an upstream's 400
// relayed as an error frame 400, a served turn 200 (README
// "Observability"); an error-rate alert on 4xx/5xx sees WebSocket traffic.
func TestWebSocketFramesCountedWithTheirAnswer(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, []string{"gpt-fake-*"}, store.KeyLimits{}))
	h.ups["A"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest,
		upstreamtest.ErrorBody("bad request", "invalid_request_error", "bad", "")))
	c := h.dialWS(map[string]string{"Authorization": "Bearer " + teamAKey})
	for _, frame := range []struct{ model, want string }{
		{"gpt-other", "error"},  // model_not_allowed
		{"gpt-fake-1", "error"}, // the upstream's 400
		{"gpt-fake-1", "response.completed"},
	} {
		evs := c.turn(`{"type":"response.create","model":"` + frame.model + `","input":"hi"}`)
		if got := evs[len(evs)-1].typ; got != frame.want {
			t.Fatalf("frame for %s ended with %s, want %s: %s", frame.model, got, frame.want, evs[len(evs)-1].data)
		}
	}
	waitAccessLines(t, h, 3) // a frame is counted before its line is written
	m := h.metrics()
	for _, want := range []string{
		`sluice_requests_total{code="403",surface="websocket"} 1`,
		`sluice_requests_total{code="400",surface="websocket"} 1`,
		`sluice_requests_total{code="200",surface="websocket"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_requests_total"))
		}
	}
	if strings.Contains(m, `code="101"`) {
		t.Errorf("frames counted as 101 whatever their answer:\n%s", grepLines(m, "sluice_requests_total"))
	}
	lines := grepLines(h.logs.String(), "access: request")
	for _, want := range []string{"status=403", "status=400", "status=200"} {
		if !strings.Contains(lines, want) {
			t.Errorf("access lines lack %s:\n%s", want, lines)
		}
	}
}
