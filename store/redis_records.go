package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// luaPrelude is shared by the scripts: after(a, b) compares two stamps
// (20-digit nanosecond strings, or "~" for never) exactly, in two halves
// that a Lua double holds without loss; live(x, now) says whether a record
// expiring at x is live at now.
const luaPrelude = `
local function after(a, b)
  if a == '~' then return b ~= '~' end
  if b == '~' then return false end
  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if ah ~= bh then return ah > bh end
  return tonumber(string.sub(a, 11)) > tonumber(string.sub(b, 11))
end
local function live(x, now)
  return x and (x == '~' or after(x, now))
end
local function expire(key, px)
  if tonumber(px) > 0 then redis.call('PEXPIRE', key, px) else redis.call('PERSIST', key) end
end
`

// putAnchorScript: KEYS anchor, scope; ARGV anchor value, anchor px,
// latest id, scope value, scope px, "1" to write only over an existing
// anchor (ReplaceAnchor). 0: there was none, nothing written.
var putAnchorScript = redis.NewScript(luaPrelude + `
if ARGV[6] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
expire(KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'l', ARGV[3], 'r', ARGV[4])
expire(KEYS[2], ARGV[5])
return 1
`)

// deleteAnchorScript: KEYS anchor, scope; ARGV response id, "1" when the
// scope key is known. The scope goes only if it still points at the id.
var deleteAnchorScript = redis.NewScript(`
if ARGV[2] == '1' and redis.call('HGET', KEYS[2], 'l') == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return redis.call('DEL', KEYS[1])
`)

// setScript: KEYS key; ARGV value, px. A plain SET with expiry, as a script
// so that it goes through exec (WAIT).
var setScript = redis.NewScript(luaPrelude + `
redis.call('SET', KEYS[1], ARGV[1])
expire(KEYS[1], ARGV[2])
return 1
`)

// createSessionScript: KEYS session, chunks, result, index; ARGV record, la,
// x, px, now, id, token. 0: a live session has the id (unless it is this
// same create, retried).
var createSessionScript = redis.NewScript(luaPrelude + `
local cur = redis.call('HMGET', KEYS[1], 'x', 'tok')
if live(cur[1], ARGV[5]) then
  if cur[2] == ARGV[7] then return 1 end
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
-- 'ro' is no longer read (an answer's parts are numbered by the stream's
-- length), but a replica of an earlier version still reads it.
redis.call('HSET', KEYS[1], 'r', ARGV[1], 'la', ARGV[2], 'x', ARGV[3], 'tok', ARGV[7], 'ro', '0')
expire(KEYS[1], ARGV[4])
redis.call('SADD', KEYS[4], ARGV[6])
return 1
`)

// writeSessionScript updates a live session's record and, when ARGV[7] is
// not empty, stores chunk ARGV[8] under sequence id ARGV[7]. KEYS session,
// chunks, result; ARGV record, la, x, px, now, expected la ("" for any),
// seq, chunk. 0: absent or expired; 2: conflict (the record changed since
// the caller saw expected la); 1: written (or written before: a retry).
var writeSessionScript = redis.NewScript(luaPrelude + `
local cur = redis.call('HMGET', KEYS[1], 'x', 'la')
if not live(cur[1], ARGV[5]) then return 0 end
if ARGV[6] ~= '' and cur[2] ~= ARGV[6] then
  if cur[2] == ARGV[2] then return 1 end
  return 2
end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[2], ARGV[7], ARGV[8]) end
redis.call('HSET', KEYS[1], 'r', ARGV[1], 'la', ARGV[2], 'x', ARGV[3])
expire(KEYS[1], ARGV[4])
if redis.call('EXISTS', KEYS[2]) == 1 then expire(KEYS[2], ARGV[4]) end
if redis.call('EXISTS', KEYS[3]) == 1 then expire(KEYS[3], ARGV[4]) end
return 1
`)

// deleteSessionScript: KEYS session, chunks, result, index; ARGV id. The
// answer of a session closed already (closeSessionScript) is left to its
// readers: it expires with the close's marker.
var deleteSessionScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[3])
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[4], ARGV[1])
return 1
`)

// closeSessionScript: KEYS session, chunks, result, index, closed marker;
// ARGV id, reason, marker px. A delete that leaves why the session closed.
// The first close stands: a session already closed answers with the reason
// recorded then (0: gone without one). The answer's parts stay, expiring
// with the marker, for the replica running it to end it and the others'
// readers to follow it to that end (SharedInputSessionStore).
var closeSessionScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  local why = redis.call('GET', KEYS[5])
  if why then return why end
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('SET', KEYS[5], ARGV[2], 'PX', ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
return 1
`)

