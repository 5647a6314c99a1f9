package policycli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), Options{}, args, &out, &errb)
	return code, out.String(), errb.String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, _ := os.Getwd()
	dir, mod := findModule(wd)
	if mod != SluiceModule {
		t.Skip("not inside the Sluice module")
	}
	return dir
}

func TestUsage(t *testing.T) {
	if code, _, _ := run(t); code != 2 {
		t.Fatal(code)
	}
	if code, _, _ := run(t, "bogus"); code != 2 {
		t.Fatal(code)
	}
	if code, _, _ := run(t, "check"); code != 2 {
		t.Fatal(code)
	}
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "sluice policy") {
		t.Fatal(code)
	}
}

func TestCheck(t *testing.T) {
	root := repoRoot(t)
	code, out, errs := run(t, "check", filepath.Join(root, "policies", "recover.wasm"))
	if code != 0 || !strings.Contains(out, "hooks:       recover, self_test") || !strings.Contains(out, "self_test:   passed") {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	code, _, errs = run(t, "check", filepath.Join(root, "plugins", "testdata", "badabi.wasm"))
	if code != 1 || !strings.Contains(errs, "ABI version 99") {
		t.Fatalf("%d %s", code, errs)
	}
	code, _, errs = run(t, "check", filepath.Join(root, "policies", "rewrite.wasm"), "-config", `{"strip_tool_types":"x"}`)
	if code != 1 || !strings.Contains(errs, "self_test failed") {
		t.Fatalf("bad config passed the self-test: %d %s", code, errs)
	}
	// The rejection says why, in the policy's own words.
	if !strings.Contains(errs, "self_test: strip_tool_types must be an array of strings") {
		t.Fatalf("the self-test's reason is missing from the rejection:\n%s", errs)
	}
}

func TestTestEvents(t *testing.T) {
	root := repoRoot(t)
	events := filepath.Join(t.TempDir(), "events.jsonl")
	lines := `{"hook":"recover","input":{"code":"previous_response_not_found"},"expect":"recover"}
# comments and blank lines are skipped

{"hook":"recover","input":{"code":"rate_limit_exceeded"},"expect":"pass"}
{"hook":"replay","input":{"code":"usage_limit_reached"},"expect":"replay_other_upstream"}
{"hook":"rewrite","body":{"model":"fast","tools":[{"type":"web_search_preview"}]},"expect":"changed"}
{"hook":"rewrite","body":{"model":"other"},"expect":"unchanged"}
`
	if err := os.WriteFile(events, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"model_aliases":{"fast":"gpt-5-mini"},"strip_tool_types":["web_search_preview"]}`
	code, out, errs := run(t, "test", filepath.Join(root, "policies", "rewrite.wasm"), "-events", events, "-config", cfg)
	if code != 0 {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	var results []result
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if len(results) != 5 || results[0].DecidedBy != "default" || string(results[3].Body) != `{"model":"gpt-5-mini","tools":[]}` {
		t.Fatalf("%s", out)
	}
	// A wrong expectation fails the command.
	_ = os.WriteFile(events, []byte(`{"hook":"recover","input":{"code":"x"},"expect":"recover"}`+"\n"), 0o644)
	if code, _, _ := run(t, "test", filepath.Join(root, "policies", "recover.wasm"), "-events", events); code != 1 {
		t.Fatalf("expectation mismatch passed: %d", code)
	}
}

// TestTestNeverTripsTheModule: the gateway rolls a policy back (or trips
// it) after 5 faults in a row, but a test must report the module's own
// answer for every input. A module that traps on long inputs gets an error
// on each of those, and still answers every short input after 40 faults,
// through -events and -recording alike.
func TestTestNeverTripsTheModule(t *testing.T) {
	mod := filepath.Join("testdata", "trap_long_recover.wasm")
	long := `{"surface":"chat_json","upstream":"u","code":"x","message":"` + strings.Repeat("long ", 30) + `"}`
	short := `{"surface":"chat_json","upstream":"u","code":"x"}`
	const faults, answers = 40, 3
	var events, recording strings.Builder
	for range faults {
		events.WriteString(`{"hook":"recover","input":` + long + "}\n")
		recording.WriteString(`{"hook":"recover","input":` + long + `,"verdict":"pass","decided_by":"default"}` + "\n")
	}
	for range answers {
		events.WriteString(`{"hook":"recover","input":` + short + `,"expect":"recover"}` + "\n")
		recording.WriteString(`{"hook":"recover","input":` + short + `,"verdict":"recover","decided_by":"trap_long_recover"}` + "\n")
	}
	dir := t.TempDir()
	evFile, recFile := filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "hooks-1.jsonl")
	if err := os.WriteFile(evFile, []byte(events.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recFile, []byte(recording.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errs := run(t, "test", mod, "-events", evFile)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != faults+answers || !strings.Contains(errs, fmt.Sprintf("%d event(s) failed", faults)) {
		t.Fatalf("exit %d, %d lines\n%s\n%s", code, len(lines), out, errs)
	}
	for i, l := range lines {
		var r result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if i < faults {
			if r.Outcome != "fault" || !strings.Contains(r.Error, "trap_long_recover: fault:") {
				t.Errorf("a faulted input is not reported as an error: %s", l)
			}
			continue
		}
		if r.Verdict != "recover" || r.DecidedBy != "trap_long_recover" || r.Outcome != "decided" || r.Error != "" || r.Pass == nil || !*r.Pass {
			t.Errorf("after %d faults the module's own answer is not reported: %s", faults, l)
		}
	}

	code, out, errs = run(t, "test", mod, "-recording", recFile)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != faults+answers+1 {
		t.Fatalf("exit %d, %d lines\n%s\n%s", code, len(lines), out, errs)
	}
	for i, l := range lines[:faults+answers] {
		var r replayed
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if i < faults {
			if r.Outcome != "fault" || r.Error == "" || r.DecidedBy != "default" {
				t.Errorf("a faulted input is not reported as an error: %s", l)
			}
			continue
		}
		if r.Changed || r.Verdict != "recover" || r.DecidedBy != "trap_long_recover" || r.Outcome != "decided" || r.Error != "" {
			t.Errorf("after %d faults the module's own answer is not reported: %s", faults, l)
		}
	}
	var sum summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Summary.Errors != faults || sum.Summary.Changed != 0 {
		t.Fatalf("summary %s (%v)", lines[len(lines)-1], err)
	}
}

// TestNewBuildCheck scaffolds a policy outside the Sluice module, tests and
// builds it (about 20 s: a Go wasip1 build).
func TestNewBuildCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go guest")
	}
	root := repoRoot(t)
	parent := t.TempDir()
	code, out, errs := run(t, "new", "demo", "-dir", parent, "-sluice", root)
	if code != 0 {
		t.Fatalf("%d %s %s", code, out, errs)
	}
	dir := filepath.Join(parent, "demo")
	for _, f := range []string{"main.go", "main_test.go", "go.mod"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(env []string, args ...string) ([]byte, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off"), env...)
		return cmd.CombinedOutput()
	}
	// Offline from the module cache first, then through the module proxy.
	if _, err := goCmd([]string{"GOPROXY=off"}, "mod", "tidy"); err != nil {
		if b, err := goCmd(nil, "mod", "tidy"); err != nil {
			if bytes.Contains(b, []byte("dial tcp")) || bytes.Contains(b, []byte("lookup")) {
				t.Skipf("go mod tidy needs the network: %s", b)
			}
			t.Fatalf("go mod tidy: %v\n%s", err, b)
		}
	}
	if b, err := goCmd(nil, "test", "./..."); err != nil {
		t.Fatalf("go test: %v\n%s", err, b)
	}
	code, out, errs = run(t, "build", dir)
	if code != 0 || !strings.Contains(out, "hooks:       recover, rewrite_request, self_test") {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	if _, err := os.Stat(dir + ".wasm"); err != nil {
		t.Fatal(err)
	}
	// -o replaces an existing module, and the hint names a file a gateway loads.
	deployed := filepath.Join(parent, "policies.d", "10-demo.wasm")
	if err := os.MkdirAll(filepath.Dir(deployed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(deployed, []byte("an older module"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, "build", dir, "-o", deployed)
	if code != 0 || !strings.Contains(out, deployed+": ok") || !strings.Contains(out, "(e.g. policies.d/10-demo.wasm)") {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	if b, err := os.ReadFile(deployed); err != nil || !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("%s not replaced by the module: %q %v", deployed, b[:min(len(b), 16)], err)
	}
	// A failing self-test says why, and the module is not put in place.
	src, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	failing := strings.NewReplacer(
		`import "github.com/sluice-gw/sluice/sdk"`, "import (\n\t\"errors\"\n\n\t\"github.com/sluice-gw/sluice/sdk\"\n)",
		"SelfTest: func() error { return nil },", `SelfTest: func() error { return errors.New("the demo says no") },`,
	).Replace(string(src))
	if !strings.Contains(failing, "the demo says no") || !strings.Contains(failing, `"errors"`) {
		t.Fatal("the scaffold's main.go changed; update this test")
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(failing), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(deployed)
	code, out, errs = run(t, "build", dir, "-o", deployed)
	if code != 1 || !strings.Contains(errs, "self_test failed (returned 1)") ||
		!strings.Contains(errs, "self_test: the demo says no") || !strings.Contains(errs, deployed+" not written") {
		t.Fatalf("failing self-test: %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out, "built "+deployed) || !strings.Contains(out, "compiled "+dir) {
		t.Fatalf("a module not written is announced as built, or the compilation is not reported:\n%s", out)
	}
	if after, _ := os.ReadFile(deployed); !bytes.Equal(after, before) {
		t.Fatal("a module that failed its self-test replaced the deployed one")
	}
	// Inside the Sluice module no go.mod is written.
	tmpNew := filepath.Join(root, "plugins", "policycli", "testdata", "tmp-new")
	code, _, errs = run(t, "new", "inrepo", "-dir", tmpNew)
	defer func() {
		_ = os.RemoveAll(tmpNew)
		_ = os.Remove(filepath.Dir(tmpNew)) // only if empty
	}()
	if code != 0 {
		t.Fatal(errs)
	}
	if _, err := os.Stat(filepath.Join(tmpNew, "inrepo", "go.mod")); err == nil {
		t.Fatal("go.mod written inside the Sluice module")
	}
}

// TestScaffoldsHaveNoPlaceholderLeft renders every file `policy new` writes
// and checks that each placeholder was replaced: the scaffolds are plain
// substitution now, which (unlike text/template) would not complain about a
// misspelt one.
func TestScaffoldsHaveNoPlaceholderLeft(t *testing.T) {
	s := scaffold{Name: "pname", Module: "example.com/pmod", Replace: "./prepl"}
	files := map[string]scaffoldText{"go.mod": goModTmpl, "main.go": mainTmpl, "main_test.go": testTmpl,
		"package.json": asPackageTmpl, "asconfig.json": asConfigTmpl, ".gitignore": asIgnoreTmpl, "index.ts": asMainTmpl}
	for name, tmpl := range files {
		out := string(tmpl.render(s))
		if strings.Contains(out, "{{") {
			t.Errorf("%s: a placeholder is left: %q", name, out[strings.Index(out, "{{"):][:min(40, len(out)-strings.Index(out, "{{"))])
		}
	}
	if got := string(goModTmpl.render(s)); !strings.Contains(got, "module example.com/pmod") || !strings.Contains(got, "=> ./prepl") {
		t.Errorf("go.mod:\n%s", got)
	}
	if got := string(mainTmpl.render(s)); !strings.Contains(got, "pname.wasm") {
		t.Errorf("main.go does not name the policy:\n%s", got)
	}
}

// TestNewRejectsUnbuildableModulePaths: `policy new` refuses, before writing
// anything, a NAME or -module the go command would refuse in go.mod (which
// `policy build` would only report later as "invalid module path").
func TestNewRejectsUnbuildableModulePaths(t *testing.T) {
	parent := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"go"}, `NAME "go" cannot be a Go module path (reserved by the go command`},
		{[]string{"toolchain"}, `NAME "toolchain" cannot be a Go module path (reserved by the go command`},
		{[]string{"std"}, `NAME "std" cannot be a Go module path (names the standard library's packages`},
		{[]string{"cmd"}, `NAME "cmd" cannot be a Go module path (names the standard library's packages`},
		{[]string{"con"}, `NAME "con" cannot be a Go module path (path element "con": "con" is a device name on Windows)`},
		{[]string{"demo."}, `NAME "demo." cannot be a Go module path (path element "demo.": trailing dot)`},
		{[]string{"demo", "-module", "bad module path!"}, `-module "bad module path!" is not a valid Go module path: path element "bad module path!": invalid character ' '`},
		{[]string{"demo", "-module", "example.com//demo"}, `-module "example.com//demo" is not a valid Go module path: double slash`},
		{[]string{"demo", "-module", "example.com/./demo"}, `-module "example.com/./demo" is not a valid Go module path: path element ".": only dots`},
		{[]string{"demo", "-module", "example.com/demo/"}, `trailing slash`},
		{[]string{"demo", "-module", "PROGRA~1/demo"}, `like a Windows short name`},
	} {
		code, out, errs := run(t, append([]string{"new", "-dir", parent}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "usage: sluice policy new") {
			t.Errorf("new %q: exit %d, want 2 and %q\nstdout: %s\nstderr: %s", tc.args, code, tc.want, out, errs)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("a refused policy new wrote %v", entries)
	}
	// Names and paths the go command accepts still scaffold.
	for _, args := range [][]string{{"gopher"}, {"Std_2"}, {"quota", "-module", "example.com/policies/quota+x/v2"}} {
		if code, out, errs := run(t, append([]string{"new", "-dir", parent}, args...)...); code != 0 {
			t.Errorf("new %q: exit %d\n%s\n%s", args, code, out, errs)
		}
	}
}

// TestBuildRefusesUnloadableOutput: an -o that is a directory, or a file
// name a gateway never loads from its policy_dir, is refused before
// anything is built or reported as built.
func TestBuildRefusesUnloadableOutput(t *testing.T) {
	parent := t.TempDir()
	if code, out, errs := run(t, "new", "-dir", parent, "demo"); code != 0 {
		t.Fatalf("new: %d\n%s\n%s", code, out, errs)
	}
	dir := filepath.Join(parent, "demo")
	policyDir := filepath.Join(parent, "policies.d")
	if err := os.Mkdir(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ out, want string }{
		{policyDir, "-o " + policyDir + " is a directory: -o names the module file (e.g. -o " + filepath.Join(policyDir, "10-demo.wasm") + ")"},
		{filepath.Join(parent, "out.bin"), "a gateway loads only files named NAME.wasm"},
		{filepath.Join(policyDir, ".demo.wasm"), "not starting with '.' or '#'"},
	} {
		code, out, errs := run(t, "build", dir, "-o", tc.out)
		if code != 2 || !strings.Contains(errs, tc.want) || strings.Contains(out, "built") || strings.Contains(out, ": ok") {
			t.Errorf("build -o %s: exit %d, want 2 and %q\nstdout: %s\nstderr: %s", tc.out, code, tc.want, out, errs)
		}
	}
	if entries, _ := os.ReadDir(policyDir); len(entries) != 0 {
		t.Fatalf("a refused build wrote into %s: %v", policyDir, entries)
	}
	if _, err := os.Stat(filepath.Join(parent, "out.bin")); err == nil {
		t.Fatal("a refused build wrote out.bin")
	}
}

// A policies.NAME block copied from the gateway's config, with its
// sluice_fail_closed, checks as the gateway loads it: the member is the
// gateway's, and the built-in rewrite (which refuses keys it does not know)
// never sees it.
func TestConfigWithTheGatewaysFailClosedKey(t *testing.T) {
	root := repoRoot(t)
	code, out, errs := run(t, "check", filepath.Join(root, "policies", "rewrite.wasm"), "-config",
		`{"sluice_fail_closed":true,"model_aliases":{"fast":"gpt-fake-1"}}`)
	if code != 0 || !strings.Contains(out, "self_test:   passed") {
		t.Fatalf("%d\n%s\n%s", code, out, errs)
	}
	// A value the gateway's config refuses is refused here too.
	code, _, errs = run(t, "check", filepath.Join(root, "policies", "rewrite.wasm"), "-config", `{"sluice_fail_closed":"yes"}`)
	if code == 0 || !strings.Contains(errs, "sluice_fail_closed must be true or false") {
		t.Fatalf("a non-boolean sluice_fail_closed: %d %s", code, errs)
	}
}
