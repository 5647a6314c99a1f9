package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

// asExample is the committed AssemblyScript example policy
// (examples/policies/as-replay, built with sdk/assemblyscript): tests load
// it without a compiler.
func asExample(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", "policies", "20-as-replay.wasm"))
	if err != nil {
		tb.Fatalf("the AssemblyScript example is committed (sluice policy build examples/policies/as-replay -o examples/policies/20-as-replay.wasm): %v", err)
	}
	return b
}

// TestASGuestRecover: the AssemblyScript SDK decodes every string member
// (escapes, \u sequences, surrogate pairs, multi-byte UTF-8) and encodes its
// JSON output so that what the policy echoes comes back byte for byte; a
// large input makes the host grow the input region; many calls in a row
// run on the SDK's rewound heap without a fault.
func TestASGuestRecover(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{"as.wasm": asExample(t)}, PoolSize: 1, CallTimeout: 5 * time.Second}) // a loaded CI machine must not turn a call into a fault
	ctx := context.Background()
	msgs := []string{
		"plain",
		"quotes \" and \\ backslash, tab\t, newline\n, cr\r, bell\x07, nul\x00",
		"utf-8: déjà vu, 日本語, emoji 😀, <tags> & amp",
		strings.Repeat("x", 30<<10) + " big", // larger than the first 4 KiB region (the echo stays under the 64 KiB output limit)
		"after the big one",
	}
	for round := 0; round < 3; round++ {
		for _, m := range msgs {
			in := hostabi.RecoverInput{Surface: "chat_json", Upstream: "u", HTTPStatus: 400, EventType: "error",
				Code: "upstream_context_lost", Type: "t", Param: "p", Message: m}
			out, tr := r.RecoverTrace(ctx, in)
			if out.Verdict != hostabi.RecoverRecover || out.Code != "context_lost_upstream" || out.Message != "upstream said: "+m || tr.Policy != "as" {
				t.Fatalf("round %d, %.40q: %+v %+v", round, m, out.Code, tr)
			}
		}
	}
	for i := 0; i < 20000; i++ {
		out, tr := r.RecoverTrace(ctx, hostabi.RecoverInput{Code: "previous_response_not_found", Message: "m"})
		if out.Verdict != hostabi.RecoverRecover || tr.Outcome != "default" {
			t.Fatalf("defer %d: %+v %+v", i, out, tr)
		}
	}
	if st, ok := statusOf(r, "as"); !ok || st.Faults != 0 || st.Errors != 0 || st.ABIVersion != 3 {
		t.Fatalf("status %+v", st)
	}
}

// TestASExampleWithDefaults: the AssemblyScript example in a policy chain
// with the embedded defaults, which decide what it defers.
func TestASExampleWithDefaults(t *testing.T) {
	emb := policies.Defaults()
	emb["20-as-replay.wasm"] = asExample(t)
	r := newRuntime(t, Options{Embedded: emb})
	ctx := context.Background()
	out, tr := r.RecoverTrace(ctx, hostabi.RecoverInput{Code: "previous_response_not_found"})
	if out.Verdict != hostabi.RecoverRecover || tr.Policy != "recover" {
		t.Fatalf("%+v %+v", out, tr)
	}
	rep, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "usage_limit_reached", RetryAfterMillis: 2500})
	if rep.Verdict != hostabi.ReplayOtherUpstream || rep.PenaltyMillis != 2500 || tr.Policy != "replay" {
		t.Fatalf("%+v %+v", rep, tr)
	}
}

// TestASGuestRewrite: the AssemblyScript fixture's rewrite hook renames the
// model alias "fast" through the host's document functions and sets a
// header; a request for another model is left alone.
func TestASGuestRewrite(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{"as.wasm": fixture(t, "asfixture")}, PoolSize: 1})
	ctx := context.Background()
	in := hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses",
		Body: []byte(`{"model":"fast","input":"hi","stream":true}`)}
	for round := 0; round < 3; round++ { // the rewound heap serves call after call
		out, tr := r.RewriteTrace(ctx, in)
		if string(out.Body) != `{"model":"gpt-5-mini","input":"hi","stream":true}` || out.SetHeaders["x-rewritten-by"] != "asfixture" || tr.Outcome != "done" {
			t.Fatalf("round %d: body %s, headers %v, trace %+v", round, out.Body, out.SetHeaders, tr)
		}
	}
	in.Body = []byte(`{"model":"gpt-5","input":"hi"}`)
	if out, _ := r.RewriteTrace(ctx, in); out.Body != nil || len(out.SetHeaders) != 0 {
		t.Fatalf("another model changed: %s %v", out.Body, out.SetHeaders)
	}
	if st, ok := statusOf(r, "as"); !ok || st.Faults != 0 || st.Errors != 0 {
		t.Fatalf("status %+v", st)
	}
}
