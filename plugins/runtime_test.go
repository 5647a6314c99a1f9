package plugins

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/hostabi"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	if err != nil {
		t.Fatalf("fixture %s: %v (run plugins/testdata/build.sh)", name, err)
	}
	return b
}

func testLogger(t testing.TB) hclog.Logger {
	if testing.Verbose() {
		return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: os.Stderr})
	}
	return hclog.NewNullLogger()
}

func newRuntime(t testing.TB, opts Options) *Runtime {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.CallTimeout == 0 {
		// A call never waits for an instance past its deadline (ABI.md §8):
		// under the race detector on a loaded machine, creating the first
		// instance can take longer than DefaultCallTimeout, and the call
		// would fall back to the default. Tests of deadlines set their own.
		opts.CallTimeout = 5 * time.Second
	}
	r, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func statusOf(r *Runtime, name string) (PolicyStatus, bool) {
	for _, s := range r.Status() {
		if s.Name == name {
			return s, true
		}
	}
	return PolicyStatus{}, false
}

// odd and even produce recover inputs of odd and even encoded length (the
// fault fixtures misbehave on odd lengths only).
func oddEven(t testing.TB) (odd, even hostabi.RecoverInput) {
	a := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
	b := a
	b.Message = "mm" // 15 more bytes: the other parity
	if len(hostabi.AppendRecoverInput(nil, a))%2 == 1 {
		return a, b
	}
	return b, a
}

func TestRecoverThroughModules(t *testing.T) {
	r := newRuntime(t, Options{
		Embedded: map[string][]byte{
			"a-defer.wasm":   fixture(t, "replay_json"), // recover defers; replay answers
			"b-v2.wasm":      fixture(t, "recover_v2"),
			"c-v1.wasm":      fixture(t, "recover_v1"),
			"d-mask.wasm":    fixture(t, "hooks_mask"),
			"ignored.txt":    []byte("x"),
			".hidden.wasm":   fixture(t, "recover_v1"),
			"e-config.wasm":  fixture(t, "config_echo"),
			"f-config2.wasm": fixture(t, "config_echo"),
		},
		Config: map[string]json.RawMessage{"e-config": json.RawMessage(`{"verdict":2}`)},
	})
	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
	out, tr := r.RecoverTrace(context.Background(), in)
	if out.Verdict != hostabi.RecoverFailClosed || out.Code != "from_v2" || tr.Policy != "b-v2" || tr.Outcome != "decided" {
		t.Fatalf("recover = %+v, trace %+v", out, tr)
	}
	if len(tr.Steps) != 2 || tr.Steps[0].Outcome != "defer" {
		t.Fatalf("steps %+v", tr.Steps)
	}
	rep, tr := r.ReplayTrace(context.Background(), hostabi.ReplayInput{Code: "x"})
	if rep.Verdict != hostabi.ReplayOtherUpstream || rep.PenaltyMillis != 1234 || tr.Policy != "a-defer" {
		t.Fatalf("replay = %+v %+v", rep, tr)
	}
	st, _ := statusOf(r, "d-mask")
	if strings.Join(st.Hooks, ",") != "recover" {
		t.Fatalf("hooks_mask hooks = %v", st.Hooks)
	}
	if _, ok := statusOf(r, ".hidden"); ok {
		t.Fatal("hidden file loaded")
	}
	for _, s := range r.Status() {
		if s.State != StateActive || s.Source != SourceEmbedded || len(s.SHA256) != 64 || s.ABIVersion != 1 {
			t.Fatalf("status %+v", s)
		}
	}
}

func TestConfigAndLog(t *testing.T) {
	r := newRuntime(t, Options{
		Embedded: map[string][]byte{"cfg.wasm": fixture(t, "config_echo")},
		Config:   map[string]json.RawMessage{"cfg": json.RawMessage(`{"verdict":2}`)},
	})
	if out := r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Verdict != hostabi.RecoverFailClosed {
		t.Fatalf("with config: %+v", out)
	}
	r2 := newRuntime(t, Options{Embedded: map[string][]byte{"cfg.wasm": fixture(t, "config_echo")}})
	out, tr := r2.RecoverTrace(context.Background(), hostabi.RecoverInput{Code: "previous_response_not_found"})
	if out.Verdict != hostabi.RecoverRecover || tr.Outcome != "default" {
		t.Fatalf("without config (defer → default): %+v %+v", out, tr)
	}
}

func TestNoPoliciesUsesDefaults(t *testing.T) {
	r := newRuntime(t, Options{})
	if out := r.Recover(context.Background(), hostabi.RecoverInput{Code: "previous_response_not_found"}); out.Verdict != hostabi.RecoverRecover {
		t.Fatal(out)
	}
	if out := r.Replay(context.Background(), hostabi.ReplayInput{Code: "rate_limit_exceeded"}); out.Verdict != hostabi.ReplayOtherUpstream {
		t.Fatal(out)
	}
	body := []byte(`{"model":"m"}`)
	if out := r.Rewrite(context.Background(), hostabi.RewriteInput{Body: body}); out.Body != nil || out.Reject != nil {
		t.Fatal(out)
	}
	if !r.Ready() {
		t.Fatal("not ready")
	}
}

const rewriteBody = `{"model":"gpt-5","input":[{"type":"message","role":"user","content":"hi"}],"tools":[{"type":"function","name":"shell"},{"type":"web_search"}],"stream":true}`

func TestRewriteEdits(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{"rw.wasm": fixture(t, "rewrite")}})
	in := hostabi.RewriteInput{Surface: "responses_stream", Endpoint: "/v1/responses", Body: []byte(rewriteBody),
		Headers: map[string]string{"Authorization": "Bearer secret", "x-drop": "1"}}
	out := r.Rewrite(context.Background(), in)
	var got map[string]any
	if err := json.Unmarshal(out.Body, &got); err != nil {
		t.Fatalf("body %s: %v", out.Body, err)
	}
	if got["model"] != "renamed" || got["previous_model"] != "gpt-5" {
		t.Fatalf("model not renamed: %s", out.Body)
	}
	if tools := got["tools"].([]any); len(tools) != 1 {
		t.Fatalf("tool not dropped: %s", out.Body)
	}
	if out.SetHeaders["x-policy"] != "wat" || len(out.RemoveHeaders) != 1 || out.RemoveHeaders[0] != "x-drop" || out.Upstream != "secondary" || out.Reject != nil {
		t.Fatalf("out = %+v", out)
	}
	if string(in.Body) != rewriteBody {
		t.Fatal("input body modified")
	}
}

