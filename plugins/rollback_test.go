package plugins

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// faultUntilSettled makes n calls that fault on p's trap fixture and waits
// for the rollback or trip they cause to settle.
func faultUntilSettled(t *testing.T, r *Runtime, odd hostabi.RecoverInput, n int) PolicyStatus {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, tr := r.RecoverTrace(context.Background(), odd); tr.Outcome != outFault.String() {
			t.Fatalf("call %d: %+v", i, tr)
		}
	}
	waitFor(t, func() bool { st, _ := statusOf(r, "p"); return st.State != StateActive })
	st, _ := statusOf(r, "p")
	return st
}

// TestRollbackPassesOverATrippedVersion: a version that tripped is no
// rollback target (ABI.md §7). A new file that trips in turn leaves the
// built-in default serving, with a last_error that says why no rollback
// happened. A file refused while the policy is tripped neither hides the
// trip's reason nor is logged as if the tripped version still served, the
// tripped bytes written back do not make it active again, and the row's
// counters are the shown version's only.
func TestRollbackPassesOverATrippedVersion(t *testing.T) {
	odd, even := oddEven(t)
	dir := t.TempDir()
	first := fixture(t, "trap") // traps on odd inputs
	second := withCustomSection(first, "rebuilt", "v2")
	write(t, dir, "p.wasm", first)
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{PolicyDir: dir, FaultsBeforeRollback: 3, Debounce: time.Hour, Logger: logger, CallTimeout: time.Minute})

	if st := faultUntilSettled(t, r, odd, 3); st.State != StateTripped || !strings.Contains(st.LastError, "no previous version") {
		t.Fatalf("first version: %+v", st)
	}

	// A file refused meanwhile: the trip's reason stays the last_error, and
	// the log says the built-in default serves.
	junk := []byte("junk")
	write(t, dir, "p.wasm", junk)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := statusOf(r, "p")
	if st.State != StateTripped || st.Rejected != shaOf(junk) || !strings.Contains(st.RejectedError, "bad magic") ||
		!strings.Contains(st.LastError, "3 faults in a row in version "+short(shaOf(first))) {
		t.Fatalf("a file refused while tripped: %+v", st)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "policy rejected") {
			line = l
		}
	}
	if !strings.Contains(line, `still_serving="the built-in default"`) || !strings.Contains(line, "tripped_sha256="+short(shaOf(first))) {
		t.Fatalf("the rejection does not say the built-in default serves: %q", line)
	}

	// The tripped version's own bytes written back are no new file: it
	// stays tripped.
	write(t, dir, "p.wasm", first)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.State != StateTripped || st.Rejected != "" || st.RejectedError != "" ||
		!strings.Contains(st.LastError, "3 faults in a row in version "+short(shaOf(first))) {
		t.Fatalf("the tripped bytes written back: %+v", st)
	}

	// The next version trips too: the first is no rollback target.
	write(t, dir, "p.wasm", second)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.State != StateActive || st.SHA256 != shaOf(second) || st.Calls != 0 || st.Faults != 0 {
		t.Fatalf("second version loaded: %+v (counters must be its own)", st)
	}
	st = faultUntilSettled(t, r, odd, 3)
	if st.State != StateTripped || st.SHA256 != shaOf(second) || st.Calls != 3 || st.Faults != 3 ||
		!strings.Contains(st.LastError, "not rolled back to "+short(shaOf(first))+", which tripped too") ||
		!strings.Contains(st.LastError, "3 faults in a row in version "+short(shaOf(second))) {
		t.Fatalf("second version tripped: %+v", st)
	}
	if out, tr := r.RecoverTrace(context.Background(), even); out != hostabi.DefaultRecover(even) || tr.Outcome != outTripped.String() {
		t.Fatalf("after the trip: %+v %+v", out, tr)
	}
}

// TestRolledBackRowCountsTheRestoredVersion: after a rollback the row shows
// the restored version's calls and faults, not those of the version it
// replaced.
func TestRolledBackRowCountsTheRestoredVersion(t *testing.T) {
	odd, _ := oddEven(t)
	dir := t.TempDir()
	write(t, dir, "p.wasm", fixture(t, "trap"))
	embedded := fixture(t, "recover_v2")
	r := newRuntime(t, Options{PolicyDir: dir, FaultsBeforeRollback: 3, Debounce: time.Hour, CallTimeout: time.Minute,
		Embedded: map[string][]byte{"p.wasm": embedded}})

	st := faultUntilSettled(t, r, odd, 3)
	if st.State != StateRolledBack || st.SHA256 != shaOf(embedded) || st.Calls != 0 || st.Faults != 0 {
		t.Fatalf("rolled back to the embedded module: %+v", st)
	}
	if out := r.Recover(context.Background(), odd); out.Code != "from_v2" {
		t.Fatalf("the embedded module does not serve: %+v", out)
	}
	if st, _ := statusOf(r, "p"); st.Calls != 1 || st.Faults != 0 {
		t.Fatalf("after one call of the restored version: %+v", st)
	}
}
