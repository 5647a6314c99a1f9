package otlphttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// collector is an OTLP/HTTP collector on 127.0.0.1: it decodes every
// request with the official collector type and answers with respond (nil:
// 200 and an empty ExportTraceServiceResponse).
type collector struct {
	*httptest.Server
	respond func(n int, w http.ResponseWriter, r *http.Request) // n counts requests from 1

	mu      sync.Mutex
	reqs    []*coltracepb.ExportTraceServiceRequest
	headers []http.Header
	errs    []string
}

func newCollector(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *collector {
	t.Helper()
	c := &collector{respond: respond}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	if !strings.HasPrefix(c.Listener.Addr().String(), "127.0.0.1:") {
		t.Fatalf("collector listens on %s, want 127.0.0.1", c.Listener.Addr())
	}
	t.Cleanup(c.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	c.mu.Lock()
	if err != nil {
		c.errs = append(c.errs, err.Error())
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		c.errs = append(c.errs, "got "+r.Method+" "+r.URL.Path)
	}
	c.reqs = append(c.reqs, &req)
	c.headers = append(c.headers, r.Header.Clone())
	n := len(c.reqs)
	c.mu.Unlock()
	if c.respond != nil {
		c.respond(n, w, r)
		return
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) requests(t *testing.T) []*coltracepb.ExportTraceServiceRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		t.Fatalf("collector: %v", c.errs)
	}
	return append([]*coltracepb.ExportTraceServiceRequest(nil), c.reqs...)
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

func (c *collector) tracesURL() string { return c.URL + "/v1/traces" }

// newExporter is New(url, opts...) shut down when the test ends.
func newExporter(t *testing.T, url string, opts ...Option) *Exporter {
	t.Helper()
	e, err := New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

// stubSpans are n ended spans (no provider) to export as they are.
func stubSpans(n int) []sdktrace.ReadOnlySpan {
	var stubs tracetest.SpanStubs
	for i := range n {
		stubs = append(stubs, tracetest.SpanStub{
			Name: "s",
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i + 1)}, TraceFlags: trace.FlagsSampled,
			}),
		})
	}
	return stubs.Snapshots()
}

func TestNewValidatesURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" when valid
	}{
		{"http://127.0.0.1:4318/v1/traces", ""},
		{"https://collector.example/v1/traces", ""},
		{"HTTP://collector.example:4318/otlp/v1/traces?tenant=a", ""},
		{"", "scheme must be http or https"},
		{"127.0.0.1:4318/v1/traces", "not a URL"},
		{"collector.example/v1/traces", "scheme must be http or https"},
		{"ftp://collector.example/v1/traces", "scheme must be http or https"},
		{"unix:///run/otel.sock", "scheme must be http or https"},
		{"http:///v1/traces", "has no host"},
		{"http://:4318/v1/traces", "has no host"},
		{"http:collector.example", "has no host"},
		{"http://[::1/v1/traces", "not a URL"},
		{"ftp://user:hunter2@collector.example/v1/traces", "scheme must be http or https"},
		{"http://user:hunter2@[::1/v1/traces", "not a URL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			e, err := New(tc.url)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = e.Shutdown(context.Background())
				return
			}
			if err == nil || e != nil {
				t.Fatalf("New = %v, %v; want an error", e, err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "otlphttp: ") {
				t.Errorf("error %q, want otlphttp: ...%s...", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func str(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}
func i64(n int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: n}}
}
func dbl(f float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
}
func boolean(b bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
}
func array(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}

func kvs(pairs ...any) []*commonpb.KeyValue {
	var out []*commonpb.KeyValue
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &commonpb.KeyValue{Key: pairs[i].(string), Value: pairs[i+1].(*commonpb.AnyValue)})
	}
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !proto.Equal(got.(proto.Message), want.(proto.Message)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestExportMapsEveryField exports, through a real provider with a
// synchronous processor, a span with every kind of field and checks each as
// the collector decodes it.
func TestExportMapsEveryField(t *testing.T) {
	c := newCollector(t, nil)
	exp := newExporter(t, c.tracesURL())
	const resSchema = "https://opentelemetry.io/schemas/1.26.0"
	res := resource.NewWithAttributes(resSchema, attribute.String("service.name", "sluice-test"), attribute.Int64("res.n", 7))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exp),
		sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
			AttributeValueLengthLimit: -1, AttributeCountLimit: 12, EventCountLimit: 2, LinkCountLimit: 2,
			AttributePerEventCountLimit: 1, AttributePerLinkCountLimit: 1,
		}),
	)
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("scope/a", trace.WithInstrumentationVersion("1.2.3"),
		trace.WithSchemaURL("https://example.com/scope-schema"),
		trace.WithInstrumentationAttributes(attribute.String("scope.attr", "x")))

	parentState, _ := trace.ParseTraceState("vendor=v1")
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
		SpanID:  trace.SpanID{0, 0xf0, 0x67, 0xaa, 1, 2, 3, 4}, TraceFlags: trace.FlagsSampled,
		TraceState: parentState, Remote: true,
	})
	linkState, _ := trace.ParseTraceState("lk=1")
	remoteLink := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9, 9}, TraceFlags: trace.FlagsSampled, TraceState: linkState, Remote: true,
	})
	localLink := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{8}, SpanID: trace.SpanID{8, 8}})
	start := time.Unix(1_700_000_000, 123)
	end := start.Add(1500 * time.Millisecond)

	ctx, span := tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "call upstream",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithLinks(
			trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}})}, // evicted
			trace.Link{SpanContext: remoteLink, Attributes: []attribute.KeyValue{attribute.String("link.a", "1"), attribute.String("link.b", "2")}},
			trace.Link{SpanContext: localLink},
		),
		trace.WithAttributes(
			attribute.Bool("a.bool", true),
			attribute.Int64("a.int", -42),
			attribute.Float64("a.float", 2.5),
			attribute.String("a.string", "héllo"),
			attribute.BoolSlice("a.bools", []bool{true, false}),
			attribute.Int64Slice("a.ints", []int64{1, -2, 3}),
			attribute.Float64Slice("a.floats", []float64{0.5, -1.25}),
			attribute.StringSlice("a.strings", []string{"x", "", "z"}),
			attribute.KeyValue{Key: "a.bytes", Value: attribute.ByteSliceValue([]byte{0, 1, 0xff})},
			attribute.KeyValue{Key: "a.slice", Value: attribute.SliceValue(attribute.StringValue("s"), attribute.Int64Value(5))},
			attribute.KeyValue{Key: "a.map", Value: attribute.MapValue(attribute.Bool("m.b", false))},
			attribute.KeyValue{Key: "a.empty"},
		))
	span.SetAttributes(attribute.String("over.1", "dropped"), attribute.String("over.2", "dropped"))
	span.AddEvent("e1", trace.WithTimestamp(start.Add(time.Millisecond))) // evicted
	span.AddEvent("e2", trace.WithTimestamp(start.Add(2*time.Millisecond)),
		trace.WithAttributes(attribute.Int("e.n", 1), attribute.Int("e.dropped", 2)))
	span.AddEvent("e3", trace.WithTimestamp(start.Add(3*time.Millisecond)))
	span.SetStatus(codes.Error, "boom")

	_, child := tracer.Start(ctx, "inner", trace.WithTimestamp(start.Add(time.Millisecond)))
	child.SetStatus(codes.Ok, "")
	child.End(trace.WithTimestamp(start.Add(2 * time.Millisecond)))
	span.End(trace.WithTimestamp(end))

	reqs := c.requests(t)
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2 (one per span)", len(reqs))
	}
	for i, req := range reqs {
		if len(req.ResourceSpans) != 1 || len(req.ResourceSpans[0].ScopeSpans) != 1 || len(req.ResourceSpans[0].ScopeSpans[0].Spans) != 1 {
			t.Fatalf("request %d: %v, want one resource, scope and span", i, req)
		}
		rs := req.ResourceSpans[0]
		if rs.SchemaUrl != resSchema {
			t.Errorf("resource schema_url %q", rs.SchemaUrl)
		}
		equal(t, "resource attributes", &commonpb.KeyValueList{Values: rs.Resource.Attributes},
			&commonpb.KeyValueList{Values: kvs("res.n", i64(7), "service.name", str("sluice-test"))})
		ss := rs.ScopeSpans[0]
		equal(t, "scope", ss.Scope, &commonpb.InstrumentationScope{Name: "scope/a", Version: "1.2.3", Attributes: kvs("scope.attr", str("x"))})
		if ss.SchemaUrl != "https://example.com/scope-schema" {
			t.Errorf("scope schema_url %q", ss.SchemaUrl)
		}
	}
	inner, outer := reqs[0].ResourceSpans[0].ScopeSpans[0].Spans[0], reqs[1].ResourceSpans[0].ScopeSpans[0].Spans[0]

	tid, sid, psid := parent.TraceID(), span.SpanContext().SpanID(), parent.SpanID()
	rlt, rls, llt, lls := remoteLink.TraceID(), remoteLink.SpanID(), localLink.TraceID(), localLink.SpanID()
	want := &tracepb.Span{
		TraceId:           tid[:],
		SpanId:            sid[:],
		TraceState:        "vendor=v1",
		ParentSpanId:      psid[:],
		Flags:             0x01 | 0x100 | 0x200, // sampled, parent remote-ness known, parent remote
		Name:              "call upstream",
		Kind:              tracepb.Span_SPAN_KIND_CLIENT,
		StartTimeUnixNano: uint64(start.UnixNano()),
		EndTimeUnixNano:   uint64(end.UnixNano()),
		Attributes: kvs(
			"a.bool", boolean(true),
			"a.int", i64(-42),
			"a.float", dbl(2.5),
			"a.string", str("héllo"),
			"a.bools", array(boolean(true), boolean(false)),
			"a.ints", array(i64(1), i64(-2), i64(3)),
			"a.floats", array(dbl(0.5), dbl(-1.25)),
			"a.strings", array(str("x"), str(""), str("z")),
			"a.bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 0xff}}},
			"a.slice", array(str("s"), i64(5)),
			"a.map", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs("m.b", boolean(false))}}},
			"a.empty", &commonpb.AnyValue{},
		),
		DroppedAttributesCount: 2,
		Events: []*tracepb.Span_Event{
			{TimeUnixNano: uint64(start.Add(2 * time.Millisecond).UnixNano()), Name: "e2", Attributes: kvs("e.n", i64(1)), DroppedAttributesCount: 1},
			{TimeUnixNano: uint64(start.Add(3 * time.Millisecond).UnixNano()), Name: "e3"},
		},
		DroppedEventsCount: 1,
		Links: []*tracepb.Span_Link{
			{TraceId: rlt[:], SpanId: rls[:], TraceState: "lk=1", Attributes: kvs("link.a", str("1")),
				DroppedAttributesCount: 1, Flags: 0x01 | 0x100 | 0x200},
			{TraceId: llt[:], SpanId: lls[:], Flags: 0x100}, // unsampled, not remote
		},
		DroppedLinksCount: 1,
		Status:            &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "boom"},
	}
	// The SDK keeps attributes in the order set; compare them by key.
	gotAttrs := map[string]*commonpb.AnyValue{}
	for _, kv := range outer.Attributes {
		gotAttrs[kv.Key] = kv.Value
	}
	if len(gotAttrs) != len(want.Attributes) {
		t.Errorf("%d attributes, want %d: %v", len(outer.Attributes), len(want.Attributes), outer.Attributes)
	}
	for _, kv := range want.Attributes {
		equal(t, "attribute "+kv.Key, gotAttrs[kv.Key], kv.Value)
	}
	outerCmp, wantCmp := proto.Clone(outer).(*tracepb.Span), proto.Clone(want).(*tracepb.Span)
	outerCmp.Attributes, wantCmp.Attributes = nil, nil
	equal(t, "span", outerCmp, wantCmp)

	isid, osid := child.SpanContext().SpanID(), sid
	wantInner := &tracepb.Span{
		TraceId: tid[:], SpanId: isid[:], TraceState: "vendor=v1", ParentSpanId: osid[:],
		Flags: 0x01 | 0x100, // a local parent
		Name:  "inner", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: uint64(start.Add(time.Millisecond).UnixNano()),
		EndTimeUnixNano:   uint64(start.Add(2 * time.Millisecond).UnixNano()),
		Status:            &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK},
	}
	equal(t, "inner span", inner, wantInner)
	if h := c.headers[0]; h.Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("Content-Type %q", h.Get("Content-Type"))
	}
}

