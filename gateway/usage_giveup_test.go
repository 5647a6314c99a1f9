package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A continued stream that ends with its failure, no target left to go on
// with, reports (and is charged) the usage every attempt reported, summed
// (README "Continuation"): P fails after 3 deltas reporting 3 out, B
// continues and fails after 2 reporting 2 out, and C, the last target, fails
// before it adds anything (a 503, or a failure reported with its own usage
// while a restart still reproduced the client's text). What C reported
// counts too; a C that answered nothing is charged nothing.
func TestUsageOfAContinuedStreamThatEndsFailedSumsEveryAttempt(t *testing.T) {
	a := upstreamtest.Answer(fullAnswer, 9)
	for _, tc := range []struct {
		name     string
		c        upstreamtest.Script
		wantOut  int64
		attempts int64 // attempts that reported usage (their input counted)
	}{
		{"C answers 503", upstreamtest.Status5xx(http.StatusServiceUnavailable), 5, 2},
		{"C fails at once with its usage", upstreamtest.Script{Frames: []upstreamtest.Frame{
			upstreamtest.SSEEvent([]byte(`{"type":"response.created","sequence_number":0,"response":{"id":"{{id}}","object":"response","status":"in_progress","model":"{{model}}","output":[]}}`)),
			upstreamtest.SSEEvent([]byte(`{"type":"response.failed","sequence_number":1,"response":{"id":"{{id}}","object":"response","status":"failed",` +
				`"model":"{{model}}","output":[],"error":{"code":"server_error","message":"boom"},` +
				`"usage":{"input_tokens":8,"output_tokens":0,"total_tokens":8}}}`)),
		}}, 5, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := threeTargetHarness(t, 300*time.Millisecond, harnessConfig{})
			h.ups["P"].Enqueue(a.FailAfterDeltas(3, "server_error"))
			h.ups["B"].Enqueue(a.FailAfterDeltas(2, "server_error"))
			h.ups["C"].Enqueue(tc.c)
			_, evs := postWith(t, h, "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, nil)
			last := evs[len(evs)-1]
			if eventType(last) != "response.failed" || h.ups["C"].RequestCount() != 1 {
				t.Fatalf("stream ended with %s (C asked %d times); want response.failed after C", last.Data, h.ups["C"].RequestCount())
			}
			in := gjson.GetBytes(last.Data, "response.usage.input_tokens").Int()
			out := gjson.GetBytes(last.Data, "response.usage.output_tokens").Int()
			if in != 8*tc.attempts || out != tc.wantOut { // the fake reports 8 input tokens an attempt
				t.Fatalf("response.failed usage %d in / %d out, want every attempt's summed: %d / %d", in, out, 8*tc.attempts, tc.wantOut)
			}
			waitAccessLines(t, h, 1)
			line := grepLines(h.logs.String(), "access: request")
			if !strings.Contains(line, fmt.Sprintf("input_tokens=%d output_tokens=%d", in, out)) {
				t.Fatalf("access line does not charge %d in / %d out: %s", in, out, line)
			}
		})
	}
}
