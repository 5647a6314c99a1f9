package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

func shaOf(b []byte) string { return newArtifact("", b).sha }

// captureLogs returns a logger whose lines (also written to the test's
// stderr with -v) can be read back.
func captureLogs(t testing.TB) (hclog.Logger, *syncBuilder) {
	t.Helper()
	var logs syncBuilder
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &logs}), &logs
}

// TestRejectedOverrideAtStartKeepsEmbedded: a policy_dir file that overrides
// an embedded policy and is rejected at start leaves the embedded policy
// serving (ABI.md §10: the previous version keeps serving), reported as
// active with the file's sha256 and error beside it; a good file then replaces it and deleting
// the file brings the embedded one back.
func TestRejectedOverrideAtStartKeepsEmbedded(t *testing.T) {
	dir := t.TempDir()
	junk := []byte("junk")
	write(t, dir, "rewrite.wasm", junk)
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Logger: logger,
		Embedded: policies.Defaults(),
		Config:   map[string]json.RawMessage{"rewrite": json.RawMessage(`{"model_aliases":{"fast":"gpt-fake-1"}}`)}})

	embedded := policies.Defaults()["rewrite.wasm"]
	st, _ := statusOf(r, "rewrite")
	if st.State != StateActive || st.Source != SourceEmbedded || st.SHA256 != shaOf(embedded) ||
		st.Rejected != shaOf(junk) || !strings.Contains(st.LastError, "bad magic") {
		t.Fatalf("status after a rejected override at start: %+v", st)
	}
	for _, want := range []string{"policy rejected: policy=rewrite source=dir", "the embedded default serves instead: policy=rewrite source=embedded"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	aliased := func() string {
		t.Helper()
		out := r.Rewrite(context.Background(), hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream,
			Endpoint: "/v1/responses", Body: []byte(`{"model":"fast","input":"hi"}`)})
		var got struct{ Model string }
		_ = json.Unmarshal(out.Body, &got)
		return got.Model
	}
	if m := aliased(); m != "gpt-fake-1" {
		t.Fatalf("model alias not applied by the embedded rewrite policy: model %q", m)
	}

	// A good file replaces the embedded default.
	good := fixture(t, "rewrite")
	write(t, dir, "rewrite.wasm", good)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "rewrite"); st.State != StateActive || st.Source != SourceDir || st.SHA256 != shaOf(good) || st.LastError != "" {
		t.Fatalf("a good file did not replace the embedded default: %+v", st)
	}
	if m := aliased(); m != "renamed" { // what the WAT fixture does
		t.Fatalf("the good file does not serve: model %q", m)
	}

	// Deleting it brings the embedded default back.
	if err := os.Remove(filepath.Join(dir, "rewrite.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "rewrite"); st.State != StateActive || st.Source != SourceEmbedded || st.SHA256 != shaOf(embedded) || st.LastError != "" {
		t.Fatalf("embedded default did not come back: %+v", st)
	}
	if m := aliased(); m != "gpt-fake-1" {
		t.Fatalf("model alias not applied after the file was deleted: model %q", m)
	}
}

// TestRejectedOverrideThenDeleted: deleting the rejected file while the
// embedded default serves in its place clears the rejection.
func TestRejectedOverrideThenDeleted(t *testing.T) {
	dir := t.TempDir()
	v1 := fixture(t, "recover_v1")
	write(t, dir, "p.wasm", fixture(t, "badabi"))
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Embedded: map[string][]byte{"p.wasm": v1}})
	in := hostabi.RecoverInput{Code: "x"}
	if out, tr := r.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover || tr.Policy != "p" {
		t.Fatalf("the embedded p does not serve in place of the rejected file: %+v %+v", out, tr)
	}
	if st, _ := statusOf(r, "p"); st.State != StateActive || st.SHA256 != shaOf(v1) || st.Rejected != shaOf(fixture(t, "badabi")) ||
		!strings.Contains(st.LastError, "ABI version 99") {
		t.Fatalf("status %+v", st)
	}
	if err := os.Remove(filepath.Join(dir, "p.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.State != StateActive || st.Source != SourceEmbedded || st.SHA256 != shaOf(v1) || st.LastError != "" || st.Rejected != "" {
		t.Fatalf("after deleting the rejected file: %+v", st)
	}
}