// appendResultScript: KEYS session, result, closed marker; ARGV part
// index, kind, data. 0: the session is gone; 1: appended (or already
// appended); 2: a gap. A session closed with a reason still takes the
// parts of its answer (the replica running it ends it, and every reader
// follows it to that end): then {1 or 2, the reason}. The parts number is
// the stream's length: nothing trims it.
var appendResultScript = redis.NewScript(`
local why = false
local ttl
if redis.call('EXISTS', KEYS[1]) == 1 then
  ttl = redis.call('PTTL', KEYS[1])
else
  why = redis.call('GET', KEYS[3])
  if not why then return 0 end
  ttl = redis.call('PTTL', KEYS[3])
end
local n = redis.call('XLEN', KEYS[2])
local want = tonumber(ARGV[1])
local r = 1
if n < want then
  r = 2
elseif n == want then
  redis.call('XADD', KEYS[2], '*', 'k', ARGV[2], 'd', ARGV[3])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
if why then return {r, why} end
return r
`)

// putTargetScript: KEYS target; ARGV px, reason. Keeps the later of the
// stored and the new end.
var putTargetScript = redis.NewScript(`
local t = redis.call('PTTL', KEYS[1])
if t ~= -1 and t < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
end
return 1
`)

// --- anchors and scopes

// PutAnchor is PebbleStore.PutAnchor on Redis: the anchor and its scope in
// one script (atomic), each key expiring with its record.
func (s *RedisStore) PutAnchor(ctx context.Context, a Anchor) error {
	return s.putAnchor(ctx, a, false)
}

// ReplaceAnchor is PebbleStore.ReplaceAnchor on Redis: the existence check
// and the write are one script, so a DeleteAnchor from another replica is
// never undone.
func (s *RedisStore) ReplaceAnchor(ctx context.Context, a Anchor) error {
	return s.putAnchor(ctx, a, true)
}

func (s *RedisStore) putAnchor(ctx context.Context, a Anchor, replace bool) error {
	if err := validAnchor(&a); err != nil {
		return fmt.Errorf("store: put anchor: %w", err)
	}
	now := s.now()
	if a.CreatedAt.IsZero() {
		a.CreatedAt = now
	}
	if a.ExpiresAt.IsZero() {
		a.ExpiresAt = a.CreatedAt.Add(s.opts.AnchorTTL)
	}
	scope := ScopeRecord{LatestResponseID: a.ResponseID, Owner: a.Upstream, UpdatedAt: now, ExpiresAt: now.Add(s.opts.ScopeTTL)}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put anchor %s: %w", RedactID(a.ResponseID), err)
	}
	defer release()
	only := "0"
	if replace {
		only = "1"
	}
	n, err := s.exec(ctx, putAnchorScript, []string{s.anchorKey(a.ResponseID), s.scopeKey(a.ScopeKind, a.ScopeID)},
		encodeAnchor(&a), s.pxUntil(a.ExpiresAt), a.ResponseID, encodeScope(&scope), s.pxUntil(scope.ExpiresAt), only)
	if err != nil {
		return fmt.Errorf("store: put anchor %s: %w", RedactID(a.ResponseID), s.fail(err))
	}
	if n, _ := n.(int64); n == 0 {
		return fmt.Errorf("store: replace anchor %s: %w", RedactID(a.ResponseID), ErrNotFound)
	}
	s.stats.anchorsWritten.Add(1)
	return nil
}

