package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
)

// CreateInputSession stores a new streaming-input session, synced. It fails
// with ErrExists if a live session has the same id (an expired one is
// replaced, and its chunks dropped). Zero CreatedAt and LastActivity become
// the store's clock; a zero ExpiresAt becomes LastActivity +
// InputSessionTTL.
func (s *PebbleStore) CreateInputSession(ctx context.Context, sess InputSession) (err error) {
	if err := s.validSession(&sess); err != nil {
		return fmt.Errorf("store: create input session: %w", err)
	}
	s.sessionDefaults(&sess)
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), err)
	}
	defer release(&err)
	mu := s.sessionLock(sess.ID)
	mu.Lock()
	defer mu.Unlock()

	old, err := loadSession(db, sess.ID)
	switch {
	case err == nil && !expired(old.ExpiresAt, s.now()):
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), ErrExists)
	case err != nil && !errors.Is(err, ErrNotFound):
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), err)
	}
	b := db.NewBatch()
	defer b.Close()
	if err == nil {
		// The chunks of the expired, not yet swept session with this id
		// must not show up in the new one.
		if err := deleteSession(b, sess.ID); err != nil {
			return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), err)
		}
	}
	if err := s.commitSession(b, &sess); err != nil {
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), err)
	}
	return nil
}

// GetInputSession loads a session. It returns an error wrapping ErrNotFound
// when there is none or it has expired.
func (s *PebbleStore) GetInputSession(ctx context.Context, id string) (_ InputSession, err error) {
	if err := validID("session id", id); err != nil {
		return InputSession{}, fmt.Errorf("store: get input session: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return InputSession{}, fmt.Errorf("store: get input session %s: %w", RedactID(id), err)
	}
	defer release(&err)
	sess, err := s.loadLiveSession(db, id)
	if err != nil {
		return InputSession{}, fmt.Errorf("store: get input session %s: %w", RedactID(id), err)
	}
	return sess, nil
}

// UpdateInputSession replaces the record of a live session, synced. It
// fails with ErrNotFound if the session is absent or expired. A zero
// LastActivity becomes the store's clock and a zero ExpiresAt becomes
// LastActivity + InputSessionTTL.
func (s *PebbleStore) UpdateInputSession(ctx context.Context, sess InputSession) (err error) {
	if err := s.validSession(&sess); err != nil {
		return fmt.Errorf("store: update input session: %w", err)
	}
	s.sessionDefaults(&sess)
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: update input session %s: %w", RedactID(sess.ID), err)
	}
	defer release(&err)
	mu := s.sessionLock(sess.ID)
	mu.Lock()
	defer mu.Unlock()

	if _, err := s.loadLiveSession(db, sess.ID); err != nil {
		return fmt.Errorf("store: update input session %s: %w", RedactID(sess.ID), err)
	}
	b := db.NewBatch()
	defer b.Close()
	if err := s.commitSession(b, &sess); err != nil {
		return fmt.Errorf("store: update input session %s: %w", RedactID(sess.ID), err)
	}
	return nil
}

// PutChunk stores chunk c under (sessionID, seq) and replaces the session's
// record with sessionUpdate, in one batch committed with pebble.Sync: when
// PutChunk returns nil, the chunk and the session's new state are both
// durable. sessionUpdate.ID may be empty (it becomes sessionID) but must not
// name another session. The session must be live (ErrNotFound). A chunk
// already stored under seq is replaced: ordering and duplicates are the
// gateway's business.
func (s *PebbleStore) PutChunk(ctx context.Context, sessionID string, seq uint64, c Chunk, sessionUpdate InputSession) (err error) {
	if err := validID("session id", sessionID); err != nil {
		return fmt.Errorf("store: put chunk: %w", err)
	}
	if sessionUpdate.ID == "" {
		sessionUpdate.ID = sessionID
	}
	if sessionUpdate.ID != sessionID {
		return fmt.Errorf("store: put chunk %s/%d: session update names another session: %w", RedactID(sessionID), seq, ErrInvalid)
	}
	if len(c.Payload) > s.opts.MaxChunkBytes {
		return fmt.Errorf("store: put chunk %s/%d: payload of %d bytes exceeds %d: %w",
			RedactID(sessionID), seq, len(c.Payload), s.opts.MaxChunkBytes, ErrTooLarge)
	}
	if err := s.validSession(&sessionUpdate); err != nil {
		return fmt.Errorf("store: put chunk %s/%d: %w", RedactID(sessionID), seq, err)
	}
	s.sessionDefaults(&sessionUpdate)
	c.Seq = seq

	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put chunk %s/%d: %w", RedactID(sessionID), seq, err)
	}
	defer release(&err)
	mu := s.sessionLock(sessionID)
	mu.Lock()
	defer mu.Unlock()

	if _, err := s.loadLiveSession(db, sessionID); err != nil {
		return fmt.Errorf("store: put chunk %s/%d: %w", RedactID(sessionID), seq, err)
	}
	b := db.NewBatch()
	defer b.Close()
	if err := b.Set(chunkKey(sessionID, seq), encodeChunk(&c), nil); err != nil {
		return fmt.Errorf("store: put chunk %s/%d: %w", RedactID(sessionID), seq, err)
	}
	if err := s.commitSession(b, &sessionUpdate); err != nil {
		return fmt.Errorf("store: put chunk %s/%d: %w", RedactID(sessionID), seq, err)
	}
	s.stats.chunksWritten.Add(1)
	return nil
}

