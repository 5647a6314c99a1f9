package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The SharedStreamLogStore contract: what a store that replicas share adds
// to StreamLogStore (the replica running a response and the others reach
// each other through it). Run against every backend that implements it.

func forEachSharedBackend(t *testing.T, f func(t *testing.T, s SharedStreamLogStore, clk *fakeClock)) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, clk := b.open(t)
		sh, ok := s.(SharedStreamLogStore)
		if !ok {
			t.Skipf("%s is not shared by replicas", b.name)
		}
		f(t, sh, clk)
	})
}

func putLog(t *testing.T, s StreamLogStore, id string, expires time.Time) {
	t.Helper()
	if err := s.PutStreamLog(context.Background(), StreamLog{ResponseID: id, Status: "in_progress", ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
}

// TestSharedStreamLogDeleteLeavesATombstone: a deleted record is not
// written back by the replica still running it (PutStreamLogUnlessDeleted,
// AppendStreamEvents), which tells it apart from a record the store lost;
// a new PutStreamLog starts afresh.
func TestSharedStreamLogDeleteLeavesATombstone(t *testing.T) {
	forEachSharedBackend(t, func(t *testing.T, s SharedStreamLogStore, clk *fakeClock) {
		ctx := context.Background()
		putLog(t, s, "r", clk.Now().Add(time.Hour))
		wantErr(t, "append", s.AppendStreamEvents(ctx, "r", 0, []StreamEvent{{Name: "a"}}), nil)
		wantErr(t, "delete", s.DeleteStreamLog(ctx, "r"), nil)
		wantErr(t, "delete again", s.DeleteStreamLog(ctx, "r"), nil)

		_, err := s.GetStreamLog(ctx, "r")
		wantErr(t, "get deleted", err, ErrStreamLogDeleted)
		wantErr(t, "get deleted (a miss)", err, ErrNotFound)
		rewrite := StreamLog{ResponseID: "r", Status: "completed", Ended: true, ExpiresAt: clk.Now().Add(time.Hour)}
		wantErr(t, "put unless deleted", s.PutStreamLogUnlessDeleted(ctx, rewrite), ErrStreamLogDeleted)
		wantErr(t, "append deleted", s.AppendStreamEvents(ctx, "r", 1, []StreamEvent{{Name: "b"}}), ErrStreamLogDeleted)
		wantErr(t, "follow deleted", s.FollowStreamLog(ctx, "r", clk.Now().Add(time.Minute)), ErrStreamLogDeleted)
		_, err = s.StreamEvents(ctx, "r", -1, 0)
		wantErr(t, "events deleted", err, ErrNotFound)
		if left := streamKeysLeft(t, s.(contractStore), "r"); left != 0 {
			t.Fatalf("%d parts of a deleted log left", left)
		}

		// A new record of the id replaces the tombstone.
		putLog(t, s, "r", clk.Now().Add(time.Hour))
		if got, err := s.GetStreamLog(ctx, "r"); err != nil || got.Status != "in_progress" {
			t.Fatalf("a new record after a delete: %+v, %v", got, err)
		}
		wantErr(t, "put unless deleted, recreated", s.PutStreamLogUnlessDeleted(ctx, rewrite), nil)
		if evs, err := s.StreamEvents(ctx, "r", -1, 0); err != nil || len(evs) != 0 {
			t.Fatalf("events of the new record: %v, %v", evs, err)
		}

		// A record that is absent without a delete (the store lost it) is a
		// plain miss, and is written again.
		_, err = s.GetStreamLog(ctx, "lost")
		if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStreamLogDeleted) {
			t.Fatalf("get of a record never written: %v", err)
		}
		if err := s.AppendStreamEvents(ctx, "lost", 0, []StreamEvent{{Name: "a"}}); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStreamLogDeleted) {
			t.Fatalf("append of a record never written: %v", err)
		}
		wantErr(t, "put unless deleted, lost", s.PutStreamLogUnlessDeleted(ctx, StreamLog{ResponseID: "lost", ExpiresAt: clk.Now().Add(time.Hour)}), nil)
		if _, err := s.GetStreamLog(ctx, "lost"); err != nil {
			t.Fatalf("a lost record written again: %v", err)
		}
		// Deleting an absent record leaves nothing to refuse.
		wantErr(t, "delete absent", s.DeleteStreamLog(ctx, "never"), nil)
		wantErr(t, "put unless deleted, never", s.PutStreamLogUnlessDeleted(ctx, StreamLog{ResponseID: "never", ExpiresAt: clk.Now().Add(time.Hour)}), nil)
	})
}

