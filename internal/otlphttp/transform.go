package otlphttp

import (
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The mapping follows the official exporter's (otlptrace/internal/
// tracetransform), plus the links' trace_state, and keeps the order in which
// resources, scopes and spans first appear.

// marshalRequest is the body of an ExportTraceServiceRequest holding spans:
//
//	message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
//
// encoded by hand, as the collector package that declares it imports gRPC.
func marshalRequest(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	var b []byte
	for _, rs := range resourceSpans(spans) {
		n := proto.Size(rs)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		before := len(b)
		var err error
		b, err = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, rs)
		if err != nil {
			return nil, fmt.Errorf("otlphttp: encoding spans: %w", err)
		}
		if len(b)-before != n {
			return nil, fmt.Errorf("otlphttp: encoding spans: %d bytes written, %d announced", len(b)-before, n)
		}
	}
	return b, nil
}

// resourceSpans groups spans by resource, then by instrumentation scope.
func resourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	type resKey struct {
		attrs     attribute.Set
		schemaURL string
	}
	type scopeKey struct {
		res   resKey
		scope instrumentation.Scope
	}
	var out []*tracepb.ResourceSpans
	byRes := map[resKey]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	for _, sd := range spans {
		if sd == nil {
			continue
		}
		res := sd.Resource()
		rk := resKey{attrs: *res.Set(), schemaURL: res.SchemaURL()} // nil-safe
		rs, ok := byRes[rk]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: resourceProto(res), SchemaUrl: rk.schemaURL}
			byRes[rk] = rs
			out = append(out, rs)
		}
		scope := sd.InstrumentationScope()
		sk := scopeKey{res: rk, scope: scope}
		ss, ok := byScope[sk]
		if !ok {
			ss = &tracepb.ScopeSpans{Scope: scopeProto(scope), SchemaUrl: scope.SchemaURL}
			byScope[sk] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(sd))
	}
	return out
}

func resourceProto(r *resource.Resource) *resourcepb.Resource {
	if r == nil {
		return nil
	}
	return &resourcepb.Resource{Attributes: iterKeyValues(r.Iter())}
}

func scopeProto(s instrumentation.Scope) *commonpb.InstrumentationScope {
	if s == (instrumentation.Scope{}) {
		return nil
	}
	return &commonpb.InstrumentationScope{
		Name:       s.Name,
		Version:    s.Version,
		Attributes: iterKeyValues(s.Attributes.Iter()),
	}
}

func spanProto(sd sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := sd.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	st := sd.Status()
	s := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Name:                   sd.Name(),
		Kind:                   spanKind(sd.SpanKind()),
		StartTimeUnixNano:      unixNano(sd.StartTime()),
		EndTimeUnixNano:        unixNano(sd.EndTime()),
		Attributes:             keyValues(sd.Attributes()),
		DroppedAttributesCount: clampUint32(sd.DroppedAttributes()),
		Events:                 events(sd.Events()),
		DroppedEventsCount:     clampUint32(sd.DroppedEvents()),
		Links:                  links(sd.Links()),
		DroppedLinksCount:      clampUint32(sd.DroppedLinks()),
		Status:                 status(st.Code, st.Description),
	}
	parent := sd.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		s.ParentSpanId = psid[:]
	}
	s.Flags = spanFlags(sc.TraceFlags(), parent.IsRemote())
	return s
}

// spanFlags is a span's or link's flags field: the W3C trace flags in bits
// 0-7, bit 8 (HAS_IS_REMOTE) always set since the SDK knows whether the
// parent (a link: its span context) is remote, and bit 9 (IS_REMOTE) when it
// is.
func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if remote {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func spanKind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	default:
		return tracepb.Span_SPAN_KIND_UNSPECIFIED
	}
}

func status(c codes.Code, msg string) *tracepb.Status {
	var pc tracepb.Status_StatusCode
	switch c {
	case codes.Ok:
		pc = tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		pc = tracepb.Status_STATUS_CODE_ERROR
	default:
		pc = tracepb.Status_STATUS_CODE_UNSET
	}
	return &tracepb.Status{Code: pc, Message: msg}
}

func events(es []sdktrace.Event) []*tracepb.Span_Event {
	if len(es) == 0 {
		return nil
	}
	out := make([]*tracepb.Span_Event, len(es))
	for i, e := range es {
		out[i] = &tracepb.Span_Event{
			TimeUnixNano:           unixNano(e.Time),
			Name:                   e.Name,
			Attributes:             keyValues(e.Attributes),
			DroppedAttributesCount: clampUint32(e.DroppedAttributeCount),
		}
	}
	return out
}

func links(ls []sdktrace.Link) []*tracepb.Span_Link {
	if len(ls) == 0 {
		return nil
	}
	out := make([]*tracepb.Span_Link, len(ls))
	for i, l := range ls {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		out[i] = &tracepb.Span_Link{
			TraceId:                tid[:],
			SpanId:                 sid[:],
			TraceState:             l.SpanContext.TraceState().String(),
			Attributes:             keyValues(l.Attributes),
			DroppedAttributesCount: clampUint32(l.DroppedAttributeCount),
			Flags:                  spanFlags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()),
		}
	}
	return out
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)}
	}
	return out
}

func iterKeyValues(it attribute.Iterator) []*commonpb.KeyValue {
	if it.Len() == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, it.Len())
	for it.Next() {
		kv := it.Attribute()
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

// anyValue maps every attribute.Type; EMPTY is an AnyValue with no value.
func anyValue(v attribute.Value) *commonpb.AnyValue {
	av := &commonpb.AnyValue{}
	switch v.Type() {
	case attribute.EMPTY:
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.INT64:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRING:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: v.AsString()}
	case attribute.BYTESLICE:
		av.Value = &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}
	case attribute.BOOLSLICE:
		av.Value = arrayOf(v.AsBoolSlice(), func(b bool) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
		})
	case attribute.INT64SLICE:
		av.Value = arrayOf(v.AsInt64Slice(), func(n int64) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: n}}
		})
	case attribute.FLOAT64SLICE:
		av.Value = arrayOf(v.AsFloat64Slice(), func(f float64) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
		})
	case attribute.STRINGSLICE:
		av.Value = arrayOf(v.AsStringSlice(), func(s string) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
		})
	case attribute.SLICE:
		av.Value = arrayOf(v.AsSlice(), anyValue)
	case attribute.MAP:
		av.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: keyValues(v.AsMap())}}
	default:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: "INVALID"}
	}
	return av
}

func arrayOf[T any](vs []T, conv func(T) *commonpb.AnyValue) *commonpb.AnyValue_ArrayValue {
	out := make([]*commonpb.AnyValue, len(vs))
	for i, v := range vs {
		out[i] = conv(v)
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: out}}
}

// unixNano is t in Unix nanoseconds; the zero time.Time, or one before 1970,
// is 0 (unset).
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(max(0, t.UnixNano()))
}

func clampUint32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case int64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