// TestExportGroupsByResourceAndScope: one request holds one ResourceSpans
// per resource, and in it one ScopeSpans per scope, in first-seen order.
func TestExportGroupsByResourceAndScope(t *testing.T) {
	names := func(rs *tracepb.ResourceSpans) map[string][]string {
		out := map[string][]string{}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				out[ss.Scope.GetName()+"@"+ss.Scope.GetVersion()] = append(out[ss.Scope.GetName()+"@"+ss.Scope.GetVersion()], s.Name)
			}
		}
		return out
	}

	t.Run("provider", func(t *testing.T) {
		c := newCollector(t, nil)
		exp := newExporter(t, c.tracesURL())
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "g"))))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		a, b := tp.Tracer("scope/a", trace.WithInstrumentationVersion("1")), tp.Tracer("scope/b", trace.WithInstrumentationVersion("2"))
		a2 := tp.Tracer("scope/a", trace.WithInstrumentationVersion("2")) // another scope: same name, other version
		for _, s := range []struct {
			tr   trace.Tracer
			name string
		}{{a, "a1"}, {b, "b1"}, {a, "a2"}, {a2, "a2v2"}, {b, "b2"}} {
			_, sp := s.tr.Start(context.Background(), s.name)
			sp.End()
		}
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		reqs := c.requests(t)
		if len(reqs) != 1 || len(reqs[0].ResourceSpans) != 1 {
			t.Fatalf("requests %v, want one with one resource", reqs)
		}
		rs := reqs[0].ResourceSpans[0]
		if len(rs.ScopeSpans) != 3 {
			t.Fatalf("%d scopes, want 3", len(rs.ScopeSpans))
		}
		got := names(rs)
		for scope, want := range map[string][]string{"scope/a@1": {"a1", "a2"}, "scope/b@2": {"b1", "b2"}, "scope/a@2": {"a2v2"}} {
			if strings.Join(got[scope], ",") != strings.Join(want, ",") {
				t.Errorf("scope %s holds %v, want %v", scope, got[scope], want)
			}
		}
		if got := rs.ScopeSpans[0].Scope.GetName() + rs.ScopeSpans[1].Scope.GetName() + rs.ScopeSpans[2].Scope.GetName(); got != "scope/ascope/bscope/a" {
			t.Errorf("scope order %s", got)
		}
	})

	t.Run("resources", func(t *testing.T) {
		c := newCollector(t, nil)
		exp := newExporter(t, c.tracesURL())
		r1 := resource.NewSchemaless(attribute.String("service.name", "one"))
		r1again := resource.NewSchemaless(attribute.String("service.name", "one")) // equivalent, another pointer
		r1schema := resource.NewWithAttributes("https://example.com/s", attribute.String("service.name", "one"))
		r2 := resource.NewSchemaless(attribute.String("service.name", "two"))
		scope := instrumentation.Scope{Name: "s", Version: "1"}
		stub := func(name string, r *resource.Resource, sc instrumentation.Scope) tracetest.SpanStub {
			return tracetest.SpanStub{Name: name, Resource: r, InstrumentationScope: sc}
		}
		spans := tracetest.SpanStubs{
			stub("x1", r1, scope), stub("y1", r2, scope), stub("x2", r1again, scope),
			stub("z1", r1schema, scope), stub("x3", r1, instrumentation.Scope{}), stub("n1", nil, scope),
		}.Snapshots()
		spans = append(spans, nil) // skipped
		if err := exp.ExportSpans(context.Background(), spans); err != nil {
			t.Fatal(err)
		}
		reqs := c.requests(t)
		if len(reqs) != 1 {
			t.Fatalf("%d requests", len(reqs))
		}
		rss := reqs[0].ResourceSpans
		var got []string
		for _, rs := range rss {
			got = append(got, attr(rs.GetResource().GetAttributes(), "service.name").GetStringValue()+"|"+rs.SchemaUrl)
		}
		if want := "one|,two|,one|https://example.com/s,|"; strings.Join(got, ",") != want {
			t.Fatalf("resources %q, want %q", strings.Join(got, ","), want)
		}
		if n := names(rss[0]); len(rss[0].ScopeSpans) != 2 || strings.Join(n["s@1"], ",") != "x1,x2" || strings.Join(n["@"], ",") != "x3" {
			t.Errorf("first resource's scopes: %v", n)
		}
		if rss[0].ScopeSpans[1].Scope != nil {
			t.Errorf("the empty scope is %v, want none", rss[0].ScopeSpans[1].Scope)
		}
	})
}

