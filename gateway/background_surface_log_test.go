package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestBackgroundContinuationLogsItsRequestSurface: a background create
// without stream whose run is cut on P and continued on B logs the
// decision to continue, like every other line about the run, under the
// surface its access line and its metrics give it, responses_json, not
// under the stream the run is internally: an operator who follows one
// surface finds the decision (README "Access log").
func TestBackgroundContinuationLogsItsRequestSurface(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: resumeOpts()})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9))
	resp := h.post("/v1/responses", `{"model":"m","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	requestID := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusOK || requestID == "" {
		t.Fatalf("background create: %d %s", resp.StatusCode, b)
	}
	waitAccessLinesOf(t, h, requestID, 2)
	lines := accessLinesOf(h, requestID)
	end := lines[len(lines)-1]
	if end["background"] != "ended" || end["reason"] != "completed" || end["surface"] != "responses_json" || end["targets"] != "P/m,B/m" {
		t.Fatalf("the run's end line: %v", end)
	}
	var decision string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "continuing on the next target") {
			decision = line
		}
		if strings.Contains(line, "surface=") && !strings.Contains(line, "surface="+end["surface"]+" ") {
			t.Errorf("a line about the run names another surface than its access line's %s: %s", end["surface"], line)
		}
	}
	if !strings.Contains(decision, "surface=responses_json ") {
		t.Fatalf("the decision to continue is logged as %q; want surface=responses_json\nlog:\n%s", decision, h.logs.String())
	}
	m := h.metrics()
	if v := metricValue(m, `sluice_rescues_total{kind="prefill",outcome="completed",surface="responses_json"}`); v != 1 {
		t.Errorf("the continuation counted %v times under responses_json:\n%s", v, grep(m, "sluice_rescues_total"))
	}
}
