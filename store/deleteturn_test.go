package store

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// A deleted turn is gone for GetTurn and for History, its own and that of
// every later turn chained through it: nothing of it is read again.
func TestDeleteTurn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		for _, tr := range []Turn{
			{ResponseID: "r1", Input: items("u1"), Output: items("a1")},
			{ResponseID: "r2", ParentID: "r1", Input: items("SECRET-u2"), Output: items("a2")},
			{ResponseID: "r3", ParentID: "r2", Input: items("u3"), Output: items("a3")},
			{ResponseID: "other", Input: items("kept")},
		} {
			if err := s.PutConversation(ctx, tr); err != nil {
				t.Fatalf("PutConversation(%s): %v", tr.ResponseID, err)
			}
		}

		if err := s.DeleteTurn(ctx, "r2"); err != nil {
			t.Fatalf("DeleteTurn: %v", err)
		}
		_, err := s.GetTurn(ctx, "r2")
		wantErr(t, "GetTurn of the deleted turn", err, ErrNotFound)
		_, err = s.History(ctx, "r2", 0, 0)
		wantErr(t, "History of the deleted turn", err, ErrNotFound)

		got, err := s.History(ctx, "r3", 0, 0)
		var bce *BrokenChainError
		if !errors.As(err, &bce) || bce.MissingID != "r2" || bce.ChildID != "r3" {
			t.Fatalf("History through the deleted turn = %s, %v; want a broken chain missing r2", got, err)
		}
		for _, it := range got {
			if strings.Contains(string(it), "SECRET") {
				t.Fatalf("History still returns the deleted turn's items: %s", got)
			}
		}

		if got, err := s.History(ctx, "r1", 0, 0); err != nil || !reflect.DeepEqual(got, items("u1", "a1")) {
			t.Errorf("History of the parent = %s, %v; want it untouched", got, err)
		}
		if tr, err := s.GetTurn(ctx, "other"); err != nil || !reflect.DeepEqual(tr.Input, items("kept")) {
			t.Errorf("GetTurn of an unrelated turn = %+v, %v", tr, err)
		}

		if err := s.DeleteTurn(ctx, "r2"); err != nil {
			t.Errorf("deleting the deleted turn again: %v, want nil", err)
		}
		if err := s.DeleteTurn(ctx, "never"); err != nil {
			t.Errorf("deleting an unknown turn: %v, want nil", err)
		}
		wantErr(t, "DeleteTurn of an empty id", s.DeleteTurn(ctx, ""), ErrInvalid)
		wantErr(t, "DeleteTurn of an overlong id", s.DeleteTurn(ctx, strings.Repeat("x", 5000)), ErrInvalid)
		if _, err := s.Sweep(ctx, t0.Add(2*DefaultTurnTTL)); err != nil {
			t.Errorf("Sweep after a delete: %v", err)
		}
	})
}

// A closed store refuses the delete.
func TestDeleteTurnClosed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "DeleteTurn after Close", s.DeleteTurn(context.Background(), "r1"), ErrClosed)
	})
}
