package plugins

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// rewriteInputs are a small rewrite input and one whose client header makes
// it larger than the 64 KiB input buffer of the reject and trap fixtures,
// whose sluice_alloc traps on larger sizes (the fixed buffer ABI.md §2
// allows).
func rewriteInputs() (small, big hostabi.RewriteInput) {
	small = hostabi.RewriteInput{Surface: "responses_json", Endpoint: "/v1/responses", Body: []byte(`{"model":"m","input":"x"}`)}
	big = small
	big.Headers = map[string]string{"x-pad": strings.Repeat("a", 70000)}
	return small, big
}

// TestOversizedInputsDoNotTripAGuardrail: a guardrail whose sluice_alloc
// traps on inputs it cannot hold faults on each client request too large
// for it, and that request gets what a fault gives (the built-in default,
// or a refusal where the policy fails closed); but once the version has
// completed a call, a fault on an input larger than any it completed does
// not count towards the trip (ABI.md §7), so however many such requests
// come, the policy still rejects the next ordinary one.
func TestOversizedInputsDoNotTripAGuardrail(t *testing.T) {
	const faults = 3
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{FaultsBeforeRollback: faults, CallTimeout: time.Minute, Logger: logger,
		Embedded: map[string][]byte{"guard.wasm": fixture(t, "reject")}})
	ctx := context.Background()
	small, big := rewriteInputs()
	if out, tr := r.RewriteTrace(ctx, small); out.Reject == nil || tr.Outcome != "rejected" {
		t.Fatalf("a small request: %+v %+v", out, tr)
	}
	for i := 0; i < 2*faults+1; i++ {
		out, tr := r.RewriteTrace(ctx, big)
		if out.Reject != nil || tr.Outcome != outFault.String() || !strings.Contains(tr.Steps[0].Error, "sluice_alloc") {
			t.Fatalf("oversized request %d: %+v %+v, want a fault in sluice_alloc", i, out, tr)
		}
	}
	holdToEdits := RewriteChecks{FailClosed: func(string) bool { return true }}
	if out, tr := r.RewriteWith(ctx, big, holdToEdits); out.Reject != nil || !tr.FailedClosed || tr.Outcome != outFault.String() {
		t.Fatalf("an oversized request, the policy failing closed: %+v %+v, want it refused", out, tr)
	}
	if out, tr := r.RewriteTrace(ctx, small); out.Reject == nil || tr.Outcome != "rejected" {
		t.Fatalf("a small request after %d oversized ones: %+v %+v, want the guardrail's reject", 2*faults+2, out, tr)
	}
	st, _ := statusOf(r, "guard")
	if st.State != StateActive || st.Faults != 2*faults+2 || !strings.Contains(st.LastError, "not counted towards the trip") {
		t.Fatalf("status: %+v", st)
	}
	if !strings.Contains(logs.String(), "not_counted_towards_trip=") {
		t.Errorf("no fault log line says it was not counted:\n%s", logs.String())
	}
}

// TestUncountedFaultsLeaveTheRunAsItWas: a completed call ends a run of
// faults; a fault on an input larger than any completed neither lengthens
// nor ends it; faults on inputs no larger than one completed count, so a
// version that faults on what it held before still trips at the N-th.
// (The trap fixture's recover traps on odd input lengths, and its
// sluice_alloc on inputs over 64 KiB.)
func TestUncountedFaultsLeaveTheRunAsItWas(t *testing.T) {
	odd, _ := oddEven(t)
	// even completes and is longer than odd: odd's faults are on an input
	// no larger than one completed.
	even := odd
	for len(hostabi.AppendRecoverInput(nil, even))%2 == 1 {
		even.Message += "m"
	}
	big := even
	big.Message = strings.Repeat("m", 70000)
	r := newRuntime(t, Options{FaultsBeforeRollback: 3, CallTimeout: time.Minute,
		Embedded: map[string][]byte{"p.wasm": fixture(t, "trap")}})
	ctx := context.Background()
	call := func(in hostabi.RecoverInput, want outcome, what string) {
		t.Helper()
		if _, tr := r.RecoverTrace(ctx, in); len(tr.Steps) != 1 || tr.Steps[0].Outcome != want.String() {
			t.Fatalf("%s: %+v, want %s", what, tr, want)
		}
	}
	call(even, outOK, "first call")
	call(odd, outFault, "fault 1 of the first run")
	call(odd, outFault, "fault 2 of the first run")
	call(even, outOK, "a completed call")
	call(odd, outFault, "fault 1 of the second run")
	for i := 0; i < 5; i++ {
		call(big, outFault, "an oversized input")
	}
	call(odd, outFault, "fault 2 of the second run: the oversized inputs did not end the run")
	call(big, outFault, "an oversized input")
	call(odd, outFault, "fault 3 of the second run")
	call(even, outTripped, "after the third counted fault in a row")
	waitFor(t, func() bool { st, _ := statusOf(r, "p"); return st.State == StateTripped })
	if st, _ := statusOf(r, "p"); !strings.Contains(st.LastError, "3 faults in a row") {
		t.Fatalf("tripped: %+v", st)
	}
}