// TestExportKindsAndStatuses maps each SDK span kind and status code.
func TestExportKindsAndStatuses(t *testing.T) {
	for _, tc := range []struct {
		kind     trace.SpanKind
		wantKind tracepb.Span_SpanKind
		code     codes.Code
		desc     string
		want     *tracepb.Status
	}{
		{trace.SpanKindUnspecified, tracepb.Span_SPAN_KIND_UNSPECIFIED, codes.Unset, "", &tracepb.Status{}},
		{trace.SpanKindInternal, tracepb.Span_SPAN_KIND_INTERNAL, codes.Ok, "", &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}},
		{trace.SpanKindServer, tracepb.Span_SPAN_KIND_SERVER, codes.Error, "bad gateway", &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "bad gateway"}},
		{trace.SpanKindClient, tracepb.Span_SPAN_KIND_CLIENT, codes.Unset, "", &tracepb.Status{}},
		{trace.SpanKindProducer, tracepb.Span_SPAN_KIND_PRODUCER, codes.Unset, "", &tracepb.Status{}},
		{trace.SpanKindConsumer, tracepb.Span_SPAN_KIND_CONSUMER, codes.Error, "", &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}},
		{trace.SpanKind(99), tracepb.Span_SPAN_KIND_UNSPECIFIED, codes.Code(99), "", &tracepb.Status{}},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			if tracepb.Span_SPAN_KIND_INTERNAL != 1 || tracepb.Span_SPAN_KIND_CONSUMER != 5 || tracepb.Status_STATUS_CODE_ERROR != 2 {
				t.Fatal("the proto's enum values moved")
			}
			spans := tracetest.SpanStubs{{Name: "k", SpanKind: tc.kind, Status: sdktrace.Status{Code: tc.code, Description: tc.desc}}}.Snapshots()
			got := resourceSpans(spans)[0].ScopeSpans[0].Spans[0]
			if got.Kind != tc.wantKind {
				t.Errorf("kind %v, want %v", got.Kind, tc.wantKind)
			}
			equal(t, "status", got.Status, tc.want)
			if got.ParentSpanId != nil || got.StartTimeUnixNano != 0 || got.Flags != 0x100 {
				t.Errorf("root span with zero times: parent %x start %d flags %#x", got.ParentSpanId, got.StartTimeUnixNano, got.Flags)
			}
		})
	}
}

