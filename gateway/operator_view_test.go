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

// bannedModelPolicy is a rewrite policy that rejects the model "banned",
// as an operator's policy does with its Reject.
type bannedModelPolicy struct{ gateway.BuiltinPolicy }

func (bannedModelPolicy) Rewrite(_ context.Context, in hostabi.RewriteInput) hostabi.RewriteOutput {
	if gjson.GetBytes(in.Body, "model").Str == "banned" {
		return hostabi.RewriteOutput{Reject: &hostabi.RejectError{Status: http.StatusForbidden, Code: "model_banned", Message: "not here"}}
	}
	return hostabi.RewriteOutput{}
}

// TestEarlyRefusalsLogTheirCodeAndModel: a request refused before the
// pipeline (a body that is not JSON, a duplicate key, a rewrite policy's
// reject) logs its error code, and its model when the body names one, as
// README "Access log" lists them: an operator tells a policy's 403 from
// any other.
func TestEarlyRefusalsLogTheirCodeAndModel(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: bannedModelPolicy{}}})
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"model":"gpt-trunc"`, http.StatusBadRequest, `model=gpt-trunc status=400 code=invalid_json`},
		{`{"model":"gpt-dup","input":"a","input":"b"}`, http.StatusBadRequest, `model=gpt-dup status=400 code=duplicate_key`},
		{`{"model":"banned","input":"hi"}`, http.StatusForbidden, `model=banned status=403 code=model_banned`},
	} {
		resp := h.post("/v1/responses", c.body)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s, want %d", c.body, resp.StatusCode, body, c.status)
		}
	}
	waitAccessLines(t, h, 3)
	lines := grepLines(h.logs.String(), "access: request")
	for _, want := range []string{
		`model=gpt-trunc status=400 code=invalid_json`,
		`model=gpt-dup status=400 code=duplicate_key`,
		`model=banned status=403 code=model_banned`,
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("access log lacks %q:\n%s", want, lines)
		}
	}
}

// TestNumericUpstreamCodeIsNotRepeated: llama.cpp answers a bad key with
// "code": 401; the upstream's failure reason (log and /admin/upstreams)
// reads "HTTP 401", not "HTTP 401 401".
func TestNumericUpstreamCodeIsNotRepeated(t *testing.T) {
	const key = "sk-upstream-key-0123456789"
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A", APIKey: key}},
		keys:      map[string]string{"A": key},
	})
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusUnauthorized,
		Body: []byte(`{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}`)})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("status %d, want an error", resp.StatusCode)
	}
	var st struct {
		Upstreams []struct {
			Name   string
			Reason string
		}
	}
	h.getJSON("/admin/upstreams", &st)
	if len(st.Upstreams) != 1 || st.Upstreams[0].Reason != "HTTP 401" {
		t.Fatalf("/admin/upstreams: %+v, want reason \"HTTP 401\"", st.Upstreams)
	}
	if logs := h.logs.String(); strings.Contains(logs, "401 401") {
		t.Fatalf("the log repeats the status:\n%s", grepLines(logs, "401"))
	}
}