func TestRewriteChainRejectAndFault(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{
		"10-trap.wasm":   fixture(t, "rewrite_trap"),
		"20-rw.wasm":     fixture(t, "rewrite"),
		"30-reject.wasm": fixture(t, "reject"),
	}})
	out, tr := r.RewriteTrace(context.Background(), hostabi.RewriteInput{Body: []byte(rewriteBody)})
	if out.Reject == nil || out.Reject.Status != 403 || out.Reject.Code != "blocked_by_policy" || out.Reject.Type != "invalid_request_error" || out.Reject.Param != "model" {
		t.Fatalf("reject = %+v", out.Reject)
	}
	if tr.Policy != "30-reject" || tr.Outcome != "rejected" || len(tr.Steps) != 3 || tr.Steps[0].Outcome != "fault" {
		t.Fatalf("trace %+v", tr)
	}
	var got map[string]any
	_ = json.Unmarshal(out.Body, &got)
	if got["model"] != "renamed" || got["previous_model"] != "gpt-5" {
		t.Fatalf("the trapping module's edit leaked or the next module's edit is missing: %s", out.Body)
	}
	st, _ := statusOf(r, "10-trap")
	if st.Faults != 1 || !strings.Contains(st.LastError, "unreachable") {
		t.Fatalf("status %+v", st)
	}
}

