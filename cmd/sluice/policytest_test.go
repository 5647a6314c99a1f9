package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyTestReportsInvalidRewrites: `sluice policy test` judges a
// rewrite's edited body with the gateway's own check, so an edit the
// gateway discards (ABI.md §3.3) is reported as it is treated: no edits,
// outcome invalid with the reason, exit 1.
func TestPolicyTestReportsInvalidRewrites(t *testing.T) {
	fixtures := filepath.Join("..", "..", "gateway", "testdata", "policies")
	for _, tc := range []struct {
		name, fixture, body string
		flags               []string
		reason              string
	}{
		{"model not a string", "rewrite_invalid", `{"model":"m","input":"x"}`, nil, "model must be a string"},
		{"stream flipped", "rewrite_stream", `{"model":"m","input":"x","stream":true}`, nil, "stream must stay true"},
		{"over the body limit", "rewrite_pad", `{"model":"m","input":"x"}`, []string{"-max-body-bytes", "4096"}, "over the gateway limit of 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := filepath.Join(t.TempDir(), "events.jsonl")
			ev := `{"hook":"rewrite","body":` + tc.body + `,"expect":"changed"}` + "\n"
			if err := os.WriteFile(events, []byte(ev), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"policy", "test", filepath.Join(fixtures, tc.fixture+".wasm"), "-events", events}, tc.flags...)
			code, stdout, stderr := runCLI(args...)
			var res struct {
				Verdict, Outcome, Error, Upstream string
				Body                              json.RawMessage
				SetHeaders                        map[string]string `json:"set_headers"`
				Pass                              *bool
			}
			if err := json.Unmarshal([]byte(stdout), &res); err != nil {
				t.Fatalf("exit %d, output %.400q: %v\n%s", code, stdout, err, stderr)
			}
			if code != 1 || res.Verdict != "unchanged" || res.Outcome != "invalid" || res.Body != nil || res.SetHeaders != nil || res.Upstream != "" ||
				!strings.Contains(res.Error, "its edited body is not a valid request") || !strings.Contains(res.Error, tc.reason) ||
				res.Pass == nil || *res.Pass {
				t.Fatalf("exit %d, %.400s%s; want exit 1, unchanged, outcome invalid, no edits, an error with %q", code, stdout, stderr, tc.reason)
			}
		})
	}

	// The same module with a body it leaves valid is an ordinary change.
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"rewrite","body":{"model":"m","input":"x"},"expect":"changed"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI("policy", "test", filepath.Join(fixtures, "rewrite_stream.wasm"), "-events", events); code != 0 || !strings.Contains(stdout, `"verdict":"changed"`) {
		t.Fatalf("exit %d, %s%s; want changed, exit 0", code, stdout, stderr)
	}
}

// TestPolicyTestHeldToItsEdits: with the gateway's sluice_fail_closed in
// -config, a rewrite the gateway would not send on is reported as the 503
// policy_unavailable the client would get, including an edited body the
// gateway's own check refuses (as the gateway judges each held module's
// body when it returns); without it, as an edit discarded.
func TestPolicyTestHeldToItsEdits(t *testing.T) {
	fixture := filepath.Join("..", "..", "gateway", "testdata", "policies", "rewrite_invalid.wasm")
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"rewrite","body":{"model":"m","input":"x"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		config, verdict, outcome, errContains string
	}{
		{`{"sluice_fail_closed":true}`, "failed_closed", "error", "the gateway answers the request 503 policy_unavailable"},
		{`{"sluice_fail_closed":false}`, "unchanged", "invalid", "its edited body is not a valid request"},
	} {
		t.Run(tc.config, func(t *testing.T) {
			code, stdout, stderr := runCLI("policy", "test", fixture, "-events", events, "-config", tc.config)
			var res struct{ Verdict, Outcome, Error string }
			if err := json.Unmarshal([]byte(stdout), &res); err != nil {
				t.Fatalf("exit %d, output %.400q: %v\n%s", code, stdout, err, stderr)
			}
			if code != 1 || res.Verdict != tc.verdict || res.Outcome != tc.outcome || !strings.Contains(res.Error, tc.errContains) {
				t.Fatalf("exit %d, %.400s%s; want exit 1, verdict %s, outcome %s, an error with %q", code, stdout, stderr, tc.verdict, tc.outcome, tc.errContains)
			}
		})
	}
}
