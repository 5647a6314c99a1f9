package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRedisCloseInputSessionLeavesWhy: a session closed with a reason is
// gone like a deleted one (ErrNotFound), and every read or append of it
// says why; a deleted one says nothing more.
func TestRedisCloseInputSessionLeavesWhy(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	for _, id := range []string{"closed1", "deleted1"} {
		if err := s.CreateInputSession(ctx, InputSession{ID: id, State: "open+started"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendResult(ctx, id, 0, ResultPart{Kind: ResultHead, Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseInputSession(ctx, "closed1", []byte(`{"code":"payload_too_large"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInputSession(ctx, "deleted1"); err != nil {
		t.Fatal(err)
	}
	_, getErr := s.GetInputSession(ctx, "closed1")
	appendErr := s.AppendResult(ctx, "closed1", 1, ResultPart{Kind: ResultEnd})
	for name, err := range map[string]error{"get": getErr, "append": appendErr} {
		var ce *InputSessionClosedError
		if !errors.Is(err, ErrNotFound) || !errors.As(err, &ce) || string(ce.Reason) != `{"code":"payload_too_large"}` {
			t.Fatalf("%s of a closed session: %v", name, err)
		}
	}
	if _, err := s.Chunks(ctx, "closed1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("chunks of a closed session: %v", err)
	}
	_, getErr = s.GetInputSession(ctx, "deleted1")
	appendErr = s.AppendResult(ctx, "deleted1", 1, ResultPart{Kind: ResultEnd})
	for name, err := range map[string]error{"get": getErr, "append": appendErr} {
		var ce *InputSessionClosedError
		if !errors.Is(err, ErrNotFound) || errors.As(err, &ce) {
			t.Fatalf("%s of a deleted session: %v", name, err)
		}
	}
}
