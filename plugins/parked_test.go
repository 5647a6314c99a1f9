package plugins

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

// standIns are the gateway's (cmd/sluice wires the same two).
var standIns = map[string]StandIn{
	"recover.wasm": {Recover: hostabi.EmbeddedRecover},
	"replay.wasm":  {Replay: hostabi.EmbeddedReplay},
}

// policyStatus is name's status; the test fails without one.
func policyStatus(t *testing.T, r *Runtime, name string) PolicyStatus {
	t.Helper()
	st, ok := statusOf(r, name)
	if !ok {
		t.Fatalf("no policy %q in %+v", name, r.Status())
	}
	return st
}

// waitUnparked polls until name's module answers again.
func waitUnparked(t *testing.T, r *Runtime, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for policyStatus(t, r, name).Parked {
		if time.Now().After(deadline) {
			t.Fatalf("%s still parked after 60s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestParkedEmbeddedPolicy: with stand-ins, the embedded recover and
// replay modules are checked at load and parked; the first call is
// answered by the stand-in without waiting for a compile and starts one;
// once it is done the module itself answers, with the same verdict.
func TestParkedEmbeddedPolicy(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Options{Embedded: policies.Defaults(), StandIns: standIns, CallTimeout: 5 * time.Second})
	for _, name := range []string{"recover", "replay"} {
		if st := policyStatus(t, r, name); !st.Parked || st.State != StateActive || st.SHA256 == "" {
			t.Fatalf("%s after load: %+v, want active and parked", name, st)
		}
	}
	if st := policyStatus(t, r, "rewrite"); st.Parked {
		t.Fatalf("rewrite has no stand-in but is parked: %+v", st)
	}

	in := hostabi.RecoverInput{Code: "previous_response_not_found", Message: "gone"}
	out, tr := r.RecoverTrace(ctx, in)
	if out.Verdict != hostabi.RecoverRecover || tr.Policy != "recover" || tr.Outcome != "decided" ||
		len(tr.Steps) != 1 || tr.Steps[0].Outcome != "stand_in" {
		t.Fatalf("first call: %+v %+v, want recover decided by the stand-in", out, tr)
	}
	if got := counterValue(t, r, "sluice_policy_calls_total", map[string]string{"policy": "recover", "outcome": "stand_in"}); got != 1 {
		t.Fatalf("stand_in calls = %v, want 1", got)
	}
	waitUnparked(t, r, "recover")
	out, tr = r.RecoverTrace(ctx, in)
	if out.Verdict != hostabi.RecoverRecover || len(tr.Steps) != 1 || tr.Steps[0].Outcome != "ok" {
		t.Fatalf("after the compile: %+v %+v, want the module to answer", out, tr)
	}
	if policyStatus(t, r, "replay").Parked != true {
		t.Fatal("replay was unparked by a recover call")
	}
}

// TestStandInsDecideAsTheModules runs the replay failure table (every
// phase, class and variant) and a set of recover questions through the
// embedded modules and through their stand-ins, with and without config:
// a stand-in that drifted from its module would change what the first
// failures after start get.
func TestStandInsDecideAsTheModules(t *testing.T) {
	ctx := context.Background()
	recoverIns := []hostabi.RecoverInput{
		{Code: "previous_response_not_found"},
		{Code: "invalid_request_error", Param: "previous_response_id", Message: "Previous response with id 'r' not found."},
		{Type: "invalid_request_error", Param: "previous_response_id", Message: "not found: previous response"},
		{Code: "invalid_request_error", Param: "input", Message: "previous response not found"},
		{Code: "rate_limit_exceeded", HTTPStatus: 429},
		{Code: hostabi.CodeOwnerUnavailable, OwnerRemoved: true, Portable: true},
		{Code: hostabi.CodeOwnerUnavailable, OwnerRemoved: true},
		{Code: hostabi.CodeOwnerUnavailable, OwnerDownMillis: 400000, RehydrateAfterMillis: 300000, Portable: true},
		{Code: hostabi.CodeOwnerUnavailable, OwnerDownMillis: 1000, RehydrateAfterMillis: 300000, Portable: true},
	}
	replayIns := append(conformanceInputs(), []hostabi.ReplayInput{
		{Code: "rate_limit_exceeded"}, {Code: "rate_limit_exceeded", RetryAfterMillis: 1500},
		{Code: "insufficient_quota", Phase: hostabi.PhaseBeforeContent, FailureClass: hostabi.FailureQuota, HasNextTarget: true},
		{Code: "rate_limit_exceeded", ResponseCreatedSeen: true}, {Code: "transport"},
	}...)
	// Configs the modules accept (a bad one refuses the load:
	// hostabi.CheckReplayConfig); recover takes none.
	for _, cfg := range []string{"", `{"penalty_ms": 1234}`, `{"penalty_ms": 0}`, `{"penalty_ms": 30000.0}`} {
		t.Run("config="+cfg, func(t *testing.T) {
			opts := Options{Embedded: policies.Defaults(), CallTimeout: 5 * time.Second}
			var raw []byte
			if cfg != "" {
				raw = []byte(cfg)
				opts.Config = map[string]json.RawMessage{"replay": raw}
			}
			r := newRuntime(t, opts) // no stand-ins: the modules answer
			for _, in := range recoverIns {
				got, tr := r.RecoverTrace(ctx, in)
				if tr.Policy != "recover" {
					t.Fatalf("recover %+v: decided by %+v", in, tr)
				}
				if want := hostabi.EmbeddedRecover(in, nil); got != want {
					t.Errorf("recover %+v: module %+v, stand-in %+v", in, got, want)
				}
			}
			for _, in := range replayIns {
				got, tr := r.ReplayTrace(ctx, in)
				if tr.Policy != "replay" {
					t.Fatalf("replay %+v: decided by %+v", in, tr)
				}
				if want := hostabi.EmbeddedReplay(in, raw); got != want {
					t.Errorf("replay %+v: module %+v, stand-in %+v", in, got, want)
				}
			}
		})
	}
}

// TestParkedReplacedOrClosedWhileCompiling: a parked policy replaced by a
// policy_dir file while its compile runs, and a runtime closed while one
// runs, end cleanly (the leak check of this package covers goroutines).
func TestParkedReplacedOrClosedWhileCompiling(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := New(ctx, Options{PolicyDir: dir, Embedded: policies.Defaults(), StandIns: standIns, CallTimeout: 5 * time.Second, Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "transport"}); tr.Steps[0].Outcome != "stand_in" {
		t.Fatalf("first replay call: %+v", tr)
	}
	// The same module bytes, from the directory: not parked (only embedded
	// modules are), and the parked version is retired.
	if err := os.WriteFile(filepath.Join(dir, "replay.wasm"), policies.Defaults()["replay.wasm"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if st := policyStatus(t, r, "replay"); st.Parked || st.Source != SourceDir {
		t.Fatalf("after the dir file: %+v", st)
	}
	if _, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "transport"}); tr.Steps[0].Outcome != "ok" {
		t.Fatalf("the dir module did not answer: %+v", tr)
	}
	// Close while recover's compile may still run.
	if _, tr := r.RecoverTrace(ctx, hostabi.RecoverInput{Code: "x"}); tr.Steps[0].Outcome != "stand_in" {
		t.Fatalf("first recover call: %+v", tr)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPrewarmDoesNotPark: an operator who asks for prewarmed instances
// gets compiled modules from load.
func TestPrewarmDoesNotPark(t *testing.T) {
	r := newRuntime(t, Options{Embedded: policies.Defaults(), StandIns: standIns, Prewarm: 1, CallTimeout: 5 * time.Second})
	if st := policyStatus(t, r, "recover"); st.Parked {
		t.Fatalf("%+v", st)
	}
	if _, tr := r.RecoverTrace(context.Background(), hostabi.RecoverInput{Code: "x"}); tr.Steps[0].Outcome != "ok" {
		t.Fatalf("%+v", tr)
	}
}
