package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestCancelOfAContinuedBackgroundRunEndsItCancelled: a background run
// that a cancel or DELETE stops ends as cancelled wherever the cancel lands
// — during its first attempt, while the continuation that follows a cut
// connects to the next target, or while that continuation streams: its
// end line says reason=cancelled (README "Access log"), it is counted in
// sluice_stream_terminal_total{reason="cancelled"}, and the continuation
// it stopped counts as a rescue outcome cancelled, never client_gone (a
// background run has no client to leave).
func TestCancelOfAContinuedBackgroundRunEndsItCancelled(t *testing.T) {
	connecting := upstreamtest.Answer(fullAnswer, 9)
	connecting.Latency = time.Minute // its headers never come before the cancel
	for _, tc := range []struct {
		name        string
		primary     upstreamtest.Script
		backup      *upstreamtest.Script
		del         bool
		continued   bool // a continuation attempt was under way
		cancelAfter func(t *testing.T, h *harness, id string)
	}{
		{"first attempt", upstreamtest.Answer(fullAnswer, 9).StallAfterDeltas(3), nil, false, false,
			func(t *testing.T, h *harness, id string) {
				h.waitFor("/v1/responses/"+id, func(b []byte) bool { return gjson.GetBytes(b, "output.0.content.0.text").Str != "" })
			}},
		{"continuation connecting", upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3), &connecting, false, true,
			func(t *testing.T, h *harness, _ string) {
				eventually(t, "the continuation's request", func() bool { return h.ups["B"].RequestCount() == 1 })
			}},
		{"continuation connecting, DELETE", upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3), &connecting, true, true,
			func(t *testing.T, h *harness, _ string) {
				eventually(t, "the continuation's request", func() bool { return h.ups["B"].RequestCount() == 1 })
			}},
		{"continuation streaming", upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3), ptr(upstreamtest.Answer(fullAnswer, 6).StallAfterDeltas(2)), false, true,
			func(t *testing.T, h *harness, id string) {
				eventually(t, "the continuation's request", func() bool { return h.ups["B"].RequestCount() == 1 })
				_, prefill := lastMessage(h.ups["B"].Requests()[0])
				h.waitFor("/v1/responses/"+id, func(b []byte) bool {
					return len(gjson.GetBytes(b, "output.0.content.0.text").Str) > len(prefill) // the continuation's text is there
				})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: resumeOpts()})
			h.ups["P"].Enqueue(tc.primary)
			if tc.backup != nil {
				h.ups["B"].Enqueue(*tc.backup)
			}
			resp := h.post("/v1/responses", `{"model":"m","input":"hi","background":true}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			id, requestID := gjson.GetBytes(b, "id").Str, resp.Header.Get("X-Request-Id")
			if resp.StatusCode != http.StatusOK || id == "" {
				t.Fatalf("background create: %d %s", resp.StatusCode, b)
			}
			tc.cancelAfter(t, h, id)
			method, path := http.MethodPost, "/v1/responses/"+id+"/cancel"
			if tc.del {
				method, path = http.MethodDelete, "/v1/responses/"+id
			}
			if status, body := h.call(method, path, "sk-client-secret"); status != http.StatusOK {
				t.Fatalf("%s %s: %d %s", method, path, status, body)
			}
			if !tc.del {
				if st := gjson.GetBytes(h.waitFor("/v1/responses/"+id, func([]byte) bool { return true }), "status").Str; st != "cancelled" {
					t.Fatalf("GET says %q after the cancel", st)
				}
			}
			waitAccessLinesOf(t, h, requestID, 2)
			if end := accessLinesOf(h, requestID)[1]; end["background"] != "ended" || end["reason"] != "cancelled" {
				t.Errorf("the run's end line: %v, want background=ended reason=cancelled", end)
			}
			// Counted under the request's surface: a background create
			// without stream is a JSON request (README "Access log").
			m := h.waitMetric(`sluice_stream_terminal_total{reason="cancelled",surface="responses_json"} 1`)
			if strings.Contains(m, `outcome="client_gone"`) {
				t.Errorf("a cancelled run counted as a client that left:\n%s", grepLines(m, "sluice_rescues_total")+"\n"+grepLines(m, "sluice_upstream_attempts_total"))
			}
			if !tc.continued && !strings.Contains(m, `sluice_upstream_attempts_total{outcome="cancelled",upstream="P"} 1`) {
				t.Errorf("the attempt the cancel stopped is not counted cancelled:\n%s", grepLines(m, "sluice_upstream_attempts_total"))
			}
			if tc.continued && !strings.Contains(m, `sluice_rescues_total{kind="prefill",outcome="cancelled",surface="responses_json"} 1`) {
				t.Errorf("the continuation the cancel stopped is not counted cancelled:\n%s", grepLines(m, "sluice_rescues_total"))
			}
			if n := strings.Count(grepLines(m, "sluice_stream_terminal_total"), "\n") + 1; n != 1 {
				t.Errorf("the run was counted %d times:\n%s", n, grepLines(m, "sluice_stream_terminal_total"))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
