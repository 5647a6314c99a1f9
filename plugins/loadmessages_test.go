package plugins

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRejectionNamesTheCause: a module refused at load is told what is
// wrong in the terms it is written in: the missing export by name, the
// unknown import by module and function (with AssemblyScript's flag for
// env.abort), and _initialize's type by the export check the other exports
// get rather than a call error.
func TestRejectionNamesTheCause(t *testing.T) {
	cases := []struct {
		fixture string
		want    []string
		notWant string
	}{
		{"noalloc", []string{"missing export sluice_alloc"}, "init:"},
		{"envabort", []string{`imports env.abort from unknown module "env"`, "--use abort="}, ""},
		{"badimport", []string{"imports unknown host function sluice.nope"}, "--use abort="},
		{"initparam", []string{"export _initialize has type (i32)->(), the ABI wants ()->()"}, "init:"},
		{"initsig", []string{"export _initialize has type"}, ""},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			r := newRuntime(t, Options{Embedded: map[string][]byte{c.fixture + ".wasm": fixture(t, c.fixture)}})
			st, ok := statusOf(r, c.fixture)
			if !ok || st.State != StateRejected {
				t.Fatalf("not rejected: %+v", st)
			}
			for _, w := range c.want {
				if !strings.Contains(st.LastError, w) {
					t.Errorf("last_error %q, want %q in it", st.LastError, w)
				}
			}
			if c.notWant != "" && strings.Contains(st.LastError, c.notWant) {
				t.Errorf("last_error %q has %q", st.LastError, c.notWant)
			}
		})
	}
}

// lockedBuffer is a log output read while the runtime may write to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSkippedDirectorySaysDirectory: a directory named like a policy is
// skipped with a warning that says it is a directory, not a mode string
// whose permission bits are all dashes.
func TestSkippedDirectorySaysDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "26-dir.wasm"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	newRuntime(t, Options{PolicyDir: dir, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})})
	out := logs.String()
	if !strings.Contains(out, "policy file skipped") || !strings.Contains(out, "a directory, not a regular file") || strings.Contains(out, "d---------") {
		t.Fatalf("log:\n%s", out)
	}
}

// TestConfigRefusalIsThePolicys: only a load failure of the policy's own
// code run with its config (_initialize, sluice_hooks, the self-test) is a
// refusal of its config (PolicyStatus.ConfigRefusal, on which `sluice
// serve` refuses to start); a file the host cannot load is not.
func TestConfigRefusalIsThePolicys(t *testing.T) {
	cases := map[string]bool{
		"selftest_fail": true,
		"inittrap":      true,
		"badabi":        false,
		"badimport":     false,
		"noalloc":       false,
	}
	emb := map[string][]byte{"notwasm.wasm": []byte("#!/bin/sh\n")}
	for name := range cases {
		emb[name+".wasm"] = fixture(t, name)
	}
	r := newRuntime(t, Options{Embedded: emb})
	cases["notwasm"] = false
	for name, refused := range cases {
		st, ok := statusOf(r, name)
		if !ok || st.State != StateRejected {
			t.Fatalf("%s not rejected: %+v", name, st)
		}
		if got := st.ConfigRefusal != ""; got != refused || refused && st.ConfigRefusal != st.LastError {
			t.Errorf("%s: config refusal %q (last_error %q), want refused=%v", name, st.ConfigRefusal, st.LastError, refused)
		}
	}
}
