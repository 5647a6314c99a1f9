package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

var update = flag.Bool("update", false, "rewrite cmd/sluice/testdata/*.golden")

// golden compares got with testdata/NAME.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/sluice -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("%s differs (go test ./cmd/sluice -run %s -update rewrites it)\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// runCLI runs the command in process and returns exit code, stdout, stderr.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestHelpGolden: every command's --help, -h and `sluice help COMMAND` print
// the same text on stdout and exit 0; the text shows the flags with their
// defaults, the environment and examples.
func TestHelpGolden(t *testing.T) {
	for _, tt := range []struct {
		golden string
		ways   [][]string
	}{
		{"help", [][]string{{"help"}, {"--help"}, {"-h"}, {"help", "help"}, {"help", "--help"}, {"help", "-h"}, {"help", "-help"}}},
		{"serve-help", [][]string{{"serve", "--help"}, {"serve", "-h"}, {"serve", "-help"}, {"help", "serve"}, {"serve", "--listen", "x", "--help"}}},
		{"demo-help", [][]string{{"demo", "--help"}, {"demo", "-h"}, {"help", "demo"}}},
		{"version-help", [][]string{{"version", "--help"}, {"version", "-h"}, {"help", "version"}}},
		{"policy-help", [][]string{{"policy", "--help"}, {"policy", "-h"}, {"policy", "help"}, {"help", "policy"}}},
		{"policy-new-help", [][]string{{"policy", "new", "--help"}, {"policy", "new", "-h"}, {"policy", "help", "new"}, {"help", "policy", "new"}}},
		{"policy-build-help", [][]string{{"policy", "build", "--help"}, {"policy", "build", "./x", "-h"}, {"help", "policy", "build"}}},
		{"policy-check-help", [][]string{{"policy", "check", "--help"}, {"policy", "check", "-h"}, {"help", "policy", "check"}}},
		{"policy-test-help", [][]string{{"policy", "test", "--help"}, {"policy", "test", "-h"}, {"help", "policy", "test"}}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			var first string
			for i, args := range tt.ways {
				code, stdout, stderr := runCLI(args...)
				if code != 0 || stderr != "" {
					t.Fatalf("sluice %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
				}
				if i == 0 {
					first = stdout
					golden(t, tt.golden, stdout)
				} else if stdout != first {
					t.Fatalf("sluice %s differs from sluice %s:\n%s", strings.Join(args, " "), strings.Join(tt.ways[0], " "), stdout)
				}
			}
			if !strings.HasPrefix(first, "usage: sluice") || !strings.Contains(first, "\nexamples:\n") ||
				!strings.Contains(first, "\nenvironment") {
				t.Fatalf("help without usage line, environment or examples:\n%s", first)
			}
			for _, line := range strings.Split(first, "\n") {
				if len([]rune(line)) > 100 {
					t.Errorf("line longer than 100 columns: %q", line)
				}
			}
		})
	}
}

