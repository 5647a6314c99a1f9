package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
)

// sweepBatchSize is how many due index entries one sweep step handles. A
// step holds the store exclusively while it re-reads and deletes them, so it
// is kept small.
const sweepBatchSize = 128

// Sweep removes every anchor, scope record, turn, input session (with its
// chunks) and stream log (with its events) whose ExpiresAt is at or before
// now, and returns how many records it removed (chunks and events not
// counted). It reads only the due part of the expiry index, whose times are
// rounded up to the minute, so a record is removed by the first sweep at or
// after its ExpiresAt rounded up to the minute. Reads never return expired
// records, swept or not.
//
// Sweep works in small steps and checks ctx between them; on an error it
// returns what it removed so far. Deletions are not synced: a sweep lost in
// a crash is redone by the next one.
func (s *PebbleStore) Sweep(ctx context.Context, now time.Time) (removed int, err error) {
	s.stats.sweeps.Add(1)
	defer func() {
		if err != nil {
			s.stats.sweepErrors.Add(1)
		}
	}()
	lower := []byte{famExpiry}
	upper := expiryUpperBound(now)
	for {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("store: sweep: %w", err)
		}
		due, more, err := s.dueEntries(ctx, lower, upper)
		if err != nil {
			return removed, fmt.Errorf("store: sweep: %w", err)
		}
		if len(due) == 0 {
			return removed, nil
		}
		n, err := s.removeDue(due, now)
		removed += n
		if err != nil {
			return removed, fmt.Errorf("store: sweep: %w", err)
		}
		if !more {
			return removed, nil
		}
		lower = append(due[len(due)-1], 0) // the next key after the last one seen
	}
}

// dueEntries returns up to sweepBatchSize index keys in [lower, upper), and
// whether there may be more.
func (s *PebbleStore) dueEntries(ctx context.Context, lower, upper []byte) (keys [][]byte, more bool, err error) {
	db, release, err := s.acquire()
	if err != nil {
		return nil, false, err
	}
	defer release(&err)
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, false, err
	}
	valid := it.First()
	for ; valid && len(keys) < sweepBatchSize; valid = it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		return nil, false, err
	}
	return keys, valid, nil
}

// removeDue re-reads the records that the due index entries point at and
// deletes those that have expired, together with the entries. It holds the
// store exclusively so that no writer can refresh a record between the check
// and the deletion. Entries whose record is gone or has been refreshed (and
// so has a later entry of its own) are just deleted.
func (s *PebbleStore) removeDue(due [][]byte, now time.Time) (_ int, err error) {
	db, release, err := s.acquireExclusive()
	if err != nil {
		return 0, err
	}
	defer release(&err)

	b := db.NewBatch()
	defer b.Close()
	var anchors, scopes, turns, sessions, streamLogs uint64
	for _, entry := range due {
		if err := b.Delete(entry, nil); err != nil {
			return 0, err
		}
		primary, ok := expiryPrimary(entry)
		if !ok {
			s.log.Error("malformed expiry index entry", "len", len(entry))
			continue
		}
		var exp time.Time
		err := get(db, primary, func(v []byte) (err error) {
			exp, err = decodeExpiry(primary, v)
			return err
		})
		switch {
		case errors.Is(err, pebble.ErrNotFound):
			continue
		case errors.Is(err, ErrCorrupt):
			// Keep the record for inspection; drop its index entry so it is
			// not reported on every sweep.
			s.log.Error("undecodable record left in place", "family", string(primary[:1]), "error", err)
			continue
		case err != nil:
			return 0, err
		case !expired(exp, now):
			continue
		}
		switch primary[0] {
		case famAnchor:
			anchors++
			err = b.Delete(primary, nil)
		case famScope:
			scopes++
			err = b.Delete(primary, nil)
		case famTurn:
			turns++
			err = b.Delete(primary, nil)
		case famSession:
			sessions++
			err = deleteSession(b, string(primary[1:]))
		case famStreamLog:
			streamLogs++
			err = deleteStreamLog(b, string(primary[1:]))
		}
		if err != nil {
			return 0, err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	s.stats.sweptAnchors.Add(anchors)
	s.stats.sweptScopes.Add(scopes)
	s.stats.sweptTurns.Add(turns)
	s.stats.sweptSessions.Add(sessions)
	s.stats.sweptStreamLogs.Add(streamLogs)
	return int(anchors + scopes + turns + sessions + streamLogs), nil
}

// sweepLoop runs Sweep every interval until ctx is canceled (by Close).
func (s *PebbleStore) sweepLoop(ctx context.Context, interval time.Duration) {
	defer close(s.sweeperDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		n, err := s.Sweep(ctx, s.now())
		switch {
		case errors.Is(err, ErrClosed) || ctx.Err() != nil:
			return
		case s.Health() != nil:
			// The failure is logged once when it happens (failure.go,
			// datadir.go); the sweep runs again once the database is
			// reopened.
		case err != nil:
			s.log.Error("sweep failed", "removed", n, "error", err)
		case n > 0:
			s.log.Debug("swept expired records", "removed", n, "took", time.Since(start))
		}
	}
}
