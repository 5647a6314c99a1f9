package policycli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestChecksUpstreamNames: a rewrite's use_upstream is judged against
// the gateway's upstreams when test knows them (-upstreams, or
// -gateway-config through Options.GatewayUpstreams): a name the gateway
// does not have is "invalid" and fails the command, as the gateway fails
// such a request, and its verdict is "unchanged": none of its edits reach
// an upstream (README "Policies"); without them the result says nothing of it, and a note
// on stderr says the name was not checked.
func TestTestChecksUpstreamNames(t *testing.T) {
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"rewrite","body":{"model":"m","input":"hi"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gatewayConfigs := func(path string) ([]string, error) {
		if path == "gw.yaml" {
			return []string{"primary", "secondary"}, nil
		}
		return nil, errors.New("config " + path + ": no such file")
	}
	mod := filepath.Join("testdata", "upstream_rewrite.wasm") // use_upstream("secondary")
	for _, tc := range []struct {
		name        string
		flags       []string
		code        int
		outcome     string // "" when no result line is expected
		verdict     string
		upstream    string // the result's upstream
		errContains string
		note        bool
	}{
		{"not checked", nil, 0, "done", "changed", "secondary", "", true},
		{"known", []string{"-upstreams", "primary, secondary"}, 0, "done", "changed", "secondary", "", false},
		{"unknown", []string{"-upstreams", "primary"}, 1, "invalid", "unchanged", "", `use_upstream named "secondary"`, false},
		{"gateway config", []string{"-gateway-config", "gw.yaml"}, 0, "done", "changed", "secondary", "", false},
		{"unreadable gateway config", []string{"-gateway-config", "missing.yaml"}, 1, "", "", "", "", false},
		{"empty name", []string{"-upstreams", "primary,"}, 2, "", "", "", "", false},
		{"both", []string{"-upstreams", "primary", "-gateway-config", "gw.yaml"}, 2, "", "", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"test", mod, "-events", events}, tc.flags...)
			code := Run(context.Background(), Options{GatewayUpstreams: gatewayConfigs}, args, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, out.String(), errb.String())
			}
			if got := strings.Contains(errb.String(), "was not checked"); got != tc.note {
				t.Errorf("note on stderr: %v, want %v: %s", got, tc.note, errb.String())
			}
			if tc.outcome == "" {
				return
			}
			var res result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if res.Outcome != tc.outcome || !strings.Contains(res.Error, tc.errContains) || (tc.errContains == "") != (res.Error == "") {
				t.Errorf("outcome %q error %q, want %q and an error containing %q", res.Outcome, res.Error, tc.outcome, tc.errContains)
			}
			if res.Verdict != tc.verdict || res.Changed == nil || *res.Changed != (tc.verdict == "changed") || res.Upstream != tc.upstream {
				t.Errorf("%s: want verdict %q, changed %v, upstream %q", out.String(), tc.verdict, tc.verdict == "changed", tc.upstream)
			}
		})
	}
}

// TestTestRewriteFaultOutcome: a rewrite that faults says "fault", as the
// other hooks do, not "done" with an error.
func TestTestRewriteFaultOutcome(t *testing.T) {
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"rewrite","body":{"model":"m","input":"hi"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "test", filepath.Join("..", "testdata", "rewrite_trap.wasm"), "-events", events)
	var res result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errs)
	}
	if res.Outcome != "fault" || !strings.Contains(res.Error, "fault") {
		t.Fatalf("a faulting rewrite: outcome %q error %q, want fault", res.Outcome, res.Error)
	}
}