// TestMarshalRequestMatchesCollectorType: the hand-made wrapper encodes
// exactly as the official ExportTraceServiceRequest does.
func TestMarshalRequestMatchesCollectorType(t *testing.T) {
	r1 := resource.NewSchemaless(attribute.String("service.name", "one"))
	r2 := resource.NewSchemaless(attribute.String("service.name", "two"), attribute.StringSlice("l", []string{"a", "b"}))
	spans := tracetest.SpanStubs{
		{Name: "a", Resource: r1, Attributes: []attribute.KeyValue{attribute.Int("n", 1)}},
		{Name: "b", Resource: r2, InstrumentationScope: instrumentation.Scope{Name: "x"}},
	}.Snapshots()
	got, err := marshalRequest(spans)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: resourceSpans(spans)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encodings differ:\n got %x\nwant %x", got, want)
	}
	if b, err := marshalRequest(nil); err != nil || len(b) != 0 {
		t.Errorf("no spans: %x, %v", b, err)
	}
}

func TestExportRetries(t *testing.T) {
	type reply struct {
		status     int
		retryAfter string
	}
	for _, tc := range []struct {
		name     string
		replies  []reply // then 200
		wantErr  string  // "" for success
		wantReqs int
		minWait  time.Duration
	}{
		{"503 Retry-After 1s then ok", []reply{{503, "1"}}, "", 2, time.Second},
		{"429 then ok", []reply{{429, ""}}, "", 2, 0},
		{"502 504 then ok", []reply{{502, ""}, {504, "0"}}, "", 3, 0},
		{"past HTTP-date then ok", []reply{{503, "Mon, 02 Jan 2006 15:04:05 GMT"}}, "", 2, 0},
		{"3 attempts at most", []reply{{503, ""}, {429, ""}, {503, ""}, {503, ""}}, "503 Service Unavailable", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCollector(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n <= len(tc.replies) {
					if ra := tc.replies[n-1].retryAfter; ra != "" {
						w.Header().Set("Retry-After", ra)
					}
					w.WriteHeader(tc.replies[n-1].status)
					_, _ = io.WriteString(w, "busy")
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			exp := newExporter(t, c.tracesURL(), WithRetryBackoff(10*time.Millisecond))
			t0 := time.Now()
			err := exp.ExportSpans(context.Background(), stubSpans(2))
			took := time.Since(t0)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ExportSpans: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "3 attempts")):
				t.Fatalf("ExportSpans: %v, want an error naming %q after 3 attempts", err, tc.wantErr)
			}
			if n := c.count(); n != tc.wantReqs {
				t.Errorf("%d requests, want %d", n, tc.wantReqs)
			}
			if took < tc.minWait-50*time.Millisecond {
				t.Errorf("took %v, want Retry-After's %v at least", took, tc.minWait)
			}
			if tc.minWait == 0 && took > 2*time.Second {
				t.Errorf("took %v", took)
			}
			for i, req := range c.requests(t) {
				if n := len(req.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()); n != 2 {
					t.Errorf("request %d has %d spans, want the same 2", i, n)
				}
			}
		})
	}
}

