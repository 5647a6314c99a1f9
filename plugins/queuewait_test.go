package plugins

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestCallThatWaitedGetsItsWholeBudget: a call that waited for a free
// instance still has its whole call_timeout to run (ABI.md §8: the call's
// own deadline starts once it has its instance). Every instance is held
// (PoolSize 1) while the call waits most of its wait bound, then one is
// put back; the hook runs 600 ms of its 1 s budget, so the wait and the run
// together outlast call_timeout, and the call must still answer.
func TestCallThatWaitedGetsItsWholeBudget(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{"spin.wasm": fixture(t, "spin")},
		Logger: testLogger(t), PoolSize: 1, CallTimeout: time.Second})
	v := r.active.Load().byHook[hRecover][0]
	inst, err := v.get(context.Background(), context.Background()) // the pool's only instance
	if err != nil {
		t.Fatal(err)
	}
	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
	type answer struct {
		out hostabi.RecoverOutput
		tr  Trace
	}
	answered := make(chan answer, 1)
	go func() {
		out, tr := r.RecoverTrace(context.Background(), in)
		answered <- answer{out, tr}
	}()
	time.Sleep(600 * time.Millisecond) // the call waits for an instance: most of its wait bound, not its run's
	v.put(inst, true)
	a := <-answered
	if a.tr.Outcome != "decided" || a.out.Verdict != hostabi.RecoverRecover {
		t.Fatalf("a call that waited for its instance: %+v %+v; want the policy's answer", a.out, a.tr)
	}
}

// TestRewriteFailClosed: a rewrite module the caller holds to its edits
// (RewriteChecks.FailClosed) that faults stops the chain, no edit of any
// module applies and the fallback is counted as failed_closed; without it
// the chain goes on, and the trace names the fault as the other hooks do
// ("fault", not "done").
func TestRewriteFailClosed(t *testing.T) {
	// "10-trap" sorts before "20-rewrite": the trap runs first.
	r := newRuntime(t, Options{Embedded: map[string][]byte{
		"10-trap.wasm":    fixture(t, "rewrite_trap"),
		"20-rewrite.wasm": fixture(t, "rewrite"),
	}, FaultsBeforeRollback: -1})
	in := hostabi.RewriteInput{Body: []byte(rewriteBody)}

	out, tr := r.RewriteWith(context.Background(), in, RewriteChecks{FailClosed: func(name string) bool { return name == "10-trap" }})
	if !tr.FailedClosed || tr.Policy != "10-trap" || tr.Outcome != outFault.String() || len(tr.Steps) != 1 {
		t.Fatalf("fail-closed trap: trace %+v", tr)
	}
	if out.Body != nil || out.SetHeaders != nil || out.Upstream != "" || out.Reject != nil {
		t.Fatalf("fail-closed trap: output %+v; want no edit at all", out)
	}
	if n := counterValue(t, r, "sluice_policy_fallbacks_total", map[string]string{"hook": "rewrite_request", "reason": "failed_closed"}); n != 1 {
		t.Fatalf("fallbacks{failed_closed} = %v", n)
	}
	if _, p, why := r.RewriteGuarded(context.Background(), in, nil, nil, func(name string) bool { return name == "10-trap" }); p != "10-trap" || !strings.HasPrefix(why, "fault: ") {
		t.Fatalf("RewriteGuarded: %q %q", p, why)
	}

	out, tr = r.RewriteTrace(context.Background(), in)
	if tr.FailedClosed || tr.Policy != "10-trap" || tr.Outcome != outFault.String() || len(tr.Steps) != 2 || out.Body == nil {
		t.Fatalf("fail-open trap: %+v %+v; want the second module's edits and outcome fault", out, tr)
	}
	if _, p, _ := r.RewriteGuarded(context.Background(), in, nil, nil, nil); p != "" {
		t.Fatalf("RewriteGuarded without fail-closed modules stopped at %q", p)
	}
}
