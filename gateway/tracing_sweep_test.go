package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestTracingBoundsTheClientsModel: the model a client chose reaches the
// spans cut to 128 bytes and without control characters, as on the access
// line (README "Access log"), in the attempt span's name and in every
// attribute that names it: one request must not make a span, and the
// export batch it shares with other clients' spans, megabytes long.
func TestTracingBoundsTheClientsModel(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	model := "gpt-fake-1\x07" + strings.Repeat("y", 20000)
	resp, _ := postWith(t, h, "/v1/responses", `{"model":"`+strings.ReplaceAll(model, "\x07", `\u0007`)+`","input":"hi","stream":true}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client got %d", resp.StatusCode)
	}
	spans := waitServerSpans(t, rec, 1)
	if len(spansOfKind(spans, trace.SpanKindClient)) != 1 {
		t.Fatalf("%d spans, want a request and an attempt", len(spans))
	}
	bounded := func(what, v string) {
		t.Helper()
		if len(v) > 128 || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			t.Errorf("%s is %d bytes (control characters: %v), want at most 128 and none", what, len(v), strings.IndexFunc(v, unicode.IsControl) >= 0)
		}
	}
	for _, s := range spans {
		name, _ := strings.CutPrefix(s.Name(), "chat ")
		bounded("span name "+s.Name()[:min(len(s.Name()), 20)], name)
		for _, kv := range s.Attributes() {
			switch kv.Value.Type() {
			case attribute.STRING:
				bounded(string(kv.Key), kv.Value.AsString())
			case attribute.STRINGSLICE:
				for _, v := range kv.Value.AsStringSlice() {
					bounded(string(kv.Key), v)
				}
			}
		}
	}
	rs := spansOfKind(spans, trace.SpanKindServer)[0]
	if v, _ := attrOf(rs, "gen_ai.request.model"); !strings.HasPrefix(v.AsString(), "gpt-fake-1yyy") {
		t.Errorf("request span gen_ai.request.model %q…, want the client's, cleaned", v.AsString()[:min(len(v.AsString()), 20)])
	}
}

// TestTracingFailedStreamIsAnError: a stream cut with nothing to continue
// it ends with the gateway's failure (Responses: response.failed; Chat: an
// error chunk, then [DONE]); on either endpoint the request span's status
// is ERROR, and the attempt that ended it is ERROR with sluice.failure
// (README "Tracing": one rule for a request that failed).
func TestTracingFailedStreamIsAnError(t *testing.T) {
	for _, tc := range []struct{ name, path, body string }{
		{"responses", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`},
		{"chat", "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			h.ups["A"].Enqueue(upstreamtest.Answer("one two three four", 4).CutAfterDeltas(2))
			_, _ = postWith(t, h, tc.path, tc.body, nil)
			spans := waitServerSpans(t, rec, 1)
			rs, attempts := spansOfKind(spans, trace.SpanKindServer)[0], spansOfKind(spans, trace.SpanKindClient)
			if v, _ := attrOf(rs, "error.type"); v.AsString() != "stream_incomplete" {
				t.Fatalf("error.type %q, want stream_incomplete: the client did not get the gateway's failure", v.AsString())
			}
			if rs.Status().Code != codes.Error {
				t.Errorf("request span status %v, want Error", rs.Status())
			}
			if len(attempts) != 1 {
				t.Fatalf("%d attempt spans, want 1", len(attempts))
			}
			if as := attempts[0]; as.Status().Code != codes.Error {
				t.Errorf("attempt span status %v, want Error", as.Status())
			} else if v, _ := attrOf(as, "sluice.failure"); v.AsString() != "upstream_cut" {
				t.Errorf("attempt sluice.failure %q, want upstream_cut", v.AsString())
			}
		})
	}
}

// TestTracingChatFinishReasonsWithSpacedJSON: a Chat upstream that writes
// JSON with a space after the colon ("finish_reason": "stop", as
// Python-based servers do) gets its finish reason into the spans, as
// compact JSON does.
func TestTracingChatFinishReasonsWithSpacedJSON(t *testing.T) {
	chunk := func(s string) upstreamtest.Frame { return upstreamtest.SSEData([]byte(s)) }
	for _, tc := range []struct{ name, sep string }{{"compact", ""}, {"spaced", " "}} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}, opts: gateway.Options{TracerProvider: tp}})
			c := tc.sep
			head := `{"id":` + c + `"chatcmpl-1",` + c + `"object":` + c + `"chat.completion.chunk",` + c + `"created":` + c + `1,` + c + `"model":` + c + `"gpt-fake-1",` + c + `"choices":` + c
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
				chunk(head + `[{"index":` + c + `0,` + c + `"delta":` + c + `{"role":` + c + `"assistant",` + c + `"content":` + c + `"hi"},` + c + `"finish_reason":` + c + `null}]}`),
				chunk(head + `[{"index":` + c + `0,` + c + `"delta":` + c + `{},` + c + `"finish_reason":` + c + `"stop"}]}`),
				chunk("[DONE]"),
			}})
			_, _ = postWith(t, h, "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`, nil)
			spans := waitServerSpans(t, rec, 1)
			for _, s := range spans {
				if v, _ := attrOf(s, "gen_ai.response.finish_reasons"); len(v.AsStringSlice()) != 1 || v.AsStringSlice()[0] != "stop" {
					t.Errorf("%s span finish reasons %v, want [stop]", s.Name(), v.AsStringSlice())
				}
			}
		})
	}
}