// GetAnchor loads the anchor of responseID; ErrNotFound when absent or
// expired.
func (s *RedisStore) GetAnchor(ctx context.Context, responseID string) (Anchor, error) {
	if err := validID("response id", responseID); err != nil {
		return Anchor{}, fmt.Errorf("store: get anchor: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return Anchor{}, fmt.Errorf("store: get anchor %s: %w", RedactID(responseID), err)
	}
	defer release()
	s.stats.anchorLookups.Add(1)
	a, err := s.loadAnchor(ctx, responseID)
	if err == nil && expired(a.ExpiresAt, s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return Anchor{}, fmt.Errorf("store: get anchor %s: %w", RedactID(responseID), err)
	}
	s.stats.anchorHits.Add(1)
	return a, nil
}

func (s *RedisStore) loadAnchor(ctx context.Context, responseID string) (Anchor, error) {
	v, err := s.c.Get(ctx, s.anchorKey(responseID)).Bytes()
	if err != nil {
		return Anchor{}, s.fail(err)
	}
	return decodeAnchor(responseID, v)
}

// DeleteAnchor removes the anchor of responseID and its scope record if
// that still points at responseID (checked and deleted in one script).
func (s *RedisStore) DeleteAnchor(ctx context.Context, responseID string) error {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: delete anchor: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), err)
	}
	defer release()
	a, err := s.loadAnchor(ctx, responseID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case errors.Is(err, ErrCorrupt):
		s.log.Warn("deleting undecodable anchor", "response", RedactID(responseID), "error", err)
	case err != nil:
		return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), err)
	}
	scopeKey, known := s.anchorKey(responseID), "0"
	if err == nil {
		scopeKey, known = s.scopeKey(a.ScopeKind, a.ScopeID), "1"
	}
	n, err := s.exec(ctx, deleteAnchorScript, []string{s.anchorKey(responseID), scopeKey}, responseID, known)
	if err != nil {
		return fmt.Errorf("store: delete anchor %s: %w", RedactID(responseID), s.fail(err))
	}
	if n, _ := n.(int64); n > 0 {
		s.stats.anchorsDeleted.Add(1)
	}
	return nil
}

// GetScope loads the scope record of (kind, id); ErrNotFound when absent or
// expired.
func (s *RedisStore) GetScope(ctx context.Context, kind ScopeKind, id string) (ScopeRecord, error) {
	if !kind.Valid() {
		return ScopeRecord{}, fmt.Errorf("store: get scope: %v: %w", kind, ErrInvalid)
	}
	if err := validID("scope id", id); err != nil {
		return ScopeRecord{}, fmt.Errorf("store: get scope: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return ScopeRecord{}, fmt.Errorf("store: get scope %s %s: %w", kind, RedactID(id), err)
	}
	defer release()
	s.stats.scopeLookups.Add(1)
	var r ScopeRecord
	v, err := s.c.HGet(ctx, s.scopeKey(kind, id), "r").Bytes()
	if err == nil {
		r, err = decodeScope(v)
	}
	err = s.fail(err)
	if err == nil && expired(r.ExpiresAt, s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return ScopeRecord{}, fmt.Errorf("store: get scope %s %s: %w", kind, RedactID(id), err)
	}
	return r, nil
}

// --- conversations

// PutConversation stores one turn (see PebbleStore.PutConversation).
func (s *RedisStore) PutConversation(ctx context.Context, t Turn) error {
	if err := prepareTurn(&t, s.now(), s.opts.MaxTurnBytes, s.opts.TurnTTL); err != nil {
		return err
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put conversation %s: %w", RedactID(t.ResponseID), err)
	}
	defer release()
	v := encodeTurn(make([]byte, 0, turnValueLen(&t)), &t)
	if _, err := s.exec(ctx, setScript, []string{s.turnKey(t.ResponseID)}, v, s.pxUntil(t.ExpiresAt)); err != nil {
		return fmt.Errorf("store: put conversation %s: %w", RedactID(t.ResponseID), s.fail(err))
	}
	s.stats.turnsWritten.Add(1)
	return nil
}

// GetTurn loads one turn; ErrNotFound when absent or expired.
func (s *RedisStore) GetTurn(ctx context.Context, responseID string) (Turn, error) {
	if err := validID("response id", responseID); err != nil {
		return Turn{}, fmt.Errorf("store: get turn: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return Turn{}, fmt.Errorf("store: get turn %s: %w", RedactID(responseID), err)
	}
	defer release()
	t, err := s.loadLiveTurn(ctx, responseID)
	if err != nil {
		return Turn{}, fmt.Errorf("store: get turn %s: %w", RedactID(responseID), err)
	}
	return t, nil
}

func (s *RedisStore) loadLiveTurn(ctx context.Context, responseID string) (Turn, error) {
	v, err := s.c.Get(ctx, s.turnKey(responseID)).Bytes()
	if err != nil {
		return Turn{}, s.fail(err)
	}
	t, err := decodeTurn(responseID, v)
	if err == nil && expired(t.ExpiresAt, s.now()) {
		return Turn{}, ErrNotFound
	}
	return t, err
}

// DeleteTurn removes the turn of responseID (see PebbleStore.DeleteTurn);
// every replica sees it gone at once.
func (s *RedisStore) DeleteTurn(ctx context.Context, responseID string) error {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: delete turn: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete turn %s: %w", RedactID(responseID), err)
	}
	defer release()
	if err := s.c.Del(ctx, s.turnKey(responseID)).Err(); err != nil {
		return fmt.Errorf("store: delete turn %s: %w", RedactID(responseID), s.fail(err))
	}
	return nil
}

// History returns the items of the conversation ending at responseID,
// oldest first, with PebbleStore.History's bounds and errors. It reads one
// turn per round trip (the chain is discovered as it goes).
func (s *RedisStore) History(ctx context.Context, responseID string, maxItems, maxBytes int) ([]json.RawMessage, error) {
	if err := validID("response id", responseID); err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: history %s: %w", RedactID(responseID), err)
	}
	defer release()
	s.stats.historyLookups.Add(1)
	return walkHistory(ctx, responseID, maxItems, maxBytes, func(id string) (Turn, error) { return s.loadLiveTurn(ctx, id) })
}

