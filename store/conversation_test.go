package store

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		// turn is shorthand: id, parent, inputs, outputs.
		turn := func(id, parent string, in, out []string) Turn {
			return Turn{ResponseID: id, ParentID: parent, Input: items(in...), Output: items(out...)}
		}
		chain := []Turn{
			turn("r1", "", []string{"sys", "u1"}, []string{"a1"}),
			turn("r2", "r1", []string{"u2"}, []string{"call", "a2"}),
			turn("r3", "r2", []string{"tool-out"}, nil),
		}
		tests := []struct {
			name     string
			turns    []Turn
			advance  time.Duration
			id       string
			maxItems int
			maxBytes int
			want     []string
			wantErr  error
			missing  string // BrokenChainError.MissingID
		}{
			{name: "single turn", turns: chain[:1], id: "r1", want: []string{"sys", "u1", "a1"}},
			{name: "chain oldest first", turns: chain, id: "r3",
				want: []string{"sys", "u1", "a1", "u2", "call", "a2", "tool-out"}},
			{name: "middle of chain", turns: chain, id: "r2", want: []string{"sys", "u1", "a1", "u2", "call", "a2"}},
			{name: "branches share a parent", turns: append(chain[:2:2], turn("r2b", "r1", []string{"u2b"}, []string{"a2b"})),
				id: "r2b", want: []string{"sys", "u1", "a1", "u2b", "a2b"}},
			{name: "turns stored out of order", turns: []Turn{chain[2], chain[0], chain[1]}, id: "r3",
				want: []string{"sys", "u1", "a1", "u2", "call", "a2", "tool-out"}},
			{name: "empty turn", turns: []Turn{turn("r1", "", nil, nil)}, id: "r1", want: []string{}},
			{name: "unknown id", turns: chain, id: "nope", wantErr: ErrNotFound},
			{name: "broken chain", turns: chain[1:], id: "r3", wantErr: ErrNotFound, missing: "r1"},
			{name: "exact item limit", turns: chain, id: "r3", maxItems: 7,
				want: []string{"sys", "u1", "a1", "u2", "call", "a2", "tool-out"}},
			{name: "over item limit", turns: chain, id: "r3", maxItems: 6, wantErr: ErrTooLarge},
			{name: "over byte limit", turns: chain, id: "r3", maxBytes: 20, wantErr: ErrTooLarge},
			{name: "expired", turns: chain, advance: DefaultTurnTTL, id: "r3", wantErr: ErrNotFound},
			{name: "expired parent breaks the chain",
				turns: []Turn{
					{ResponseID: "r1", Input: items("old"), ExpiresAt: t0.Add(time.Hour)},
					turn("r2", "r1", []string{"new"}, nil),
				},
				advance: time.Hour, id: "r2", wantErr: ErrNotFound, missing: "r1"},
			{name: "cycle", turns: []Turn{turn("r1", "r2", nil, nil), turn("r2", "r1", nil, nil)}, id: "r2", wantErr: ErrCorrupt},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, clk := b.open(t)
				ctx := context.Background()
				for _, tr := range tt.turns {
					if err := s.PutConversation(ctx, tr); err != nil {
						t.Fatalf("PutConversation(%s): %v", tr.ResponseID, err)
					}
				}
				clk.Advance(tt.advance)
				got, err := s.History(ctx, tt.id, tt.maxItems, tt.maxBytes)
				wantErr(t, "History", err, tt.wantErr)
				if tt.missing != "" {
					var bce *BrokenChainError
					if !errors.As(err, &bce) || bce.MissingID != tt.missing || bce.ResponseID != tt.id {
						t.Fatalf("History error %#v, want broken chain missing %q", err, tt.missing)
					}
					if strings.Contains(err.Error(), tt.missing) {
						t.Errorf("error message %q shows a raw id", err)
					}
				}
				if tt.wantErr != nil {
					return
				}
				if want := items(tt.want...); !reflect.DeepEqual(got, want) {
					t.Errorf("History = %s, want %s", got, want)
				}
			})
		}
	})
}

func TestPutConversation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		tests := []struct {
			name    string
			turn    Turn
			wantErr error
		}{
			{name: "ok", turn: Turn{ResponseID: "r1", Input: items("x")}},
			{name: "at the cap", turn: Turn{ResponseID: "r1", Input: []json.RawMessage{make([]byte, 600)}, Output: []json.RawMessage{make([]byte, 424)}}},
			{name: "over the cap", turn: Turn{ResponseID: "r1", Input: []json.RawMessage{make([]byte, 600)}, Output: []json.RawMessage{make([]byte, 425)}}, wantErr: ErrTooLarge},
			{name: "empty id", turn: Turn{}, wantErr: ErrInvalid},
			{name: "own parent", turn: Turn{ResponseID: "r1", ParentID: "r1"}, wantErr: ErrInvalid},
			{name: "long parent", turn: Turn{ResponseID: "r1", ParentID: strings.Repeat("p", MaxIDLen+1)}, wantErr: ErrInvalid},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, _ := b.open(t, func(o *Options) { o.MaxTurnBytes = 1024 })
				ctx := context.Background()
				wantErr(t, "PutConversation", s.PutConversation(ctx, tt.turn), tt.wantErr)
				if tt.wantErr != nil {
					return
				}
				got, err := s.GetTurn(ctx, tt.turn.ResponseID)
				if err != nil {
					t.Fatal(err)
				}
				want := tt.turn
				want.CreatedAt, want.ExpiresAt = t0, t0.Add(DefaultTurnTTL)
				if want.Input == nil {
					want.Input = []json.RawMessage{}
				}
				if want.Output == nil {
					want.Output = []json.RawMessage{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("GetTurn = %+v, want %+v", got, want)
				}
			})
		}
	})
}
