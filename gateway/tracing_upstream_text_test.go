package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// tracedAttempts waits for one request's spans and returns them with its
// attempt (client) spans, failing the test when it has none.
func tracedAttempts(t *testing.T, rec *tracetest.SpanRecorder) (spans, attempts []sdktrace.ReadOnlySpan) {
	t.Helper()
	spans = waitServerSpans(t, rec, 1)
	attempts = spansOfKind(spans, trace.SpanKindClient)
	if len(attempts) == 0 {
		t.Fatal("no attempt span")
	}
	return spans, attempts
}

// spanTexts is every string a span exports that text can hide in: its
// attributes' values, its status description and its events' names and
// attributes, each with where it was found.
func spanTexts(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{"status": s.Status().Description}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = valueText(kv.Value)
	}
	for _, ev := range s.Events() {
		out["event "+ev.Name] = ev.Name
		for _, kv := range ev.Attributes {
			out["event "+ev.Name+" "+string(kv.Key)] = valueText(kv.Value)
		}
	}
	return out
}

// valueText is v's text: a string's, a string slice's joined; "" for
// other kinds (numbers and booleans hold no upstream text).
func valueText(v attribute.Value) string {
	switch v.Type() {
	case attribute.STRING:
		return v.AsString()
	case attribute.STRINGSLICE:
		return strings.Join(v.AsStringSlice(), ", ")
	}
	return ""
}

// TestTracingScrubsAnUpstreamKeyEchoedInAnErrorEnvelope: an upstream that
// answers 200 with an error envelope whose code echoes the API key it was
// sent gets no span to carry that key to the collector (SECURITY.md: the key
// scrubber covers everything the gateway emits); sluice.error_envelope says
// [redacted], as the client's answer does.
func TestTracingScrubsAnUpstreamKeyEchoedInAnErrorEnvelope(t *testing.T) {
	const key = "sk-proj-UPSTREAMSECRETabcdef123456"
	envelope := `{"error":{"message":"Incorrect API key provided: Bearer ` + key + `","type":"server_error","code":"` + key + `"}}`
	for _, tc := range []struct{ name, path, body string }{
		{"responses stream", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`},
		{"chat json", "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{keys: map[string]string{"A": key}, opts: gateway.Options{TracerProvider: tp}})
			raw := []upstreamtest.Frame{upstreamtest.RawFrame([]byte(envelope))}
			h.ups["A"].SetDefault(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(envelope), Frames: raw, ChatFrames: raw})
			resp := h.post(tc.path, tc.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), key) || !strings.Contains(string(b), "[redacted]") {
				t.Fatalf("the client's answer: %s", b)
			}
			spans, attempts := tracedAttempts(t, rec)
			for _, s := range spans {
				for where, v := range spanTexts(s) {
					if strings.Contains(v, key) {
						t.Errorf("span %q %s holds the upstream key: %q", s.Name(), where, v)
					}
				}
			}
			for i, as := range attempts {
				if v, _ := attrOf(as, "sluice.error_envelope"); v.AsString() != "[redacted]" {
					t.Errorf("attempt %d sluice.error_envelope = %q, want [redacted]", i, v.AsString())
				}
			}
		})
	}
}

// TestTracingBoundsAndCleansAnUpstreamErrorCode: an upstream error code of
// any size, with control characters, reaches neither a span's status
// description nor its sluice.failure longer than an attribute may be, nor
// with its control characters (README "Tracing"); and the gateway's own
// error message quotes no more than an excerpt of it, marked cut.
func TestTracingBoundsAndCleansAnUpstreamErrorCode(t *testing.T) {
	code := "K\u0007\u001b[31m" + strings.Repeat("K", 300000)
	body := `{"error":{"message":"short","type":"server_error","code":"K\u0007\u001b[31m` + strings.Repeat("K", 300000) + `"}}`
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	h.ups["A"].SetDefault(upstreamtest.Script{Status: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)})
	resp := h.post("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	msg := gjson.GetBytes(b, "error.message").Str
	if resp.StatusCode < 500 || !strings.HasPrefix(msg, "no upstream could serve the request: ") {
		t.Fatalf("%d %.300s", resp.StatusCode, b)
	}
	if len(msg) > 1000 || !strings.Contains(msg, "HTTP 503 K") || !strings.Contains(msg, "…") || strings.Contains(msg, code[:1000]) {
		t.Errorf("the client's message (%d bytes) should quote an excerpt of the upstream's code, marked cut: %.300q", len(msg), msg)
	}
	spans, attempts := tracedAttempts(t, rec)
	for _, s := range spans {
		for where, v := range spanTexts(s) {
			if len(v) > 4096 {
				t.Errorf("span %q %s is %d bytes long", s.Name(), where, len(v))
			}
			if strings.IndexFunc(v, unicode.IsControl) >= 0 {
				t.Errorf("span %q %s holds control characters: %.80q", s.Name(), where, v)
			}
		}
	}
	for i, as := range attempts {
		if d := as.Status().Description; !strings.HasPrefix(d, "HTTP 503 K") {
			t.Errorf("attempt %d status %.80q, want the reason naming the upstream's code", i, d)
		}
	}
}

// TestTracingRefusalWithoutAModelHasNoEmptyModel: a request refused before
// it named a model has no gen_ai.request.model at all, not an empty one.
func TestTracingRefusalWithoutAModelHasNoEmptyModel(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	resp := h.post("/v1/responses", `{"input":`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("%d, want 400", resp.StatusCode)
	}
	spans := spansOfKind(waitServerSpans(t, rec, 1), trace.SpanKindServer)
	if v, ok := attrOf(spans[0], "gen_ai.request.model"); ok {
		t.Errorf("gen_ai.request.model = %q on a request that named no model", v.AsString())
	}
	if v, _ := attrOf(spans[0], "error.type"); v.AsString() == "" {
		t.Errorf("the refusal's span has no error.type")
	}
}
