package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
)

// PebbleStore keeps stream logs as a record under famStreamLog (with an
// expiry index entry, like every record) and one key per event under
// famStreamEvent, in sequence order, so that a resume reads on from a
// sequence number with one iterator and a record's events go with it in one
// range deletion (keys.go).
var _ StreamLogStore = (*PebbleStore)(nil)

// maxStreamSeq is the largest sequence number the stores accept: Redis
// orders events by a double-precision score, exact up to 2^53.
const maxStreamSeq = 1 << 53

// prepareStreamLog checks l and fills its defaults (both backends).
func prepareStreamLog(l *StreamLog, now time.Time) error {
	if err := validID("response id", l.ResponseID); err != nil {
		return err
	}
	if l.ExpiresAt.IsZero() {
		return fmt.Errorf("stream log %s without ExpiresAt: %w", RedactID(l.ResponseID), ErrInvalid)
	}
	if l.CreatedAt.IsZero() {
		l.CreatedAt = now
	}
	return nil
}

// validStreamAppend checks the arguments of AppendStreamEvents (both
// backends).
func validStreamAppend(responseID string, first int64, n int) error {
	if err := validID("response id", responseID); err != nil {
		return err
	}
	if first < 0 || first > maxStreamSeq || int64(n) > maxStreamSeq-first+1 {
		return fmt.Errorf("sequence numbers %d..%d outside 0..%d: %w", first, first+int64(n)-1, int64(maxStreamSeq), ErrInvalid)
	}
	return nil
}

// PutStreamLog creates or replaces the record of l.ResponseID in one synced
// batch. A live record's events and CancelRequested are kept (the flag is
// read and written back under the log's lock), and so is its IssuedBelow
// when higher; an expired, not yet swept
// record is replaced as if absent, its events dropped. A zero CreatedAt
// becomes the store's clock; a zero ExpiresAt is ErrInvalid.
func (s *PebbleStore) PutStreamLog(ctx context.Context, l StreamLog) (err error) {
	if err := prepareStreamLog(&l, s.now()); err != nil {
		return fmt.Errorf("store: put stream log: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), err)
	}
	defer release(&err)
	mu := s.streamLock(l.ResponseID)
	mu.Lock()
	defer mu.Unlock()

	b := db.NewBatch()
	defer b.Close()
	old, err := loadStreamLog(db, l.ResponseID)
	switch {
	case err == nil && !expired(old.ExpiresAt, s.now()):
		l.CancelRequested = l.CancelRequested || old.CancelRequested
		l.IssuedBelow = max(l.IssuedBelow, old.IssuedBelow)
	case err == nil:
		// The events of the expired record must not show up in the new one.
		if err := deleteStreamLog(b, l.ResponseID); err != nil {
			return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), err)
		}
	case !errors.Is(err, ErrNotFound):
		return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), err)
	}
	if err := s.commitStreamLog(b, &l); err != nil {
		return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), err)
	}
	return nil
}

// GetStreamLog loads a record; ErrNotFound when absent or expired.
func (s *PebbleStore) GetStreamLog(ctx context.Context, responseID string) (_ StreamLog, err error) {
	if err := validID("response id", responseID); err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	l, err := s.loadLiveStreamLog(db, responseID)
	if err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log %s: %w", RedactID(responseID), err)
	}
	return l, nil
}

// AppendStreamEvents stores events numbered first, first+1, … under the
// log of responseID, in one synced batch. Events whose number is already
// stored are skipped (a retried or overlapping append is harmless); a gap
// before first is not checked. The record must be live (ErrNotFound).
// Sequence numbers must lie in 0..2^53 (ErrInvalid); each event's Seq is
// set from first.
func (s *PebbleStore) AppendStreamEvents(ctx context.Context, responseID string, first int64, events []StreamEvent) (err error) {
	if err := validStreamAppend(responseID, first, len(events)); err != nil {
		return fmt.Errorf("store: append stream events: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, err)
	}
	defer release(&err)
	mu := s.streamLock(responseID)
	mu.Lock()
	defer mu.Unlock()

	if _, err := s.loadLiveStreamLog(db, responseID); err != nil {
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, err)
	}
	if len(events) == 0 {
		return nil
	}
	// Which of first..first+n-1 are stored already: one iterator over that
	// range (usually empty, or the whole range for a retry).
	last := first + int64(len(events)) - 1
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: streamEventKey(responseID, first),
		UpperBound: prefixSuccessor(streamEventKey(responseID, last)),
	})
	if err != nil {
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, err)
	}
	stored := make(map[int64]bool)
	prefixLen := len(streamEventPrefix(responseID))
	for valid := it.First(); valid; valid = it.Next() {
		seq, ok := chunkSeq(it.Key(), prefixLen)
		if !ok {
			_ = it.Close()
			return fmt.Errorf("store: append stream events %s/%d: malformed key: %w", RedactID(responseID), first, ErrCorrupt)
		}
		stored[int64(seq)] = true
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, err)
	}

	b := db.NewBatch()
	defer b.Close()
	var added uint64
	for i := range events {
		ev := events[i]
		ev.Seq = first + int64(i)
		if stored[ev.Seq] {
			continue
		}
		if err := b.Set(streamEventKey(responseID, ev.Seq), encodeStreamEvent(&ev), nil); err != nil {
			return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), ev.Seq, err)
		}
		added++
	}
	if added == 0 {
		return nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: append stream events %s/%d: commit: %w", RedactID(responseID), first, err)
	}
	s.stats.streamEventsWritten.Add(added)
	return nil
}

