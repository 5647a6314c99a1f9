package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// recordedSpans is a tracer provider that keeps the ended spans in memory.
func recordedSpans(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec
}

// waitServerSpans waits until n server spans have ended (a request's span
// ends after its client got the answer), and returns every ended span.
func waitServerSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		spans := rec.Ended()
		if len(spansOfKind(spans, trace.SpanKindServer)) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d server spans", len(spans), n)
		}
	}
}

func spansOfKind(spans []sdktrace.ReadOnlySpan, kind trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTracingCutAttemptHoldsTheChargedUsage: a stream cut after content
// with nothing to continue it fails the request; the attempt that ended it
// is the failed one (ERROR, sluice.failure) and holds the tokens the client
// was charged, here an estimate, as the request span does (README
// "Tracing").
func TestTracingCutAttemptHoldsTheChargedUsage(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	h.ups["A"].Enqueue(upstreamtest.Answer("one two three four", 4).CutAfterDeltas(2))
	_, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
	if len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.failed" {
		t.Fatalf("client got %d events, last %v", len(evs), evs)
	}
	spans := waitServerSpans(t, rec, 1)
	servers, clients := spansOfKind(spans, trace.SpanKindServer), spansOfKind(spans, trace.SpanKindClient)
	if len(servers) != 1 || len(clients) != 1 {
		t.Fatalf("%d server spans, %d client spans; want 1 and 1", len(servers), len(clients))
	}
	rs, as := servers[0], clients[0]
	if rs.Status().Code != codes.Error {
		t.Fatalf("request span status %v, want Error", rs.Status())
	}
	for _, key := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
		want, ok := attrOf(rs, key)
		if !ok || want.AsInt64() <= 0 {
			t.Fatalf("request span %s = %v (set %v)", key, want.AsInt64(), ok)
		}
		if got, ok := attrOf(as, key); !ok || got.AsInt64() != want.AsInt64() {
			t.Errorf("attempt span %s = %v (set %v), want the request's %d", key, got.AsInt64(), ok, want.AsInt64())
		}
	}
	if v, _ := attrOf(as, "sluice.rescue"); v.AsString() != "stop" {
		t.Errorf("attempt sluice.rescue = %q, want stop: its cut failed the request", v.AsString())
	}
	if as.Status().Code != codes.Error {
		t.Errorf("attempt span status %v, want Error: its cut failed the request", as.Status())
	}
	if v, ok := attrOf(as, "sluice.failure"); !ok || v.AsString() == "" {
		t.Errorf("attempt span has no sluice.failure")
	}
	if as.EndTime().After(rs.EndTime()) || as.EndTime().Before(as.StartTime()) {
		t.Errorf("attempt span %v–%v, request span ends %v", as.StartTime(), as.EndTime(), rs.EndTime())
	}
}

// TestTracingCompletedAttemptIsNotFailed: the attempt that answered keeps
// an unset status and the request's usage.
func TestTracingCompletedAttemptIsNotFailed(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	_, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
	if len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("client got %d events, last %v", len(evs), evs)
	}
	spans := waitServerSpans(t, rec, 1)
	clients := spansOfKind(spans, trace.SpanKindClient)
	if len(clients) != 1 {
		t.Fatalf("%d client spans, want 1", len(clients))
	}
	as := clients[0]
	if as.Status().Code != codes.Unset {
		t.Errorf("attempt span status %v, want Unset", as.Status())
	}
	if _, ok := attrOf(as, "sluice.failure"); ok {
		t.Errorf("a completed attempt has sluice.failure")
	}
	if v, ok := attrOf(as, "gen_ai.usage.output_tokens"); !ok || v.AsInt64() <= 0 {
		t.Errorf("attempt span output tokens %v (set %v)", v.AsInt64(), ok)
	}
}

// TestTracingRefusedBodiesHaveARequestSpan: a request refused while its
// body is validated is a server span too (README "Tracing": each request
// is one), under the client's traceparent, with the refusal's status and
// code; no attempt span, and nothing reached the upstream.
func TestTracingRefusedBodiesHaveARequestSpan(t *testing.T) {
	for _, tc := range []struct {
		name, body, code string
	}{
		{"invalid type", `{"model":"gpt-fake-1","input":"x","stream":"notbool"}`, "invalid_type"},
		{"truncated JSON", `{"model":"gpt-fake-1","input":"x"`, ""},
		{"duplicate key", `{"model":"gpt-fake-1","model":"gpt-fake-2","input":"x"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			resp, _ := postWith(t, h, "/v1/responses", tc.body, map[string]string{"traceparent": clientTraceparen})
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("client got %d, want 400", resp.StatusCode)
			}
			spans := waitServerSpans(t, rec, 1)
			if len(spans) != 1 {
				t.Fatalf("%d spans, want only the request's", len(spans))
			}
			rs := spans[0]
			if rs.SpanKind() != trace.SpanKindServer || rs.Name() != "POST /v1/responses" {
				t.Fatalf("span %q kind %v", rs.Name(), rs.SpanKind())
			}
			if rs.Parent().TraceID().String() != clientTraceID || rs.Parent().SpanID().String() != clientParentSpan {
				t.Errorf("request span parent %v, want the client's", rs.Parent())
			}
			if v, _ := attrOf(rs, "http.response.status_code"); v.AsInt64() != http.StatusBadRequest {
				t.Errorf("request span status code %d", v.AsInt64())
			}
			v, ok := attrOf(rs, "error.type")
			if !ok || v.AsString() == "" || (tc.code != "" && v.AsString() != tc.code) {
				t.Errorf("request span error.type %q (set %v), want %q", v.AsString(), ok, tc.code)
			}
			if rs.Status().Code == codes.Error {
				t.Errorf("a client's error made the request span %v", rs.Status())
			}
			if n := h.ups["A"].RequestCount(); n != 0 {
				t.Errorf("the upstream got %d requests", n)
			}
		})
	}
}

// TestTracingRefusedWebSocketFrameHasARequestSpan: a WebSocket frame
// refused as it is read is a request too (README "Tracing"): it gets its
// server span, under the upgrade's traceparent, with the refusal's status
// and code.
func TestTracingRefusedWebSocketFrameHasARequestSpan(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	c := h.dialWS(map[string]string{"traceparent": clientTraceparen})
	evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","store":"yes"}`)
	if len(evs) != 1 || evs[0].typ != "error" {
		t.Fatalf("the frame got %d events, want one error frame", len(evs))
	}
	spans := waitServerSpans(t, rec, 1)
	rs := spans[0]
	if len(spans) != 1 || rs.Name() != "WS /v1/responses" || rs.Parent().TraceID().String() != clientTraceID {
		t.Fatalf("%d spans, the first %q under %v", len(spans), rs.Name(), rs.Parent())
	}
	if v, _ := attrOf(rs, "http.response.status_code"); v.AsInt64() != http.StatusBadRequest {
		t.Errorf("request span status code %d", v.AsInt64())
	}
	if v, _ := attrOf(rs, "error.type"); v.AsString() != "invalid_type" {
		t.Errorf("request span error.type %q, want invalid_type", v.AsString())
	}
}