// TestFaultsBeforeAnyCompletedCallTrip: until a hook has completed a call,
// the version has shown no input it can hold, so every fault on an input of
// 64 KiB or less counts: a version that always traps trips on ordinary
// inputs (ABI.md §7). The trip's log line and last_error say that a rewrite
// held to its edits refuses its requests instead of using the built-in
// default.
func TestFaultsBeforeAnyCompletedCallTrip(t *testing.T) {
	small, _ := rewriteInputs()
	for _, c := range []struct {
		name, module string
		in           hostabi.RewriteInput
	}{
		{"always traps", "rewrite_trap", small},
	} {
		t.Run(c.name, func(t *testing.T) {
			logger, logs := captureLogs(t)
			r := newRuntime(t, Options{FaultsBeforeRollback: 3, CallTimeout: time.Minute, Logger: logger,
				Embedded: map[string][]byte{"guard.wasm": fixture(t, c.module)}})
			for i := 0; i < 3; i++ {
				if _, tr := r.RewriteTrace(context.Background(), c.in); tr.Outcome != outFault.String() {
					t.Fatalf("call %d: %+v", i, tr)
				}
			}
			if _, tr := r.RewriteTrace(context.Background(), small); tr.Outcome != outTripped.String() {
				t.Fatalf("after 3 faults: %+v, want tripped", tr)
			}
			waitFor(t, func() bool { st, _ := statusOf(r, "guard"); return st.State == StateTripped })
			const wording = "the built-in default applies, or the request is refused where the policy fails closed (sluice_fail_closed)"
			if st, _ := statusOf(r, "guard"); !strings.Contains(st.LastError, wording+" after 3 faults in a row") {
				t.Fatalf("last_error: %q", st.LastError)
			}
			if !strings.Contains(logs.String(), "policy tripped: "+wording) || !strings.Contains(logs.String(), "policy fault: "+wording) {
				t.Fatalf("the log does not say a fail-closed policy refuses:\n%s", logs.String())
			}
		})
	}
}

// TestTripWordingOfAPolicyThatDoesNotRewrite: only a rewrite can fail
// closed, so a policy without one is told plainly that the built-in default
// applies.
func TestTripWordingOfAPolicyThatDoesNotRewrite(t *testing.T) {
	odd, _ := oddEven(t)
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{FaultsBeforeRollback: 2, CallTimeout: time.Minute, Logger: logger,
		Embedded: map[string][]byte{"p.wasm": fixture(t, "trap")}})
	for i := 0; i < 2; i++ {
		r.Recover(context.Background(), odd)
	}
	waitFor(t, func() bool { st, _ := statusOf(r, "p"); return st.State == StateTripped })
	st, _ := statusOf(r, "p")
	if !strings.Contains(st.LastError, "; the built-in default applies after 2 faults in a row") || strings.Contains(logs.String(), "fails closed") ||
		!strings.Contains(logs.String(), "policy tripped: the built-in default applies") {
		t.Fatalf("last_error %q, log:\n%s", st.LastError, logs.String())
	}
}

// TestOversizedInputsDoNotTripAFreshVersion: a version just loaded (a
// restart, a deploy) has completed no call, and the first requests it gets
// are over 64 KiB and too large for it: their faults fail their calls but
// do not count toward the trip (ABI.md §7), so the guardrail still rejects
// the first ordinary request after them.
func TestOversizedInputsDoNotTripAFreshVersion(t *testing.T) {
	small, big := rewriteInputs()
	r := newRuntime(t, Options{FaultsBeforeRollback: 3, CallTimeout: time.Minute,
		Embedded: map[string][]byte{"guard.wasm": fixture(t, "reject")}})
	for i := 0; i < 6; i++ {
		if _, tr := r.RewriteTrace(context.Background(), big); tr.Outcome != outFault.String() {
			t.Fatalf("oversized call %d: %+v, want a fault", i, tr)
		}
	}
	if _, tr := r.RewriteTrace(context.Background(), small); tr.Outcome != "rejected" {
		t.Fatalf("the ordinary request after them: %+v, want the guardrail's rejection", tr)
	}
	if st, _ := statusOf(r, "guard"); st.State == StateTripped || !strings.Contains(st.LastError, "not counted towards the trip") {
		t.Fatalf("state %s, last_error %q", st.State, st.LastError)
	}
}
