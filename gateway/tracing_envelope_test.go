package gateway_test

import (
	"io"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestTracingErrorEnvelopeAttemptRecordsTheSentStatus: an upstream's 200
// whose body is an error envelope is judged as the 502 its error stands
// for, but its attempt's span records the 200 the upstream sent, names the
// envelope's error (sluice.error_envelope) and says why it failed, while
// the request's span records what the client was sent: a 502, or the 200
// of a stream that ends with response.failed, or the 400 of a client error
// the envelope held, relayed (the ending attempt keeps its own 200).
func TestTracingErrorEnvelopeAttemptRecordsTheSentStatus(t *testing.T) {
	const serverError = `{"error":{"message":"something broke","type":"server_error","code":"engine_overheated"}}`
	const clientError = `{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}`
	for _, tc := range []struct {
		name       string
		envelope   string
		code       string
		body       string
		stream     bool
		clientSent int
	}{
		{"json", serverError, "engine_overheated", `{"model":"gpt-fake-1","input":"hi"}`, false, http.StatusBadGateway},
		{"stream", serverError, "engine_overheated", `{"model":"gpt-fake-1","input":"hi","stream":true}`, true, http.StatusOK},
		{"json client error relayed", clientError, "context_length_exceeded", `{"model":"gpt-fake-1","input":"hi"}`, false, http.StatusBadRequest},
	} {
		envelope := tc.envelope
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			raw := []upstreamtest.Frame{upstreamtest.RawFrame([]byte(envelope))}
			script := upstreamtest.Script{Body: []byte(envelope)}
			if tc.stream {
				script = upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}}, Frames: raw, ChatFrames: raw}
			}
			h.ups["A"].SetDefault(script)
			if tc.stream {
				resp, evs := postWith(t, h, "/v1/responses", tc.body, nil)
				if resp.StatusCode != http.StatusOK || len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.failed" {
					t.Fatalf("%d, %d events; want a stream ending response.failed", resp.StatusCode, len(evs))
				}
			} else {
				resp := h.post("/v1/responses", tc.body)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.clientSent {
					t.Fatalf("%d %s; want %d", resp.StatusCode, b, tc.clientSent)
				}
			}
			spans := waitServerSpans(t, rec, 1)
			servers, clients := spansOfKind(spans, trace.SpanKindServer), spansOfKind(spans, trace.SpanKindClient)
			if len(servers) != 1 || len(clients) == 0 {
				t.Fatalf("%d server spans, %d client spans", len(servers), len(clients))
			}
			if v, _ := attrOf(servers[0], "http.response.status_code"); v.AsInt64() != int64(tc.clientSent) {
				t.Errorf("request span http.response.status_code = %d, want %d, what the client was sent", v.AsInt64(), tc.clientSent)
			}
			for i, as := range clients {
				if v, _ := attrOf(as, "http.response.status_code"); v.AsInt64() != http.StatusOK {
					t.Errorf("attempt %d http.response.status_code = %d, want the 200 the upstream sent", i, v.AsInt64())
				}
				if v, _ := attrOf(as, "sluice.error_envelope"); v.AsString() != tc.code {
					t.Errorf("attempt %d sluice.error_envelope = %q, want the envelope's code", i, v.AsString())
				}
				if tc.clientSent == http.StatusBadRequest {
					continue // relayed: the client's own error, not the attempt's failure
				}
				if d := as.Status().Description; d != "HTTP 200 error body: engine_overheated" {
					t.Errorf("attempt %d status %v, want the reason naming the 200 error body", i, as.Status())
				}
			}
		})
	}
}