// TestHelpNamesEveryEnvironmentVariable: every variable the binary reads
// (os.Getenv / os.LookupEnv with a literal name) is in serve's help, or in
// the help of the policy command that reads it (policy build).
func TestHelpNamesEveryEnvironmentVariable(t *testing.T) {
	_, serveHelp, _ := runCLI("serve", "--help")
	_, buildHelp, _ := runCLI("policy", "help", "build")
	help := serveHelp + buildHelp
	ref := regexp.MustCompile(`os\.(?:Getenv|LookupEnv)\("([A-Za-z_][A-Za-z0-9_]*)"\)`)
	seen := map[string]bool{}
	// The Sluice packages linked into the binary, and their non-test files.
	list, err := exec.Command("go", "list", "-deps", "-f",
		`{{if and (not .Standard) (eq .Module.Path "github.com/sluice-gw/sluice")}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		fields := strings.Fields(line)
		for _, f := range fields[min(1, len(fields)):] {
			src, err := os.ReadFile(filepath.Join(fields[0], f))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ref.FindAllSubmatch(src, -1) {
				seen[string(m[1])] = true
			}
		}
	}
	if !seen["SLUICE_UPSTREAM_API_KEY"] {
		t.Fatalf("the scan found no os.Getenv(\"SLUICE_UPSTREAM_API_KEY\"): %v\n%s", seen, list)
	}
	for _, name := range []string{"SLUICE_ADMIN_TOKEN", "SLUICE_UPSTREAM_API_KEY", "HOME", "XDG_CACHE_HOME"} {
		seen[name] = true
	}
	for name := range seen {
		if !strings.Contains(help, name) {
			t.Errorf("neither serve --help nor policy help build mentions %s", name)
		}
	}
	// The environment and the flags show the defaults that apply.
	for _, want := range []string{"(default 127.0.0.1:8080;", "(default ./sluice-data;", "(default info;", "chat+http(s)://HOST/v1"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

// TestHelpUsageErrors: an unknown command, a bad flag or a stray argument is
// reported on stderr with exit 2, and nothing goes to stdout.
func TestHelpUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "usage: sluice <command>"},
		{[]string{"frobnicate"}, "sluice: unknown command \"frobnicate\"\n\nusage: sluice <command>"},
		{[]string{"help", "frobnicate"}, "sluice help: unknown command \"frobnicate\""},
		{[]string{"serve", "--bogus"}, "sluice serve: flag provided but not defined: -bogus\n(sluice serve --help for the flags and examples)\n"},
		{[]string{"serve", "stray"}, "sluice serve: unexpected argument \"stray\""},
		{[]string{"demo", "--listen"}, "sluice demo: flag needs an argument: -listen"},
		{[]string{"version", "extra"}, "sluice version: unexpected argument \"extra\""},
		{[]string{"policy", "frobnicate"}, "sluice policy: unknown command \"frobnicate\""},
		{[]string{"policy", "build", "--bogus"}, "sluice policy build: flag provided but not defined: -bogus\nusage: sluice policy build DIR"},
		{[]string{"help", "policy", "frobnicate"}, "sluice policy help: unknown command \"frobnicate\""},
	} {
		code, stdout, stderr := runCLI(tt.args...)
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, tt.want) {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit 2 and stderr starting %q",
				strings.Join(tt.args, " "), code, stdout, stderr, tt.want)
		}
	}
}

// buildSluice builds the binary with extra go build flags into a temp dir.
func buildSluice(t *testing.T, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, ".")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, b)
	}
	return out
}

func versionOutput(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	// The Go and ABI versions are the toolchain's and hostabi's: keep the
	// golden file stable.
	got := strings.ReplaceAll(string(out), runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH, "GOVERSION GOOS/GOARCH")
	return strings.Replace(got, fmt.Sprintf("\npolicy ABI: %d\n", hostabi.ABIVersion), "\npolicy ABI: ABIVERSION\n", 1)
}

// TestVersionGolden: a build stamped the way the justfile stamps it prints
// the version, commit, Go version and policy ABI; an unstamped build without
// VCS information says "devel" and "unknown", never nothing.
func TestVersionGolden(t *testing.T) {
	stamped := buildSluice(t, "-trimpath", "-buildvcs=false", "-ldflags",
		"-X main.version=v1.2.3-test -X main.commit=0123456789abcdef0123456789abcdef01234567")
	got := versionOutput(t, stamped, "version")
	golden(t, "version", got)
	if alt := versionOutput(t, stamped, "--version"); alt != got {
		t.Fatalf("--version differs:\n%s", alt)
	}

	plain := versionOutput(t, buildSluice(t, "-buildvcs=false"), "version")
	want := "sluice devel\ncommit:     unknown\ngo:         GOVERSION GOOS/GOARCH\npolicy ABI: ABIVERSION\n"
	if plain != want {
		t.Fatalf("-buildvcs=false build:\n%s\nwant\n%s", plain, want)
	}
}

// TestVersionFromVCS: without -ldflags, a build with VCS stamping reports
// the commit it was built from.
func TestVersionFromVCS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout: %v", err)
	}
	out := filepath.Join(t.TempDir(), "sluice")
	if b, err := exec.Command("go", "build", "-buildvcs=true", "-o", out, ".").CombinedOutput(); err != nil {
		t.Skipf("cannot build with VCS stamping here: %v\n%s", err, b)
	}
	got := versionOutput(t, out, "version")
	if !strings.Contains(got, "\ncommit:     "+strings.TrimSpace(string(head))) || strings.HasPrefix(got, "sluice devel") {
		t.Fatalf("VCS build:\n%s\nwant the commit %s and a module version", got, head)
	}
}
