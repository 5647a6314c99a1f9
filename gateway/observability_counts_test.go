package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// attemptsOfUpstream sums sluice_upstream_attempts_total over the outcomes
// of one upstream, and lists the series it read.
func attemptsOfUpstream(page, upstream string) (total float64, series []string) {
	for _, l := range strings.Split(page, "\n") {
		if !strings.HasPrefix(l, "sluice_upstream_attempts_total{") || !strings.Contains(l, `upstream="`+upstream+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
			total += v
			series = append(series, l)
		}
	}
	return total, series
}

// TestFaultBeforeFirstEventCountsOneAttempt: one request sent to an
// upstream is one count in sluice_upstream_attempts_total (its Help:
// "Requests sent to upstreams"), by its cause, when a stream that broke or
// could not be read before its first event is replayed on the next target,
// and when a JSON answer's body is cut after its headers (README
// "Observability").
func TestFaultBeforeFirstEventCountsOneAttempt(t *testing.T) {
	faults := beforeFirstEvent()
	faults["cut after the lifecycle events"] = upstreamtest.CutAfter(2) // response.created, response.in_progress, then the close
	outcome := map[string]string{"cut": "cut_before_first_event", "cut after the lifecycle events": "cut_before_first_event",
		"garbage": "unparseable_event", "oversize": "oversize_event", "done": "cut_before_first_event"}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			h := routedPairHarness(t, nil, gateway.Options{MaxEventBytes: faultEventBytes})
			h.ups["A"].Enqueue(fault)
			_, evs := h.responsesStream(`{"model":"cm","stream":true,"input":"hi"}`)
			if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
				t.Fatalf("the stream ended with %s, want B's answer", last.typ)
			}
			if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 1 {
				t.Fatalf("A got %d requests, B %d; want one each (one replay)", a, b)
			}
			m := h.metrics()
			total, series := attemptsOfUpstream(m, "A")
			want := `sluice_upstream_attempts_total{outcome="` + outcome[name] + `",upstream="A"} 1`
			if total != 1 || !strings.Contains(m, want+"\n") {
				t.Fatalf("A's one request counted %v times, want once as %s:\n%s", total, want, strings.Join(series, "\n"))
			}
		})
	}
	t.Run("JSON body cut after its headers", func(t *testing.T) {
		h := routedPairHarness(t, nil, gateway.Options{})
		h.ups["A"].Enqueue(upstreamtest.Script{BodyPrefix: 6, End: upstreamtest.EndCut})
		resp, body := postWithin(t, h, 30*time.Second, "/v1/responses", `{"model":"cm","input":"hi"}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Hello from B") {
			t.Fatalf("%d %s, want B's answer", resp.StatusCode, body)
		}
		if total, series := attemptsOfUpstream(h.metrics(), "A"); total != 1 {
			t.Fatalf("A's one request counted %v times:\n%s", total, strings.Join(series, "\n"))
		}
	})
}

// TestResumeKeepalivesOnlyWhileNothingIsWritten: a resume that follows a
// stream whose events keep coming (every 40ms) gets no ": keepalive" and
// none is counted: keepalives come once nothing was written for a
// timeouts.keepalive period (README "Continuation"), following a log held
// here or, on another replica, through the store. The live client gets
// none either.
func TestResumeKeepalivesOnlyWhileNothingIsWritten(t *testing.T) {
	busy := func() upstreamtest.Script {
		a := upstreamtest.Answer(longText, 30)
		a.Gap = 40 * time.Millisecond // far shorter than timeouts.keepalive: never silent
		return a
	}
	const keepAlive = 250 * time.Millisecond
	follow := func(t *testing.T, running, resumer *harness) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		live := sseLines(t, ctx, http.MethodPost, running.url+"/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		first := <-live.events
		id := gjson.Get(first, "response.id").Str
		if id == "" {
			t.Fatalf("first event without a response id: %s", first)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if status, _ := resumer.call(http.MethodGet, "/v1/responses/"+id, clientKey); status == http.StatusOK {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the resuming gateway answers %d for the response", status)
			}
		}
		resumed := sseLines(t, ctx, http.MethodGet, fmt.Sprintf("%s/v1/responses/%s?stream=true&starting_after=0", resumer.url, id), "")
		text := ""
		for d := range resumed.events {
			text += gjson.Get(d, "delta").Str
		}
		for range live.events {
		}
		if resumed.terminal != "response.completed" || text != longText {
			t.Fatalf("the resume ended with %q, text %q", resumed.terminal, text)
		}
		if resumed.keepalives != 0 || live.keepalives != 0 {
			t.Fatalf("the resumer got %d keepalives, the live client %d, while events came every 40ms (timeouts.keepalive %v)",
				resumed.keepalives, live.keepalives, keepAlive)
		}
		for _, h := range []*harness{running, resumer} {
			if m := h.metrics(); strings.Contains(m, "sluice_keepalives_total{") {
				t.Fatalf("keepalives counted while events came every 40ms:\n%s", grep(m, "keepalives"))
			}
		}
	}
	t.Run("a log held here", func(t *testing.T) {
		h := newHarness(t, harnessConfig{opts: gateway.Options{KeepAlive: keepAlive, LifecycleHold: -1}})
		h.ups["A"].Enqueue(busy())
		follow(t, h, h)
	})
	t.Run("through the store", func(t *testing.T) {
		up, replica := redisReplicas(t, gateway.Options{KeepAlive: keepAlive, LifecycleHold: -1})
		running, other := replica(), replica()
		up.Enqueue(busy())
		follow(t, running, other)
	})
}

// TestGatewayFailureBeforeContentHasItsFirstEventTime: a Responses stream
// whose every target failed before content gets the gateway's own
// response.created and response.failed; that response.created is the
// client's first event: the access line has its ttfe and
// sluice_time_to_first_event_seconds observes it, as for any stream.
func TestGatewayFailureBeforeContentHasItsFirstEventTime(t *testing.T) {
	h := routedPairHarness(t, nil, gateway.Options{})
	h.ups["A"].Enqueue(upstreamtest.CutAfter(0))
	h.ups["B"].Enqueue(upstreamtest.CutAfter(0))
	resp, evs := h.streamEvents("/v1/responses", `{"model":"cm","stream":true,"input":"hi"}`)
	if resp.StatusCode != http.StatusOK || len(evs) != 2 || eventType(evs[0]) != "response.created" || eventType(evs[1]) != "response.failed" {
		t.Fatalf("%d with %d events, want 200 with response.created then response.failed", resp.StatusCode, len(evs))
	}
	requestID := resp.Header.Get("X-Request-Id")
	waitAccessLinesOf(t, h, requestID, 1)
	if line := accessLinesOf(h, requestID)[0]; line["ttfe"] == "" || line["surface"] != "responses_stream" {
		t.Errorf("the access line has ttfe %q (surface %s), want the first event's time", line["ttfe"], line["surface"])
	}
	m := h.metrics()
	if v := metricValue(m, `sluice_time_to_first_event_seconds_count{surface="responses_stream"}`); v != 1 {
		t.Errorf("time to first event observed %v times, want once:\n%s", v, grep(m, "time_to_first_event_seconds_count"))
	}
}

// TestBackgroundRunEndsUnderItsRequestSurface: a background create without
// stream is counted, logged and traced as responses_json; its run's end is
// counted in sluice_stream_terminal_total under that surface too, not as a
// client stream that never existed (README "Access log").
func TestBackgroundRunEndsUnderItsRequestSurface(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(upstreamtest.Answer("one two three four", 4))
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id, requestID := gjson.GetBytes(b, "id").Str, resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("background create: %d %s", resp.StatusCode, b)
	}
	waitAccessLinesOf(t, h, requestID, 2)
	lines := accessLinesOf(h, requestID)
	if end := lines[len(lines)-1]; end["background"] != "ended" || end["reason"] != "completed" || end["surface"] != "responses_json" {
		t.Fatalf("the run's end line: %v", end)
	}
	m := h.metrics()
	if v := metricValue(m, `sluice_stream_terminal_total{reason="completed",surface="responses_json"}`); v != 1 {
		t.Errorf("the run's end counted %v times under responses_json:\n%s", v, grep(m, "sluice_stream_terminal_total"))
	}
	if strings.Contains(m, `sluice_stream_terminal_total{reason="completed",surface="responses_stream"}`) {
		t.Errorf("the run's end counted as a client stream:\n%s", grep(m, "sluice_stream_terminal_total"))
	}
}

// TestFailedContinuationAttemptSpanNamesItsOwnFailure: a continuation
// target that answers 500 ends the stream with the failure that started
// the rescue (the cut), but its attempt span's sluice.failure and status
// name its own failure, the 500, as every failed attempt's span does.
func TestFailedContinuationAttemptSpanNamesItsOwnFailure(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Status5xx(500))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s, want the cut's response.failed", last.typ, last.code)
	}
	spans := waitServerSpans(t, rec, 1)
	var cont, cut []string
	for _, s := range spansOfKind(spans, trace.SpanKindClient) {
		n, _ := attrOf(s, "sluice.attempt")
		failure, _ := attrOf(s, "sluice.failure")
		status, _ := attrOf(s, "http.response.status_code")
		desc := fmt.Sprintf("attempt %d: status %d, %v %q, sluice.failure %q", n.AsInt64(), status.AsInt64(), s.Status().Code, s.Status().Description, failure.AsString())
		if status.AsInt64() == http.StatusInternalServerError {
			cont = append(cont, desc)
			if s.Status().Code != codes.Error || !strings.Contains(failure.AsString(), "500") || s.Status().Description != failure.AsString() {
				t.Errorf("the continuation attempt's span does not name its own failure: %s", desc)
			}
		} else {
			cut = append(cut, desc)
		}
	}
	if len(cont) != 1 || len(cut) != 1 {
		t.Fatalf("attempt spans: continuation %v, cut %v; want one each", cont, cut)
	}
}

// TestRescuesHelpSaysOneCountPerAttempt: a stream whose refused prefill is
// restarted, and completes, counts two continuation attempts in
// sluice_rescues_total (prefill_refused, then the restart's completed), and
// the metric's Help says a count is an attempt, not a rescued stream, as
// README's outcome list (prefill_refused, target_failed, continued) implies.
func TestRescuesHelpSaysOneCountPerAttempt(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B", RefusePrefill: true}}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s, want the restart's completion", last.typ)
	}
	m := h.waitMetric(`sluice_rescues_total{kind="restart",outcome="completed",surface="responses_stream"} 1`)
	if v := metricValue(m, `sluice_rescues_total{kind="prefill",outcome="prefill_refused",surface="responses_stream"}`); v != 1 {
		t.Fatalf("prefill_refused counted %v times:\n%s", v, grep(m, "sluice_rescues_total"))
	}
	resp, err := http.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	help := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if h, ok := strings.CutPrefix(sc.Text(), "# HELP sluice_rescues_total "); ok {
			help = h
		}
	}
	if !strings.Contains(help, "one count per attempt") {
		t.Fatalf("sluice_rescues_total's Help %q does not say what one count is", help)
	}
}