// --- input sessions

func (s *RedisStore) validSession(sess *InputSession) error {
	return validSession(sess, s.opts.MaxChunkBytes)
}

func (s *RedisStore) sessionDefaults(sess *InputSession) {
	sessionDefaults(sess, s.now(), s.opts.InputSessionTTL)
}

// CreateInputSession stores a new session; ErrExists if a live one has the
// id (an expired one is replaced, its chunks and answer dropped).
func (s *RedisStore) CreateInputSession(ctx context.Context, sess InputSession) error {
	if err := s.validSession(&sess); err != nil {
		return fmt.Errorf("store: create input session: %w", err)
	}
	s.sessionDefaults(&sess)
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), err)
	}
	defer release()
	token := strconv.FormatInt(time.Now().UnixNano(), 36) + ":" + stamp(sess.LastActivity)
	v, err := s.exec(ctx, createSessionScript,
		[]string{s.sessionKey(sess.ID), s.chunksKey(sess.ID), s.resultKey(sess.ID), s.indexKey()},
		encodeSession(&sess), stamp(sess.LastActivity), stamp(sess.ExpiresAt), s.pxUntil(sess.ExpiresAt), stamp(s.now()), sess.ID, token)
	if err != nil {
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), s.fail(err))
	}
	if n, _ := v.(int64); n == 0 {
		return fmt.Errorf("store: create input session %s: %w", RedactID(sess.ID), ErrExists)
	}
	s.stats.sessionsWritten.Add(1)
	return nil
}

