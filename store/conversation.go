package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"
)

// BrokenChainError is returned by History when a turn's parent is missing
// or expired. It wraps ErrNotFound. Its message shows ids redacted.
type BrokenChainError struct {
	// ResponseID is the response History was asked for.
	ResponseID string
	// MissingID is the parent id that could not be loaded.
	MissingID string
	// ChildID is the turn whose ParentID is MissingID.
	ChildID string
}

// Error implements error.
func (e *BrokenChainError) Error() string {
	return fmt.Sprintf("store: history %s: turn %s: parent %s: %v",
		RedactID(e.ResponseID), RedactID(e.ChildID), RedactID(e.MissingID), ErrNotFound)
}

// Unwrap returns ErrNotFound.
func (e *BrokenChainError) Unwrap() error { return ErrNotFound }

// PutConversation stores one turn in one batch committed with pebble.Sync.
// The turn's items are stored once; later turns refer to it through their
// ParentID. A zero CreatedAt becomes the store's clock and a zero ExpiresAt
// becomes CreatedAt + TurnTTL. A turn whose items add up to more than
// MaxTurnBytes is rejected with ErrTooLarge. The parent is not checked here:
// History reports a missing one. Items are opaque bytes to the store.
func (s *PebbleStore) PutConversation(ctx context.Context, t Turn) (err error) {
	if err := prepareTurn(&t, s.now(), s.opts.MaxTurnBytes, s.opts.TurnTTL); err != nil {
		return err
	}

	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put conversation %s: %w", RedactID(t.ResponseID), err)
	}
	defer release(&err)

	key := turnKey(t.ResponseID)
	b := db.NewBatch()
	defer b.Close()
	// Encode straight into the batch: a turn can be tens of MiB.
	vlen := turnValueLen(&t)
	op := b.SetDeferred(len(key), vlen)
	copy(op.Key, key)
	if v := encodeTurn(op.Value[:0:vlen], &t); len(v) != vlen {
		return fmt.Errorf("store: put conversation %s: encoded %d bytes, sized %d", RedactID(t.ResponseID), len(v), vlen)
	}
	if err := op.Finish(); err != nil {
		return fmt.Errorf("store: put conversation %s: %w", RedactID(t.ResponseID), err)
	}
	if err := b.Set(expiryKey(t.ExpiresAt, key), nil, nil); err != nil {
		return fmt.Errorf("store: put conversation %s: %w", RedactID(t.ResponseID), err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: put conversation %s: commit: %w", RedactID(t.ResponseID), err)
	}
	s.stats.turnsWritten.Add(1)
	return nil
}

