package gateway

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/logtext"
	"github.com/sluice-gw/sluice/internal/otlphttp"
)

// Tracing (README "Tracing"). With Options.TracerProvider set, each client
// request (each response.create on a WebSocket) is a server span, and each
// upstream attempt a client span under it, carrying the GenAI semantic
// convention attributes (gen_ai.*), the route, the target and what the
// attempt loop decided after it (sluice.rescue). A client's W3C traceparent
// is the request span's parent, and the attempt span's context is what the
// upstream gets as its traceparent. Without a provider nothing here runs:
// every hook returns at a nil check, and a client's traceparent reaches the
// upstream unchanged, like any other header (none is invented).
//
// No global state: the provider and the propagator are the server's, and
// Shutdown flushes and stops the provider.

// tracing is the server's tracer; nil when tracing is off.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
	stop   func(context.Context) error // the provider's Shutdown, when it has one
}

const tracerName = "github.com/sluice-gw/sluice/gateway"

func newTracing(tp trace.TracerProvider) *tracing {
	if tp == nil {
		return nil
	}
	t := &tracing{tracer: tp.Tracer(tracerName)}
	if sd, ok := tp.(interface{ Shutdown(context.Context) error }); ok {
		t.stop = sd.Shutdown
	}
	return t
}

// shutdownTracing flushes the spans still buffered and stops the provider
// (Shutdown, after the last stream ended). A collector that does not answer
// costs at most 5 seconds.
func (s *Server) shutdownTracing() {
	if s.tracing == nil || s.tracing.stop == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracing.stop(ctx); err != nil {
		s.log.Warn("flushing traces failed", "error", err)
	}
}

// NewOTLPTracerProvider is the SDK tracer provider that sends spans over
// OTLP/HTTP (protobuf) to tracesURL ({otlp_endpoint}/v1/traces, an http(s)
// URL), batched, recording the share ratio (0..1) of new traces; a client's
// sampled flag decides for its own trace. The exporter is Sluice's own
// (internal/otlphttp; the official one links in gRPC) and reads no
// OTEL_EXPORTER_OTLP_* environment variables; ctx is unused (nothing is sent
// before the first batch). Hand it to Options.TracerProvider: the server
// owns it from then on and shuts it down on drain. Pass WithExportLog, or
// failed exports go to OpenTelemetry's global error handler.
func NewOTLPTracerProvider(ctx context.Context, tracesURL string, ratio float64, version string, opts ...OTLPOption) (*sdktrace.TracerProvider, error) {
	var o otlpOptions
	for _, opt := range opts {
		opt(&o)
	}
	otlp, err := otlphttp.New(tracesURL)
	if err != nil {
		return nil, err
	}
	var processor sdktrace.SpanProcessor
	if o.log != nil {
		exp := &loggedExporter{SpanExporter: otlp, log: o.log, every: exportLogEvery, now: time.Now}
		processor = &countedProcessor{SpanProcessor: sdktrace.NewBatchSpanProcessor(exp), exp: exp}
	} else {
		processor = sdktrace.NewBatchSpanProcessor(otlp)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "sluice")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// A backstop under the attributes' own bounds (the client's strings are
	// cut as the access log's, label): no value, an upstream's error
	// message included, makes a span, and the batch it shares with other
	// requests' spans, too large for the collector.
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = maxSpanAttributeLen
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(processor),
		sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	), nil
}

// maxSpanAttributeLen bounds a span attribute's string value (in
// characters; the SDK cuts longer ones), and what spanText keeps of a
// failure reason or status description (in bytes), which the SDK does not
// bound.
const maxSpanAttributeLen = 4096

// labelLen is what label keeps of a name (an error code, a model, a
// finish reason) in bytes, as the access log does.
const labelLen = 128

