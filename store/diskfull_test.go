package store

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/hashicorp/go-hclog"
)

// fullDisk is the operating system's file system, except that while full is
// set every write, creation and preallocation fails with ENOSPC, as on a data
// dir whose disk has filled up (removing files still works there).
func fullDisk(full *atomic.Bool) vfs.FS {
	return errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !full.Load() {
			return nil
		}
		switch op {
		case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate, errorfs.OpReuseForRewrite:
			return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
		}
		return nil
	}))
}

// bounded runs call and fails the test if it has not returned within a
// minute: a call into a failed store must not hang.
func bounded[T any](t *testing.T, what string, call func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- call() }()
	select {
	case v := <-done:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s hangs on a failed store", what)
		panic("unreachable")
	}
}

// TestFullDiskFailsTheStoreNotTheProcess: when the data dir's disk fills
// while the store runs, the write that hits it returns an error (Pebble's
// fatal commit error used to panic the whole gateway), every later call
// fails at once with ErrUnavailable, Health says so, and once the disk has
// room again the store reopens itself and takes writes (docs/ARCHITECTURE.md
// §7, README "Continuity").
func TestFullDiskFailsTheStoreNotTheProcess(t *testing.T) {
	var full atomic.Bool
	var logs syncBuffer
	s, _ := openTest(t, func(o *Options) {
		o.fs = fullDisk(&full)
		o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})
	})
	ctx := context.Background()
	before := anchor("resp_before", "primary", "sess-1")
	wantErr(t, "PutAnchor before the disk fills", s.PutAnchor(ctx, before), nil)
	if err := s.Health(); err != nil {
		t.Fatalf("Health of a working store: %v", err)
	}

	full.Store(true)
	err := bounded(t, "PutAnchor on a full disk", func() error { return s.PutAnchor(ctx, anchor("resp_full", "primary", "sess-1")) })
	wantErr(t, "PutAnchor on a full disk", err, ErrUnavailable)
	if !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("the error does not say why: %v", err)
	}
	calls := map[string]func() error{
		"PutAnchor": func() error { return s.PutAnchor(ctx, anchor("resp_later", "primary", "sess-2")) },
		"GetAnchor": func() error { _, err := s.GetAnchor(ctx, before.ResponseID); return err },
		"GetScope":  func() error { _, err := s.GetScope(ctx, ScopeSession, "sess-1"); return err },
		"DeleteAnchor": func() error {
			return s.DeleteAnchor(ctx, before.ResponseID)
		},
		"Sweep": func() error { _, err := s.Sweep(ctx, time.Now()); return err },
		"AddUsages": func() error {
			return errors.Join(s.AddUsages(ctx, "", []UsageRecord{{Key: "k", Day: "2026-03-01", Requests: 1}})...)
		},
	}
	for name, call := range calls {
		wantErr(t, name+" on the failed store", bounded(t, name, call), ErrUnavailable)
	}
	if err := s.Health(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Health of the failed store = %v, want ErrUnavailable", err)
	} else if errors.Is(err, ErrUnavailableUntilRestart) {
		t.Errorf("a full disk is unavailable until restart (%v); it reopens once the disk takes writes", err)
	}
	if l := logs.String(); !strings.Contains(l, "[ERROR] store: store failed") || !strings.Contains(l, "Free space") {
		t.Errorf("no ERROR line telling the operator what happened and what to do:\n%s", l)
	}

	full.Store(false)
	deadline := time.Now().Add(time.Minute)
	for s.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store was not reopened after the disk had room again: %v\n%s", s.Health(), logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := s.GetAnchor(ctx, before.ResponseID)
	wantErr(t, "GetAnchor after the reopen", err, nil)
	if got.Upstream != before.Upstream {
		t.Fatalf("anchor written before the failure reads back as %+v", got)
	}
	after := anchor("resp_after", "secondary", "sess-3")
	wantErr(t, "PutAnchor after the reopen", s.PutAnchor(ctx, after), nil)
	_, err = s.GetAnchor(ctx, after.ResponseID)
	wantErr(t, "GetAnchor of a write after the reopen", err, nil)
	if !strings.Contains(logs.String(), "store reopened") {
		t.Errorf("the reopen is not logged:\n%s", logs.String())
	}
}

// TestPebbleFatalOnItsOwnGoroutine: a fatal error Pebble raises on one of
// its background goroutines (a MANIFEST write of a flush on a full disk)
// ends that goroutine only, and fails the store, rather than the process.
func TestPebbleFatalOnItsOwnGoroutine(t *testing.T) {
	var logs syncBuffer
	var failed atomic.Pointer[error]
	p := pebbleLogger{
		l:       hclog.New(&hclog.LoggerOptions{Output: &logs}),
		onFatal: func(err error) { failed.Store(&err) },
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		p.Fatalf("MANIFEST sync failed: %v", syscall.ENOSPC)
		t.Error("Fatalf returned to Pebble")
	}()
	<-ended
	if errp := failed.Load(); errp == nil || !strings.Contains((*errp).Error(), "MANIFEST sync failed") {
		t.Fatalf("the store was not told: %v", errp)
	}
	if !strings.Contains(logs.String(), "pebble fatal error") {
		t.Fatalf("not logged:\n%s", logs.String())
	}
}
