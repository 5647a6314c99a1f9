package policycli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sluiceBinary builds cmd/sluice into a temp dir: the tests below run the
// real binary, as a user who has only it and Go would.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", err, b)
	}
	return bin
}

// offlineEnv is a Go environment with no module proxy, an empty module cache
// and a fresh HOME: nothing but the binary and the Go toolchain (the build
// cache is kept, only to save time).
func offlineEnv(t *testing.T) []string {
	t.Helper()
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "GOPATH", "GOMODCACHE", "GOPROXY", "GOFLAGS", "GOWORK", "GOTOOLCHAIN", "GOCACHE", "XDG_CACHE_HOME", "GONOSUMDB", "GOPRIVATE", "GOSUMDB":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "GOPATH="+filepath.Join(home, "go"), "GOPROXY=off", "GOFLAGS=-mod=mod",
		"GOTOOLCHAIN=local", "GOSUMDB=off", "GOCACHE="+strings.TrimSpace(string(gocache)))
}

func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, b)
	}
	return string(b)
}

// TestBinaryAuthoringOffline is issue item 1: from an empty directory,
// `sluice policy new` then `sluice policy build` give a loadable module with
// only the binary and Go, no checkout and no network (GOPROXY=off, an empty
// module cache). The policy's go.mod is then stripped of its require to
// check that build tidies when needed. About 30 s.
func TestBinaryAuthoringOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sluice binary and a Go guest")
	}
	bin := sluiceBinary(t)
	env := offlineEnv(t)
	work := t.TempDir()

	out := runIn(t, work, env, bin, "policy", "new", "mypolicy")
	if !strings.Contains(out, "no network needed") {
		t.Fatalf("new: %s", out)
	}
	dir := filepath.Join(work, "mypolicy")
	for _, f := range []string{"go.mod", "main.go", "main_test.go", "sluice-sdk/go.mod", "sluice-sdk/sdk/sdk.go", "sluice-sdk/hostabi/abi.go", "sluice-sdk/hostabi/ABI.md", "sluice-sdk/internal/jsonx/document.go", "sluice-sdk/" + sdkStamp} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	// A policy imports only the SDK, and the copy carries no tests.
	for _, f := range []string{"main.go", "main_test.go"} {
		if b, _ := os.ReadFile(filepath.Join(dir, f)); bytes.Contains(b, []byte(`"`+SluiceModule+`/hostabi"`)) {
			t.Errorf("%s imports hostabi", f)
		}
	}
	for _, glob := range []string{"*/*_test.go", "*/*/*_test.go"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "sluice-sdk", glob)); len(m) > 0 {
			t.Errorf("tests copied: %v", m)
		}
	}
	out = runIn(t, dir, env, bin, "policy", "build", ".")
	wasm := filepath.Join(work, "mypolicy.wasm")
	for _, want := range []string{"built " + wasm, "hooks:       recover, rewrite_request, self_test", "self_test:   passed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("build output lacks %q:\n%s", want, out)
		}
	}
	// Without -mod=mod a go.mod behind the imports makes build tidy:
	// drop the require, keep the replace.
	gomod := filepath.Join(dir, "go.mod")
	b, _ := os.ReadFile(gomod)
	b = regexp.MustCompile(`(?m)^require .*\n`).ReplaceAll(b, nil)
	if err := os.WriteFile(gomod, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out = runIn(t, dir, append(env, "GOFLAGS="), bin, "policy", "build", ".")
	if !strings.Contains(out, "running go mod tidy") || !strings.Contains(out, "built "+wasm) {
		t.Fatalf("build did not tidy:\n%s", out)
	}
	runIn(t, dir, env, "go", "test", "./...")
	out = runIn(t, work, env, bin, "policy", "check", "mypolicy.wasm")
	if !strings.Contains(out, "abi_version: 3") {
		t.Fatalf("check: %s", out)
	}
	// -o into a directory that does not exist yet (the README's policies.d).
	runIn(t, work, env, bin, "policy", "build", "mypolicy", "-o", "policies.d/10-mypolicy.wasm")
	if _, err := os.Stat(filepath.Join(work, "policies.d", "10-mypolicy.wasm")); err != nil {
		t.Fatal(err)
	}
}

// TestEnsureSDK: build rewrites a missing SDK copy (a policy repository that
// does not commit it), rewrites it on -update-sdk and notes a different one.
func TestEnsureSDK(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module p\n\nreplace "+SluiceModule+" => ./"+SDKDir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := ensureSDK(dir, false, &out, &errb); err != nil || !strings.Contains(out.String(), "wrote ") {
		t.Fatalf("%v %s %s", err, out.String(), errb.String())
	}
	_, hash := embeddedSDK()
	if got := readStamp(filepath.Join(dir, SDKDir)); got != hash {
		t.Fatalf("stamp %q, want %q", got, hash)
	}
	if err := os.WriteFile(filepath.Join(dir, SDKDir, sdkStamp), []byte("sdk old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := ensureSDK(dir, false, &out, &errb); err != nil || out.Len() != 0 || !strings.Contains(errb.String(), "-update-sdk rewrites it") {
		t.Fatalf("%v %q %q", err, out.String(), errb.String())
	}
	if err := ensureSDK(dir, true, &out, &errb); err != nil || readStamp(filepath.Join(dir, SDKDir)) != hash {
		t.Fatal(err)
	}
	// A directory sluice did not write is never replaced.
	other := filepath.Join(t.TempDir(), SDKDir)
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeSDK(other); err == nil {
		t.Fatal("overwrote a foreign directory")
	}
	// The copy is exactly the packages the gateway is built from.
	files, _ := embeddedSDK()
	root := repoRoot(t)
	for _, f := range files {
		if f.path == "go.mod" {
			continue
		}
		want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.path)))
		if err != nil || !bytes.Equal(want, f.data) {
			t.Errorf("%s differs from the checkout (%v)", f.path, err)
		}
	}
}