// GetInputSession loads a session; ErrNotFound when absent or expired.
func (s *RedisStore) GetInputSession(ctx context.Context, id string) (InputSession, error) {
	if err := validID("session id", id); err != nil {
		return InputSession{}, fmt.Errorf("store: get input session: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return InputSession{}, fmt.Errorf("store: get input session %s: %w", RedactID(id), err)
	}
	defer release()
	sess, err := s.loadLiveSession(ctx, id)
	if err != nil {
		return InputSession{}, fmt.Errorf("store: get input session %s: %w", RedactID(id), err)
	}
	return sess, nil
}

func (s *RedisStore) loadLiveSession(ctx context.Context, id string) (InputSession, error) {
	v, err := s.c.HGet(ctx, s.sessionKey(id), "r").Bytes()
	if errors.Is(err, redis.Nil) {
		// Absent: closed for a reason another replica recorded, or gone.
		why, err := s.c.Get(ctx, s.closedKey(id)).Bytes()
		if err == nil {
			return InputSession{}, &InputSessionClosedError{ID: id, Reason: why}
		}
		if !errors.Is(err, redis.Nil) {
			return InputSession{}, s.fail(err)
		}
		return InputSession{}, ErrNotFound
	}
	if err != nil {
		return InputSession{}, s.fail(err)
	}
	sess, err := decodeSession(id, v)
	if err == nil && expired(sess.ExpiresAt, s.now()) {
		return InputSession{}, ErrNotFound
	}
	return sess, err
}

// UpdateInputSession replaces a live session's record.
func (s *RedisStore) UpdateInputSession(ctx context.Context, sess InputSession) error {
	return s.writeSession(ctx, "update input session", sess, nil, 0, nil)
}

// UpdateInputSessionIf is UpdateInputSession that fails with ErrConflict
// unless the stored record's LastActivity equals prev.
func (s *RedisStore) UpdateInputSessionIf(ctx context.Context, sess InputSession, prev time.Time) error {
	return s.writeSession(ctx, "update input session", sess, &prev, 0, nil)
}

// PutChunk stores a chunk and the session's new record in one script.
func (s *RedisStore) PutChunk(ctx context.Context, sessionID string, seq uint64, c Chunk, sessionUpdate InputSession) error {
	return s.putChunk(ctx, sessionID, seq, c, sessionUpdate, nil)
}

// PutChunkIf is PutChunk that fails with ErrConflict unless the stored
// record's LastActivity equals prev.
func (s *RedisStore) PutChunkIf(ctx context.Context, sessionID string, seq uint64, c Chunk, sessionUpdate InputSession, prev time.Time) error {
	return s.putChunk(ctx, sessionID, seq, c, sessionUpdate, &prev)
}

func (s *RedisStore) putChunk(ctx context.Context, sessionID string, seq uint64, c Chunk, up InputSession, prev *time.Time) error {
	if err := validID("session id", sessionID); err != nil {
		return fmt.Errorf("store: put chunk: %w", err)
	}
	if up.ID == "" {
		up.ID = sessionID
	}
	if up.ID != sessionID {
		return fmt.Errorf("store: put chunk %s/%d: session update names another session: %w", RedactID(sessionID), seq, ErrInvalid)
	}
	if len(c.Payload) > s.opts.MaxChunkBytes {
		return fmt.Errorf("store: put chunk %s/%d: payload of %d bytes exceeds %d: %w",
			RedactID(sessionID), seq, len(c.Payload), s.opts.MaxChunkBytes, ErrTooLarge)
	}
	c.Seq = seq
	if err := s.writeSession(ctx, fmt.Sprintf("put chunk %s/%d", RedactID(sessionID), seq), up, prev, seq, &c); err != nil {
		return err
	}
	s.stats.chunksWritten.Add(1)
	return nil
}

// writeSession runs writeSessionScript: the record (and a chunk), optionally
// conditional on prev.
func (s *RedisStore) writeSession(ctx context.Context, op string, sess InputSession, prev *time.Time, seq uint64, c *Chunk) error {
	if err := s.validSession(&sess); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	what := op
	if c == nil {
		what = op + " " + RedactID(sess.ID)
	}
	s.sessionDefaults(&sess)
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	defer release()
	expect, seqArg, chunk := "", "", []byte(nil)
	if prev != nil {
		expect = stamp(*prev)
	}
	if c != nil {
		seqArg, chunk = strconv.FormatUint(seq, 10), encodeChunk(c)
	}
	v, err := s.exec(ctx, writeSessionScript,
		[]string{s.sessionKey(sess.ID), s.chunksKey(sess.ID), s.resultKey(sess.ID)},
		encodeSession(&sess), stamp(sess.LastActivity), stamp(sess.ExpiresAt), s.pxUntil(sess.ExpiresAt), stamp(s.now()),
		expect, seqArg, chunk)
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, s.fail(err))
	}
	switch n, _ := v.(int64); n {
	case 0:
		return fmt.Errorf("store: %s: %w", what, ErrNotFound)
	case 2:
		return fmt.Errorf("store: %s: %w", what, ErrConflict)
	}
	s.stats.sessionsWritten.Add(1)
	return nil
}

// Chunks returns a live session's chunks in sequence order (the session and
// its chunks read in one transaction).
func (s *RedisStore) Chunks(ctx context.Context, sessionID string) ([]Chunk, error) {
	if err := validID("session id", sessionID); err != nil {
		return nil, fmt.Errorf("store: chunks: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), err)
	}
	defer release()
	var rec *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err = s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, s.sessionKey(sessionID), "x")
		all = p.HGetAll(ctx, s.chunksKey(sessionID))
		return nil
	})
	if err == nil || errors.Is(err, redis.Nil) {
		err = rec.Err()
	}
	if err == nil && !liveStamp(rec.Val(), s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: chunks %s: %w", RedactID(sessionID), s.fail(err))
	}
	chunks := make([]Chunk, 0, len(all.Val()))
	for field, v := range all.Val() {
		seq, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("store: chunks %s: malformed field: %w", RedactID(sessionID), ErrCorrupt)
		}
		c, err := decodeChunk(seq, []byte(v))
		if err != nil {
			return nil, fmt.Errorf("store: chunks %s/%d: %w", RedactID(sessionID), seq, err)
		}
		chunks = append(chunks, c)
	}
	slices.SortFunc(chunks, func(a, b Chunk) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return chunks, nil
}

