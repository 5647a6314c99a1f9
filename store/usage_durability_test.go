package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// usageChildDirEnv, when set, turns TestUsageSurvivesSIGKILL into the child
// process that adds usage totals into that directory.
const usageChildDirEnv = "SLUICE_STORE_TEST_USAGE_CHILD_DIR"

// usageDay is the day of the totals the durability tests add.
const usageDay = "2026-03-01"

// TestUsageSurvivesSIGKILL: usage totals that AddUsage and AddUsages
// acknowledged are in the store after the process is killed with SIGKILL,
// with no later write to carry them to disk (README: a crash loses at most
// the counts not yet flushed). The child adds the totals, says so, and idles
// until the parent kills it; an unsynced write would still sit in the
// child's WAL buffer then, and be lost with it.
func TestUsageSurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv(usageChildDirEnv); dir != "" {
		usageDurabilityChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestUsageSurvivesSIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), usageChildDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := false
	sc := bufio.NewScanner(stdout)
	for !acked && sc.Scan() {
		acked = sc.Text() == "ack"
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	if !acked {
		t.Fatal("the child never acknowledged its usage")
	}

	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	got, err := s.Usage(ctx, "", usageDay, usageDay)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]UsageRecord{}
	for _, u := range got {
		byKey[u.Key] = u
	}
	for key, want := range map[string]int64{"single": 1, "batch-a": 2, "batch-b": 1} {
		if u := byKey[key]; u.Requests != want || u.InputTokens != 10*want {
			t.Errorf("key %s after SIGKILL: %+v, want %d requests", key, u, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("totals after SIGKILL: %+v, want 3", got)
	}
}

// usageDurabilityChild adds the totals TestUsageSurvivesSIGKILL looks for,
// prints "ack", and waits to be killed.
func usageDurabilityChild(dir string) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	rec := func(key string) UsageRecord {
		return UsageRecord{Day: usageDay, Key: key, Route: "r", Target: "t", Model: "m", Requests: 1, InputTokens: 10}
	}
	if err := s.AddUsage(ctx, rec("single")); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	if err := errors.Join(s.AddUsages(ctx, "", []UsageRecord{rec("batch-a"), rec("batch-b"), rec("batch-a")})...); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Println("ack")
	time.Sleep(time.Minute)
	os.Exit(3) // not reached when the parent kills the child in time
}

// TestAddUsagesKeepsEachRecordsOutcome: a record the store refuses is left
// out with ErrInvalid, a stored total it cannot read with ErrCorrupt, and
// the other records of the call are added all the same.
func TestAddUsagesKeepsEachRecordsOutcome(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	rec := func(key, model string) UsageRecord {
		return UsageRecord{Day: usageDay, Key: key, Model: model, Requests: 1, OutputTokens: 5}
	}
	corrupt := rec("k", "corrupt")
	corrupt.Day = "2026-03-02" // Usage of usageDay does not read it
	if err := s.db.Set(usageKey(corrupt), []byte("{not json"), nil); err != nil {
		t.Fatal(err)
	}
	errs := s.AddUsages(ctx, "", []UsageRecord{rec("k", "a"), rec("k", "bad\x00model"), corrupt, rec("k", strings.Repeat("m", 257)), rec("k", "a")})
	for i, want := range []error{nil, ErrInvalid, ErrCorrupt, ErrInvalid, nil} {
		if (want == nil && errs[i] != nil) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("record %d: %v, want %v", i, errs[i], want)
		}
	}
	got, err := s.Usage(ctx, "k", usageDay, usageDay)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Model != "a" || got[0].Requests != 2 || got[0].OutputTokens != 10 {
		t.Fatalf("totals: %+v, want model a with 2 requests", got)
	}

	// A closed store fails every record that was not refused already.
	_ = s.Close()
	errs = s.AddUsages(ctx, "", []UsageRecord{rec("k", "a"), rec("k", "bad\x00model")})
	if !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[1], ErrInvalid) {
		t.Fatalf("on a closed store: %v", errs)
	}
}