// TestSwapClearsLastError: /admin/policies' last_error is about the
// version that serves: once a good file is swapped in (or the serving bytes
// are written back), a rejected file's error or the old version's fault is
// no longer reported.
func TestSwapClearsLastError(t *testing.T) {
	odd, _ := oddEven(t)
	dir := t.TempDir()
	v1, v2 := fixture(t, "recover_v1"), fixture(t, "recover_v2")
	write(t, dir, "p.wasm", v1)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour})
	reload := func(data []byte) PolicyStatus {
		t.Helper()
		write(t, dir, "p.wasm", data)
		if err := r.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, _ := statusOf(r, "p")
		return st
	}
	if st := reload([]byte("garbage")); st.State != StateActive || st.Rejected != shaOf([]byte("garbage")) ||
		!strings.Contains(st.LastError, "bad magic") || st.SHA256 != shaOf(v1) {
		t.Fatalf("after garbage: %+v", st)
	}
	if st := reload(v2); st.State != StateActive || st.SHA256 != shaOf(v2) || st.LastError != "" {
		t.Fatalf("after a good v2: %+v", st)
	}
	if st := reload([]byte("garbage again")); st.State != StateActive || st.Rejected == "" || st.SHA256 != shaOf(v2) {
		t.Fatalf("after more garbage: %+v", st)
	}
	if st := reload(v2); st.State != StateActive || st.SHA256 != shaOf(v2) || st.LastError != "" || st.Rejected != "" {
		t.Fatalf("after writing the serving bytes back: %+v", st)
	}
	// A fault of the old version is not reported once the new one serves.
	if st := reload(fixture(t, "trap")); st.State != StateActive {
		t.Fatalf("trap fixture: %+v", st)
	}
	if _, tr := r.RecoverTrace(context.Background(), odd); tr.Outcome != "fault" {
		t.Fatalf("the trap fixture did not fault: %+v", tr)
	}
	if st, _ := statusOf(r, "p"); !strings.Contains(st.LastError, "unreachable") {
		t.Fatalf("fault not reported: %+v", st)
	}
	// Nor counted: the row's counters are the serving version's.
	if st := reload(v1); st.State != StateActive || st.SHA256 != shaOf(v1) || st.LastError != "" || st.Faults != 0 {
		t.Fatalf("after swapping out the faulting version: %+v", st)
	}
}

// TestSelfTestReasonInRejection: when a module fails its self-test, what it
// logged on the way (the Go SDK logs the self-test's error) is part of the
// rejection /admin/policies reports.
func TestSelfTestReasonInRejection(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{"rewrite.wasm": policies.Defaults()["rewrite.wasm"]},
		Config: map[string]json.RawMessage{"rewrite": json.RawMessage(`{"strip_tool_types":"x"}`)}})
	st, _ := statusOf(r, "rewrite")
	if st.State != StateRejected || !strings.Contains(st.LastError, "self_test failed (returned 1)") ||
		!strings.Contains(st.LastError, "self_test: strip_tool_types must be an array of strings") {
		t.Fatalf("status %+v", st)
	}
}

// TestWatchSurvivesDirRecreated: removing the policy directory unloads its
// policies and warns; once a directory is back at the same path (created
// again, or another one moved there), files in it are loaded and hot swap
// works again.
func TestWatchSurvivesDirRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies.d")
	v1, v2 := fixture(t, "recover_v1"), fixture(t, "recover_v2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "10-my.wasm", v2)
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: 20 * time.Millisecond, Logger: logger})
	serving := func(b []byte) func() bool {
		return func() bool {
			st, ok := statusOf(r, "10-my")
			return ok && st.SHA256 == shaOf(b) && st.State == StateActive
		}
	}
	gone := func() bool { _, ok := statusOf(r, "10-my"); return !ok }
	in := hostabi.RecoverInput{Code: "x"}
	if !serving(v2)() {
		t.Fatalf("not loaded at start: %+v", r.Status())
	}

	for _, away := range []struct {
		name   string
		remove func() error
	}{
		{"removed", func() error { return os.RemoveAll(dir) }},
		{"moved away", func() error { return os.Rename(dir, dir+".old") }},
	} {
		t.Run(away.name, func(t *testing.T) {
			warnings := strings.Count(logs.String(), "policy dir is gone")
			if err := away.remove(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, gone)
			waitFor(t, func() bool { return strings.Count(logs.String(), "policy dir is gone") > warnings })
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, dir, "10-my.wasm", v1)
			waitFor(t, serving(v1))
			if out, tr := r.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover || tr.Policy != "10-my" {
				t.Fatalf("the file in the new directory does not serve: %+v %+v", out, tr)
			}
			// The new directory is watched: a change is swapped in.
			writeAtomic(t, dir, "10-my.wasm", v2)
			waitFor(t, serving(v2))
			if out := r.Recover(context.Background(), in); out.Code != "from_v2" {
				t.Fatalf("after a swap in the new directory: %+v", out)
			}
		})
	}
	if !strings.Contains(logs.String(), "policy dir is back: watching it again") {
		t.Fatalf("log lacks the line saying the watch is back:\n%s", logs)
	}
}

