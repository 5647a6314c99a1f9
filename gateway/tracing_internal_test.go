package gateway

import (
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

// TestTracingOffAllocatesNothing: without a tracer provider every tracing
// hook of the request path returns at its nil check: no allocation.
func TestTracingOffAllocatesNothing(t *testing.T) {
	s := &Server{}
	req := &clientRequest{ep: responsesEndpoint, model: "m", header: http.Header{"Traceparent": {"x"}}, meta: &reqMeta{}}
	h := http.Header{}
	var tgt upstream.Target
	ans := &upstreamAnswer{status: 200}
	if n := testing.AllocsPerRun(1000, func() {
		end := s.traceRequest(req)
		s.traceAttempt(req, tgt)
		s.traceAnswer(req, ans)
		s.traceAttemptEnd(req, attemptResult{})
		req.injectTrace(h)
		end()
	}); n != 0 {
		t.Fatalf("%v allocations per request with tracing off", n)
	}
	if req.trace != nil || req.meta.traced || len(h) != 0 {
		t.Fatal("tracing off left state behind")
	}
}

// BenchmarkTracingOff is the cost of the tracing hooks of one request with
// one attempt when tracing is off.
func BenchmarkTracingOff(b *testing.B) {
	s := &Server{}
	req := &clientRequest{ep: responsesEndpoint, model: "m", header: http.Header{}}
	h := http.Header{}
	var tgt upstream.Target
	b.ReportAllocs()
	for b.Loop() {
		end := s.traceRequest(req)
		s.traceAttempt(req, tgt)
		s.traceAnswer(req, nil)
		s.traceAttemptEnd(req, attemptResult{})
		req.injectTrace(h)
		end()
	}
}

// TestHasFinishReason: the byte check before a Chat chunk's finish reasons
// are parsed passes a string finish_reason however the JSON is spaced, and
// passes over null ones.
func TestHasFinishReason(t *testing.T) {
	for _, tc := range []struct {
		chunk string
		want  bool
	}{
		{`{"choices":[{"finish_reason":"stop"}]}`, true},
		{`{"choices":[{"finish_reason": "stop"}]}`, true},
		{`{"choices":[{"finish_reason" :	"length"}]}`, true},
		{"{\"choices\":[{\"finish_reason\":\n\"stop\"}]}", true},
		{`{"choices":[{"finish_reason":null},{"finish_reason": "stop"}]}`, true},
		{`{"choices":[{"finish_reason":null}]}`, false},
		{`{"choices":[{"finish_reason": null}]}`, false},
		{`{"choices":[{"delta":{"content":"finish_reason"}}]}`, false},
		{`{"choices":[{"delta":{"content":"\"finish_reason\""}}]}`, false},
		{`{"choices":[]}`, false},
		{`"finish_reason"`, false},
	} {
		if got := hasFinishReason([]byte(tc.chunk)); got != tc.want {
			t.Errorf("hasFinishReason(%s) = %v, want %v", tc.chunk, got, tc.want)
		}
	}
}
