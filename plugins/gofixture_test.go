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
		CallTimeout:      10 * time.Second, // the OOM case must hit the cap first, even under -race
		MemoryLimitPages: 512,              // 32 MiB
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
	// The deadline: the request's own (shorter than CallTimeout) applies.
	lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	out, tr := r.RecoverTrace(lctx, hostabi.RecoverInput{Code: "loop"})
	cancel()
	if out.Verdict != hostabi.RecoverPass || tr.Outcome != "canceled" {
		// The caller's deadline expired: counted as an error, not a fault.
		t.Fatalf("loop under the request deadline: %+v %+v", out, tr)
	}
	r2 := newRuntime(t, Options{Embedded: map[string][]byte{"go.wasm": fixture(t, "gofixture")}, CallTimeout: 100 * time.Millisecond})
	if out, _ := recoverOnceReady(t, r2, hostabi.RecoverInput{Code: "ok"}); out.Code != "go:ok" {
		t.Fatalf("before loop: %+v", out)
	}
	out, tr = r2.RecoverTrace(ctx, hostabi.RecoverInput{Code: "loop"})
	if out.Verdict != hostabi.RecoverPass || tr.Outcome != "fault" || !strings.Contains(tr.Steps[0].Error, "deadline") {
		t.Fatalf("loop: %+v %+v", out, tr)
	}
	if out, _ := recoverOnceReady(t, r2, hostabi.RecoverInput{Code: "ok"}); out.Code != "go:ok" {
		t.Fatalf("after loop: %+v", out)
	}
	faults := []struct{ code, kind, text string }{
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
	out2, tr := rw("edit")
	var got map[string]any
	if err := json.Unmarshal(out2.Body, &got); err != nil || got["model"] != "m-edited" || got["echo"] != "hello" || len(got["tools"].([]any)) != 1 {
		t.Fatalf("edit: %s %v %+v", out2.Body, err, tr)
	}
	if out2, tr = rw("headers"); out2.SetHeaders["x-set"] != "yes" || len(out2.RemoveHeaders) != 1 || out2.Body != nil {
		t.Fatalf("headers: %+v %+v", out2, tr)
	}
	if out2, _ = rw("upstream"); out2.Upstream != "backup" {
		t.Fatalf("upstream: %+v", out2)
	}
	if out2, _ = rw("reject"); out2.Reject == nil || out2.Reject.Status != 429 || out2.Reject.Code != "too_many_tools" || out2.Reject.Param != "tools" {
		t.Fatalf("reject: %+v", out2)
	}
	if out2, tr = rw("panic"); out2.Body != nil || tr.Steps[0].Outcome != "fault" {
		t.Fatalf("panic: the edit leaked: %+v %+v", out2, tr)
	}
	if out2, _ = rw("none"); out2.Body != nil || out2.Reject != nil {
		t.Fatalf("none: %+v", out2)
	}
}

// recoverOnceReady calls the recover hook again while its answer is busy:
// no policy instance was ready in time. A call waits for an instance
// created for it no longer than instanceWait (ABI.md §8), and creating one
// of the Go fixture, under the race detector on a loaded machine, can take
// longer; the instance that call stopped waiting for joins the pool when it
// is ready. Any other outcome is the answer.
func recoverOnceReady(t *testing.T, r *Runtime, in hostabi.RecoverInput) (hostabi.RecoverOutput, Trace) {
	t.Helper()
	var out hostabi.RecoverOutput
	var tr Trace
	waitFor(t, func() bool {
		out, tr = r.RecoverTrace(context.Background(), in)
		return tr.Outcome != outBusy.String()
	})
	return out, tr
}
