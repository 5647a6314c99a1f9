package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// recoverAllPolicy answers every upstream error with the recover verdict
// and no message of its own.
type recoverAllPolicy struct{ gateway.BuiltinPolicy }

func (recoverAllPolicy) Recover(context.Context, hostabi.RecoverInput) hostabi.RecoverOutput {
	return hostabi.RecoverOutput{Verdict: hostabi.RecoverRecover}
}

// answeredError is the error a client got for a /v1/responses request:
// the JSON body's error, or for a stream (SSE) its response.failed's
// response.error.
func answeredError(t *testing.T, raw []byte, stream bool) gjson.Result {
	t.Helper()
	if !stream {
		return gjson.GetBytes(raw, "error")
	}
	i := strings.Index(string(raw), `{"type":"response.failed"`)
	if i < 0 {
		t.Fatalf("no response.failed in %s", raw)
	}
	return gjson.Get(strings.SplitN(string(raw[i:]), "\n", 2)[0], "response.error")
}

// TestRecoverVerdictMessageFitsTheError: a recover verdict without a
// message answers the retryable stream_incomplete error (ABI.md §3.1) whose
// message speaks of a lost previous response only when that is what the
// upstream said; any other error is named by its code.
func TestRecoverVerdictMessageFitsTheError(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: recoverAllPolicy{}}})
	for _, tc := range []struct {
		name, code, stream, want string
	}{
		{"JSON, another code", "foo", "false", "the upstream failed this request (code foo); retry the request"},
		{"SSE, another code", "foo", "true", "the upstream failed this request (code foo); retry the request"},
		{"no code", "", "false", "the upstream failed this request; retry the request"},
		{"lost previous response", "previous_response_not_found", "false", "the upstream lost this conversation's previous response; retry the request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Body: upstreamtest.ErrorBody("refused", "invalid_request_error", tc.code, "")})
			resp := h.post("/v1/responses", `{"model":"m","input":"x","stream":`+tc.stream+`}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			errObj := answeredError(t, raw, tc.stream == "true")
			// A Responses stream's response.failed carries the code in the
			// message ("stream_incomplete: …").
			if msg := errObj.Get("code").Str + ": " + errObj.Get("message").Str; !strings.Contains(msg, "stream_incomplete: ") || !strings.HasSuffix(msg, tc.want) {
				t.Fatalf("client got %d %s; want stream_incomplete with %q", resp.StatusCode, raw, tc.want)
			}
			if tc.stream == "false" && (resp.StatusCode != http.StatusBadGateway || errObj.Get("type").Str != "server_error") {
				t.Fatalf("client got %d %s; want 502 server_error", resp.StatusCode, raw)
			}
		})
	}
}