// spanText is upstream-supplied text (an error code, a failure reason
// quoting one, a model or finish reason it named) as a span's attribute,
// status description or event carries it: the upstreams' keys redacted
// first (SECURITY.md: an upstream may echo the credential it was sent, and
// what is cut cannot be matched whole any more), control characters
// stripped and cut to limit bytes as label does (README "Tracing"). Every
// such text in this file goes through it, the one place where a span's
// upstream text is made safe to export.
func (s *scrubber) spanText(v string, limit int) string {
	v = logtext.Printable(s.String(v))
	if len(v) > limit {
		v = strings.ToValidUTF8(v[:limit], "")
	}
	return v
}

// OTLPOption configures NewOTLPTracerProvider.
type OTLPOption func(*otlpOptions)

type otlpOptions struct {
	log hclog.Logger
}

// WithExportLog makes a failed export a WARN line of log (the gateway's
// logger: its format and level), at most one per exportLogEvery, counting
// the failures in between. Without it the SDK hands the error to
// OpenTelemetry's global error handler, which by default prints it with Go's
// log package: a plain line in a JSON log, whatever the log level.
func WithExportLog(log hclog.Logger) OTLPOption {
	return func(o *otlpOptions) { o.log = log }
}

// exportLogEvery is the least time between two lines about failed exports:
// a collector that is down fails every batch (one each 5s by default).
const exportLogEvery = time.Minute

// loggedExporter logs its exporter's failures and reports none to the SDK.
// The batch span processor drops a failed batch either way, and does
// nothing with the error but pass it to otel.Handle (global state), or
// return it from ForceFlush; so the error is logged here, through the
// gateway's own logger, and no global handler has to be set.
type loggedExporter struct {
	sdktrace.SpanExporter
	log   hclog.Logger
	every time.Duration
	now   func() time.Time

	// handed counts the spans the batch processor was handed
	// (countedProcessor); those it did not export, sent or failed
	// (settled), by the end of its shutdown were dropped there.
	handed atomic.Int64

	mu       sync.Mutex
	next     time.Time // no line before then
	failures int       // failed exports since the last line
	dropped  int       // their spans
	settled  int64     // spans whose export ended, sent or failed
	closed   bool      // the shutdown line was written: no line after it
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settled += int64(len(spans))
	if err != nil {
		e.failedLocked(err, len(spans))
	}
	return nil
}

func (e *loggedExporter) failedLocked(err error, spans int) {
	e.failures++
	e.dropped += spans
	now := e.now()
	if e.closed || now.Before(e.next) {
		return
	}
	e.next = now.Add(e.every)
	e.log.Warn("exporting spans failed; they are dropped", "error", err, "failed_exports", e.failures, "dropped_spans", e.dropped)
	e.failures, e.dropped = 0, 0
}

// shutdownReport writes, when the batch processor has shut down (flushErr:
// its error, a flush cut by the shutdown's deadline), what was dropped since
// the last line: the failed exports the one-a-minute bound held back and
// their spans, and the spans the processor was handed but never exported
// (queued or in flight when the flush was cut, or refused by a full queue).
// Without it, what a process exiting soon after a line lost is not told.
func (e *loggedExporter) shutdownReport(flushErr error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	unexported := max(e.handed.Load()-e.settled, 0)
	if e.failures == 0 && unexported == 0 {
		return
	}
	args := []any{"failed_exports", e.failures, "dropped_spans", int64(e.dropped) + unexported, "unexported_spans", unexported}
	if flushErr != nil {
		args = append(args, "error", flushErr)
	}
	e.log.Warn("tracing stopped; spans were dropped since the last line", args...)
	e.failures, e.dropped = 0, 0
}

// countedProcessor is the batch span processor, counting the spans it is
// handed for its exporter's shutdown report (the processor itself drops
// unsampled spans, and counts nothing it drops in a way one can read).
type countedProcessor struct {
	sdktrace.SpanProcessor
	exp *loggedExporter
}

func (p *countedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() { // the batch processor exports sampled spans only
		p.exp.handed.Add(1)
	}
	p.SpanProcessor.OnEnd(s)
}

