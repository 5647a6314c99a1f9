package plugins

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestABIWATExampleWorks: the WAT module in hostabi/ABI.md §11 is complete
// as printed (an author with only the ABI.md that `sluice policy new`
// writes copies it): it assembles with wabt's wat2wasm, loads with its
// self-test, recovers its code and defers the rest.
func TestABIWATExampleWorks(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "hostabi", "ABI.md"))
	if err != nil {
		t.Fatal(err)
	}
	wat := abiSectionWAT(t, string(doc), "## 11. ")
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		if ci := os.Getenv("CI"); ci != "" && ci != "0" && ci != "false" {
			t.Fatal("wat2wasm (wabt) is not installed; .ci/run installs it")
		}
		t.Skip("wat2wasm (wabt) is not installed")
	}
	dir := t.TempDir()
	src, wasm := filepath.Join(dir, "recover.wat"), filepath.Join(dir, "05-abi-example.wasm")
	write(t, dir, "recover.wat", []byte(wat))
	if out, err := exec.Command(wat2wasm, src, "-o", wasm).CombinedOutput(); err != nil {
		t.Fatalf("ABI.md §11's module does not assemble: %v\n%s\n%s", err, out, wat)
	}
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Options{Embedded: map[string][]byte{"05-abi-example.wasm": b}})
	st := r.Status()
	if len(st) != 1 || st[0].State != StateActive || strings.Join(st[0].Hooks, ",") != "recover,self_test" {
		t.Fatalf("ABI.md §11's module did not load with its self-test: %+v", st)
	}
	ctx := context.Background()
	out, tr := r.RecoverTrace(ctx, hostabi.RecoverInput{Surface: "chat_json", Upstream: "u", Code: "upstream_context_lost"})
	if out.Verdict != hostabi.RecoverRecover || out.Code != "context_lost_upstream" || tr.Policy != "05-abi-example" {
		t.Fatalf("its code: %+v %+v", out, tr)
	}
	if _, tr = r.RecoverTrace(ctx, hostabi.RecoverInput{Surface: "chat_json", Upstream: "u", Code: "other"}); len(tr.Steps) != 1 || tr.Steps[0].Outcome != "defer" {
		t.Fatalf("another code: %+v, want deferred", tr)
	}
}

// abiSectionWAT is the one ```wat block of the section of doc whose
// heading starts with heading.
func abiSectionWAT(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		t.Fatalf("ABI.md has no section %q", heading)
	}
	section := doc[i+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	_, rest, ok := strings.Cut(section, "```wat\n")
	wat, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed || strings.Contains(rest[len(wat):], "```wat") {
		t.Fatalf("section %q does not hold exactly one ```wat block", heading)
	}
	return wat + "\n"
}