func TestFaults(t *testing.T) {
	odd, even := oddEven(t)
	cases := []struct {
		fixture string
		kind    string
		timeout time.Duration
	}{
		// Short enough to time the loop out quickly, long enough that the
		// calls after the fault (waiting for the replacement instance, then
		// running) fit under the race detector on a loaded machine.
		{"loop", "timeout", 500 * time.Millisecond},
		{"membomb", "memory", 5 * time.Second},
		{"trap", "trap", 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			r := newRuntime(t, Options{
				Embedded:         map[string][]byte{"p.wasm": fixture(t, c.fixture)},
				CallTimeout:      c.timeout,
				MemoryLimitPages: 64,
				PoolSize:         2,
			})
			start := time.Now()
			out, tr := r.RecoverTrace(context.Background(), odd)
			if out.Verdict != hostabi.RecoverPass || tr.Outcome != "fault" {
				t.Fatalf("faulting call: %+v %+v", out, tr)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("fault took %v", d)
			}
			for i := 0; i < 3; i++ { // the instance was replaced: the next calls work
				if out, tr := r.RecoverTrace(context.Background(), even); out.Verdict != hostabi.RecoverRecover || tr.Outcome != "decided" {
					t.Fatalf("call after fault: %+v %+v", out, tr)
				}
			}
			st, _ := statusOf(r, "p")
			if st.Faults != 1 || st.Calls != 4 || st.State != StateActive || st.LastError == "" {
				t.Fatalf("status %+v", st)
			}
			if n := counterValue(t, r, "sluice_policy_faults_total", map[string]string{"policy": "p", "kind": c.kind}); n != 1 {
				t.Fatalf("faults{kind=%s} = %v (last error %s)", c.kind, n, st.LastError)
			}
		})
	}
}

func TestInvalidOutputs(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{
		"badout.wasm": fixture(t, "badout"),
	}})
	r2 := newRuntime(t, Options{Embedded: map[string][]byte{
		"badverdict.wasm": fixture(t, "badverdict"),
		"guest_err.wasm":  fixture(t, "guest_error"),
	}})
	in := hostabi.RecoverInput{Code: "previous_response_not_found"}
	if out, tr := r.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover || tr.Outcome != "fault" {
		t.Fatalf("out-of-range output: %+v %+v", out, tr)
	}
	if out, tr := r.ReplayTrace(context.Background(), hostabi.ReplayInput{Code: "transport"}); out.Verdict != hostabi.ReplayOtherUpstream || tr.Outcome != "fault" {
		t.Fatalf("garbage output: %+v %+v", out, tr)
	}
	if out, tr := r.RewriteTrace(context.Background(), hostabi.RewriteInput{Body: []byte(rewriteBody)}); out.Body != nil || tr.Steps[0].Outcome != "fault" {
		t.Fatalf("bad rewrite result: %+v %+v", out, tr)
	}
	st, _ := statusOf(r, "badout")
	if st.Faults != 3 || !strings.Contains(st.LastError, "invalid hook output") {
		t.Fatalf("status %+v", st)
	}
	if out, tr := r2.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover || tr.Outcome != "fault" || tr.Policy != "badverdict" {
		t.Fatalf("bad verdict: %+v %+v", out, tr)
	}
	// guest_error sorts after badverdict; ask it alone.
	r3 := newRuntime(t, Options{Embedded: map[string][]byte{"guest_err.wasm": fixture(t, "guest_error")}})
	if out, tr := r3.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover || tr.Outcome != "error" {
		t.Fatalf("guest error: %+v %+v", out, tr)
	}
	st, _ = statusOf(r3, "guest_err")
	if st.Errors != 1 || st.Faults != 0 {
		t.Fatalf("guest error status %+v", st)
	}
}