// StreamEvents returns up to limit events of a live log numbered after
// after (any negative after: from the first), in order, read with one
// iterator that starts at after+1. limit <= 0 means no limit. ErrNotFound when the
// record is absent or expired; a live log without such events yields an
// empty slice.
func (s *PebbleStore) StreamEvents(ctx context.Context, responseID string, after int64, limit int) (_ []StreamEvent, err error) {
	if err := validID("response id", responseID); err != nil {
		return nil, fmt.Errorf("store: stream events: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	if _, err := s.loadLiveStreamLog(db, responseID); err != nil {
		return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), err)
	}
	events := []StreamEvent{}
	if after >= maxStreamSeq {
		return events, nil
	}
	prefix := streamEventPrefix(responseID)
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: streamEventKey(responseID, max(after+1, 0)),
		UpperBound: prefixSuccessor(prefix),
	})
	if err != nil {
		return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), err)
	}
	for valid := it.First(); valid && (limit <= 0 || len(events) < limit); valid = it.Next() {
		if len(events)%256 == 255 {
			if err := ctx.Err(); err != nil {
				_ = it.Close()
				return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), err)
			}
		}
		seq, ok := chunkSeq(it.Key(), len(prefix))
		if !ok {
			_ = it.Close()
			return nil, fmt.Errorf("store: stream events %s: malformed key: %w", RedactID(responseID), ErrCorrupt)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: stream events %s/%d: %w", RedactID(responseID), seq, err)
		}
		ev, err := decodeStreamEvent(int64(seq), v)
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: stream events %s/%d: %w", RedactID(responseID), seq, err)
		}
		events = append(events, ev)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), err)
	}
	return events, nil
}

// CancelStreamLog sets the live record's CancelRequested, synced.
// ErrNotFound when the record is absent or expired.
func (s *PebbleStore) CancelStreamLog(ctx context.Context, responseID string) (err error) {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: cancel stream log: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: cancel stream log %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	mu := s.streamLock(responseID)
	mu.Lock()
	defer mu.Unlock()

	l, err := s.loadLiveStreamLog(db, responseID)
	if err != nil {
		return fmt.Errorf("store: cancel stream log %s: %w", RedactID(responseID), err)
	}
	if l.CancelRequested {
		return nil
	}
	l.CancelRequested = true
	b := db.NewBatch()
	defer b.Close()
	if err := s.commitStreamLog(b, &l); err != nil {
		return fmt.Errorf("store: cancel stream log %s: %w", RedactID(responseID), err)
	}
	return nil
}

// DeleteStreamLog removes a record and its events (one range deletion) in
// one synced batch. Deleting an absent log is not an error.
func (s *PebbleStore) DeleteStreamLog(ctx context.Context, responseID string) (err error) {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: delete stream log: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete stream log %s: %w", RedactID(responseID), err)
	}
	defer release(&err)
	mu := s.streamLock(responseID)
	mu.Lock()
	defer mu.Unlock()

	b := db.NewBatch()
	defer b.Close()
	if err := deleteStreamLog(b, responseID); err != nil {
		return fmt.Errorf("store: delete stream log %s: %w", RedactID(responseID), err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: delete stream log %s: commit: %w", RedactID(responseID), err)
	}
	return nil
}

// commitStreamLog adds l's record and expiry entry to b and commits it
// synced.
func (s *PebbleStore) commitStreamLog(b *pebble.Batch, l *StreamLog) error {
	key := streamLogKey(l.ResponseID)
	if err := b.Set(key, encodeStreamLog(l), nil); err != nil {
		return err
	}
	if err := b.Set(expiryKey(l.ExpiresAt, key), nil, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.stats.streamLogsWritten.Add(1)
	return nil
}

// loadLiveStreamLog reads a record; ErrNotFound if absent or expired.
func (s *PebbleStore) loadLiveStreamLog(db *pebble.DB, responseID string) (StreamLog, error) {
	l, err := loadStreamLog(db, responseID)
	if err == nil && expired(l.ExpiresAt, s.now()) {
		return StreamLog{}, ErrNotFound
	}
	return l, err
}

// loadStreamLog reads a record whether or not it has expired; ErrNotFound
// if absent.
func loadStreamLog(db *pebble.DB, responseID string) (StreamLog, error) {
	var l StreamLog
	err := get(db, streamLogKey(responseID), func(v []byte) (err error) {
		l, err = decodeStreamLog(responseID, v)
		return err
	})
	if errors.Is(err, pebble.ErrNotFound) {
		return StreamLog{}, ErrNotFound
	}
	return l, err
}

// deleteStreamLog adds the deletion of a record and its events to b.
func deleteStreamLog(b *pebble.Batch, responseID string) error {
	if err := b.Delete(streamLogKey(responseID), nil); err != nil {
		return err
	}
	prefix := streamEventPrefix(responseID)
	return b.DeleteRange(prefix, prefixSuccessor(prefix), nil)
}
