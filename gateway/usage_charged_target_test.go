package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// attemptSpans is the attempt (client) spans among spans, which must
// number n.
func attemptSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	clients := spansOfKind(spans, trace.SpanKindClient)
	if len(clients) != n {
		t.Fatalf("%d attempt spans, want %d", len(clients), n)
	}
	return clients
}

// A continued stream's usage is charged to the target that produced it
// (README "Keys, limits and usage"). P streams and is cut; its continuation
// on B either completes, and the stream's usage, every attempt's summed, is
// B's as the last target's; or B answers a 500, or is cut after its
// lifecycle events, before it adds anything: the stream ends with P's
// failure, and the usage (P's deltas, estimated) stays with P, in the
// per-target usage series and on P's attempt span, never on B's, which
// produced nothing. The request span names the model P's upstream served.
func TestUsageOfAContinuedStreamIsChargedToTheTargetThatProducedIt(t *testing.T) {
	serverError := upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusInternalServerError,
		upstreamtest.ErrorBody("boom", "server_error", "server_error", ""))
	for _, tc := range []struct {
		name     string
		b        []upstreamtest.Script
		terminal string
		charged  string // the target the usage series name
		output   string // their output tokens
		attempt  int64  // the attempt span that carries the usage
	}{
		{"continuation failed", []upstreamtest.Script{serverError, serverError}, "response.failed", "P", "2", 0},
		{"continuation cut before its first delta", []upstreamtest.Script{upstreamtest.CutAfter(2)}, "response.failed", "P", "2", 0},
		{"continuation completed", []upstreamtest.Script{upstreamtest.Answer(fullAnswer, 3)}, "response.completed", "B", "5", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(2))
			for _, s := range tc.b {
				h.ups["B"].Enqueue(s)
			}
			_, evs := postWith(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`, nil)
			if len(evs) == 0 || eventType(evs[len(evs)-1]) != tc.terminal || h.ups["B"].RequestCount() != 1 {
				t.Fatalf("client got %d events, the last %s; B asked %d times; want %s after one continuation",
					len(evs), eventType(evs[len(evs)-1]), h.ups["B"].RequestCount(), tc.terminal)
			}
			waitAccessLine(t, h)

			m := h.metrics()
			usage := grepLines(m, "sluice_usage_")
			for _, series := range []string{
				`sluice_usage_requests_total{key="",model="m",route="m",target="` + tc.charged + `"} 1`,
				`sluice_usage_tokens_total{key="",kind="output",model="m",route="m",target="` + tc.charged + `"} ` + tc.output,
				`sluice_usage_estimated_requests_total{key="",model="m",route="m",target="` + tc.charged + `"} 1`,
			} {
				if !strings.Contains(m, series+"\n") {
					t.Errorf("want %s in:\n%s", series, usage)
				}
			}
			other := map[string]string{"P": "B", "B": "P"}[tc.charged]
			if strings.Contains(usage, `target="`+other+`"`) {
				t.Errorf("%s is charged usage; only %s produced the stream's:\n%s", other, tc.charged, usage)
			}

			spans := waitServerSpans(t, rec, 1)
			clients := attemptSpans(t, spans, 2)
			for _, as := range clients {
				at, _ := attrOf(as, "sluice.attempt")
				out, has := attrOf(as, "gen_ai.usage.output_tokens")
				switch {
				case at.AsInt64() == tc.attempt && (!has || strconv.FormatInt(out.AsInt64(), 10) != tc.output):
					t.Errorf("attempt %d (%s), which produced the output, has gen_ai.usage.output_tokens %q (set: %v), want %s",
						at.AsInt64(), targetOf(as), strconv.FormatInt(out.AsInt64(), 10), has, tc.output)
				case at.AsInt64() != tc.attempt && has:
					t.Errorf("attempt %d (%s) carries gen_ai.usage.output_tokens %s; the usage is attempt %d's",
						at.AsInt64(), targetOf(as), strconv.FormatInt(out.AsInt64(), 10), tc.attempt)
				}
			}
			server := spansOfKind(spans, trace.SpanKindServer)[0]
			if v, ok := attrOf(server, "gen_ai.response.model"); !ok || v.AsString() != "m" {
				t.Errorf("request span gen_ai.response.model = %q (set: %v), want the served model m", v.AsString(), ok)
			}
		})
	}
}

func targetOf(s sdktrace.ReadOnlySpan) string {
	v, _ := attrOf(s, "sluice.target")
	return v.AsString()
}
