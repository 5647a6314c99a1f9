package plugins

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestTripDecidedByTheNthFault: the FaultsBeforeRollback-th fault in a row
// trips the version before the next call is served (ABI.md §7), however
// long its rollback takes, and the trip stays the last_error. The test holds
// the runtime's lock, as a Reload compiling a big module would: the rollback
// waits for it, the trip must not.
func TestTripDecidedByTheNthFault(t *testing.T) {
	odd, _ := oddEven(t)
	dir := t.TempDir()
	write(t, dir, "p.wasm", fixture(t, "recover_v2"))
	r := newRuntime(t, Options{PolicyDir: dir, FaultsBeforeRollback: 3, Debounce: time.Hour, CallTimeout: time.Minute})
	write(t, dir, "p.wasm", fixture(t, "trap")) // traps on odd inputs
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}

	r.mu.Lock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			r.mu.Unlock()
		}
	}
	t.Cleanup(unlock)
	for i := 0; i < 3; i++ {
		if _, tr := r.RecoverTrace(context.Background(), odd); tr.Outcome != outFault.String() {
			t.Fatalf("call %d: %+v", i, tr)
		}
	}
	for i := 0; i < 5; i++ {
		out, tr := r.RecoverTrace(context.Background(), odd)
		if out != hostabi.DefaultRecover(odd) || tr.Outcome != outTripped.String() {
			t.Fatalf("call %d after the third fault: %+v %+v", i, out, tr)
		}
	}
	st, _ := statusOf(r, "p")
	if st.Faults != 3 || !strings.Contains(st.LastError, "3 faults in a row") {
		t.Fatalf("before the rollback: %+v", st)
	}

	unlock()
	waitFor(t, func() bool { st, _ := statusOf(r, "p"); return st.State == StateRolledBack })
	// The row counts the restored version's calls: none yet.
	if st, _ := statusOf(r, "p"); st.Faults != 0 || !strings.HasPrefix(st.LastError, "rolled back to ") || !strings.Contains(st.LastError, "3 faults in a row") {
		t.Fatalf("after the rollback: %+v", st)
	}
	if out := r.Recover(context.Background(), odd); out.Verdict != hostabi.RecoverFailClosed || out.Code != "from_v2" {
		t.Fatalf("the previous version does not serve: %+v", out)
	}

	// With nothing to roll back to, the trip is all there is.
	r2 := newRuntime(t, Options{FaultsBeforeRollback: 2, CallTimeout: time.Minute,
		Embedded: map[string][]byte{"t.wasm": fixture(t, "trap")}})
	r2.mu.Lock()
	for i := 0; i < 5; i++ {
		r2.Recover(context.Background(), odd)
	}
	st, _ = statusOf(r2, "t")
	r2.mu.Unlock()
	if st.Faults != 2 || !strings.Contains(st.LastError, "2 faults in a row") {
		t.Fatalf("tripped: %+v", st)
	}
	waitFor(t, func() bool { st, _ := statusOf(r2, "t"); return st.State == StateTripped })
	if st, _ := statusOf(r2, "t"); st.Faults != 2 || !strings.Contains(st.LastError, "no previous version") || !strings.Contains(st.LastError, "2 faults in a row") {
		t.Fatalf("after the trip settled: %+v", st)
	}
}
