package policycli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckAndTestRefuseAPolicyThatIsNoRegularFile: check and test refuse a
// *.wasm that is a FIFO (or a directory) at once, naming what it is, as the
// gateway skips one in policy_dir: opening a FIFO for reading would block
// the command for good.
func TestCheckAndTestRefuseAPolicyThatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "10-pipe.wasm")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	events := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(events, []byte(`{"hook":"replay","input":{"code":"rate_limit_exceeded"}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", fifo}, {"test", fifo, "-events", events}, {"check", t.TempDir()}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out, errb bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- Run(ctx, Options{}, args, &out, &errb) }()
		select {
		case code := <-done:
			if code == 0 || !strings.Contains(errb.String(), "not a regular file") {
				t.Errorf("%v: exit %d, stderr %q; want a refusal naming it not a regular file", args, code, errb.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: still running after 20s (blocked opening it)", args)
		}
		cancel()
	}
}
