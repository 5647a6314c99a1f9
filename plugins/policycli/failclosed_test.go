package policycli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/plugins"
)

// TestFailClosedConfigAsTheGateway: -config with the gateway's
// sluice_fail_closed is judged and applied as the gateway would: a module
// without a rewrite hook is refused with the words `sluice serve` refuses
// to start with, a value other than a boolean is refused, and a rewrite the
// module cannot complete is the 503 the client would get, not "unchanged".
func TestFailClosedConfigAsTheGateway(t *testing.T) {
	root := repoRoot(t)
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"rewrite","body":{"model":"m","input":"hi"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recoverOnly := filepath.Join(root, "policies", "recover.wasm")
	builtinRewrite := filepath.Join(root, "policies", "rewrite.wasm") // no rewrite hook without model_aliases
	trap := filepath.Join("..", "testdata", "rewrite_trap.wasm")      // sets model, then traps
	const noRewriteHook = "rejected: sluice_fail_closed: only a policy that rewrites requests can fail closed, and this one implements no rewrite_request hook"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // in the output ("" for none expected)
		stderr string // in stderr
		// the result line of a test -events run ("" when none)
		verdict, outcome, errContains string
	}{
		{"check recover only", []string{"check", recoverOnly, "-config", `{"sluice_fail_closed":true}`}, 1, "", noRewriteHook + " (its hooks: recover, self_test)", "", "", ""},
		{"check rewrite with nothing to do", []string{"check", builtinRewrite, "-config", `{"sluice_fail_closed":true}`}, 1, "", noRewriteHook + " (its hooks: self_test)", "", "", ""},
		{"test recover only", []string{"test", recoverOnly, "-events", events, "-config", `{"sluice_fail_closed":true}`}, 1, "", noRewriteHook, "", "", ""},
		{"check recover held false", []string{"check", recoverOnly, "-config", `{"sluice_fail_closed":false}`}, 0, "hooks:       recover", "", "", "", ""},
		{"check a string", []string{"check", recoverOnly, "-config", `{"sluice_fail_closed":"yes"}`}, 1, "", "sluice_fail_closed must be true or false", "", "", ""},
		{"test a number", []string{"test", trap, "-events", events, "-config", `{"sluice_fail_closed":1}`}, 1, "", "sluice_fail_closed must be true or false", "", "", ""},
		{"test a fault held to its edits", []string{"test", trap, "-events", events, "-config", `{"sluice_fail_closed":true}`}, 1, "", "1 event(s) failed",
			plugins.RewriteFailedClosed, "fault", "the gateway answers the request 503 policy_unavailable"},
		{"test a fault not held", []string{"test", trap, "-events", events, "-config", `{"sluice_fail_closed":false}`}, 1, "", "1 event(s) failed",
			plugins.RewriteUnchanged, "fault", "rewrite_request trap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errs, tc.stderr) {
				t.Fatalf("exit %d, want %d with %q on stdout and %q on stderr\nstdout: %s\nstderr: %s", code, tc.code, tc.stdout, tc.stderr, out, errs)
			}
			if tc.verdict == "" {
				if tc.args[0] == "test" && out != "" {
					t.Fatalf("a refused module was run: %s", out)
				}
				return
			}
			var res result
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if res.Verdict != tc.verdict || res.Outcome != tc.outcome || res.Changed == nil || *res.Changed ||
				res.Body != nil || !strings.Contains(res.Error, tc.errContains) {
				t.Fatalf("%s; want verdict %s, outcome %s, changed false, no body, an error with %q", out, tc.verdict, tc.outcome, tc.errContains)
			}
		})
	}
}

// TestRecordingOfAFailedClosedRewrite: a rewrite the gateway failed closed
// is recorded as such, and a replay held to its edits as the gateway was
// (-config with sluice_fail_closed) reports it the same way: the request
// got a 503, it did not go on unchanged.
func TestRecordingOfAFailedClosedRewrite(t *testing.T) {
	trap := filepath.Join("..", "testdata", "rewrite_trap.wasm")
	data, err := os.ReadFile(trap)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "rec")
	ctx := context.Background()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, PoolSize: 1, FaultsBeforeRollback: -1,
		Embedded: map[string][]byte{"10-guard.wasm": data}})
	if err != nil {
		t.Fatal(err)
	}
	// As the gateway calls it for policies.10-guard.sluice_fail_closed: true.
	_, tr := rt.RewriteWith(ctx, hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses",
		Body: []byte(`{"model":"m","input":"hi"}`)}, plugins.RewriteChecks{FailClosed: func(p string) bool { return p == "10-guard" }})
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !tr.FailedClosed {
		t.Fatalf("the call did not fail closed: %+v", tr)
	}
	for _, tc := range []struct {
		name            string
		config          string
		verdict         string
		changed         bool
		recordedVerdict string
	}{
		{"held to its edits", `{"sluice_fail_closed":true}`, plugins.RewriteFailedClosed, false, plugins.RewriteFailedClosed},
		{"not held", `{}`, plugins.RewriteUnchanged, true, plugins.RewriteFailedClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, "test", trap, "-recording", dir, "-config", tc.config)
			if code != 1 { // the module faults on the input either way
				t.Fatalf("exit %d\n%s\n%s", code, out, errs)
			}
			var r replayed
			if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &r); err != nil {
				t.Fatal(err)
			}
			if r.RecordedVerdict != tc.recordedVerdict || r.Verdict != tc.verdict || r.Changed != tc.changed || r.Error == "" {
				t.Fatalf("%s; want recorded_verdict %s, verdict %s, changed %v and an error", out, tc.recordedVerdict, tc.verdict, tc.changed)
			}
		})
	}
}
