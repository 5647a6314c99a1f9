package plugins

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestSymlinkTargetOutsideDirHotSwaps: a policy file that is a symlink to a
// file outside the policy directory is swapped when its target is replaced
// or rewritten, unloaded when the target is deleted and loaded again when
// it is back, with nothing else happening in the directory (README
// "Policies").
func TestSymlinkTargetOutsideDirHotSwaps(t *testing.T) {
	root := t.TempDir()
	dir, real := filepath.Join(root, "policies.d"), filepath.Join(root, "real")
	for _, d := range []string{dir, real} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v1, v2 := fixture(t, "recover_v1"), fixture(t, "recover_v2")
	write(t, real, "t.wasm", v1)
	if err := os.Symlink(filepath.Join("..", "real", "t.wasm"), filepath.Join(dir, "10-my.wasm")); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: 20 * time.Millisecond})
	serving := func(b []byte) func() bool {
		return func() bool {
			st, ok := statusOf(r, "10-my")
			return ok && st.SHA256 == shaOf(b) && st.State == StateActive
		}
	}
	if !serving(v1)() {
		t.Fatalf("the link is not loaded at start: %+v", r.Status())
	}

	writeAtomic(t, real, "t.wasm", v2) // replaced by a rename, as a deploy does
	waitFor(t, serving(v2))
	if out := r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Code != "from_v2" {
		t.Fatalf("after the target was replaced: %+v", out)
	}

	write(t, real, "t.wasm", v1) // rewritten in place
	waitFor(t, serving(v1))

	if err := os.Remove(filepath.Join(real, "t.wasm")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := statusOf(r, "10-my"); return !ok })

	writeAtomic(t, real, "t.wasm", v2) // the dangling link resolves again
	waitFor(t, serving(v2))
}