// A module read half-written (a copy slower than the debounce) is rejected
// with a log line that says which version still serves and how to avoid
// the half-written moment; the complete file then loads.
func TestHalfWrittenModuleRejectionSaysWhatServes(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := fixture(t, "recover_v1"), fixture(t, "recover_v2")
	write(t, dir, "p.wasm", v1)
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Logger: logger})
	write(t, dir, "p.wasm", v2[:len(v2)/2])
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "policy rejected") {
			line = l
		}
	}
	if !strings.Contains(line, "still_serving="+short(shaOf(v1))) || !strings.Contains(line, "rename it into place") {
		t.Fatalf("rejection of a half-written file: %q\n%s", line, logs)
	}
	write(t, dir, "p.wasm", v2)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.State != StateActive || st.SHA256 != shaOf(v2) {
		t.Fatalf("the complete file did not load: %+v", st)
	}
}

// A *.wasm name in policy_dir that cannot be a policy (a directory, a
// dangling symlink) is skipped with a log line naming it, and the rest
// loads.
func TestUnloadablePolicyNamesAreLogged(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p.wasm", fixture(t, "recover_v1"))
	if err := os.Mkdir(filepath.Join(dir, "adir.wasm"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling.wasm")); err != nil {
		t.Fatal(err)
	}
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Logger: logger})
	for _, name := range []string{"adir.wasm", "dangling.wasm"} {
		if !strings.Contains(logs.String(), "policy file skipped: file="+filepath.Join(dir, name)) {
			t.Errorf("%s skipped silently:\n%s", name, logs)
		}
	}
	if st, ok := statusOf(r, "p"); !ok || st.State != StateActive {
		t.Fatalf("p.wasm: %+v", st)
	}
}

// TestHalfWrittenFileHint: a file read before its copy completed is
// rejected with the hint to write it elsewhere and rename it into place,
// whichever way the decoder words the early end ("unexpected EOF", or a
// plain "EOF" between two fields).
func TestHalfWrittenFileHint(t *testing.T) {
	dir := t.TempDir()
	good := fixture(t, "recover_v1")
	logger, logs := captureLogs(t)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Logger: logger})
	var plainEOF, eofs int
	for cut := 9; cut < len(good); cut += max(1, len(good)/64) { // past the 8-byte header
		write(t, dir, "p.wasm", good[:cut])
		before := len(logs.String())
		if err := r.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		line := logs.String()[before:]
		if !strings.Contains(line, "EOF") {
			continue // cut at a section's end: rejected for what is missing
		}
		eofs++
		if strings.Contains(line, `: EOF"`) { // the error="…" field ends so
			plainEOF++
		}
		if !strings.Contains(line, "hint=\"the file may still be being written") {
			t.Errorf("cut at %d of %d bytes: no hint in %s", cut, len(good), line)
		}
	}
	if eofs == 0 || plainEOF == 0 {
		t.Fatalf("the cuts gave %d EOF rejections, %d of them a plain EOF: the test covers nothing", eofs, plainEOF)
	}
}

func TestHalfWrittenErrors(t *testing.T) {
	for msg, want := range map[string]bool{
		"compile: import[2] error decoding type: EOF":                  true,
		"compile: section export: read name: unexpected EOF":           true,
		"compile: section data: read data segment prefix: EOF":         true,
		"the module exports none of the hooks recover, replay":         false,
		"ABI version 99; this host speaks 1 to 3 (EOF handling aside)": false,
	} {
		if got := halfWritten(errors.New(msg)); got != want {
			t.Errorf("halfWritten(%q) = %v", msg, got)
		}
	}
}