// TestSharedStreamLogFollowAndSavedAt: the follow mark keeps the latest
// time and survives puts; SavedAt is the store's clock at the last put.
func TestSharedStreamLogFollowAndSavedAt(t *testing.T) {
	forEachSharedBackend(t, func(t *testing.T, s SharedStreamLogStore, clk *fakeClock) {
		ctx := context.Background()
		putLog(t, s, "r", t0.Add(time.Hour))
		check := func(what string, saved, followed time.Time) {
			t.Helper()
			got, err := s.GetStreamLog(ctx, "r")
			if err != nil || !got.SavedAt.Equal(saved) || !got.FollowedUntil.Equal(followed) {
				t.Fatalf("%s: %+v, %v; want SavedAt %v, FollowedUntil %v", what, got, err, saved, followed)
			}
		}
		check("after a put", t0, time.Time{})
		clk.Advance(time.Minute)
		wantErr(t, "follow", s.FollowStreamLog(ctx, "r", t0.Add(10*time.Minute)), nil)
		check("followed", t0, t0.Add(10*time.Minute))
		wantErr(t, "follow, earlier", s.FollowStreamLog(ctx, "r", t0.Add(5*time.Minute)), nil)
		check("an earlier mark", t0, t0.Add(10*time.Minute))
		putLog(t, s, "r", t0.Add(time.Hour))
		check("put again", t0.Add(time.Minute), t0.Add(10*time.Minute))
		wantErr(t, "follow, later", s.FollowStreamLog(ctx, "r", t0.Add(20*time.Minute)), nil)
		check("a later mark", t0.Add(time.Minute), t0.Add(20*time.Minute))

		wantErr(t, "follow absent", s.FollowStreamLog(ctx, "nope", t0.Add(time.Hour)), ErrNotFound)
		clk.Advance(time.Hour)
		wantErr(t, "follow expired", s.FollowStreamLog(ctx, "r", clk.Now().Add(time.Hour)), ErrNotFound)
		wantErr(t, "follow invalid", s.FollowStreamLog(ctx, "", t0), ErrInvalid)
	})
}

// TestRedisStreamLogTombstoneExpires: a tombstone lives as long as its
// record would have, no longer.
func TestRedisStreamLogTombstoneExpires(t *testing.T) {
	url := redisServer(t).URL
	s, _ := openRedisTestOn(t, url, func(o *Options) { o.Now = nil })
	ctx := context.Background()
	raw := rawClient(t, url)
	putLog(t, s, "r1", time.Now().Add(time.Hour))
	putLog(t, s, "r2", time.Now().Add(300*time.Millisecond))
	wantErr(t, "delete r1", s.DeleteStreamLog(ctx, "r1"), nil)
	wantErr(t, "delete r2", s.DeleteStreamLog(ctx, "r2"), nil)
	if ttl := raw.PTTL(ctx, s.streamLogDeletedKey("r1")).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("the tombstone of a record that had an hour left expires in %v", ttl)
	}
	time.Sleep(500 * time.Millisecond)
	if n := raw.Exists(ctx, s.streamLogDeletedKey("r2")).Val(); n != 0 {
		t.Error("a tombstone outlived its record's expiry")
	}
	if _, err := s.GetStreamLog(ctx, "r2"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStreamLogDeleted) {
		t.Errorf("GetStreamLog after the tombstone expired: %v", err)
	}
}