// Shutdown flushes the processor and writes what it dropped; its export
// may go on after ctx ended, but the process does not wait for it.
func (p *countedProcessor) Shutdown(ctx context.Context) error {
	err := p.SpanProcessor.Shutdown(ctx)
	p.exp.shutdownReport(err)
	return err
}

// reqTrace is one request's spans.
type reqTrace struct {
	t       *tracing
	scrub   *scrubber       // the server's: upstream text a span carries is scrubbed (spanText)
	ctx     context.Context // holds the request span: the attempts' parent
	span    trace.Span
	attempt trace.Span // the attempt in flight; nil between attempts
	status  int        // the attempt's upstream HTTP status (0: none)
	count   int        // attempts made
	// ending is the attempt that ended the request (sluice.rescue=done),
	// ended with the request span (end) at endingAt, when it ended: only
	// then is the usage the key was charged known (an estimate, the cut
	// attempts a continuation replaced), and whether the request failed.
	ending      trace.Span
	endingAt    time.Time
	endingIndex int // its sluice.attempt
	// endingWhy is the ending attempt's own failure, if it had one: a
	// continuation target that failed, whose request ends with the failure
	// that started the rescue (README "Continuation").
	endingWhy string
	// failedAttempt is the last attempt that failed, ended (at failedAt)
	// once what the attempt loop did next is known: when the next attempt
	// starts, with failedRescue, its decision; when the request ends
	// without one, with stop, whatever the decision had named (README
	// "Tracing": sluice.rescue is what the loop did next, and a replay
	// or failover that found no target left did not happen).
	failedAttempt trace.Span
	failedAt      time.Time
	failedRescue  string
	failedIndex   int
	// continued are the attempts a continuation followed, ended with the
	// request: the usage of a stream whose continuations added nothing is
	// the last of them that produced output's (reqMeta.chargedAttempt), and
	// its span carries it.
	continued []heldAttempt
}

// heldAttempt is an attempt's span whose end waits for the request's.
type heldAttempt struct {
	span  trace.Span
	at    time.Time
	index int
}

func noTrace() {}

// traceRequest starts req's span (the client's traceparent, if any, is its
// parent) and returns what ends it. Without tracing it does nothing.
func (s *Server) traceRequest(req *clientRequest) (end func()) {
	if s.tracing == nil {
		return noTrace
	}
	t := s.tracing
	ctx, span := t.startRequest(req.header, req.ep, req.viaWebSocket, req.model, req.surface())
	rt := &reqTrace{t: t, scrub: s.scrub, ctx: ctx, span: span}
	req.trace = rt
	if req.meta != nil {
		req.meta.mu.Lock()
		req.meta.traced = true
		req.meta.mu.Unlock()
	}
	return func() { rt.end(req) }
}

// startRequest starts a request's server span on endpoint ep (its client's
// traceparent in header, if any, is its parent), for a client request of
// model on surface.
func (t *tracing) startRequest(header http.Header, ep endpoint, viaWebSocket bool, model, surface string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	name, method, path := "POST /v1"+ep.path, http.MethodPost, "/v1"+ep.path
	if viaWebSocket {
		name, method = "WS /v1/responses", "GET"
	}
	attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.system", "openai"),
		attribute.String("gen_ai.provider.name", "openai")}
	if model := label(model); model != "" { // a refused request may name none: no empty attribute
		attrs = append(attrs, attribute.String("gen_ai.request.model", model))
	}
	return t.startServer(header, name, method, path, surface, opts, attrs...)
}

