package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/plugins/policycli"
)

// readRecords reads every record line of a record_dir.
func readRecords(t *testing.T, dir string) ([]plugins.Record, string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var recs []plugins.Record
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var rc plugins.Record
			if err := json.Unmarshal(sc.Bytes(), &rc); err != nil {
				t.Fatalf("%s: %v", sc.Bytes(), err)
			}
			recs = append(recs, rc)
		}
	}
	return recs, all.String()
}

// TestRecordedFailureHasUpstreamEvents: with record_dir, a recover or
// replay call about an upstream failure records the upstream events the
// attempt saw before it (oldest first, ids redacted like the rest of the
// line): here an error event right after response.created (replay, before
// content) and a response.failed after two text deltas. With recording
// off nothing is written, and `sluice policy test -recording` replays the
// lines as before, ignoring the events.
func TestRecordedFailureHasUpstreamEvents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, Logger: hclog.NewNullLogger(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})

	const body = `{"model":"m","input":"hi","stream":true}`
	h.ups["A"].Enqueue(upstreamtest.Answer("key sk-proj-abcdefghijkl here", 3).FailAfterDeltas(2, "server_error"))
	_, _ = h.streamEvents("/v1/responses", body)
	// Off: nothing is written.
	if err := rt.SetRecording(false); err != nil {
		t.Fatal(err)
	}
	h.ups["A"].Enqueue(upstreamtest.Answer("the plan", 3).FailAfterDeltas(2, "server_error"))
	_, _ = h.streamEvents("/v1/responses", body)
	recsOn, _ := readRecords(t, dir)
	if err := rt.SetRecording(true); err != nil {
		t.Fatal(err)
	}
	// Last: a quota error cools A down.
	h.ups["A"].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent).AfterCreated())
	_, _ = h.streamEvents("/v1/responses", body)

	recs, text := readRecords(t, dir)
	if len(h.ups["A"].Requests()) != 3 {
		t.Fatalf("upstream got %d requests, want 3", len(h.ups["A"].Requests()))
	}
	var before, after *plugins.Record
	for i := range recs {
		rc := &recs[i]
		if rc.Hook == "rewrite" {
			if len(rc.UpstreamEvents) != 0 {
				t.Errorf("rewrite record with upstream events: %+v", rc)
			}
			continue
		}
		var in struct {
			Code  string `json:"code"`
			Phase string `json:"phase"`
		}
		_ = json.Unmarshal(rc.Input, &in)
		switch {
		case in.Code == "usage_limit_reached" && before == nil:
			before = rc
		case in.Code == "server_error" && after == nil:
			after = rc
		}
	}
	if before == nil || after == nil {
		t.Fatalf("no record of one of the failures (%d records):\n%s", len(recs), text)
	}
	types := func(rc *plugins.Record) string {
		var ts []string
		for _, ev := range rc.UpstreamEvents {
			var d struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			ts = append(ts, d.Type)
		}
		return strings.Join(ts, " ")
	}
	if got, want := types(before), "response.created error"; before.Hook != "replay" || got != want {
		t.Errorf("before content: %s record, events %q, want %q", before.Hook, got, want)
	}
	got := types(after)
	if !strings.HasPrefix(got, "response.created") || strings.Count(got, "response.output_text.delta") != 2 || !strings.HasSuffix(got, "response.failed") {
		t.Errorf("after content: %s record, events %q", after.Hook, got)
	}
	// Keys in the events are redacted like the rest of the line (the fake
	// upstream's ids are too short for the log redaction's pattern).
	if strings.Contains(text, "sk-proj-abcdefghijkl") || !strings.Contains(text, `"delta":" sha256:`) {
		t.Errorf("the key in a delta is not redacted:\n%s", text)
	}
	if n := len(recs) - len(recsOn); n != 1 {
		t.Errorf("recording off: %d records written between the toggles, want only the quota failure's", n-1)
	}

	// The recording replays through a policy; the events are ignored.
	var out, errs bytes.Buffer
	code := policycli.Run(ctx, policycli.Options{CheckRewrite: gateway.CheckRewrittenBody}, []string{"test", filepath.Join("..", "policies", "replay.wasm"), "-recording", dir}, &out, &errs)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if code != 0 || len(lines) != len(recs)+1 || strings.Contains(out.String(), `"error"`) {
		t.Fatalf("policy test -recording: exit %d, %d lines for %d records\n%s\n%s", code, len(lines), len(recs), out.String(), errs.String())
	}
}

// TestRecoverInputTypeOfBareErrorEvent: a Responses error event carries its
// code and message at the top level beside the event's own "type":"error";
// the recover policy's input must not take that for the error's type
// (hostabi/ABI.md §3.1: "the error's type").
func TestRecoverInputTypeOfBareErrorEvent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, Logger: hclog.NewNullLogger(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})

	frames := upstreamtest.ResponsesStream("resp_1", "m", "one two three", 3)[:3] // created, in_progress or added, a delta
	frames = append(frames, upstreamtest.SSEEvent([]byte(`{"type":"error","code":"some_code","message":"boom","sequence_number":9}`)))
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
	_, _ = h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)

	recs, text := readRecords(t, dir)
	found := false
	for _, rc := range recs {
		if rc.Hook != "recover" {
			continue
		}
		var in struct {
			Code string  `json:"code"`
			Type *string `json:"type"`
		}
		_ = json.Unmarshal(rc.Input, &in)
		if in.Code != "some_code" {
			continue
		}
		found = true
		if in.Type != nil && *in.Type == "error" {
			t.Errorf("recover input type %q: the event's type, not the error's\n%s", *in.Type, rc.Input)
		}
	}
	if !found {
		t.Fatalf("no recover record for the error event:\n%s", text)
	}
}
