package gateway_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// otlpReceiver is an OTLP/HTTP collector: it accepts POST /v1/traces
// (protobuf) and keeps the spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	paths []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.paths = append(r.paths, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var ex coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range ex.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// waitSpans waits until n spans have arrived.
func (r *otlpReceiver) waitSpans(t *testing.T, n int) []*tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		got := append([]*tracepb.Span(nil), r.spans...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans arrived, want %d (requests: %v)", len(got), n, r.paths)
		}
	}
}

func spanAttr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func spanByKind(t *testing.T, spans []*tracepb.Span, kind tracepb.Span_SpanKind) []*tracepb.Span {
	t.Helper()
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// postWith posts body to path with extra headers and reads the SSE events.
func postWith(t *testing.T, h *harness, path, body string, hdr map[string]string) (*http.Response, []sse.Event) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 64<<20)
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			return resp, evs
		}
		evs = append(evs, ev.Clone())
	}
}

const (
	clientTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParentSpan = "00f067aa0ba902b7"
	clientTraceparen = "00-" + clientTraceID + "-" + clientParentSpan + "-01"
)

// TestTracingSpansReachTheCollector: with a tracer provider, a request is a
// server span whose parent is the client's traceparent, each attempt a
// client span under it with the GenAI attributes, and the upstream gets a
// traceparent of the same trace whose parent is the attempt span. A failed
// attempt shows its rescue decision.
func TestTracingSpansReachTheCollector(t *testing.T) {
	recv := newOTLPReceiver(t)
	tp, err := gateway.NewOTLPTracerProvider(context.Background(), recv.URL+"/v1/traces", 1, "test")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}, opts: gateway.Options{
		TracerProvider: tp,
		Routes:         []gateway.Route{{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}},
	}})
	h.ups["A"].Enqueue(upstreamtest.Status5xx(http.StatusInternalServerError))
	_, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, map[string]string{"traceparent": clientTraceparen})
	if len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("client got %d events, last %v", len(evs), evs)
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := recv.waitSpans(t, 3)
	servers, clients := spanByKind(t, spans, tracepb.Span_SPAN_KIND_SERVER), spanByKind(t, spans, tracepb.Span_SPAN_KIND_CLIENT)
	if len(servers) != 1 || len(clients) != 2 {
		t.Fatalf("%d server spans, %d client spans; want 1 and 2", len(servers), len(clients))
	}
	rs := servers[0]
	if hex.EncodeToString(rs.TraceId) != clientTraceID || hex.EncodeToString(rs.ParentSpanId) != clientParentSpan {
		t.Fatalf("request span trace %x parent %x; want the client's", rs.TraceId, rs.ParentSpanId)
	}
	for key, want := range map[string]string{"gen_ai.request.model": "gpt-fake-1", "gen_ai.response.model": "gpt-fake-1",
		"gen_ai.system": "openai", "gen_ai.provider.name": "openai", "sluice.route": "gpt-fake-1", "sluice.target": "A/gpt-fake-1"} {
		if v := spanAttr(rs, key); v.GetStringValue() != want {
			t.Errorf("request span %s = %v, want %q", key, v, want)
		}
	}
	for _, key := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
		if v := spanAttr(rs, key); v.GetIntValue() <= 0 {
			t.Errorf("request span %s = %v", key, v)
		}
	}
	// The fake reports no cached input and no reasoning tokens: neither
	// attribute is set.
	for _, key := range []string{"gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.reasoning.output_tokens"} {
		if v := spanAttr(rs, key); v != nil {
			t.Errorf("request span has %s = %v without such tokens", key, v)
		}
	}
	if v := spanAttr(rs, "http.response.status_code"); v.GetIntValue() != 200 {
		t.Errorf("request span status %v", v)
	}
	if v := spanAttr(rs, "gen_ai.response.finish_reasons").GetArrayValue(); len(v.GetValues()) != 1 || v.Values[0].GetStringValue() != "stop" {
		t.Errorf("request span finish reasons %v", v)
	}
	attempts := make([]*tracepb.Span, len(clients))
	for _, c := range clients {
		if hex.EncodeToString(c.TraceId) != clientTraceID || !bytes.Equal(c.ParentSpanId, rs.SpanId) {
			t.Fatalf("attempt span trace %x parent %x; want a child of the request span %x", c.TraceId, c.ParentSpanId, rs.SpanId)
		}
		n := spanAttr(c, "sluice.attempt").GetIntValue()
		if n < 0 || int(n) >= len(attempts) || attempts[n] != nil {
			t.Fatalf("attempt number %d", n)
		}
		attempts[n] = c
	}
	// The 500 is retried on the same target (the default failure table),
	// which answers.
	a, b := attempts[0], attempts[1]
	if v := spanAttr(a, "sluice.rescue").GetStringValue(); v != "retry_same_target" {
		t.Errorf("the first attempt's rescue decision %q, want retry_same_target", v)
	}
	if v := spanAttr(a, "http.response.status_code").GetIntValue(); v != 500 {
		t.Errorf("the first attempt's status %d", v)
	}
	if a.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the first attempt's span status %v", a.Status)
	}
	if v := spanAttr(b, "sluice.rescue").GetStringValue(); v != "done" {
		t.Errorf("the second attempt's rescue decision %q", v)
	}
	for key, want := range map[string]string{"server.address": "127.0.0.1", "gen_ai.request.model": "gpt-fake-1", "gen_ai.response.model": "gpt-fake-1",
		"sluice.route": "gpt-fake-1", "sluice.target": "A/gpt-fake-1", "gen_ai.provider.name": "openai"} {
		if v := spanAttr(b, key); v.GetStringValue() != want {
			t.Errorf("the second attempt's %s = %v, want %q", key, v, want)
		}
	}
	if v := spanAttr(b, "gen_ai.usage.output_tokens"); v.GetIntValue() <= 0 {
		t.Errorf("the second attempt's output tokens %v", v)
	}
	// The upstream got the trace, each request with its attempt span as parent.
	reqs := h.ups["A"].Requests()
	if len(reqs) != 2 || h.ups["B"].RequestCount() != 0 {
		t.Fatalf("A got %d requests, B %d", len(reqs), h.ups["B"].RequestCount())
	}
	for i, sp := range attempts {
		want := "00-" + clientTraceID + "-" + hex.EncodeToString(sp.SpanId) + "-01"
		if got := reqs[i].Header.Get("Traceparent"); got != want {
			t.Errorf("request %d got traceparent %q, want %q", i, got, want)
		}
	}
}