// GetTurn loads one turn. It returns an error wrapping ErrNotFound when
// there is none or it has expired.
func (s *PebbleStore) GetTurn(ctx context.Context, responseID string) (_ Turn, err error) {
	if err := validID("response id", responseID); err != nil {
		return Turn{}, fmt.Errorf("store: get turn: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return Turn{}, fmt.Errorf("store: get turn %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	t, err := s.loadLiveTurn(db, responseID)
	if err != nil {
		return Turn{}, fmt.Errorf("store: get turn %s: %w", RedactID(responseID), err)
	}
	return t, nil
}

// loadLiveTurn reads a turn; ErrNotFound if absent or expired. The turn's
// items share one freshly allocated buffer.
func (s *PebbleStore) loadLiveTurn(db *pebble.DB, responseID string) (Turn, error) {
	var t Turn
	err := get(db, turnKey(responseID), func(v []byte) (err error) {
		t, err = decodeTurn(responseID, slices.Clone(v))
		return err
	})
	if errors.Is(err, pebble.ErrNotFound) || err == nil && expired(t.ExpiresAt, s.now()) {
		return Turn{}, ErrNotFound
	}
	return t, err
}

// DeleteTurn removes the turn of responseID in one synced batch; an absent
// turn is not an error. The expiry index entry is left behind; the sweeper
// drops it when it comes due and finds no record.
func (s *PebbleStore) DeleteTurn(ctx context.Context, responseID string) (err error) {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: delete turn: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete turn %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	if err := db.Delete(turnKey(responseID), pebble.Sync); err != nil {
		return fmt.Errorf("store: delete turn %s: %w", RedactID(responseID), err)
	}
	return nil
}

// History returns the items of the conversation that ends with the response
// responseID, oldest first: the first turn's input items, its output items,
// the second turn's input items, and so on, following ParentID links from
// responseID back to a turn without a parent.
//
// maxItems and maxBytes bound the result (zero or negative: no bound); a
// conversation that exceeds either fails with ErrTooLarge rather than being
// cut, so a caller never sends an upstream a silently truncated context.
// Turns are read newest first, so an oversized history fails before the
// rest of it is read.
//
// An unknown or expired responseID fails with ErrNotFound; a missing or
// expired ancestor fails with a *BrokenChainError, which wraps ErrNotFound.
func (s *PebbleStore) History(ctx context.Context, responseID string, maxItems, maxBytes int) (_ []json.RawMessage, err error) {
	if err := validID("response id", responseID); err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: history %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	s.stats.historyLookups.Add(1)

	return walkHistory(ctx, responseID, maxItems, maxBytes, func(id string) (Turn, error) { return s.loadLiveTurn(db, id) })
}

// prepareTurn checks a turn before either backend stores it and fills its
// zero timestamps: ids valid, not its own parent, items within maxBytes.
func prepareTurn(t *Turn, now time.Time, maxBytes int, ttl time.Duration) error {
	if err := validID("response id", t.ResponseID); err != nil {
		return fmt.Errorf("store: put conversation: %w", err)
	}
	if t.ParentID != "" {
		if err := validID("parent id", t.ParentID); err != nil {
			return fmt.Errorf("store: put conversation %s: %w", RedactID(t.ResponseID), err)
		}
		if t.ParentID == t.ResponseID {
			return fmt.Errorf("store: put conversation %s: turn is its own parent: %w", RedactID(t.ResponseID), ErrInvalid)
		}
	}
	size := 0
	for _, items := range [][]json.RawMessage{t.Input, t.Output} {
		for _, it := range items {
			size += len(it)
		}
	}
	if size > maxBytes {
		return fmt.Errorf("store: put conversation %s: items of %d bytes exceed %d: %w",
			RedactID(t.ResponseID), size, maxBytes, ErrTooLarge)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now
	}
	if t.ExpiresAt.IsZero() {
		t.ExpiresAt = t.CreatedAt.Add(ttl)
	}
	return nil
}

// walkHistory follows a conversation's parent chain from responseID, with
// load reading one live turn, and returns the items oldest first; both
// backends share it so the chain rules (cycles, broken links, caps) are one.
func walkHistory(ctx context.Context, responseID string, maxItems, maxBytes int, load func(id string) (Turn, error)) ([]json.RawMessage, error) {
	var (
		turns        []Turn // newest first
		items, bytes int
		seen         = map[string]struct{}{}
		child        string
	)
	for id := responseID; id != ""; {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("store: history %s: %w", RedactID(responseID), err)
		}
		if _, ok := seen[id]; ok {
			return nil, fmt.Errorf("store: history %s: cycle at %s: %w", RedactID(responseID), RedactID(id), ErrCorrupt)
		}
		seen[id] = struct{}{}

		t, err := load(id)
		switch {
		case errors.Is(err, ErrNotFound) && id != responseID:
			return nil, &BrokenChainError{ResponseID: responseID, MissingID: id, ChildID: child}
		case err != nil:
			return nil, fmt.Errorf("store: history %s: turn %s: %w", RedactID(responseID), RedactID(id), err)
		}
		items += len(t.Input) + len(t.Output)
		for _, list := range [][]json.RawMessage{t.Input, t.Output} {
			for _, it := range list {
				bytes += len(it)
			}
		}
		if maxItems > 0 && items > maxItems || maxBytes > 0 && bytes > maxBytes {
			return nil, fmt.Errorf("store: history %s: more than %d items or %d bytes after %d turns: %w",
				RedactID(responseID), maxItems, maxBytes, len(turns)+1, ErrTooLarge)
		}
		turns = append(turns, t)
		child, id = id, t.ParentID
	}

	out := make([]json.RawMessage, 0, items)
	for i := len(turns) - 1; i >= 0; i-- {
		out = append(out, turns[i].Input...)
		out = append(out, turns[i].Output...)
	}
	return out, nil
}