func TestExportNonRetryableStatus(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		status   int
		body     string
		wantText string
	}{
		{400, "field trace_id: bad length\n", `400 Bad Request: "field trace_id: bad length"`},
		{401, "", "401 Unauthorized"},
		{404, "404 page not found", "404 Not Found"},
		{413, long, "413 Request Entity Too Large"},
		{500, "oops", `500 Internal Server Error: "oops"`},
		{302, "", "302 Found"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			c := newCollector(t, func(n int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			exp := newExporter(t, c.tracesURL(), WithRetryBackoff(time.Millisecond))
			err := exp.ExportSpans(context.Background(), stubSpans(1))
			if err == nil || !strings.Contains(err.Error(), tc.wantText) || !strings.Contains(err.Error(), c.tracesURL()) {
				t.Fatalf("ExportSpans: %v, want an error naming the URL and %q", err, tc.wantText)
			}
			if len(err.Error()) > 1024 {
				t.Errorf("error is %d bytes long", len(err.Error()))
			}
			if n := c.count(); n != 1 {
				t.Errorf("%d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestExportAfterShutdown(t *testing.T) {
	c := newCollector(t, nil)
	exp := newExporter(t, c.tracesURL())
	if err := exp.ExportSpans(context.Background(), stubSpans(1)); err != nil {
		t.Fatal(err)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := exp.ExportSpans(context.Background(), stubSpans(1)); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Errorf("ExportSpans after Shutdown: %v, want an error", err)
	}
	if n := c.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestShutdownCancelsExportInFlight: an export waiting on a silent
// collector ends when the exporter is shut down.
func TestShutdownCancelsExportInFlight(t *testing.T) {
	release := make(chan struct{})
	c := newCollector(t, func(n int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	exp := newExporter(t, c.tracesURL())
	errc := make(chan error, 1)
	go func() { errc <- exp.ExportSpans(context.Background(), stubSpans(1)) }()
	for c.count() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, errShutdown) {
			t.Errorf("ExportSpans: %v, want it shut down", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("export still running after Shutdown")
	}
}

func TestExportHonoursContext(t *testing.T) {
	throttle := func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	t.Run("cancel stops the retries", func(t *testing.T) {
		c := newCollector(t, throttle)
		exp := newExporter(t, c.tracesURL())
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		t0 := time.Now()
		err := exp.ExportSpans(ctx, stubSpans(1))
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "503") {
			t.Errorf("ExportSpans: %v, want the 503 and context.Canceled", err)
		}
		if took := time.Since(t0); took > 5*time.Second {
			t.Errorf("took %v", took)
		}
		if n := c.count(); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
	t.Run("no retry due past the deadline", func(t *testing.T) {
		c := newCollector(t, throttle)
		exp := newExporter(t, c.tracesURL())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		t0 := time.Now()
		err := exp.ExportSpans(ctx, stubSpans(1))
		if err == nil || !strings.Contains(err.Error(), "deadline") {
			t.Errorf("ExportSpans: %v, want a refusal to wait past the deadline", err)
		}
		if took := time.Since(t0); took > 2*time.Second {
			t.Errorf("took %v, want no wait", took)
		}
		if n := c.count(); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		c := newCollector(t, nil)
		exp := newExporter(t, c.tracesURL())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := exp.ExportSpans(ctx, stubSpans(1)); !errors.Is(err, context.Canceled) {
			t.Errorf("ExportSpans: %v, want context.Canceled", err)
		}
		if n := c.count(); n != 0 {
			t.Errorf("%d requests, want 0", n)
		}
	})
	t.Run("cancel during the POST", func(t *testing.T) {
		release := make(chan struct{})
		c := newCollector(t, func(n int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		exp := newExporter(t, c.tracesURL())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := exp.ExportSpans(ctx, stubSpans(1)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ExportSpans: %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestExportRequest(t *testing.T) {
	c := newCollector(t, nil)
	exp := newExporter(t, c.tracesURL(), WithHeaders(map[string]string{"Authorization": "Bearer t0ken", "Content-Type": "text/plain"}))
	if err := exp.ExportSpans(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{nil}); err != nil {
		t.Fatal(err)
	}
	if n := c.count(); n != 0 {
		t.Fatalf("%d requests for no spans, want 0", n)
	}
	if err := exp.ExportSpans(context.Background(), stubSpans(1)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	h := c.headers[0]
	c.mu.Unlock()
	if h.Get("Content-Type") != "application/x-protobuf" || h.Get("Authorization") != "Bearer t0ken" {
		t.Errorf("headers %v", h)
	}
	if exp.client == http.DefaultClient || exp.client.Transport == http.DefaultTransport || exp.client.Transport == nil || exp.client.Timeout != 10*time.Second {
		t.Errorf("client %+v: want its own transport and a 10s timeout", exp.client)
	}

	var via int
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	own := newExporter(t, c.tracesURL(), WithHTTPClient(&http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		via++
		return tr.RoundTrip(r)
	})}))
	if err := own.ExportSpans(context.Background(), stubSpans(1)); err != nil || via != 1 || c.count() != 2 {
		t.Errorf("WithHTTPClient: err %v, %d round trips through it, %d requests", err, via, c.count())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{" 7 ", 7 * time.Second},
		{"0", time.Nanosecond},
		{"-1", 0},
		{"3600", maxRetryWait},
		{"soon", 0},
		{now.Add(4 * time.Second).Format(http.TimeFormat), 4 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tc.v, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}
