package gateway_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestTracingAStreamItsClientStoppedIsNoError: a background response the
// client cancels or deletes, and a stream whose client left and nobody
// resumed, did not fail (README "Tracing": ERROR is for a request that
// failed): neither the request span nor its attempt is ERROR, and the
// attempt is not blamed with a sluice.failure; sluice.reason says how the
// stream ended.
func TestTracingAStreamItsClientStoppedIsNoError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stop   string // cancel | delete | leave
		reason string
	}{
		{"cancel", "cancel", "cancelled"},
		{"DELETE", "delete", "cancelled"},
		{"client left, nobody resumed", "leave", "client_gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			opts := resumeOpts()
			opts.Resume.DetachGrace = 200 * time.Millisecond
			opts.TracerProvider = tp
			h := newHarness(t, harnessConfig{opts: opts})
			h.ups["A"].SetDefault(upstreamtest.Answer(fullAnswer, 9).StallAfterDeltas(3))
			if tc.stop == "leave" {
				resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() && !strings.Contains(sc.Text(), "response.output_text.delta") {
				}
				resp.Body.Close() // gone after the first delta; the detached stream is never resumed
			} else {
				id := h.createResponse(`{"model":"gpt-fake-1","input":"hi","background":true}`)
				h.waitFor("/v1/responses/"+id, func(b []byte) bool { return gjson.GetBytes(b, "output.0.content.0.text").Str != "" })
				method, path := http.MethodPost, "/v1/responses/"+id+"/cancel"
				if tc.stop == "delete" {
					method, path = http.MethodDelete, "/v1/responses/"+id
				}
				if status, body := h.call(method, path, "sk-client-secret"); status != http.StatusOK {
					t.Fatalf("%s %s: %d %s", method, path, status, body)
				}
			}
			spans := waitServerSpans(t, rec, 1)
			servers, attempts := spansOfKind(spans, trace.SpanKindServer), spansOfKind(spans, trace.SpanKindClient)
			if len(servers) != 1 || len(attempts) != 1 {
				t.Fatalf("%d request spans, %d attempt spans; want 1 and 1", len(servers), len(attempts))
			}
			if v, _ := attrOf(servers[0], "sluice.reason"); v.AsString() != tc.reason {
				t.Errorf("sluice.reason = %q, want %q", v.AsString(), tc.reason)
			}
			if st := servers[0].Status(); st.Code == codes.Error {
				t.Errorf("request span status %v, want no error: the client stopped it", st)
			}
			if st := attempts[0].Status(); st.Code == codes.Error {
				t.Errorf("attempt span status %v, want no error: the upstream did not fail", st)
			}
			if v, ok := attrOf(attempts[0], "sluice.failure"); ok {
				t.Errorf("attempt span sluice.failure = %q blames the upstream", v.AsString())
			}
			if v, _ := attrOf(attempts[0], "sluice.rescue"); v.AsString() != "done" {
				t.Errorf("attempt span sluice.rescue = %q, want done", v.AsString())
			}
		})
	}
}
