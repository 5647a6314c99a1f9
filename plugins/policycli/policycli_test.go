package policycli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
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
