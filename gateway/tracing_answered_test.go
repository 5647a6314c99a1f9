package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A stream cut after content, with nothing to continue it, ends with the
// gateway's response.failed (or Chat error chunk): its request span carries
// error.type, the code the client got (README "Tracing"), over HTTP and on
// a WebSocket alike, as an upstream_unavailable failure's does.
func TestTracingCutStreamHasErrorType(t *testing.T) {
	for _, tc := range []struct{ name, path, body string }{
		{"responses", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`},
		{"chat", "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"websocket", "", `{"type":"response.create","model":"gpt-fake-1","input":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			h.ups["A"].Enqueue(upstreamtest.Answer("one two three four", 4).CutAfterDeltas(2))
			if tc.path == "" {
				evs := h.dialWS(nil).turn(tc.body)
				if last := evs[len(evs)-1]; last.typ != "response.failed" {
					t.Fatalf("the turn ended with %s", last.data)
				}
			} else {
				_, _ = postWith(t, h, tc.path, tc.body, nil)
			}
			rs := spansOfKind(waitServerSpans(t, rec, 1), trace.SpanKindServer)[0]
			if v, _ := attrOf(rs, "sluice.reason"); v.AsString() != "upstream_cut" {
				t.Errorf("sluice.reason %q, want upstream_cut", v.AsString())
			}
			if v, _ := attrOf(rs, "error.type"); v.AsString() != "stream_incomplete" {
				t.Errorf("error.type %q, want stream_incomplete", v.AsString())
			}
		})
	}
}

// A request the key gate refuses (401 invalid_api_key, before its body is
// read) is a server span too, under the client's traceparent, with the
// refusal's status and code; the credential it presented appears nowhere
// in it.
func TestTracingKeyGateRefusalHasASpan(t *testing.T) {
	const presented = "sk-not-a-sluice-key-SECRET"
	for _, tc := range []struct{ name, method, path, spanName string }{
		{"responses", http.MethodPost, "/v1/responses", "POST /v1/responses"},
		{"chat", http.MethodPost, "/v1/chat/completions", "POST /v1/chat/completions"},
		{"session chunk", http.MethodPost, streaminput.PathPrefix + "/sis_abc/chunks", "POST " + streaminput.PathPrefix + "/{session_id}/chunks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recordedSpans(t)
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp,
				Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}}}})
			req, _ := http.NewRequest(tc.method, h.url+tc.path, strings.NewReader(`{"model":"gpt-fake-1","input":"x"}`))
			req.Header.Set("Authorization", "Bearer "+presented)
			req.Header.Set("traceparent", clientTraceparen)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", resp.StatusCode)
			}
			spans := waitServerSpans(t, rec, 1)
			rs := spans[0]
			if len(spans) != 1 || rs.Name() != tc.spanName || rs.Parent().TraceID().String() != clientTraceID {
				t.Fatalf("%d spans, the first %q under %v", len(spans), rs.Name(), rs.Parent())
			}
			if v, _ := attrOf(rs, "http.response.status_code"); v.AsInt64() != http.StatusUnauthorized {
				t.Errorf("status code %d", v.AsInt64())
			}
			if v, _ := attrOf(rs, "error.type"); v.AsString() != "invalid_api_key" {
				t.Errorf("error.type %q", v.AsString())
			}
			assertSpanHoldsNo(t, rs, presented)
		})
	}
}

// assertSpanHoldsNo fails if any of s's attributes or its name holds secret.
func assertSpanHoldsNo(t *testing.T, s sdktrace.ReadOnlySpan, secret string) {
	t.Helper()
	if strings.Contains(s.Name(), secret) {
		t.Errorf("span name %q holds the credential", s.Name())
	}
	for _, kv := range s.Attributes() {
		if strings.Contains(kv.Value.String(), secret) {
			t.Errorf("span attribute %s holds the credential", kv.Key)
		}
	}
}