// startServer starts a server span named name, for a request of method on
// path (url.path) counted under surface; the traceparent in header, if
// any, is its parent.
func (t *tracing) startServer(header http.Header, name, method, path, surface string, opts []trace.SpanStartOption, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := t.prop.Extract(context.Background(), propagation.HeaderCarrier(header))
	attrs = append(attrs,
		attribute.String("http.request.method", method),
		attribute.String("url.path", path),
		attribute.String("sluice.surface", surface))
	opts = append(opts, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return t.tracer.Start(parent, name, opts...)
}

// traceRefusal is the span of a request refused before it was taken up
// (README "Tracing": each request is a server span): one the gateway
// refused while draining, or whose body did not read, parse or pass the
// rewrite policy, or a WebSocket frame refused as it was read. It spans
// from start, when the request arrived, to now, with the refusal's status
// and code; header is the request's (a WebSocket's: its upgrade's), key
// its Sluice key if any, and model what the body names, if anything.
func (s *Server) traceRefusal(header http.Header, key *keyEntry, ep endpoint, surface string, start time.Time, aerr *apierr.Error, model string) {
	if s.tracing == nil {
		return
	}
	viaWebSocket := surface == hostabi.SurfaceWebSocket
	_, span := s.tracing.startRequest(header, ep, viaWebSocket, model, surface, trace.WithTimestamp(start))
	endAnswered(span, key, aerr.Status, aerr.Code)
}

// traceAnswered is the span of a /v1/ request answered outside the request
// pipeline: refused by the key gate (gate: 401 invalid_api_key before its
// body is read), or a streaming-input call (TraceStreamingInput). Its name
// is the method and the route (httpRoute), so that ids do not make every
// name unique; url.path shows ids as the access log does (logEndpoint).
// The credential the request presented is never read here: only key, the
// Sluice key the gate found (by name), if any.
func (s *Server) traceAnswered(r *http.Request, key *keyEntry, start time.Time, status int, code string) {
	if s.tracing == nil {
		return
	}
	name, method := strings.TrimSpace(r.Method+" "+httpRoute(r.URL.Path)), r.Method
	if isUpgrade(r) {
		name = "WS " + httpRoute(r.URL.Path)
	}
	_, span := s.tracing.startServer(r.Header, name, method, label(logEndpoint(r.URL.Path)), requestSurface(r),
		[]trace.SpanStartOption{trace.WithTimestamp(start)})
	endAnswered(span, key, status, code)
}

// endAnswered ends the span of a request answered without an attempt, with
// its status and error code (error.type: the code the client got).
func endAnswered(span trace.Span, key *keyEntry, status int, code string) {
	attrs := []attribute.KeyValue{attribute.Int("sluice.attempts", 0), attribute.Int("http.response.status_code", status)}
	if code != "" {
		attrs = append(attrs, attribute.String("error.type", code))
	}
	if key != nil {
		attrs = append(attrs, attribute.String("sluice.key", key.name))
	}
	span.SetAttributes(attrs...)
	if status >= 500 { // as a request span's: a client's error is not the server's
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

// httpRoute is path's route, ids replaced by their parameter's name (as
// OpenTelemetry's http.route), for a span's name; "" for a path outside the
// API's routes, whose span is named by its method alone.
func httpRoute(path string) string {
	switch {
	case path == "/v1/responses" || path == "/v1/chat/completions" || path == "/v1/models" || path == streaminput.PathPrefix:
		return path
	case strings.HasPrefix(path, "/v1/models/"):
		return "/v1/models/{model}"
	}
	for _, p := range [...]struct{ prefix, param string }{{responsesResourcePrefix, "{response_id}"}, {streaminput.PathPrefix + "/", "{session_id}"}} {
		prefix, param := p.prefix, p.param
		rest, ok := strings.CutPrefix(path, prefix)
		if !ok || rest == "" {
			continue
		}
		_, tail, more := strings.Cut(rest, "/")
		switch {
		case !more:
			return prefix + param
		case tail == "input_items" || tail == "cancel" || tail == "chunks" || tail == "finish" || tail == "result":
			return prefix + param + "/" + tail
		}
	}
	return ""
}

// TraceStreamingInput is the tracing hook for streaming input
// (streaminput.Options.Trace): the span of a REST session call, or of a
// Mode A request refused before the session dispatched it, answered with
// status and the error code (if any) of its answer. A Mode A request that
// was dispatched is traced as any request (its own span). It does nothing
// without tracing.
func (s *Server) TraceStreamingInput(r *http.Request, start time.Time, status int, code string) {
	s.traceAnswered(r, keyOf(r), start, status, code)
}

// end records what the request did (read from its meta: usage, served
// model, status, finish reasons, how it ended) and ends its span, and the
// span of the attempt that ended it with the same result.
func (rt *reqTrace) end(req *clientRequest) {
	rt.endFailedAttempt(rescueDecision(nextStop))
	span := rt.span
	span.SetAttributes(attribute.Int("sluice.attempts", rt.count))
	if req.key != nil {
		span.SetAttributes(attribute.String("sluice.key", req.key.name))
	}
	failed := false
	var result []attribute.KeyValue // what the charged attempt shares with the request
	reason := ""
	charged := -1 // the attempt the usage is charged to
	if m := req.meta; m != nil {
		m.mu.Lock()
		result = genAIResult(m, rt.scrub)
		charged = m.chargedAttempt().index
		reason = firstNonEmpty(m.reason, m.terminal)
		attrs := []attribute.KeyValue{attribute.String("sluice.route", m.route)}
		if m.status != 0 {
			attrs = append(attrs, attribute.Int("http.response.status_code", m.status))
		}
		attrs = append(attrs, result...)
		if reason != "" {
			attrs = append(attrs, attribute.String("sluice.reason", reason))
		}
		if len(m.targets) > 0 {
			targets := make([]string, len(m.targets))
			for i, t := range m.targets { // upstream/model: the model may be the client's
				targets[i] = label(t.String())
			}
			attrs = append(attrs, attribute.String("sluice.target", targets[len(targets)-1]),
				attribute.StringSlice("sluice.targets", targets))
		}
		if m.code != "" {
			attrs = append(attrs, attribute.String("error.type", rt.scrub.spanText(m.code, labelLen))) // maybe an upstream's code
		}
		failed = m.failed()
		m.mu.Unlock()
		span.SetAttributes(attrs...)
	}
	if failed {
		span.SetStatus(codes.Error, "")
	}
	if rt.endContinued(charged, result) {
		result = nil // an attempt a continuation followed produced it, not the ending one
	}
	rt.endAttempt(result, failed, reason)
	span.End()
}

// endContinued ends the spans of the attempts a continuation followed,
// giving result to the charged one's; it reports whether one was.
func (rt *reqTrace) endContinued(charged int, result []attribute.KeyValue) (took bool) {
	for _, h := range rt.continued {
		if h.index == charged && (rt.ending == nil || rt.endingIndex != charged) {
			h.span.SetAttributes(result...)
			took = true
		}
		h.span.End(trace.WithTimestamp(h.at))
	}
	rt.continued = nil
	return took
}

// endAttempt ends the span of the attempt that ended the request, if it is
// still open, with the request's result: the tokens the client was charged
// (README "Tracing") and, when the request failed, an error status naming
// why, for the attempt whose failure it was, and a sluice.rescue of stop:
// the attempt loop ended the request with a failure, as the access log and
// sluice_rescues_total say, not done as for an attempt that served it.
func (rt *reqTrace) endAttempt(result []attribute.KeyValue, failed bool, reason string) {
	span := rt.ending
	if span == nil {
		return
	}
	rt.ending = nil
	span.SetAttributes(result...)
	if failed {
		// The attempt's own failure, as every failed attempt's span says.
		why := rt.scrub.spanText(firstNonEmpty(rt.endingWhy, reason, "failed"), maxSpanAttributeLen)
		span.SetAttributes(attribute.String("sluice.failure", why), attribute.String("sluice.rescue", rescueDecision(nextStop)))
		span.SetStatus(codes.Error, why)
	}
	span.End(trace.WithTimestamp(rt.endingAt))
}

// genAIResult is the response side of the GenAI attributes (m.mu held),
// which the request's span shares with the attempt that ended it. The HTTP
// status is not among them: the request's is what the client was sent, an
// attempt's what its upstream sent (traceAnswer).
func genAIResult(m *reqMeta, scrub *scrubber) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if served := m.chargedAttempt().servedModel; served != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", scrub.spanText(served, labelLen))) // the upstream's; it may echo the client's
	}
	if m.usage.known {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", m.usage.input),
			attribute.Int64("gen_ai.usage.output_tokens", m.usage.output))
		if m.usage.cached > 0 {
			attrs = append(attrs, attribute.Int64("gen_ai.usage.cache_read.input_tokens", m.usage.cached))
		}
		if m.usage.reasoning > 0 {
			attrs = append(attrs, attribute.Int64("gen_ai.usage.reasoning.output_tokens", m.usage.reasoning))
		}
	}
	if len(m.finish) > 0 {
		finish := make([]string, len(m.finish))
		for i, f := range m.finish { // the upstream's (noteFinish cut them)
			finish[i] = scrub.spanText(f, labelLen)
		}
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", finish))
	}
	return attrs
}

