package plugins

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

// TestFirstPartyPolicies runs the embedded Go policies through the runtime.
func TestFirstPartyPolicies(t *testing.T) {
	r := newRuntime(t, Options{
		Embedded: policies.Defaults(),
		Config: map[string]json.RawMessage{
			"rewrite": json.RawMessage(`{"model_aliases":{"gpt-5-codex":"gpt-5.1-codex"},"strip_tool_types":["web_search"]}`),
			"replay":  json.RawMessage(`{"penalty_ms":12000}`),
		},
	})
	want := map[string]string{"recover": "recover", "replay": "replay", "rewrite": "rewrite_request"}
	for _, st := range r.Status() {
		if st.State != StateActive || len(st.Hooks) != 2 || st.Hooks[0] != want[st.Name] || st.Hooks[1] != "self_test" {
			t.Fatalf("status %+v", st)
		}
	}
	ctx := context.Background()
	rec, tr := r.RecoverTrace(ctx, hostabi.RecoverInput{Surface: "responses_stream", Code: "invalid_request_error",
		Param: "previous_response_id", Message: "Previous response with id 'resp_x' not found."})
	if rec.Verdict != hostabi.RecoverRecover || tr.Policy != "recover" {
		t.Fatalf("recover: %+v %+v", rec, tr)
	}
	if rec, _ := r.RecoverTrace(ctx, hostabi.RecoverInput{Code: "context_length_exceeded"}); rec.Verdict != hostabi.RecoverPass {
		t.Fatalf("recover pass: %+v", rec)
	}
	rep, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "usage_limit_reached", HTTPStatus: 429})
	if rep.Verdict != hostabi.ReplayOtherUpstream || rep.PenaltyMillis != 12000 || tr.Policy != "replay" {
		t.Fatalf("replay: %+v %+v", rep, tr)
	}
	for _, size := range []int{1 << 10, 1 << 20} {
		body := codexBody(size)
		out, tr := r.RewriteTrace(ctx, hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses", Body: body})
		if len(tr.Steps) != 1 || tr.Steps[0].Outcome != "ok" {
			t.Fatalf("rewrite trace %+v", tr)
		}
		var got struct {
			Model string           `json:"model"`
			Tools []map[string]any `json:"tools"`
		}
		if err := json.Unmarshal(out.Body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Model != "gpt-5.1-codex" || len(got.Tools) != 2 {
			t.Fatalf("rewrite %d: model %q, %d tools", size, got.Model, len(got.Tools))
		}
	}
}

// TestUnconfiguredRewriteIsNeverCalled: the embedded rewrite policy tells the
// host, through sluice_hooks, that without config it has nothing to do.
func TestUnconfiguredRewriteIsNeverCalled(t *testing.T) {
	r := newRuntime(t, Options{Embedded: policies.Defaults()})
	if r.RewriteActive() {
		t.Fatal("an unconfigured rewrite policy is active")
	}
	for _, st := range r.Status() {
		if st.Name == "rewrite" && (st.State != StateActive || len(st.Hooks) != 1 || st.Hooks[0] != "self_test") {
			t.Fatalf("rewrite status %+v: want loaded with only its self-test", st)
		}
	}
	body := []byte(`{"model":"m","input":"x"}`)
	out, tr := r.RewriteTrace(context.Background(), hostabi.RewriteInput{Endpoint: "/v1/responses", Body: body})
	if out.Body != nil || tr.Outcome != "default" {
		t.Fatalf("rewrite ran: %+v %+v", out, tr)
	}
	configured := newRuntime(t, Options{Embedded: policies.Defaults(),
		Config: map[string]json.RawMessage{"rewrite": json.RawMessage(`{"model_aliases":{"m":"n"}}`)}})
	if !configured.RewriteActive() {
		t.Fatal("a configured rewrite policy is not active")
	}
}
