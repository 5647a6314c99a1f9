package policycli

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyLogsReachStderr: what a module logs, while it loads and on
// each input, is written to stderr as "policy log:" lines, as the gateway
// logs it; stdout keeps only the command's own output (test's JSON lines).
func TestPolicyLogsReachStderr(t *testing.T) {
	mod := filepath.Join("testdata", "log_every_call.wasm")
	code, out, errs := run(t, "check", mod)
	if code != 0 || !strings.Contains(out, "self_test:   passed") {
		t.Fatalf("check: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, "policy log: [INFO] self_test: self-test ran\n") || strings.Contains(out, "self-test ran") {
		t.Fatalf("check: the self-test's log line is not on stderr alone:\nstdout:\n%s\nstderr:\n%s", out, errs)
	}

	events := filepath.Join(t.TempDir(), "events.jsonl")
	lines := `{"hook":"recover","input":{"code":"first_code"}}
{"hook":"recover","input":{"code":"second_code"}}
`
	if err := os.WriteFile(events, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, "test", mod, "-events", events)
	if code != 0 {
		t.Fatalf("test: exit %d\n%s%s", code, out, errs)
	}
	// The load's self-test line, then one line per input, in order.
	logged := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	if len(logged) != 3 || logged[0] != "policy log: [INFO] self_test: self-test ran" {
		t.Fatalf("test: stderr is not the self-test's line and two recover lines:\n%s", errs)
	}
	for i, want := range []string{"first_code", "second_code"} {
		if line := logged[i+1]; !strings.HasPrefix(line, "policy log: [WARN] recover: {") || !strings.Contains(line, `"code":"`+want+`"`) {
			t.Errorf("test: stderr line %d is not the recover log line with %s:\n%s", i+2, want, errs)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for ; sc.Scan(); n++ {
		var res result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil || res.Hook != "recover" {
			t.Errorf("test: stdout line %q is not a result: %v", sc.Text(), err)
		}
	}
	if n != 2 {
		t.Errorf("test: %d stdout lines, want 2 results:\n%s", n, out)
	}
}

// TestMemoryLimitFlag: -memory-mib is the gateway's policy_limits.memory_mib:
// check and test refuse a module whose initial memory is over it, with the
// gateway's reason, and load it under a limit it fits.
func TestMemoryLimitFlag(t *testing.T) {
	mod := filepath.Join("testdata", "memory_300_pages.wasm")
	const reason = "compile: section memory: min 300 pages (18 Mi) over limit of 256 pages (16 Mi)"
	code, out, errs := run(t, "check", mod, "-memory-mib", "16")
	if code != 1 || errs != mod+": rejected: "+reason+"\n" {
		t.Fatalf("check -memory-mib 16: exit %d\n%s%s; want exit 1 and %q", code, out, errs, reason)
	}
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"recover","input":{"code":"x"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, "test", mod, "-events", events, "-memory-mib", "16"); code != 1 || !strings.Contains(errs, reason) {
		t.Fatalf("test -memory-mib 16: exit %d\n%s%s; want exit 1 and %q", code, out, errs, reason)
	}
	if code, out, errs := run(t, "check", mod, "-memory-mib", "19"); code != 0 {
		t.Fatalf("check -memory-mib 19 (304 pages): exit %d\n%s%s", code, out, errs)
	}
	for _, bad := range [][]string{{"-memory-mib", "0"}, {"-memory-mib", "4097"}} {
		if code, _, errs := run(t, append([]string{"check", mod}, bad...)...); code != 2 || !strings.Contains(errs, "-memory-mib") {
			t.Errorf("check %v: exit %d %s; want a usage error", bad, code, errs)
		}
	}
	if code, _, errs := run(t, "test", mod, "-events", events, "-call-timeout", "0s"); code != 2 || !strings.Contains(errs, "-call-timeout") {
		t.Errorf("test -call-timeout 0s: exit %d %s; want a usage error", code, errs)
	}
}

// TestCallTimeoutFlag: -call-timeout is the gateway's
// policy_limits.call_timeout. A recover that needs 200 ms of wall time is
// a timeout fault under the default 50 ms and answers under 10 s.
func TestCallTimeoutFlag(t *testing.T) {
	mod := filepath.Join("testdata", "slow_recover.wasm")
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"recover","input":{"code":"x"},"expect":"recover"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	decode := func(out string) result {
		t.Helper()
		var res result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		return res
	}
	code, out, errs := run(t, "test", mod, "-events", events)
	if res := decode(out); code != 1 || res.Outcome == "decided" || res.Error == "" {
		t.Fatalf("default call timeout: exit %d\n%s%s; want a fault", code, out, errs)
	}
	code, out, errs = run(t, "test", mod, "-events", events, "-call-timeout", "10s")
	if res := decode(out); code != 0 || res.Verdict != "recover" || res.DecidedBy != "slow_recover" {
		t.Fatalf("-call-timeout 10s: exit %d\n%s%s; want the module's recover", code, out, errs)
	}
}

// TestPolicyLogDropsAreSaid: a call that logs more lines than the gateway
// writes (ABI.md §5) shows as many as the gateway would, then says the
// rest were dropped: an author does not take the lines shown for all.
func TestPolicyLogDropsAreSaid(t *testing.T) {
	mod := filepath.Join("..", "testdata", "log_lines.wasm") // logs one line per byte of its config
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"recover","input":{"code":"x"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		config    string
		lines     int
		dropsSaid bool
	}{
		{`"abc"`, 5, false}, // the config's bytes, quotes included
		{`"` + strings.Repeat("x", 98) + `"`, 16, true},
	} {
		_, _, errs := run(t, "test", mod, "-events", events, "-config", tc.config)
		if got := strings.Count(errs, "policy log: [ERROR] recover: line\n"); got != tc.lines {
			t.Errorf("config of %d bytes: %d lines shown, want %d:\n%s", len(tc.config), got, tc.lines, errs)
		}
		if said := strings.Contains(errs, "the rest are dropped"); said != tc.dropsSaid {
			t.Errorf("config of %d bytes: drops said %v, want %v:\n%s", len(tc.config), said, tc.dropsSaid, errs)
		}
	}
}
