package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	r := newRuntime(t, Options{Embedded: map[string][]byte{"as.wasm": asExample(t)}, PoolSize: 1})
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
	if st, ok := statusOf(r, "as"); !ok || st.Faults != 0 || st.Errors != 0 || st.ABIVersion != 2 {
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
	rep, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "usage_limit_reached"})
	if rep.Verdict != hostabi.ReplayOtherUpstream || rep.PenaltyMillis != 30000 || tr.Policy != "replay" {
		t.Fatalf("%+v %+v", rep, tr)
	}
}

// BenchmarkGuestCallCost is the per-call cost of the same hooks through the
// runtime (one goroutine, a warm instance) for the three guest languages:
// Go (the embedded policies, built with the Go SDK), AssemblyScript (the
// example, built with sdk/assemblyscript) and hand-written WAT.
func BenchmarkGuestCallCost(b *testing.B) {
	emb := policies.Defaults()
	recIn := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "primary", HTTPStatus: 400, EventType: "error",
		Code: "upstream_context_lost", Type: "invalid_request_error", Message: "context lost"}
	repIn := hostabi.ReplayInput{Surface: "responses_stream", Upstream: "primary", Code: "server_is_overloaded", HTTPStatus: 503,
		Phase: hostabi.PhaseBeforeContent, FailureClass: hostabi.FailureOverloaded, TargetCount: 2, HasNextTarget: true,
		MaxWaitMillis: 5000, Continuation: "auto"}
	guests := []struct {
		name     string
		rec, rep []byte
	}{
		{"go", emb["recover.wasm"], emb["replay.wasm"]},
		{"assemblyscript", asExample(b), asExample(b)},
		{"wat", fixture(b, "recover_v1"), fixture(b, "replay_v2")},
	}
	ctx := context.Background()
	for _, g := range guests {
		b.Run("recover/"+g.name, func(b *testing.B) {
			r := newRuntime(b, Options{Embedded: map[string][]byte{"p.wasm": g.rec}, PoolSize: 1})
			b.ReportAllocs()
			for b.Loop() {
				if _, tr := r.RecoverTrace(ctx, recIn); tr.Outcome != "decided" {
					b.Fatal(tr)
				}
			}
		})
		b.Run("replay/"+g.name, func(b *testing.B) {
			r := newRuntime(b, Options{Embedded: map[string][]byte{"p.wasm": g.rep}, PoolSize: 1})
			b.ReportAllocs()
			for b.Loop() {
				if out, tr := r.ReplayTrace(ctx, repIn); tr.Outcome != "decided" || out.Verdict != hostabi.ReplayOtherUpstream {
					b.Fatal(out, tr)
				}
			}
		})
	}
}
