package policycli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// recordStreamEvents records stream_event calls the way the gateway makes
// them, through stream_redact.wat (which replaces "secret" in text deltas).
func recordStreamEvents(t *testing.T) string {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "testdata", "stream_redact.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "rec")
	ctx := context.Background()
	// CallTimeout: the first call waits for the module's first instance,
	// which under the race detector on a loaded machine can take longer than
	// the default deadline, and the call would record the default instead.
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, PoolSize: 1, CallTimeout: 5 * time.Second,
		Embedded: map[string][]byte{"stream_redact.wasm": wasm}})
	if err != nil {
		t.Fatal(err)
	}
	delta := func(seq int64, d string) hostabi.StreamEventInput {
		return hostabi.StreamEventInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "primary",
			Type: "response.output_text.delta", SequenceNumber: seq, OutputIndex: 0, ContentIndex: 0,
			ItemID: "msg_0123456789abcdef", Delta: d, HasDelta: true}
	}
	for _, in := range []hostabi.StreamEventInput{
		delta(4, "the secret plan"), // 1: replaced
		delta(5, "nothing to hide"), // 2: passed
		{Surface: hostabi.SurfaceResponsesStream, Upstream: "primary", Type: "response.output_text.done", // 3: passed
			SequenceNumber: 6, OutputIndex: 0, ContentIndex: 0, ItemID: "msg_0123456789abcdef",
			Text: "the secret plan", HasText: true},
		delta(7, `<secret> & "quoted"`), // 4: replaced, with characters JSON may escape
	} {
		rt.StreamEvent(ctx, in)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRecordStreamEvent: stream_event calls are recorded like the other
// hooks, one line per event: the input as the module got it (indexes of 0
// kept, ids redacted), the verdict, who gave it and the output.
func TestRecordStreamEvent(t *testing.T) {
	dir := recordStreamEvents(t)
	files, err := recordingFiles(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	b, _ := os.ReadFile(files[0])
	if strings.Contains(string(b), "msg_0123456789abcdef") {
		t.Fatalf("item id not redacted:\n%s", b)
	}
	var got []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var rec plugins.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		in, err := hostabi.DecodeStreamEventInput(rec.Input)
		if err != nil || in.OutputIndex != 0 || in.ContentIndex != 0 || in.ItemID != plugins.RedactID("msg_0123456789abcdef") {
			t.Fatalf("recorded input %s: %+v %v", rec.Input, in, err)
		}
		out, err := hostabi.DecodeStreamEventOutput(rec.Output)
		if err != nil {
			t.Fatalf("recorded output %s: %v", rec.Output, err)
		}
		got = append(got, fmt.Sprintf("%s %s=%s/%s %q", rec.Hook, in.Type, rec.Verdict, rec.DecidedBy, out.Delta))
	}
	want := []string{
		`stream_event response.output_text.delta=replace/stream_redact "the [redacted] plan"`,
		`stream_event response.output_text.delta=pass/stream_redact ""`,
		`stream_event response.output_text.done=pass/stream_redact ""`,
		`stream_event response.output_text.delta=replace/stream_redact "<[redacted]> & \"quoted\""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRecordingReplayStreamEvent: `policy test` takes stream_event inputs,
// from a recording and as events, and reports the module's verdict, its
// replacement, and whether either changed from the recording.
func TestRecordingReplayStreamEvent(t *testing.T) {
	dir := recordStreamEvents(t)
	files, err := recordingFiles(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	base := filepath.Base(files[0])
	replay := func(mod string) ([]replayed, summary) {
		t.Helper()
		code, out, errs := run(t, "test", mod, "-recording", dir)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 5 {
			t.Fatalf("%s: exit %d\n%s\n%s", mod, code, out, errs)
		}
		var rs []replayed
		for _, l := range lines[:4] {
			var r replayed
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			if r.Hook != "stream_event" || r.Error != "" || len(r.Output) == 0 || len(r.RecordedOutput) == 0 {
				t.Fatalf("%s: %s", mod, l)
			}
			rs = append(rs, r)
		}
		var sum summary
		if err := json.Unmarshal([]byte(lines[4]), &sum); err != nil {
			t.Fatal(err)
		}
		return rs, sum
	}
	// The module that was recorded answers as recorded.
	rs, sum := replay(filepath.Join("..", "testdata", "stream_redact.wasm"))
	for _, r := range rs {
		if r.Changed || r.Verdict != r.RecordedVerdict || r.DecidedBy != "stream_redact" {
			t.Errorf("same module, changed: %+v", r)
		}
	}
	if sum.Summary.Inputs != 4 || sum.Summary.Changed != 0 || sum.Summary.Errors != 0 {
		t.Fatalf("summary %+v", sum)
	}
	// Another replacement is a change even with the same verdict.
	rs, sum = replay(filepath.Join("testdata", "stream_hide.wasm"))
	var changed []string
	for _, r := range rs {
		if r.Changed {
			changed = append(changed, fmt.Sprintf("%s %s→%s %s", r.Request, r.RecordedVerdict, r.Verdict, r.Output))
		}
	}
	want := []string{
		base + `:1 replace→replace {"verdict":2,"delta":"[hidden]"}`,
		base + `:2 pass→replace {"verdict":2,"delta":"[hidden]"}`,
		base + `:4 replace→replace {"verdict":2,"delta":"[hidden]"}`,
	}
	if strings.Join(changed, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changed\n%s\nwant\n%s", strings.Join(changed, "\n"), strings.Join(want, "\n"))
	}
	if sum.Summary.Changed != 3 || sum.Summary.ByHook["stream_event"] != 3 {
		t.Fatalf("summary %+v", sum)
	}

	// As -events: the verdict and the output, an expectation checked, and
	// an input the gateway never sends (no delta, no text) refused.
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"stream_event","input":{"type":"response.output_text.delta","delta":"a secret"},"expect":"replace"}
{"hook":"stream_event","input":{"type":"response.output_text.delta","delta":""},"expect":"pass"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "test", filepath.Join("..", "testdata", "stream_redact.wasm"), "-events", events)
	if code != 0 || !strings.Contains(out, `"verdict":"replace","decided_by":"stream_redact","outcome":"decided","output":{"verdict":2,"delta":"a [redacted]"},"expect":"replace","pass":true`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if err := os.WriteFile(events, []byte(`{"hook":"stream_event","input":{"type":"response.output_text.delta"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, "test", filepath.Join("..", "testdata", "stream_redact.wasm"), "-events", events)
	if code != 1 || !strings.Contains(out, `without \"delta\" or \"text\"`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}

// TestStreamEventTraceChain: with several stream_event modules, the one
// that decided is the last whose answer changed the event, else the first
// that answered; a module that faults is in the steps and passes the event
// on unchanged.
func TestStreamEventTraceChain(t *testing.T) {
	policyDir := t.TempDir()
	for name, src := range map[string]string{
		"10-redact.wasm": filepath.Join("..", "testdata", "stream_redact.wasm"),
		"20-hide.wasm":   filepath.Join("testdata", "stream_hide.wasm"),
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(policyDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// CallTimeout: as in recordStreamEvents, a call waits for an instance
	// (the first ones, and 10-redact's replacement after its fault) no
	// longer than its deadline, and the default one is short for a loaded
	// machine under the race detector.
	rt, err := plugins.New(ctx, plugins.Options{PolicyDir: policyDir, PoolSize: 1, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	delta := func(d string) hostabi.StreamEventInput {
		return hostabi.StreamEventInput{Type: "response.output_text.delta", OutputIndex: -1, ContentIndex: -1, Delta: d, HasDelta: true}
	}
	for _, tc := range []struct {
		in    hostabi.StreamEventInput
		want  string
		steps string
	}{
		{delta("a secret"), "replace [hidden] by 20-hide (decided)", "10-redact:ok 20-hide:ok"},
		{hostabi.StreamEventInput{Type: "response.output_text.done", OutputIndex: -1, ContentIndex: -1, Text: "a secret", HasText: true},
			"pass  by 10-redact (decided)", "10-redact:ok 20-hide:ok"},
		// stream_redact's sluice_alloc traps past 32 KiB.
		{delta(strings.Repeat("x", 40<<10)), "replace [hidden] by 20-hide (decided)", "10-redact:fault 20-hide:ok"},
	} {
		out, tr := rt.StreamEventTrace(ctx, tc.in)
		var steps []string
		for _, s := range tr.Steps {
			steps = append(steps, s.Policy+":"+s.Outcome)
		}
		if got := fmt.Sprintf("%s %s by %s (%s)", out.Verdict, out.Delta, tr.Policy, tr.Outcome); got != tc.want || strings.Join(steps, " ") != tc.steps {
			t.Errorf("%s: got %q %v, want %q %s", tc.in.Type, got, steps, tc.want, tc.steps)
		}
	}
}