// Streaming input's REST calls and the Mode A requests it refuses before
// dispatching them are server spans, through the hook the gateway hands
// the manager (TraceStreamingInput), with their status and error code.
func TestTracingStreamingInputCallsHaveSpans(t *testing.T) {
	tp, rec := recordedSpans(t)
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	mgr, err := streaminput.New(context.Background(), streaminput.Options{Dispatch: h.gw.Handler(), Trace: h.gw.TraceStreamingInput})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range mgr.Routes() {
		h.gw.Handle(rt.Method, rt.Path, rt.Handler)
	}
	srv := httptest.NewServer(mgr.ModeA(h.gw.Handler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
		srv.Close()
	})
	post := func(path, body string, hdr map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		req.Header.Set("traceparent", clientTraceparen)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(streaminput.PathPrefix, `{"endpoint":"/v1/responses"}`, nil); got != http.StatusBadRequest {
		t.Fatalf("a create without a template: %d", got)
	}
	if got := post(streaminput.PathPrefix+"/sis_unknown/chunks", `{"sequence_id":0,"payload":"x"}`, nil); got != http.StatusNotFound {
		t.Fatalf("a chunk for no session: %d", got)
	}
	if got := post(streaminput.EndpointResponses, "not json\n", map[string]string{streaminput.HeaderStreamingInput: "true"}); got != http.StatusBadRequest {
		t.Fatalf("a Mode A body without a header line: %d", got)
	}
	spans := spansOfKind(waitServerSpans(t, rec, 3), trace.SpanKindServer)
	want := []struct{ name, code string }{
		{"POST " + streaminput.PathPrefix, "missing_required_parameter"},
		{"POST " + streaminput.PathPrefix + "/{session_id}/chunks", "not_found"},
		{"POST /v1/responses", "invalid_json"},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d server spans, want %d", len(spans), len(want))
	}
	for i, w := range want {
		s := spans[i]
		code, _ := attrOf(s, "error.type")
		if s.Name() != w.name || code.AsString() != w.code || s.Parent().TraceID().String() != clientTraceID {
			t.Errorf("span %d: %q error.type %q under %v, want %q %q", i, s.Name(), code.AsString(), s.Parent(), w.name, w.code)
		}
	}
}

// An accepted WebSocket input_chunk frame is not a request (it is merged
// into the next response.create): it writes no access line, while a
// refused chunk keeps its line with the status it got.
func TestWebSocketAcceptedChunkWritesNoAccessLine(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"A"}`)
	c.send(`{"type":"input_chunk","sequence_id":1,"payload":"B"}`)
	if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the create ended with %s", evs[len(evs)-1].data)
	}
	evs := c.turn(`{"type":"input_chunk","sequence_id":"x","payload":"C"}`)
	if evs[0].typ != "error" {
		t.Fatalf("a bad chunk got %s", evs[0].data)
	}
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if lines = strings.Split(strings.TrimSpace(grepLines(h.logs.String(), "method=WS")), "\n"); len(lines) >= 2 {
			break
		}
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "status=200") || !strings.Contains(lines[1], "status=400") {
		t.Fatalf("WebSocket access lines:\n%s\nwant the create's (200) and the refused chunk's (400)", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, "status=0") {
			t.Errorf("a line with status=0: %s", l)
		}
	}
}

// TestAccessLogNamesTheCodeOfAGatewayEndedStream: a stream the gateway
// ends with its own error (a cut that nothing continues) logs that code,
// traced or not, as a refused request logs its own.
func TestAccessLogNamesTheCodeOfAGatewayEndedStream(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.CutAfter(4))
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.typ != "response.failed" {
		t.Fatalf("last event %s", last.typ)
	}
	waitAccessLines(t, h, 1)
	if line := grepLines(h.logs.String(), "access: request"); !strings.Contains(line, "code=stream_incomplete") {
		t.Fatalf("access line: %s", line)
	}
}