func TestRejectedAtLoad(t *testing.T) {
	cases := map[string][]byte{
		"badabi":        fixture(t, "badabi"),
		"selftest_fail": fixture(t, "selftest_fail"),
		"inittrap":      fixture(t, "inittrap"),
		"badimport":     fixture(t, "badimport"),
		"garbage":       []byte("\x00asm\x01\x00\x00\x00this is not a module"),
		"notwasm":       []byte("#!/bin/sh\necho hi\n"),
	}
	want := map[string]string{
		"badabi":        "ABI version 99",
		"selftest_fail": "self_test failed",
		"inittrap":      "init",
		"badimport":     "unknown host function",
		"garbage":       "compile",
		"notwasm":       "not a WebAssembly module",
	}
	emb := map[string][]byte{}
	for k, v := range cases {
		emb[k+".wasm"] = v
	}
	r := newRuntime(t, Options{Embedded: emb})
	for name := range cases {
		st, ok := statusOf(r, name)
		if !ok || st.State != StateRejected || !strings.Contains(st.LastError, want[name]) || st.SHA256 != "" || len(st.Rejected) != 64 {
			t.Errorf("%s: %+v", name, st)
		}
	}
	if out, tr := r.RecoverTrace(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Verdict != hostabi.RecoverPass || tr.Outcome != "default" {
		t.Fatalf("rejected modules served: %+v %+v", out, tr)
	}
	if n := counterValue(t, r, "sluice_policy_rejections_total", map[string]string{"policy": "badabi"}); n != 1 {
		t.Fatalf("rejections = %v", n)
	}
}

func TestRollbackAndTrip(t *testing.T) {
	odd, even := oddEven(t)
	dir := t.TempDir()
	write(t, dir, "p.wasm", fixture(t, "recover_v2"))
	r := newRuntime(t, Options{PolicyDir: dir, FaultsBeforeRollback: 3, Debounce: time.Hour,
		Embedded: map[string][]byte{"t.wasm": fixture(t, "trap")}})
	// t traps on odd inputs; it sorts after p, so ask replay-less recover via p first.
	write(t, dir, "p.wasm", fixture(t, "trap"))
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if out := r.Recover(context.Background(), odd); out.Verdict != hostabi.RecoverPass {
			t.Fatalf("fault %d: %+v", i, out)
		}
	}
	waitFor(t, func() bool { st, _ := statusOf(r, "p"); return st.State == StateRolledBack })
	st, _ := statusOf(r, "p")
	if out := r.Recover(context.Background(), odd); out.Verdict != hostabi.RecoverFailClosed || out.Code != "from_v2" {
		t.Fatalf("after rollback: %+v (status %+v)", out, st)
	}
	if n := counterValue(t, r, "sluice_policy_rollbacks_total", map[string]string{"policy": "p"}); n != 1 {
		t.Fatalf("rollbacks = %v", n)
	}
	// The same bad file is not loaded again on a rescan.
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.State != StateRolledBack {
		t.Fatalf("rescan reloaded the bad file: %+v", st)
	}

	// An embedded policy with nothing to roll back to trips.
	r2 := newRuntime(t, Options{FaultsBeforeRollback: 2, Embedded: map[string][]byte{"t.wasm": fixture(t, "trap")}})
	for i := 0; i < 2; i++ {
		r2.Recover(context.Background(), odd)
	}
	waitFor(t, func() bool { st, _ := statusOf(r2, "t"); return st.State == StateTripped })
	before, _ := statusOf(r2, "t")
	out, tr := r2.RecoverTrace(context.Background(), even)
	if out.Verdict != hostabi.RecoverPass || tr.Outcome != "tripped" {
		t.Fatalf("tripped call: %+v %+v", out, tr)
	}
	if after, _ := statusOf(r2, "t"); after.Calls != before.Calls {
		t.Fatal("a tripped policy was called")
	}
}

