package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/go-hclog"
)

// writeTable writes n keys in the stream-event family straight into db and
// flushes them to a table of their own (in L0; tables written this way
// overlap, so each is a sublevel). The keys all sort before the schema key,
// so the table is not read when the store opens.
func writeTable(t *testing.T, db *pebble.DB, n int) {
	t.Helper()
	for i := range n {
		key := fmt.Appendf([]byte{famStreamEvent}, "%06d", i)
		if err := db.Set(key, []byte(strings.Repeat("v", 100)), nil); err != nil {
			t.Fatalf("Set: %v", err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// corruptLargestTable damages the largest table (.sst) in dir as a bad disk
// does: the first half of its bytes XORed with 0x5a, its size kept.
func corruptLargestTable(t *testing.T, dir string) string {
	t.Helper()
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil || len(tables) == 0 {
		t.Fatalf("no table in %s (%v)", dir, err)
	}
	var largest string
	var size int64 = -1
	for _, p := range tables {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > size {
			largest, size = p, fi.Size()
		}
	}
	b, err := os.ReadFile(largest)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(b) / 2 {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(largest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(largest)
}

// reopenDamaged opens the store in dir, whose table was damaged, logging
// into the buffer it returns: the damage does not keep it from opening
// healthy.
func reopenDamaged(t *testing.T, dir string) (*PebbleStore, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	s, _ := openTest(t, func(o *Options) {
		o.Dir = dir
		o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	})
	if err := s.Health(); err != nil {
		t.Fatalf("Health right after the open: %v", err)
	}
	return s, logs
}

// TestCorruptTableFailsTheStoreAndLogsBounded: a table damaged on disk does
// not keep the database from opening, but the first compaction that reads
// it fails, and Pebble retries it at once and without end. The store must
// report itself unavailable (Health feeds /readyz and sluice_store_up),
// refuse calls, tell the operator what to do, and log the repeating error a
// bounded number of times (README "Continuity": once every 10 s with a
// count), not once per retry.
func TestCorruptTableFailsTheStoreAndLogsBounded(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, _ := openTest(t, func(o *Options) { o.Dir = dir })
	wantErr(t, "PutAnchor", s.PutAnchor(ctx, anchor("resp_1", "primary", "sess-1")), nil)
	if err := s.db.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	writeTable(t, s.db, 2000) // the largest table: the one damaged
	writeTable(t, s.db, 10)
	wantErr(t, "Close", s.Close(), nil)
	table := corruptLargestTable(t, dir)

	s2, logs := reopenDamaged(t, dir)
	// A fourth table in L0 makes Pebble compact them, reading the damaged
	// one.
	writeTable(t, s2.db, 10)

	deadline := time.Now().Add(time.Minute)
	for s2.Health() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store still reports itself healthy with table %s damaged; log:\n%.3000s", table, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := s2.Health()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("Health = %v, want ErrUnavailable saying what is damaged", err)
	}
	_, err = s2.GetAnchor(ctx, "resp_1")
	wantErr(t, "GetAnchor on the corrupt store", err, ErrUnavailable)

	// Without the fix Pebble's retries wrote thousands of ERROR lines
	// within this window.
	time.Sleep(time.Second)
	l := logs.String()
	if n := strings.Count(l, "[ERROR]"); n > 5 {
		t.Errorf("%d ERROR lines within about a second; want a few:\n%.3000s", n, l)
	}
	if !strings.Contains(l, "[ERROR] store: store failed: a file of the database is damaged") || !strings.Contains(l, "restore the data dir from a backup") {
		t.Errorf("no ERROR line telling the operator what happened and what to do:\n%.3000s", l)
	}
	if err := s2.Health(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("the corrupt store came back: Health = %v", err)
	}
}

// TestCorruptTableMetByAReadFailsTheStore: a damaged table that no
// background job reads (one table, nothing to compact) is met by a call
// that reads it. That call's corruption error fails the store as the
// background job's does: Health says so (/readyz, sluice_store_up), the
// operator is told what to do, and the store does not answer as if the
// fault would clear.
func TestCorruptTableMetByAReadFailsTheStore(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, _ := openTest(t, func(o *Options) { o.Dir = dir })
	for i := range 3000 {
		wantErr(t, "PutAnchor", s.PutAnchor(ctx, anchor(fmt.Sprintf("resp_%06d", i), "primary", "sess-1")), nil)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	wantErr(t, "Close", s.Close(), nil)
	table := corruptLargestTable(t, dir)

	s2, logs := reopenDamaged(t, dir)
	var err error
	for i := 0; i < 3000 && err == nil; i += 100 {
		_, err = s2.GetAnchor(ctx, fmt.Sprintf("resp_%06d", i))
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("reading the anchors of damaged table %s: %v, want ErrUnavailable", table, err)
	}
	if h := s2.Health(); !errors.Is(h, ErrUnavailable) || !pebble.IsCorruptionError(h) {
		t.Errorf("Health = %v, want the store failed by the corruption", h)
	}
	if !errors.Is(err, ErrUnavailableUntilRestart) {
		// What a caller tells its client depends on it: no "retry" for a
		// store no wait brings back.
		t.Errorf("the read's error %v is not unavailable until restart", err)
	}
	if !strings.Contains(logs.String(), "a file of the database is damaged") {
		t.Errorf("no ERROR line telling the operator what to do:\n%.3000s", logs.String())
	}
}

// TestClientRetryAfter: a client is told to wait only for a store that a
// wait can bring back.
func TestClientRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"redis down", fmt.Errorf("get: %w", ErrUnavailable), UnavailableRetryAfter},
		{"a store error that says nothing more", errors.New("disk on fire"), UnavailableRetryAfter},
		{"damaged file", untilRestart{fmt.Errorf("x: %w", ErrUnavailable)}, 0},
	} {
		if got := ClientRetryAfter(tt.err); got != tt.want {
			t.Errorf("%s: ClientRetryAfter = %v, want %v", tt.name, got, tt.want)
		}
	}
}
