package plugins

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

// TestExamplePolicies loads the committed example policies (Go and
// hand-written WAT) next to the embedded defaults, through the policy dir.
func TestExamplePolicies(t *testing.T) {
	src := filepath.Join("..", "examples", "policies")
	dir := t.TempDir()
	for _, f := range []string{"05-wat-recover.wasm", "10-vendor-overloaded.wasm"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Skipf("example %s missing (examples/policies/build.sh): %v", f, err)
		}
		write(t, dir, f, b)
	}
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: 10 * time.Second, Embedded: policies.Defaults()})
	for _, st := range r.Status() {
		if st.State != StateActive {
			t.Fatalf("%+v", st)
		}
	}
	ctx := context.Background()
	// WAT: recovers its code with its own code, defers the rest to recover.wasm.
	out, tr := r.RecoverTrace(ctx, hostabi.RecoverInput{Surface: "chat_json", Upstream: "u", Code: "upstream_context_lost"})
	if out.Verdict != hostabi.RecoverRecover || out.Code != "context_lost_upstream" || tr.Policy != "05-wat-recover" {
		t.Fatalf("wat: %+v %+v", out, tr)
	}
	out, tr = r.RecoverTrace(ctx, hostabi.RecoverInput{Code: "previous_response_not_found"})
	if out.Verdict != hostabi.RecoverRecover || tr.Policy != "recover" || tr.Steps[0].Outcome != "defer" {
		t.Fatalf("wat defer: %+v %+v", out, tr)
	}
	// Go: replays the vendor code, defers the rest to replay.wasm.
	rep, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "vendor_overloaded", Upstream: "a"})
	if rep.Verdict != hostabi.ReplayOtherUpstream || rep.PenaltyMillis != 10000 || tr.Policy != "10-vendor-overloaded" {
		t.Fatalf("vendor: %+v %+v", rep, tr)
	}
	rep, tr = r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "usage_limit_reached", RetryAfterMillis: 2500})
	if rep.Verdict != hostabi.ReplayOtherUpstream || rep.PenaltyMillis != 2500 || tr.Policy != "replay" {
		t.Fatalf("vendor defer: %+v %+v", rep, tr)
	}
}
