package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// downBackupHarness is contHarness (P then B behind the route "m") whose
// backup B was down at start: its first probe failed (HTTP 503). No
// periodic probe runs in the harness, so B stays marked down until a
// request probes it.
func downBackupHarness(t *testing.T) *harness {
	t.Helper()
	servers := map[string]*upstreamtest.Server{}
	for _, name := range []string{"P", "B"} {
		up := upstreamtest.NewServer(upstreamtest.Options{Name: name})
		t.Cleanup(up.Close)
		servers[name] = up
	}
	servers["B"].SetModelsStatus(http.StatusServiceUnavailable)
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: servers})
	if st := h.pool.Get("B").Status(time.Now()); st.State != upstream.StateDown {
		t.Fatalf("B's failed probe did not mark it down: %+v", st)
	}
	return h
}

// TestContinuationProbesDownTargetThatIsBack: the backup was down at start
// and is up now; the primary is cut after content. The continuation probes
// the backup at once, as a request before content does (README "A down
// upstream is not an outage until the next probe"), and the client's stream
// is continued there and completes, on every client surface.
func TestContinuationProbesDownTargetThatIsBack(t *testing.T) {
	for _, s := range rescueSurfaces {
		t.Run(s.name, func(t *testing.T) {
			h := downBackupHarness(t)
			h.ups["B"].SetModelsStatus(0) // B is back; its last probe still says down
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
			o := s.do(t, h)
			if o.text != fullAnswer || (o.terminal != "response.completed" && o.terminal != "done") {
				t.Fatalf("client got %q ending %s %s; want the stream continued on B\n%s", o.text, o.terminal, o.code, h.logs.String())
			}
			if n := h.ups["B"].RequestCount(); n != 1 {
				t.Fatalf("B asked %d times, want once", n)
			}
			if !strings.Contains(h.logs.String(), "stream failed after content; continuing on the next target") {
				t.Fatalf("continuation not logged:\n%s", h.logs.String())
			}
		})
	}
}

// TestNotContinuedLogSaysNoTargetLeft: the backup is still down when the
// primary is cut after content. The stream is not continued, and the
// operator's log line says why: no target was left, naming the backup and
// its probe error, beside the fields it always had.
func TestNotContinuedLogSaysNoTargetLeft(t *testing.T) {
	h := downBackupHarness(t)
	probes := h.ups["B"].ModelsRequests()
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if len(evs) == 0 || string(evs[len(evs)-1].Data) != "[DONE]" {
		t.Fatalf("the client's stream did not end with [DONE]: %d events", len(evs))
	}
	if n := h.ups["B"].RequestCount(); n != 0 {
		t.Fatalf("B, still down, was asked %d times", n)
	}
	if n := h.ups["B"].ModelsRequests(); n != probes+1 {
		t.Fatalf("B was probed %d times after content, want once on demand", n-probes)
	}
	var line string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "stream failed after content; not continued") {
			line = l
		}
	}
	for _, want := range []string{"surface=chat_stream", "upstream=P", "class=cut", "verdict=",
		`reason="no target left (B/m: down: probe: HTTP 503`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %q\n%s", want, line, h.logs.String())
		}
	}
}

// TestContinuationTargetFailedLogSaysWhy: the primary is cut after content
// and the backup, the continuation's only target, answers 500. The stream
// ends with the original failure, and the operator's log line says why it
// went no further (no target left), as the "not continued" line does.
func TestContinuationTargetFailedLogSaysWhy(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Status5xx(http.StatusInternalServerError))
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if len(evs) == 0 || string(evs[len(evs)-1].Data) != "[DONE]" {
		t.Fatalf("the client's stream did not end with [DONE]: %d events", len(evs))
	}
	if n := h.ups["B"].RequestCount(); n != 1 {
		t.Fatalf("B asked %d times, want once", n)
	}
	var line string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "continuation target failed; ending the stream with the original failure") {
			line = l
		}
	}
	for _, want := range []string{"upstream=B", "verdict=", `reason="no target left`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %q\n%s", want, line, h.logs.String())
		}
	}
}
