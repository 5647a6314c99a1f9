package policycli

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/plugins"
)

// record makes a recording the way the gateway does: hook calls on a
// runtime with RecordDir (no modules: every verdict is the built-in one,
// which the embedded policies also answer).
func record(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rec")
	ctx := context.Background()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	// 1: a transport fault mid-stream (default: pass).
	rt.Recover(ctx, hostabi.RecoverInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "a", Transport: true})
	// 2: a lost previous response, named in the message (default: recover).
	rt.Recover(ctx, hostabi.RecoverInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "a", HTTPStatus: 400,
		Code: "previous_response_not_found", Message: "Previous response with id 'resp_0123456789abcdef' not found."})
	// 3: a rate limit (default: pass).
	rt.Recover(ctx, hostabi.RecoverInput{Surface: hostabi.SurfaceChatStream, Upstream: "b", HTTPStatus: 429, Code: "rate_limit_exceeded"})
	// 4: the failure's replay decision (default: the next target).
	rt.Replay(ctx, hostabi.ReplayInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "a", Code: "transport",
		Phase: hostabi.PhaseBeforeHeaders, FailureClass: hostabi.FailureTransport, TargetCount: 2, HasNextTarget: true})
	// 5: a rewrite with a key and an id in the body; Authorization is never recorded.
	rt.Rewrite(ctx, hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses",
		Body:    []byte(`{"model":"m","previous_response_id":"resp_0123456789abcdef","input":"my key is sk-proj-abcdefghijkl"}`),
		Headers: map[string]string{"authorization": "Bearer sk-secret-123456789", "x-team": "t1"}})
	if d, on := rt.Recording(); d != dir || !on {
		t.Fatalf("Recording() = %q %v", d, on)
	}
	if err := rt.SetRecording(false); err != nil {
		t.Fatal(err)
	}
	rt.Recover(ctx, hostabi.RecoverInput{Code: "not_recorded"}) // off: not written
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRecordRedacts(t *testing.T) {
	dir := record(t)
	files, err := recordingFiles(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	b, _ := os.ReadFile(files[0])
	text := string(b)
	for _, secret := range []string{"resp_0123456789abcdef", "sk-proj-abcdefghijkl", "sk-secret", "authorization", "not_recorded"} {
		if strings.Contains(text, secret) {
			t.Errorf("recording holds %q:\n%s", secret, text)
		}
	}
	if !strings.Contains(text, plugins.RedactID("resp_0123456789abcdef")) {
		t.Errorf("id not redacted to its hash:\n%s", text)
	}
	var verdicts []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var rec plugins.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		verdicts = append(verdicts, rec.Hook+"="+rec.Verdict+"/"+rec.DecidedBy)
	}
	want := "recover=pass/default recover=recover/default recover=pass/default replay=replay_same_upstream/default rewrite=unchanged/default"
	if got := strings.Join(verdicts, " "); got != want {
		t.Fatalf("recorded\n%s\nwant\n%s", got, want)
	}
}

func TestRecordRotates(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, RecordFileBytes: 300, RecordFiles: 2, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for range 10 {
		rt.Recover(ctx, hostabi.RecoverInput{Surface: hostabi.SurfaceChatStream, Code: "server_error", HTTPStatus: 500})
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(m) != 2 {
		t.Fatalf("%d files kept, want 2: %v", len(m), m)
	}
	for _, f := range m {
		if fi, _ := os.Stat(f); fi.Size() > 600 {
			t.Fatalf("%s: %d bytes", f, fi.Size())
		}
	}
	if err := (&plugins.Runtime{}).SetRecording(true); err != plugins.ErrNoRecordDir {
		t.Fatalf("SetRecording without a dir: %v", err)
	}
}

// TestRecordingReplay is issue item 3: a recorded failure replayed through
// a stricter recover policy changes exactly the expected verdicts (the
// transport fault: pass → fail_closed), and -expect fails on disagreement.
func TestRecordingReplay(t *testing.T) {
	dir := record(t)
	strict := filepath.Join("testdata", "strict_recover.wasm")
	files, _ := recordingFiles(dir)
	base := filepath.Base(files[0])
	expect := filepath.Join(t.TempDir(), "expect.jsonl")
	if err := os.WriteFile(expect, []byte(`{"request":"`+base+`:1","verdict":"fail_closed"}
{"request":"`+base+`:2","verdict":"recover"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "test", strict, "-recording", dir, "-expect", expect)
	if code != 0 {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	var changed []string
	for _, l := range lines[:5] {
		var r replayed
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.Error != "" {
			t.Fatalf("error: %s", l)
		}
		if r.Changed {
			changed = append(changed, r.Request+" "+r.RecordedVerdict+"→"+r.Verdict+" by "+r.DecidedBy)
		}
	}
	if got, want := strings.Join(changed, "; "), base+":1 pass→fail_closed by strict_recover"; got != want {
		t.Fatalf("changed: %s\nwant:    %s\n%s", got, want, out)
	}
	var sum summary
	if err := json.Unmarshal([]byte(lines[5]), &sum); err != nil || sum.Summary.Inputs != 5 || sum.Summary.Changed != 1 || sum.Summary.Expected != 2 {
		t.Fatalf("summary %s (%v)", lines[5], err)
	}
	// The default policy set disagrees with the expectation: exit 1.
	if err := os.WriteFile(expect, []byte(`{"request":"`+base+`:1","verdict":"pass"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, "test", strict, "-recording", dir, "-expect", expect); code != 1 || !strings.Contains(errs, "verdict fail_closed, expected pass") {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	// A recording is also a plain -events file.
	if code, out, errs := run(t, "test", strict, "-events", files[0]); code != 0 {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	// An empty recording file is an error, as an empty record_dir is: a
	// run that checked nothing must not pass.
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, []byte("# nothing recorded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, "test", strict, "-recording", empty); code != 1 || !strings.Contains(errs, "holds no recorded hook input") {
		t.Fatalf("empty recording: %d\n%s\n%s", code, out, errs)
	}
}
