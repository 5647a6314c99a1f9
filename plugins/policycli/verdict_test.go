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

// TestRewriteVerdictCountsHeaderAndUpstreamEdits: a rewrite that leaves the
// body alone but sets a header, or picks an upstream, changes the request
// the gateway sends, so `policy test` reports it "changed" and
// "expect":"changed" passes.
func TestRewriteVerdictCountsHeaderAndUpstreamEdits(t *testing.T) {
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"rewrite","body":{"model":"gpt-5","input":"hi"},"expect":"changed"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ module, edit string }{
		{"header_rewrite.wasm", `"set_headers":{"x-policy":"v2"}`},
		{"upstream_rewrite.wasm", `"upstream":"secondary"`},
	} {
		code, out, errs := run(t, "test", filepath.Join("testdata", c.module), "-events", events)
		if code != 0 {
			t.Errorf("%s: exit %d\n%s\n%s", c.module, code, out, errs)
			continue
		}
		var r result
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
			t.Fatalf("%s: %v\n%s", c.module, err, out)
		}
		if r.Verdict != plugins.RewriteChanged || r.Changed == nil || !*r.Changed || r.Body != nil || !strings.Contains(out, c.edit) {
			t.Errorf("%s: %s, want verdict changed, changed true, no body and %s", c.module, out, c.edit)
		}
	}
}

// TestRecordingFlagsADroppedHeaderEdit: a recorded rewrite whose only edit
// was a header is recorded "changed", and a candidate that no longer sets
// the header is reported as changing that verdict.
func TestRecordingFlagsADroppedHeaderEdit(t *testing.T) {
	root := repoRoot(t)
	header, err := os.ReadFile(filepath.Join("testdata", "header_rewrite.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "rec")
	ctx := context.Background()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, PoolSize: 1,
		Embedded: map[string][]byte{"10-header.wasm": header}})
	if err != nil {
		t.Fatal(err)
	}
	rt.Rewrite(ctx, hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses",
		Body: []byte(`{"model":"gpt-5","input":"hi"}`)})
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := recordingFiles(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	recorded, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(recorded), `"verdict":"changed"`) {
		t.Fatalf("a header-only rewrite is not recorded as changed:\n%s", recorded)
	}
	// The embedded rewrite policy without config edits nothing.
	code, out, errs := run(t, "test", filepath.Join(root, "policies", "rewrite.wasm"), "-recording", dir)
	if code != 0 {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	var r replayed
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &r); err != nil {
		t.Fatal(err)
	}
	if r.RecordedVerdict != plugins.RewriteChanged || r.Verdict != plugins.RewriteUnchanged || !r.Changed {
		t.Fatalf("the dropped header edit is not reported: %s", out)
	}
}