// TestTracingStartsATraceWithoutAClientTraceparent: a client that sends no
// traceparent gets a new trace, and a Chat client's finish reason is noted.
func TestTracingStartsATraceWithoutAClientTraceparent(t *testing.T) {
	recv := newOTLPReceiver(t)
	tp, err := gateway.NewOTLPTracerProvider(context.Background(), recv.URL+"/v1/traces", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	_, evs := postWith(t, h, "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("chat stream: %v", evs)
	}
	_ = tp.ForceFlush(context.Background())
	spans := recv.waitSpans(t, 2)
	rs := spanByKind(t, spans, tracepb.Span_SPAN_KIND_SERVER)
	if len(rs) != 1 || len(rs[0].ParentSpanId) != 0 {
		t.Fatalf("request spans %v", rs)
	}
	if v := spanAttr(rs[0], "gen_ai.response.finish_reasons").GetArrayValue(); len(v.GetValues()) != 1 || v.Values[0].GetStringValue() != "stop" {
		t.Errorf("finish reasons %v", v)
	}
	if v := spanAttr(rs[0], "gen_ai.usage.output_tokens"); v.GetIntValue() <= 0 {
		t.Errorf("output tokens %v (the gateway asks a Chat upstream for usage)", v)
	}
	tpHdr := h.ups["A"].Requests()[0].Header.Get("Traceparent")
	if !strings.HasPrefix(tpHdr, "00-"+hex.EncodeToString(rs[0].TraceId)+"-") {
		t.Fatalf("upstream traceparent %q, trace %x", tpHdr, rs[0].TraceId)
	}
	// Shutdown flushes and stops the provider it owns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("x").Start(context.Background(), "after")
	if span.IsRecording() {
		t.Fatal("the provider still records after Shutdown")
	}
}

// TestTracingOffInventsNoTraceparent: without a tracer provider the gateway
// adds no traceparent, and a client's passes through unchanged.
func TestTracingOffInventsNoTraceparent(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
	postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, map[string]string{"traceparent": clientTraceparen, "tracestate": "k=v"})
	reqs := h.ups["A"].Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if v := reqs[0].Header.Values("Traceparent"); len(v) != 0 {
		t.Fatalf("a traceparent was invented: %v", v)
	}
	if v, s := reqs[1].Header.Get("Traceparent"), reqs[1].Header.Get("Tracestate"); v != clientTraceparen || s != "k=v" {
		t.Fatalf("the client's trace context changed: %q %q", v, s)
	}
}
