package plugins

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// servesSHA reports whether policy name is active with the module b.
func servesSHA(r *Runtime, name string, b []byte) bool {
	st, ok := statusOf(r, name)
	return ok && st.State == StateActive && st.SHA256 == shaOf(b)
}

// stuckLimit is the load limit of tests whose looping file is stopped by
// the runtime (superseded, or closed) rather than by the limit: far longer
// than the test, but finite, so that a runtime that serialized loads fails
// the test instead of hanging it.
const stuckLimit = 30 * time.Second

// loading reports whether the file of policy name last seen in PolicyDir
// is being loaded: neither served nor refused yet. It does not wait for
// r.mu (false when it is held): a load holding it is the bug tests look for.
func loading(r *Runtime, name string) bool {
	if !r.mu.TryLock() {
		return false
	}
	defer r.mu.Unlock()
	e := r.entries[name]
	return e != nil && e.fileSHA != "" && e.rejectedSHA != e.fileSHA && (e.cur == nil || e.cur.comp.sha != e.fileSHA)
}

// TestStuckLoadDoesNotHoldUpOtherFiles: two files renamed into place
// together, one whose _initialize loops (the load limit is an hour here):
// the other is swapped in while the first is still loading, which shows in
// no status yet.
func TestStuckLoadDoesNotHoldUpOtherFiles(t *testing.T) {
	dir := t.TempDir()
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, initTimeout: time.Hour})
	good := fixture(t, "recover_v1")
	write(t, dir, "a-slow.wasm", fixture(t, "init_loop"))
	write(t, dir, "b-good.wasm", good)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Reload(ctx) }()
	waitFor(t, func() bool { return servesSHA(r, "b-good", good) })
	if st, ok := statusOf(r, "a-slow"); ok || !loading(r, "a-slow") {
		t.Fatalf("the looping file is not still loading (status %+v, %v)", st, ok)
	}
	if out, tr := r.RecoverTrace(context.Background(), hostabi.RecoverInput{Code: "x"}); out.Verdict != hostabi.RecoverRecover || tr.Policy != "b-good" {
		t.Fatalf("the file loaded meanwhile does not answer: %+v %+v", out, tr)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWatcherLoadsFilesWhileOneIsStuck: the watcher goes on loading files
// renamed into place while an earlier file's _initialize loops.
func TestWatcherLoadsFilesWhileOneIsStuck(t *testing.T) {
	dir := t.TempDir()
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: 10 * time.Millisecond, initTimeout: stuckLimit})
	good := fixture(t, "recover_v1")
	writeAtomic(t, dir, "06-init.wasm", fixture(t, "init_loop"))
	waitFor(t, func() bool { return loading(r, "06-init") })
	writeAtomic(t, dir, "07-ok.wasm", good)
	waitFor(t, func() bool { return servesSHA(r, "07-ok", good) })
	if !loading(r, "06-init") {
		t.Fatalf("the looping file is no longer loading: %+v", r.Status())
	}
}

// TestSameNameSwapsInFileOrder: a newer file of a name renamed into place
// while the older one is still loading is what serves, and stays so once
// the older one's load ends (it is stopped, as nothing would serve it):
// one name's swaps follow the order of its files.
func TestSameNameSwapsInFileOrder(t *testing.T) {
	dir := t.TempDir()
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, initTimeout: stuckLimit})
	newer := fixture(t, "recover_v1")
	write(t, dir, "p.wasm", fixture(t, "init_loop"))
	first := make(chan error, 1)
	go func() { first <- r.Reload(context.Background()) }()
	waitFor(t, func() bool { return loading(r, "p") })
	write(t, dir, "p.wasm", newer)
	second := make(chan error, 1)
	go func() { second <- r.Reload(context.Background()) }()
	for _, c := range []chan error{first, second} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	st, _ := statusOf(r, "p")
	if st.SHA256 != shaOf(newer) || st.State != StateActive || st.Rejected != "" || st.LastError != "" || st.Version != 1 {
		t.Fatalf("after both loads ended: %+v", st)
	}
	if n := counterValue(t, r, "sluice_policy_swaps_total", map[string]string{"policy": "p"}); n != 1 {
		t.Fatalf("swaps = %v, want 1 (the newer file only)", n)
	}
	if n := counterValue(t, r, "sluice_policy_rejections_total", map[string]string{"policy": "p"}); n != 0 {
		t.Fatalf("rejections = %v: the superseded file was not refused, only not served", n)
	}
}

// TestLoadLimitNamedInRejection: a module stopped by the load-time limit
// is rejected with a message naming what ran past which limit.
func TestLoadLimitNamedInRejection(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{
		"init_loop.wasm":     fixture(t, "init_loop"),
		"selftest_loop.wasm": fixture(t, "selftest_loop"),
	}, initTimeout: 200 * time.Millisecond})
	for name, want := range map[string]string{
		"init_loop":     "_initialize ran past the 200ms limit",
		"selftest_loop": "sluice_self_test ran past the 200ms limit it shares with _initialize",
	} {
		st, ok := statusOf(r, name)
		if !ok || st.State != StateRejected || !strings.Contains(st.LastError, want) {
			t.Errorf("%s: want a rejection saying %q, got %+v", name, want, st)
		}
	}
}

// TestNeverLoadedFileStatus: a policy_dir file refused with no version of
// its name ever served shows in GET /admin/policies as from the dir, with
// no hooks ([]) and no loaded_at (README, Admin API).
func TestNeverLoadedFileStatus(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "09-nw.wasm", []byte("#!/bin/sh\necho hi\n"))
	write(t, dir, "09-big.wasm", fixture(t, "recover_v1")) // 2 pages of memory, over the 1-page limit
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, MemoryLimitPages: 1})
	for _, name := range []string{"09-nw", "09-big"} {
		st, ok := statusOf(r, name)
		if !ok {
			t.Fatalf("%s: no status", name)
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		hooks, isList := got["hooks"].([]any)
		_, hasLoadedAt := got["loaded_at"]
		if got["source"] != SourceDir || !isList || len(hooks) != 0 || hasLoadedAt || got["state"] != StateRejected ||
			got["last_error"] == "" {
			t.Errorf("%s: %s", name, b)
		}
	}
}