func TestClose(t *testing.T) {
	r, err := New(context.Background(), Options{Embedded: map[string][]byte{"v1.wasm": fixture(t, "recover_v1")}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Verdict != hostabi.RecoverPass {
		t.Fatal(out)
	}
	if r.Ready() || r.Reload(context.Background()) != ErrClosed {
		t.Fatal("closed runtime still ready")
	}
}

func write(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeAtomic writes through a temporary file and a rename.
func writeAtomic(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestHotSwapUnderLoad(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := fixture(t, "recover_v1"), fixture(t, "recover_v2")
	write(t, dir, "p.wasm", v1)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: 20 * time.Millisecond, PoolSize: 2, CallTimeout: 5 * time.Second})
	sha := func(b []byte) string { return newArtifact("", b).sha }
	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}

	var stop atomic.Bool
	var calls, bad atomic.Int64
	var seen sync.Map
	var wg sync.WaitGroup
	stopWorkers := func() { stop.Store(true); wg.Wait() }
	// Registered after newRuntime's Close: the workers stop first, also when
	// a t.Fatal below ends the test while they run.
	t.Cleanup(stopWorkers)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				out, tr := r.RecoverTrace(context.Background(), in)
				calls.Add(1)
				switch {
				case out.Verdict == hostabi.RecoverRecover && tr.Policy == "p":
					seen.Store("v1", true)
				case out.Verdict == hostabi.RecoverFailClosed && out.Code == "from_v2":
					seen.Store("v2", true)
				default:
					bad.Add(1)
					t.Errorf("fallback during swap: %+v %+v", out, tr)
				}
			}
		}()
	}
	live := func(b []byte) func() bool {
		return func() bool { st, _ := statusOf(r, "p"); return st.SHA256 == sha(b) && st.State == StateActive }
	}
	writeAtomic(t, dir, "p.wasm", v2) // atomic rename
	waitFor(t, live(v2))
	write(t, dir, "p.wasm", v1) // in-place write
	waitFor(t, live(v1))
	writeAtomic(t, dir, "p.wasm", v2)
	waitFor(t, live(v2))
	write(t, dir, "p.wasm", v1)
	waitFor(t, live(v1))
	// A bad file is rejected and v1 keeps serving.
	write(t, dir, "p.wasm", fixture(t, "badabi"))
	waitFor(t, func() bool { st, _ := statusOf(r, "p"); return st.Rejected == sha(fixture(t, "badabi")) })
	st, _ := statusOf(r, "p")
	if st.SHA256 != sha(v1) || st.State != StateActive || !strings.Contains(st.LastError, "ABI version 99") {
		t.Fatalf("after bad file: %+v", st)
	}
	time.Sleep(50 * time.Millisecond)
	// Editor temp files are ignored.
	write(t, dir, "p.wasm~", []byte("junk"))
	write(t, dir, ".p.wasm.swp", []byte("junk"))
	time.Sleep(100 * time.Millisecond)
	stopWorkers()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d calls fell back", bad.Load(), calls.Load())
	}
	if _, ok := seen.Load("v1"); !ok {
		t.Fatal("v1 never answered")
	}
	if _, ok := seen.Load("v2"); !ok {
		t.Fatal("v2 never answered")
	}
	t.Logf("%d calls during 4 swaps, none fell back", calls.Load())
	// Deleting the file unloads the policy.
	if err := os.Remove(filepath.Join(dir, "p.wasm")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := statusOf(r, "p"); return !ok })
	if out, tr := r.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverPass || tr.Outcome != "default" {
		t.Fatalf("after delete: %+v %+v", out, tr)
	}
}

func TestDirOverridesEmbedded(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := fixture(t, "recover_v1"), fixture(t, "recover_v2")
	write(t, dir, "p.wasm", v2)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Embedded: map[string][]byte{"p.wasm": v1}})
	if st, _ := statusOf(r, "p"); st.Source != SourceDir {
		t.Fatalf("%+v", st)
	}
	if out := r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Code != "from_v2" {
		t.Fatal(out)
	}
	_ = os.Remove(filepath.Join(dir, "p.wasm"))
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.Source != SourceEmbedded || st.State != StateActive {
		t.Fatalf("embedded default did not come back: %+v", st)
	}
	if out := r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Verdict != hostabi.RecoverRecover {
		t.Fatal(out)
	}
}

func TestCloseWhileCalling(t *testing.T) {
	r, err := New(context.Background(), Options{Embedded: map[string][]byte{
		"v1.wasm": fixture(t, "recover_v1"), "rw.wasm": fixture(t, "rewrite")}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	stopWorkers := func() { stop.Store(true); wg.Wait() }
	t.Cleanup(stopWorkers) // also when t.Fatal ends the test while they run
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"})
				r.Rewrite(context.Background(), hostabi.RewriteInput{Body: []byte(rewriteBody)})
				_ = r.Status()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	stopWorkers()
}
