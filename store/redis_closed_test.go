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

// TestRedisFirstCloseStandsAndKeepsTheAnswer: the first close of a session
// stands (a later close or delete is told it, and does not replace it), and
// the answer's parts outlive the record: the replica running the answer
// still appends its end, told the session closed, and readers read it all.
func TestRedisFirstCloseStandsAndKeepsTheAnswer(t *testing.T) {
	s, _ := openRedisTest(t)
	ctx := context.Background()
	if err := s.CreateInputSession(ctx, InputSession{ID: "c1", State: "open+started"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendResult(ctx, "c1", 0, ResultPart{Kind: ResultHead, Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseInputSession(ctx, "c1", []byte(`{"reason":"deleted"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	var ce *InputSessionClosedError
	err := s.CloseInputSession(ctx, "c1", []byte(`{"reason":"too_large"}`), time.Minute)
	if !errors.As(err, &ce) || string(ce.Reason) != `{"reason":"deleted"}` || ce.Appended {
		t.Fatalf("a second close: %v; want the first close's reason", err)
	}
	if err := s.DeleteInputSession(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []ResultPart{{ResultData, []byte("data: x\n\n")}, {ResultEnd, nil}} {
		err := s.AppendResult(ctx, "c1", int64(i+1), p)
		if !errors.Is(err, ErrNotFound) || !errors.As(err, &ce) || !ce.Appended || string(ce.Reason) != `{"reason":"deleted"}` {
			t.Fatalf("append %d after the close: %v; want it stored, and told why the session closed", i+1, err)
		}
	}
	if err := s.AppendResult(ctx, "c1", 1, ResultPart{Kind: ResultData, Data: []byte("again")}); !errors.As(err, &ce) || !ce.Appended {
		t.Fatalf("a retried append after the close: %v", err)
	}
	got, _, err := s.ReadResult(ctx, "c1", "", 0)
	if err != nil || len(got) != 3 || got[1].Kind != ResultData || string(got[1].Data) != "data: x\n\n" || got[2].Kind != ResultEnd {
		t.Fatalf("ReadResult after the close = %+v, %v; want head, data, end", got, err)
	}
	if err := s.CloseInputSession(ctx, "never", []byte(`{}`), time.Minute); !errors.Is(err, ErrNotFound) || errors.As(err, &ce) {
		t.Fatalf("closing a session that never was: %v", err)
	}
}