// Chunks returns the chunks of a live session in sequence order. It fails
// with ErrNotFound if the session is absent or expired; a live session
// without chunks yields an empty slice.
func (s *PebbleStore) Chunks(ctx context.Context, sessionID string) (_ []Chunk, err error) {
	if err := validID("session id", sessionID); err != nil {
		return nil, fmt.Errorf("store: chunks: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), err)
	}
	defer release(&err)
	if _, err := s.loadLiveSession(db, sessionID); err != nil {
		return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), err)
	}

	prefix := chunkPrefix(sessionID)
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixSuccessor(prefix)})
	if err != nil {
		return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), err)
	}
	chunks := []Chunk{}
	for valid := it.First(); valid; valid = it.Next() {
		if len(chunks)%256 == 255 {
			if err := ctx.Err(); err != nil {
				_ = it.Close()
				return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), err)
			}
		}
		seq, ok := chunkSeq(it.Key(), len(prefix))
		if !ok {
			_ = it.Close()
			return nil, fmt.Errorf("store: chunks %s: malformed key: %w", RedactID(sessionID), ErrCorrupt)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: chunks %s/%d: %w", RedactID(sessionID), seq, err)
		}
		c, err := decodeChunk(seq, v)
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: chunks %s/%d: %w", RedactID(sessionID), seq, err)
		}
		chunks = append(chunks, c)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), err)
	}
	return chunks, nil
}

// DeleteInputSession removes a session and all its chunks (one range
// deletion) in one synced batch. Deleting an absent session is not an error.
func (s *PebbleStore) DeleteInputSession(ctx context.Context, id string) (err error) {
	if err := validID("session id", id); err != nil {
		return fmt.Errorf("store: delete input session: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete input session %s: %w", RedactID(id), err)
	}
	defer release(&err)
	mu := s.sessionLock(id)
	mu.Lock()
	defer mu.Unlock()

	b := db.NewBatch()
	defer b.Close()
	if err := deleteSession(b, id); err != nil {
		return fmt.Errorf("store: delete input session %s: %w", RedactID(id), err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: delete input session %s: commit: %w", RedactID(id), err)
	}
	return nil
}

// ListInputSessions returns every live session in id order, for recovery
// after a restart.
func (s *PebbleStore) ListInputSessions(ctx context.Context) (_ []InputSession, err error) {
	db, release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list input sessions: %w", err)
	}
	defer release(&err)

	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: []byte{famSession}, UpperBound: familyUpperBound(famSession),
	})
	if err != nil {
		return nil, fmt.Errorf("store: list input sessions: %w", err)
	}
	now := s.now()
	sessions := []InputSession{}
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: list input sessions: %w", err)
		}
		id := string(it.Key()[1:])
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: list input sessions: %s: %w", RedactID(id), err)
		}
		sess, err := decodeSession(id, v)
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("store: list input sessions: %s: %w", RedactID(id), err)
		}
		if !expired(sess.ExpiresAt, now) {
			sessions = append(sessions, sess)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: list input sessions: %w", err)
	}
	return sessions, nil
}

// validSession checks the fields of a session record that the store relies
// on (both backends).
func validSession(sess *InputSession, maxTemplate int) error {
	if err := validID("session id", sess.ID); err != nil {
		return err
	}
	if len(sess.Template) > maxTemplate {
		return fmt.Errorf("template of %d bytes exceeds %d: %w", len(sess.Template), maxTemplate, ErrTooLarge)
	}
	return nil
}

// sessionDefaults fills a session's zero timestamps (both backends).
func sessionDefaults(sess *InputSession, now time.Time, ttl time.Duration) {
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = now
	}
	if sess.LastActivity.IsZero() {
		sess.LastActivity = now
	}
	if sess.ExpiresAt.IsZero() {
		sess.ExpiresAt = sess.LastActivity.Add(ttl)
	}
}

func (s *PebbleStore) validSession(sess *InputSession) error {
	return validSession(sess, s.opts.MaxChunkBytes)
}

func (s *PebbleStore) sessionDefaults(sess *InputSession) {
	sessionDefaults(sess, s.now(), s.opts.InputSessionTTL)
}

// commitSession adds sess's record and expiry entry to b and commits it
// synced.
func (s *PebbleStore) commitSession(b *pebble.Batch, sess *InputSession) error {
	key := sessionKey(sess.ID)
	if err := b.Set(key, encodeSession(sess), nil); err != nil {
		return err
	}
	if err := b.Set(expiryKey(sess.ExpiresAt, key), nil, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.stats.sessionsWritten.Add(1)
	return nil
}

// loadLiveSession reads a session; ErrNotFound if absent or expired.
func (s *PebbleStore) loadLiveSession(db *pebble.DB, id string) (InputSession, error) {
	sess, err := loadSession(db, id)
	if err == nil && expired(sess.ExpiresAt, s.now()) {
		return InputSession{}, ErrNotFound
	}
	return sess, err
}

// loadSession reads a session whether or not it has expired; ErrNotFound if
// absent.
func loadSession(db *pebble.DB, id string) (InputSession, error) {
	var sess InputSession
	err := get(db, sessionKey(id), func(v []byte) (err error) {
		sess, err = decodeSession(id, v)
		return err
	})
	if errors.Is(err, pebble.ErrNotFound) {
		return InputSession{}, ErrNotFound
	}
	return sess, err
}

// deleteSession adds the deletion of a session record and its chunks to b.
func deleteSession(b *pebble.Batch, id string) error {
	if err := b.Delete(sessionKey(id), nil); err != nil {
		return err
	}
	prefix := chunkPrefix(id)
	return b.DeleteRange(prefix, prefixSuccessor(prefix), nil)
}
