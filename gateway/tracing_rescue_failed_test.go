package gateway_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestTracingFailedLastAttemptSaysStop: the attempt that ended a stream by
// failing it (here the last continuation target, cut too, so the client
// gets response.failed) says so in its sluice.rescue, stop, as the access
// log and sluice_rescues_total say the stream failed, never done, which
// names an attempt that ended the request as it should.
func TestTracingFailedLastAttemptSaysStop(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(5))
	_, evs := postWith(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`, nil)
	if len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.failed" {
		t.Fatalf("client got %d events, last %v", len(evs), evs)
	}
	waitAccessLine(t, h)
	if line := grepLines(h.logs.String(), "access: request"); !strings.Contains(line, " code=stream_incomplete ") {
		t.Fatalf("access line %s; want the stream failed", line)
	}
	h.waitMetric(`sluice_rescues_total{kind="prefill",outcome="failed"`)
	spans := waitServerSpans(t, rec, 1)
	clients := attemptSpans(t, spans, 2)
	for _, as := range clients {
		v, _ := attrOf(as, "sluice.rescue")
		at, _ := attrOf(as, "sluice.attempt")
		switch at.AsInt64() {
		case 0:
			if v.AsString() != "continue" {
				t.Errorf("the cut first attempt's sluice.rescue = %q, want continue", v.AsString())
			}
		case 1:
			if v.AsString() != "stop" || as.Status().Code != codes.Error {
				t.Errorf("the continuation that failed the stream: sluice.rescue = %q, status %v; want stop, Error", v.AsString(), as.Status())
			}
		}
	}
}