// liveStamp reports whether a record expiring at the stamp x is live at now.
func liveStamp(x string, now time.Time) bool {
	if x == "~" {
		return true
	}
	n, err := strconv.ParseInt(x, 10, 64)
	return err == nil && now.UnixNano() < n
}

// DeleteInputSession removes a session, its chunks and its answer (the
// answer of one closed with CloseInputSession stays for its readers).
func (s *RedisStore) DeleteInputSession(ctx context.Context, id string) error {
	if err := validID("session id", id); err != nil {
		return fmt.Errorf("store: delete input session: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete input session %s: %w", RedactID(id), err)
	}
	defer release()
	if _, err := s.exec(ctx, deleteSessionScript, []string{s.sessionKey(id), s.chunksKey(id), s.resultKey(id), s.indexKey()}, id); err != nil {
		return fmt.Errorf("store: delete input session %s: %w", RedactID(id), s.fail(err))
	}
	return nil
}

// CloseInputSession removes a session and its chunks, and leaves why it
// was closed for ttl, as long as its answer's parts
// (SharedInputSessionStore). A session closed before keeps its first
// reason: the call then fails with an *InputSessionClosedError holding it.
func (s *RedisStore) CloseInputSession(ctx context.Context, id string, reason []byte, ttl time.Duration) error {
	if err := validID("session id", id); err != nil {
		return fmt.Errorf("store: close input session: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: close input session %s: %w", RedactID(id), err)
	}
	defer release()
	keys := []string{s.sessionKey(id), s.chunksKey(id), s.resultKey(id), s.indexKey(), s.closedKey(id)}
	v, err := s.exec(ctx, closeSessionScript, keys, id, reason, max(ttl.Milliseconds(), 1))
	if err != nil {
		return fmt.Errorf("store: close input session %s: %w", RedactID(id), s.fail(err))
	}
	if why, ok := v.(string); ok {
		return fmt.Errorf("store: close input session %s: %w", RedactID(id), &InputSessionClosedError{ID: id, Reason: []byte(why)})
	}
	if r, _ := v.(int64); r == 0 {
		return fmt.Errorf("store: close input session %s: %w", RedactID(id), ErrNotFound)
	}
	return nil
}

// ListInputSessions returns every live session in id order. Ids whose
// session has expired are dropped from the index as they are found.
func (s *RedisStore) ListInputSessions(ctx context.Context) ([]InputSession, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list input sessions: %w", err)
	}
	defer release()
	ids, err := s.c.SMembers(ctx, s.indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list input sessions: %w", s.fail(err))
	}
	slices.Sort(ids)
	now := s.now()
	out := []InputSession{}
	var gone []any
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 256)]
		ids = ids[len(batch):]
		cmds := make([]*redis.StringCmd, len(batch))
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range batch {
				cmds[i] = p.HGet(ctx, s.sessionKey(id), "r")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("store: list input sessions: %w", s.fail(err))
		}
		for i, id := range batch {
			v, err := cmds[i].Bytes()
			if errors.Is(err, redis.Nil) {
				gone = append(gone, id)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("store: list input sessions: %w", s.fail(err))
			}
			sess, err := decodeSession(id, v)
			if err != nil {
				return nil, fmt.Errorf("store: list input sessions: %s: %w", RedactID(id), err)
			}
			if !expired(sess.ExpiresAt, now) {
				out = append(out, sess)
			}
		}
	}
	if len(gone) > 0 {
		_ = s.c.SRem(ctx, s.indexKey(), gone...).Err()
	}
	return out, nil
}

