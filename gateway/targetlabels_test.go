package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestTargetCircuitGaugeLabelsClientModelsOther: models a client makes up
// (no route names them, the upstream does not list them) get a target
// entry once they fail; the circuit gauge labels them "other", as the
// failures counter does, never with the client's string, in one series per
// upstream that shows the worst of their circuits.
func TestTargetCircuitGaugeLabelsClientModelsOther(t *testing.T) {
	h := newHarness(t, harnessConfig{pool: upstream.Options{CircuitFailures: 2}})
	// made-up-1 fails once (its circuit stays closed), made-up-2 twice (its
	// circuit opens; a 500 is retried once on the same target).
	overloaded, serverError := upstreamtest.Status5xx(http.StatusServiceUnavailable), upstreamtest.Status5xx(http.StatusInternalServerError)
	for _, c := range []struct {
		model   string
		answers []upstreamtest.Script
		circuit string
	}{
		{"client-made-up-1", []upstreamtest.Script{overloaded}, "closed"},
		{"client-made-up-2", []upstreamtest.Script{serverError, serverError}, "closed"},
		{"client-made-up-2", []upstreamtest.Script{serverError, serverError}, "open"},
	} {
		h.ups["A"].Enqueue(c.answers...)
		resp := h.post("/v1/responses", `{"model":"`+c.model+`","input":"hi"}`)
		resp.Body.Close()
		if tg, ok := h.target("A", c.model); resp.StatusCode/100 == 2 || !ok || tg.Circuit != c.circuit {
			t.Fatalf("%s: %d, target %+v; the test needs a failure and the circuit %s", c.model, resp.StatusCode, tg, c.circuit)
		}
	}
	m := h.metrics()
	if strings.Contains(m, "client-made-up") {
		t.Fatalf("a client's model name is a label:\n%s", grepLines(m, "sluice_target"))
	}
	for _, want := range []string{
		`sluice_target_circuit_state{model="other",upstream="A"} 1`,
		`sluice_target_failures_total{class="overloaded",model="other",upstream="A"} 1`,
		`sluice_target_failures_total{class="server_error",model="other",upstream="A"} `, // each attempt, retries too
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s:\n%s", want, grepLines(m, "sluice_target"))
		}
	}
	// A model the upstream lists keeps its own label.
	h.ups["A"].Enqueue(upstreamtest.Status5xx(http.StatusServiceUnavailable))
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	resp.Body.Close()
	if m := h.metrics(); !strings.Contains(m, `sluice_target_circuit_state{model="gpt-fake-1",upstream="A"} 0`) {
		t.Fatalf("a listed model lost its label:\n%s", grepLines(m, "sluice_target"))
	}
}
