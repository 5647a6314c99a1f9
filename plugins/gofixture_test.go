package plugins

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestGoGuest runs the Go SDK fixture (a real Go guest) through every hook
// and every kind of fault.
func TestGoGuest(t *testing.T) {
	r := newRuntime(t, Options{
		Embedded:         map[string][]byte{"go.wasm": fixture(t, "gofixture")},
		CallTimeout:      200 * time.Millisecond,
		MemoryLimitPages: 512, // 32 MiB
		PoolSize:         2,
	})
	ctx := context.Background()
	rec := func(code string) (hostabi.RecoverOutput, Trace) {
		return r.RecoverTrace(ctx, hostabi.RecoverInput{Code: code, Message: "msg"})
	}
	if out, tr := rec("abc"); out.Verdict != hostabi.RecoverFailClosed || out.Code != "go:abc" || out.Message != "MSG" || tr.Outcome != "decided" {
		t.Fatalf("recover: %+v %+v", out, tr)
	}
	if out, tr := rec("defer"); out.Verdict != hostabi.RecoverPass || tr.Outcome != "default" {
		t.Fatalf("defer: %+v %+v", out, tr)
	}
	if _, tr := rec("error"); tr.Outcome != "error" {
		t.Fatalf("error: %+v", tr)
	}
	faults := []struct{ code, kind, text string }{
		{"loop", "timeout", "deadline"},
		{"oom", "memory", "fatal error: out of memory"},
		{"panic", "trap", "panic: fixture panic: msg"},
		{"exit", "exit", "exit_code(3)"},
	}
	for i, f := range faults {
		out, tr := rec(f.code)
		if out.Verdict != hostabi.RecoverPass || tr.Outcome != "fault" || !strings.Contains(tr.Steps[0].Error, f.text) {
			t.Fatalf("%s: %+v %+v", f.code, out, tr)
		}
		if n := counterValue(t, r, "sluice_policy_faults_total", map[string]string{"kind": f.kind}); n < 1 {
			t.Fatalf("%s: no %s fault counted (%s)", f.code, f.kind, tr.Steps[0].Error)
		}
		if out, _ := rec("ok"); out.Code != "go:ok" {
			t.Fatalf("after %s the next call failed: %+v", f.code, out)
		}
		st, _ := statusOf(r, "go")
		if st.Faults != int64(i+1) || st.State != StateActive {
			t.Fatalf("after %s: %+v", f.code, st)
		}
	}

	body := []byte(`{"model":"m","input":[{"role":"user","content":"hello"}],"tools":[{"type":"web_search"},{"type":"function"}]}`)
	rw := func(action string) (hostabi.RewriteOutput, Trace) {
		return r.RewriteTrace(ctx, hostabi.RewriteInput{Body: body, Headers: map[string]string{"X-Fixture": action, "Authorization": "secret"}})
	}
	out, tr := rw("edit")
	var got map[string]any
	if err := json.Unmarshal(out.Body, &got); err != nil || got["model"] != "m-edited" || got["echo"] != "hello" || len(got["tools"].([]any)) != 1 {
		t.Fatalf("edit: %s %v %+v", out.Body, err, tr)
	}
	if out, tr = rw("headers"); out.SetHeaders["x-set"] != "yes" || len(out.RemoveHeaders) != 1 || out.Body != nil {
		t.Fatalf("headers: %+v %+v", out, tr)
	}
	if out, _ = rw("upstream"); out.Upstream != "backup" {
		t.Fatalf("upstream: %+v", out)
	}
	if out, _ = rw("reject"); out.Reject == nil || out.Reject.Status != 429 || out.Reject.Code != "too_many_tools" || out.Reject.Param != "tools" {
		t.Fatalf("reject: %+v", out)
	}
	if out, tr = rw("panic"); out.Body != nil || tr.Steps[0].Outcome != "fault" {
		t.Fatalf("panic: the edit leaked: %+v %+v", out, tr)
	}
	if out, _ = rw("none"); out.Body != nil || out.Reject != nil {
		t.Fatalf("none: %+v", out)
	}
}