// AppendResult appends part number n of a session's answer.
func (s *RedisStore) AppendResult(ctx context.Context, sessionID string, n int64, p ResultPart) error {
	if err := validID("session id", sessionID); err != nil {
		return fmt.Errorf("store: append result: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: append result %s/%d: %w", RedactID(sessionID), n, err)
	}
	defer release()
	v, err := s.exec(ctx, appendResultScript, []string{s.sessionKey(sessionID), s.resultKey(sessionID), s.closedKey(sessionID)}, n, string(p.Kind), p.Data)
	if err != nil {
		return fmt.Errorf("store: append result %s/%d: %w", RedactID(sessionID), n, s.fail(err))
	}
	var closed error
	if l, ok := v.([]any); ok && len(l) == 2 {
		why, _ := l[1].(string)
		closed = &InputSessionClosedError{ID: sessionID, Reason: []byte(why), Appended: true}
		v = l[0]
	}
	switch r, _ := v.(int64); r {
	case 0:
		return fmt.Errorf("store: append result %s/%d: %w", RedactID(sessionID), n, ErrNotFound)
	case 2:
		return fmt.Errorf("store: append result %s/%d: a part is missing before it: %w", RedactID(sessionID), n, ErrCorrupt)
	}
	if closed != nil {
		return fmt.Errorf("store: append result %s/%d: %w", RedactID(sessionID), n, closed)
	}
	return nil
}

// ReadResult returns the answer's parts after cursor, blocking up to wait
// (XREAD BLOCK) for the first one.
func (s *RedisStore) ReadResult(ctx context.Context, sessionID, cursor string, wait time.Duration) ([]ResultPart, string, error) {
	if err := validID("session id", sessionID); err != nil {
		return nil, cursor, fmt.Errorf("store: read result: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return nil, cursor, fmt.Errorf("store: read result %s: %w", RedactID(sessionID), err)
	}
	defer release()
	from := cursor
	if from == "" {
		from = "0"
	}
	block := time.Duration(-1)
	if wait > 0 {
		block = max(wait, time.Millisecond)
	}
	res, err := s.c.XRead(ctx, &redis.XReadArgs{Streams: []string{s.resultKey(sessionID), from}, Count: 256, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, cursor, nil
	}
	if err != nil {
		return nil, cursor, fmt.Errorf("store: read result %s: %w", RedactID(sessionID), s.fail(err))
	}
	var parts []ResultPart
	for _, st := range res {
		for _, m := range st.Messages {
			k, _ := m.Values["k"].(string)
			d, _ := m.Values["d"].(string)
			if len(k) != 1 {
				return nil, cursor, fmt.Errorf("store: read result %s: malformed part: %w", RedactID(sessionID), ErrCorrupt)
			}
			parts = append(parts, ResultPart{Kind: k[0], Data: []byte(d)})
			cursor = m.ID
		}
	}
	return parts, cursor, nil
}

// --- shared target health (gateway/upstream.SharedHealth)

// PutTargetHealth records that the target (upstream, model; model "" is the
// whole upstream) is to be skipped for d, because of reason, for every
// replica; a longer skip already recorded is kept. The key expires when the
// skip ends, so nothing has to clear it.
func (s *RedisStore) PutTargetHealth(ctx context.Context, upstream, model string, d time.Duration, reason string) error {
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put target health: %w", err)
	}
	defer release()
	ms := max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
	if err := putTargetScript.Run(ctx, s.c, []string{s.targetKey(upstream, model)}, ms, reason).Err(); err != nil {
		return fmt.Errorf("store: put target health: %w", s.fail(err))
	}
	return nil
}

// GetTargetHealth returns how long the target is still to be skipped (0:
// not at all) and why.
func (s *RedisStore) GetTargetHealth(ctx context.Context, upstream, model string) (time.Duration, string, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("store: get target health: %w", err)
	}
	defer release()
	key := s.targetKey(upstream, model)
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		ttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) || err == nil && get.Err() == redis.Nil {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("store: get target health: %w", s.fail(err))
	}
	d := ttl.Val()
	if d <= 0 {
		return 0, "", nil
	}
	return d, get.Val(), nil
}

// ClearTargetHealth forgets the target's shared skip (it served a request
// again).
func (s *RedisStore) ClearTargetHealth(ctx context.Context, upstream, model string) error {
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: clear target health: %w", err)
	}
	defer release()
	if err := s.c.Del(ctx, s.targetKey(upstream, model)).Err(); err != nil {
		return fmt.Errorf("store: clear target health: %w", s.fail(err))
	}
	return nil
}

// String names the store for logs.
func (s *RedisStore) String() string {
	return "redis " + s.addr + " (prefix " + strings.TrimSpace(s.p) + ")"
}