// traceAttempt starts the span of an attempt on t (a child of the
// request's span); traceAttemptEnd ends it.
func (s *Server) traceAttempt(req *clientRequest, t upstream.Target) {
	rt := req.trace
	if rt == nil {
		return
	}
	rt.endFailedAttempt(rt.failedRescue) // this attempt is what its decision named
	rt.count++
	rt.status = 0
	// The client's model (a route target without its own) is cut and
	// cleaned as the access log's (label): one client must not make a span,
	// or the export batch that holds other clients' spans, megabytes long.
	model := label(firstNonEmpty(t.Model, req.model))
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.system", "openai"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", model),
		attribute.String("sluice.target", label(t.String())),
		attribute.String("sluice.upstream", t.Upstream.Name()),
		attribute.Int("sluice.attempt", rt.count-1),
	}
	if u, err := url.Parse(t.Upstream.Config().BaseURL); err == nil {
		host, port := u.Hostname(), u.Port()
		if port == "" && u.Scheme == "https" {
			port = "443"
		} else if port == "" {
			port = "80"
		}
		attrs = append(attrs, attribute.String("server.address", host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, attribute.Int("server.port", p))
		}
	}
	if req.try != nil && req.try.route != nil {
		attrs = append(attrs, attribute.String("sluice.route", strings.Join(req.try.route.Models, ",")))
	}
	if req.try != nil && req.try.cont != nil {
		attrs = append(attrs, attribute.String("sluice.continuation", req.try.cont.kind))
	}
	_, rt.attempt = rt.t.tracer.Start(rt.ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// traceAnswer notes the upstream's HTTP status for the attempt's span: the
// one it sent. A 2xx whose body was an error envelope is judged as the
// status its error stands for (answerAsError), but the attempt's span, like
// its failure reason (statusReason), says what the upstream sent, with
// sluice.error_envelope naming the envelope's error (its code, else its
// type), so that an operator does not look for a 502 in the upstream's
// logs; the request span keeps the status the client was sent.
func (s *Server) traceAnswer(req *clientRequest, ans *upstreamAnswer) {
	rt := req.trace
	if rt == nil || ans == nil {
		return
	}
	rt.status = ans.status
	if ans.sentStatus == 0 {
		return
	}
	rt.status = ans.sentStatus
	if rt.attempt != nil {
		e, _ := apierr.Parse(ans.body)
		// The body is not scrubbed yet (proxy.go scrubs it after this
		// hook): an upstream may echo the key it was sent in its code.
		rt.attempt.SetAttributes(attribute.String("sluice.error_envelope", rt.scrub.spanText(firstNonEmpty(e.Code, e.Type, "error"), labelLen)))
	}
}

// rescueDecision names what the attempt loop does after an attempt.
func rescueDecision(n next) string {
	switch n {
	case nextDone:
		return "done"
	case nextFailover:
		return "next_target"
	case nextReplayOther:
		return "replay_other_target"
	case nextReplaySame:
		return "replay_same_target"
	case nextRetrySame:
		return "retry_same_target"
	case nextOtherModel:
		return "other_model"
	case nextStop:
		return "stop"
	case nextContinue:
		return "continue"
	case nextContinueSame:
		return "continue_same_target"
	}
	return "unknown"
}

// traceAttemptEnd ends the attempt's span with its outcome: the upstream's
// status, the rescue decision and why. The attempt that ended the request
// is ended with the request (reqTrace.endAttempt), once its accounting has
// settled: it carries the response's model, usage and finish reasons as the
// client got them and was charged (on a continued stream: the attempts'
// usage summed; without the upstream's usage: the estimate), unless they
// are an earlier attempt's, whose continuations added nothing
// (reqMeta.chargedAttempt, endContinued).
func (s *Server) traceAttemptEnd(req *clientRequest, res attemptResult) {
	rt := req.trace
	if rt == nil || rt.attempt == nil {
		return
	}
	span := rt.attempt
	rt.attempt = nil
	if rt.status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", rt.status))
	}
	if res.next == nextDone {
		span.SetAttributes(attribute.String("sluice.rescue", rescueDecision(res.next)))
		if rt.ending != nil { // an earlier loop's ending attempt: this one ends the request
			rt.ending.End(trace.WithTimestamp(rt.endingAt))
		}
		rt.ending, rt.endingAt, rt.endingWhy, rt.endingIndex = span, time.Now(), "", rt.count-1
		// The failure charged to the target (tryState.fail) is the
		// attempt's own; the request's end reason may be an earlier
		// attempt's (a continuation target that failed ends the stream
		// with the failure that started the rescue).
		if f := tryOf(req).fail; f != nil {
			rt.endingWhy = f.Reason
		}
		return
	}
	why := rt.scrub.spanText(res.why, maxSpanAttributeLen)
	if why != "" {
		span.SetAttributes(attribute.String("sluice.failure", why))
	}
	span.SetStatus(codes.Error, why)
	rt.failedAttempt, rt.failedAt, rt.failedRescue, rt.failedIndex = span, time.Now(), rescueDecision(res.next), rt.count-1
}

