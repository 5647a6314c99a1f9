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

// TestExpectFailedClosed: an event expecting "failed_closed" passes when
// the module held to its edits fails closed, although its result carries
// the error saying why; it fails, with stderr saying why, when the module
// is not held and its fault leaves the request unchanged; and a fault
// still fails an event expecting the verdict the built-in default gives.
func TestExpectFailedClosed(t *testing.T) {
	trap := filepath.Join("..", "testdata", "rewrite_trap.wasm") // sets model, then traps
	dir := t.TempDir()
	eventsExpecting := func(verdict string) string {
		p := filepath.Join(dir, verdict+".jsonl")
		line := `{"hook":"rewrite","body":{"model":"m","input":"hi"},"expect":"` + verdict + `"}` + "\n"
		if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, config, expect string
		pass                 bool
		verdict              string
		stderr               string // in stderr when the event fails
	}{
		{"fails closed as expected", `{"sluice_fail_closed":true}`, plugins.RewriteFailedClosed, true, plugins.RewriteFailedClosed, ""},
		{"not held, expected to fail closed", `{}`, plugins.RewriteFailedClosed, false, plugins.RewriteUnchanged,
			"line 1: rewrite verdict unchanged, expected failed_closed: rewrite_trap: fault"},
		{"fails closed, expected unchanged", `{"sluice_fail_closed":true}`, plugins.RewriteUnchanged, false, plugins.RewriteFailedClosed,
			"line 1: rewrite verdict failed_closed, expected unchanged"},
		{"a fault is still a fault", `{}`, plugins.RewriteUnchanged, false, plugins.RewriteUnchanged,
			"line 1: rewrite verdict unchanged, expected unchanged: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, "test", trap, "-events", eventsExpecting(tc.expect), "-config", tc.config)
			var res result
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("exit %d, %v: %s\n%s", code, err, out, errs)
			}
			wantCode := 1
			if tc.pass {
				wantCode = 0
			}
			if code != wantCode || res.Pass == nil || *res.Pass != tc.pass || res.Verdict != tc.verdict || res.Error == "" {
				t.Fatalf("exit %d, %s%s; want exit %d, pass %v, verdict %s and an error", code, out, errs, wantCode, tc.pass, tc.verdict)
			}
			if !tc.pass && (!strings.Contains(errs, tc.stderr) || !strings.Contains(errs, "fault")) {
				t.Fatalf("stderr does not say why the event failed (want %q and the fault):\n%s", tc.stderr, errs)
			}
		})
	}
}

// TestRecordingExpectFailedClosed: replaying a recorded rewrite that failed
// closed with an -expect of "failed_closed" passes when the replay fails
// closed too (its error is what the verdict names, not an error of the
// run), and is a mismatch naming the fault when the module is not held.
func TestRecordingExpectFailedClosed(t *testing.T) {
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
	rt.RewriteWith(ctx, hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses",
		Body: []byte(`{"model":"m","input":"hi"}`)}, plugins.RewriteChecks{FailClosed: func(p string) bool { return p == "10-guard" }})
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := recordingFiles(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	request := filepath.Base(files[0]) + ":1"
	expect := filepath.Join(t.TempDir(), "expect.jsonl")
	if err := os.WriteFile(expect, []byte(`{"request":"`+request+`","verdict":"failed_closed"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "test", trap, "-recording", dir, "-expect", expect, "-config", `{"sluice_fail_closed":true}`)
	if code != 0 || !strings.Contains(out, `{"summary":{"inputs":1,"changed":0,"errors":0,"expected":1}}`) {
		t.Fatalf("held to its edits: exit %d, want 0 and no error counted\n%s%s", code, out, errs)
	}
	code, out, errs = run(t, "test", trap, "-recording", dir, "-expect", expect, "-config", `{}`)
	if code != 1 || !strings.Contains(errs, request+": rewrite verdict unchanged, expected failed_closed: ") || !strings.Contains(errs, "fault") {
		t.Fatalf("not held: exit %d, want 1 and a mismatch naming the fault\n%s%s", code, out, errs)
	}
}

// TestRecordingOfAnUnknownUpstream: a rewrite whose use_upstream names an
// upstream the gateway does not have is recorded as what the gateway did
// with the request (it failed it, 500: nothing of the rewrite was sent):
// "unchanged", decided by the default, as a replay that knows the
// gateway's upstreams reports it, so the replay shows no change.
func TestRecordingOfAnUnknownUpstream(t *testing.T) {
	mod := filepath.Join("testdata", "upstream_rewrite.wasm") // use_upstream("secondary")
	data, err := os.ReadFile(mod)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "rec")
	ctx := context.Background()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, PoolSize: 1, Embedded: map[string][]byte{"10-route.wasm": data}})
	if err != nil {
		t.Fatal(err)
	}
	// As the gateway calls it with the upstreams "primary" alone.
	out, tr := rt.RewriteWith(ctx, hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses",
		Body: []byte(`{"model":"m","input":"hi"}`)}, plugins.RewriteChecks{KnownUpstream: func(name string) bool { return name == "primary" }})
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out.Upstream != "secondary" || tr.Policy != "10-route" {
		t.Fatalf("the call did not stop at the unknown upstream: %+v %+v", out, tr)
	}
	files, err := recordingFiles(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec plugins.Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Verdict != plugins.RewriteUnchanged || rec.DecidedBy != "default" {
		t.Fatalf("recorded %s; want verdict unchanged, decided_by default", raw)
	}
	code, stdout, errs := run(t, "test", mod, "-recording", dir, "-upstreams", "primary")
	var r replayed
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &r); err != nil {
		t.Fatalf("exit %d, %v: %s%s", code, err, stdout, errs)
	}
	if code != 1 || r.RecordedVerdict != plugins.RewriteUnchanged || r.Verdict != plugins.RewriteUnchanged || r.Changed ||
		r.Outcome != rewriteInvalid || !strings.Contains(r.Error, `use_upstream named "secondary"`) {
		t.Fatalf("exit %d, %s; want exit 1 (the invalid rewrite), recorded_verdict and verdict unchanged, not changed, outcome invalid", code, stdout)
	}
}