// TestTracingFirstTokenTimeoutNamesIt: an attempt left at first_token,
// whose client saw only the lifecycle events, says so in its span
// (sluice.failure: the first_token timeout, not a failure after content),
// and the next target continues the stream.
func TestTracingFirstTokenTimeoutNamesIt(t *testing.T) {
	tp, rec := recordedSpans(t)
	route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: 300 * time.Millisecond,
		Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts:      gateway.Options{TracerProvider: tp, Routes: []gateway.Route{route}, LifecycleHold: 50 * time.Millisecond, IdleTimeout: 20 * time.Second},
	})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(2)) // response.created, response.in_progress, then nothing
	_, evs := h.responsesStream(`{"model":"gpt-5-mini","input":"hi","stream":true}`)
	if len(evs) == 0 || evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the stream did not complete on B")
	}
	spans := waitServerSpans(t, rec, 1)
	var a sdktrace.ReadOnlySpan
	for _, s := range spansOfKind(spans, trace.SpanKindClient) {
		if v, _ := attrOf(s, "sluice.attempt"); v.AsInt64() == 0 {
			a = s
		}
	}
	if a == nil {
		t.Fatalf("no first attempt among %d spans", len(spans))
	}
	v, _ := attrOf(a, "sluice.failure")
	if !strings.Contains(v.AsString(), "first_token_timeout") || strings.Contains(v.AsString(), "after content") {
		t.Errorf("A's sluice.failure %q, want it to name the first_token timeout", v.AsString())
	}
	if a.Status().Description != v.AsString() {
		t.Errorf("A's status %q, want its sluice.failure", a.Status().Description)
	}
}

// TestTracingRescueSaysWhatTheLoopDid: an attempt whose failure asks for a
// replay on another target says replay_other_target when another target
// took the request, and stop when none was left (README "Tracing":
// sluice.rescue is what the attempt loop did next).
func TestTracingRescueSaysWhatTheLoopDid(t *testing.T) {
	overloaded := upstreamtest.Failure(upstreamtest.ShapeFailed, http.StatusServiceUnavailable,
		upstreamtest.ErrorBody("overloaded", "server_error", "server_is_overloaded", ""))
	for _, tc := range []struct {
		name    string
		targets []gateway.RouteTarget
		want    string
	}{
		{"another target", []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}, "replay_other_target"},
		{"no other target", []gateway.RouteTarget{{Upstream: "A"}}, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{
				upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
				opts: gateway.Options{TracerProvider: tp,
					Routes: []gateway.Route{{Models: []string{"gpt-fake-1"}, Targets: tc.targets}}},
			})
			h.ups["A"].Enqueue(overloaded)
			_, _ = postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
			spans := waitServerSpans(t, rec, 1)
			attempts := spansOfKind(spans, trace.SpanKindClient)
			if len(attempts) != len(tc.targets) {
				t.Fatalf("%d attempt spans, want %d", len(attempts), len(tc.targets))
			}
			for _, s := range attempts {
				if v, _ := attrOf(s, "sluice.attempt"); v.AsInt64() != 0 {
					continue
				}
				if v, _ := attrOf(s, "sluice.rescue"); v.AsString() != tc.want {
					t.Errorf("A's sluice.rescue %q, want %q", v.AsString(), tc.want)
				}
				if s.Status().Code != codes.Error || s.EndTime().Before(s.StartTime()) {
					t.Errorf("A's span status %v, %v–%v", s.Status(), s.StartTime(), s.EndTime())
				}
			}
		})
	}
}

// TestTracingSpentRetrySaysNextTarget: A answers 500 twice and the replay
// policy asks for the same target each time. The first attempt is retried
// on A (retry_same_target); the retry may not be retried again (once per
// target), so the loop moves on to B, and that attempt's sluice.rescue
// says what the loop did (next_target), not the retry it was not given.
func TestTracingSpentRetrySaysNextTarget(t *testing.T) {
	tp, rec := recordedSpans(t)
	always := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
		return hostabi.ReplaySameUpstream, true
	}}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts: gateway.Options{TracerProvider: tp, Policy: always,
			Routes: []gateway.Route{{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}},
	})
	h.ups["A"].Enqueue(upstreamtest.Status5xx(http.StatusInternalServerError), upstreamtest.Status5xx(http.StatusInternalServerError))
	_, _ = postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
	spans := waitServerSpans(t, rec, 1)
	want := map[int64]string{0: "retry_same_target", 1: "next_target", 2: "done"}
	attempts := spansOfKind(spans, trace.SpanKindClient)
	if len(attempts) != len(want) || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("%d attempt spans, want %d; B called %d times", len(attempts), len(want), h.ups["B"].RequestCount())
	}
	for _, s := range attempts {
		n, _ := attrOf(s, "sluice.attempt")
		if v, _ := attrOf(s, "sluice.rescue"); v.AsString() != want[n.AsInt64()] {
			t.Errorf("attempt %d: sluice.rescue %q, want %q", n.AsInt64(), v.AsString(), want[n.AsInt64()])
		}
	}
}