// endFailedAttempt ends the failed attempt's span held until what followed
// it was known, if any, with rescue as its sluice.rescue.
func (rt *reqTrace) endFailedAttempt(rescue string) {
	span := rt.failedAttempt
	if span == nil {
		return
	}
	rt.failedAttempt = nil
	span.SetAttributes(attribute.String("sluice.rescue", rescue))
	if rescue == rescueDecision(nextContinue) || rescue == rescueDecision(nextContinueSame) {
		// Its stream goes on: the usage may yet be charged to it (end).
		rt.continued = append(rt.continued, heldAttempt{span: span, at: rt.failedAt, index: rt.failedIndex})
		return
	}
	span.End(trace.WithTimestamp(rt.failedAt))
}

// injectTrace sets the traceparent (and tracestate) an upstream gets: the
// attempt span's context, replacing what the client sent. Without tracing
// the client's headers pass as they are.
func (req *clientRequest) injectTrace(h http.Header) {
	rt := req.trace
	if rt == nil {
		return
	}
	h.Del("Traceparent")
	h.Del("Tracestate")
	ctx := rt.ctx
	if rt.attempt != nil {
		ctx = trace.ContextWithSpan(ctx, rt.attempt)
	}
	rt.t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// noteFinish records the finish reasons of an event the client is sent
// (m.mu held; only while traced): a Chat chunk's choices[].finish_reason,
// a Responses terminal event's status (completed: stop; incomplete: its
// reason, max_output_tokens as length; failed: error).
func (m *reqMeta) noteFinish(name string, data []byte) {
	if name != "" && !isTerminalType(name) {
		return // a Responses event that ends nothing
	}
	obj := gjson.GetBytes(data, "object").Str
	if name == "" && obj == "" {
		// A Chat stream's error chunk ({"error":{…}}), the gateway's own
		// or an upstream's: it ends the stream failed, as response.failed
		// does a Responses stream (failed), and its code is the one the
		// client got.
		e := gjson.GetBytes(data, "error")
		if !e.IsObject() {
			return
		}
		m.chatFailed = true
		if code := e.Get("code"); code.Type == gjson.String {
			m.noteTerminalCode(code.Str)
		}
		return
	}
	if obj == "chat.completion.chunk" || obj == "chat.completion" {
		if !hasFinishReason(data) {
			return
		}
		gjson.GetBytes(data, "choices.#.finish_reason").ForEach(func(_, v gjson.Result) bool {
			// The upstream chose them: each cut and cleaned as the access
			// log's text (label), and no more than maxFinishReasons.
			if v.Type == gjson.String && v.Str != "" && len(m.finish) < maxFinishReasons {
				m.finish = append(m.finish, label(v.Str))
			}
			return true
		})
		return
	}
	var resp gjson.Result
	switch typ := gjson.GetBytes(data, "type").Str; {
	case isTerminalType(typ):
		resp = gjson.GetBytes(data, "response")
	case typ == "" && obj == "response": // a JSON answer
		resp = gjson.ParseBytes(data)
	default:
		return
	}
	switch resp.Get("status").Str {
	case "completed":
		m.finish = append(m.finish[:0], "stop")
	case "incomplete":
		r := resp.Get("incomplete_details.reason").Str
		if r == "max_output_tokens" {
			r = "length"
		}
		m.finish = append(m.finish[:0], firstNonEmpty(r, "incomplete"))
	case "failed":
		m.finish = append(m.finish[:0], "error") // its code is noted traced or not (noteFailure)
	}
}

// noteAbort records code, the error code of the terminal event the
// gateway ends a stream with (clientStream.abortLocked), unless one was
// noted before (noteTerminalCode).
func (m *reqMeta) noteAbort(code string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noteTerminalCode(code)
}

// noteTerminalCode records code, the error code of the terminal event that
// ended a stream the client was already reading (a cut, idle, stall,
// oversize or garbled stream, a drain: the gateway's stream_incomplete; or
// an upstream's failure), as the request's error.type (README "Tracing":
// the error code the client got). A code noted before the stream began (a
// refusal, an error the gateway answered first) stays (m.mu held).
func (m *reqMeta) noteTerminalCode(code string) {
	if m.code == "" && code != "" {
		m.code = strings.Clone(code)
	}
}

// failed reports whether the request failed on the gateway's side (m.mu
// held), the one rule for a request span's ERROR status and its ending
// attempt's (README "Tracing"): a 5xx answer, or a stream the client got
// with 200 that ended in failure: a Responses stream's response.failed, a
// Chat stream's error chunk (chatFailed). A client's 4xx is not the
// server's error (OpenTelemetry's HTTP conventions), nor is a stream its
// client stopped: a cancel or DELETE it asked for ends a background run
// with response.failed (status cancelled), and a client that left ends its
// stream, or a detached one nobody resumed, without the upstream failing
// (sluice.reason says which; the attempt is done, not blamed).
func (m *reqMeta) failed() bool {
	stoppedByClient := m.reason == reasonCancelled || m.reason == reasonClientGone
	return m.status >= 500 || !stoppedByClient && (m.terminal == "failed" || m.chatFailed)
}

var finishField = []byte(`"finish_reason"`)

// maxFinishReasons bounds gen_ai.response.finish_reasons: one per choice,
// and an upstream may send any number of choices.
const maxFinishReasons = 128

// hasFinishReason reports whether a Chat chunk may carry a finish reason:
// a "finish_reason" member whose value is a string, whitespace allowed
// around the colon (valid JSON, and what Python-based servers write:
// "finish_reason": "stop"). Every streamed chunk has the member, mostly
// null, so this byte scan keeps the parse for the chunks that finish.
func hasFinishReason(data []byte) bool { return memberValueStarts(data, finishField, '"') }
