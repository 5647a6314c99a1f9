package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps a stream log in two keys that expire together:
//
//	l:<response_id>   the record (hash: r = record, x = expiry stamp,
//	                  c = "1" once CancelStreamLog asked to cancel,
//	                  w = stamp of the last put, f = FollowStreamLog's mark,
//	                  i = the highest IssuedBelow put, in decimal)
//	e:<response_id>   its events (sorted set: score = sequence number,
//	                  member = the number as 8 bytes big-endian, then the
//	                  encoded event)
//
// and, once DeleteStreamLog removed a live record, its tombstone
//
//	ld:<response_id>  "1", expiring when the record would have
//
// which PutStreamLogUnlessDeleted, AppendStreamEvents, FollowStreamLog and
// GetStreamLog read on a miss (ErrStreamLogDeleted), and PutStreamLog
// removes.
//
// The record key expires with the record's ExpiresAt (PEXPIRE, relative to
// the store's clock, as every record); the events key gets the record's
// remaining time on every put and append. The cancel flag, the follow mark
// and IssuedBelow are fields of their own so that a put, which rewrites r,
// keeps them without reading them first (IssuedBelow outside r also leaves
// r readable by a replica of an earlier version during a rolling upgrade).
var (
	_ StreamLogStore       = (*RedisStore)(nil)
	_ SharedStreamLogStore = (*RedisStore)(nil)
)

func (s *RedisStore) streamLogKey(id string) string        { return s.p + "l:" + id }
func (s *RedisStore) streamEventsKey(id string) string     { return s.p + "e:" + id }
func (s *RedisStore) streamLogDeletedKey(id string) string { return s.p + "ld:" + id }

// streamLogKeys are the keys of the stream-log scripts: record, events,
// tombstone.
func (s *RedisStore) streamLogKeys(id string) []string {
	return []string{s.streamLogKey(id), s.streamEventsKey(id), s.streamLogDeletedKey(id)}
}

// putStreamLogScript: KEYS record, events, tombstone; ARGV record value, x,
// px, now, "1" to set the cancel flag, "1" to refuse a deleted record,
// IssuedBelow. A record that is absent or expired is replaced with its
// events, cancel flag, follow mark and IssuedBelow dropped; a live one keeps
// them (IssuedBelow raised, never lowered). 0: refused (the
// tombstone is there); else 1, and a tombstone is gone.
var putStreamLogScript = redis.NewScript(luaPrelude + `
if redis.call('EXISTS', KEYS[3]) == 1 then
  if ARGV[6] == '1' then return 0 end
  redis.call('DEL', KEYS[3])
end
if not live(redis.call('HGET', KEYS[1], 'x'), ARGV[4]) then
  redis.call('DEL', KEYS[1], KEYS[2])
end
redis.call('HSET', KEYS[1], 'r', ARGV[1], 'x', ARGV[2], 'w', ARGV[4])
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'c', '1') end
if tonumber(ARGV[7]) > (tonumber(redis.call('HGET', KEYS[1], 'i')) or 0) then redis.call('HSET', KEYS[1], 'i', ARGV[7]) end
expire(KEYS[1], ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then expire(KEYS[2], ARGV[3]) end
return 1
`)

// appendStreamEventsScript: KEYS record, events, tombstone; ARGV now,
// lowest score, highest score, then a score and a member per event. 0: the
// record is absent or expired; -1: deleted; else 1 + the number of events
// added (those whose number is stored already are skipped).
var appendStreamEventsScript = redis.NewScript(luaPrelude + `
if not live(redis.call('HGET', KEYS[1], 'x'), ARGV[1]) then
  if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
  return 0
end
local have = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[3])) do
  have[string.sub(m, 1, 8)] = true
end
local added = 0
for i = 4, #ARGV, 2 do
  local m = ARGV[i + 1]
  if not have[string.sub(m, 1, 8)] then
    redis.call('ZADD', KEYS[2], ARGV[i], m)
    added = added + 1
  end
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) elseif ttl == -1 then redis.call('PERSIST', KEYS[2]) end
return 1 + added
`)

// cancelStreamLogScript: KEYS record; ARGV now. 0: absent or expired.
var cancelStreamLogScript = redis.NewScript(luaPrelude + `
if not live(redis.call('HGET', KEYS[1], 'x'), ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'c', '1')
return 1
`)

// followStreamLogScript: KEYS record, tombstone; ARGV now, until. 0:
// absent or expired; -1: deleted; 1: marked (a later mark is kept).
var followStreamLogScript = redis.NewScript(luaPrelude + `
if not live(redis.call('HGET', KEYS[1], 'x'), ARGV[1]) then
  if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
  return 0
end
local f = redis.call('HGET', KEYS[1], 'f')
if not f or after(ARGV[2], f) then redis.call('HSET', KEYS[1], 'f', ARGV[2]) end
return 1
`)

// deleteStreamLogScript: KEYS record, events, tombstone; ARGV now. Both
// keys go; a live record leaves its tombstone, expiring when the record
// would have. Run again, it changes nothing.
var deleteStreamLogScript = redis.NewScript(luaPrelude + `
local ttl = -2
if live(redis.call('HGET', KEYS[1], 'x'), ARGV[1]) then ttl = redis.call('PTTL', KEYS[1]) end
redis.call('DEL', KEYS[1], KEYS[2])
if ttl > 0 then redis.call('SET', KEYS[3], '1', 'PX', ttl) elseif ttl == -1 then redis.call('SET', KEYS[3], '1') end
return 1
`)

// PutStreamLog is PebbleStore.PutStreamLog on Redis: one script replaces
// the record (keeping a live one's cancel flag, follow mark and events,
// removing a tombstone) and sets both keys' expiry.
func (s *RedisStore) PutStreamLog(ctx context.Context, l StreamLog) error {
	return s.putStreamLog(ctx, l, false)
}

// PutStreamLogUnlessDeleted is PutStreamLog that leaves a deleted record
// deleted: ErrStreamLogDeleted while its tombstone lives.
func (s *RedisStore) PutStreamLogUnlessDeleted(ctx context.Context, l StreamLog) error {
	return s.putStreamLog(ctx, l, true)
}

func (s *RedisStore) putStreamLog(ctx context.Context, l StreamLog, unlessDeleted bool) error {
	if err := prepareStreamLog(&l, s.now()); err != nil {
		return fmt.Errorf("store: put stream log: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), err)
	}
	defer release()
	cancel, refuse := "0", "0"
	if l.CancelRequested {
		cancel = "1"
	}
	if unlessDeleted {
		refuse = "1"
	}
	issued := l.IssuedBelow
	l.IssuedBelow = 0 // a field of its own (i), not in r
	v, err := s.exec(ctx, putStreamLogScript, s.streamLogKeys(l.ResponseID),
		encodeStreamLog(&l), stamp(l.ExpiresAt), s.pxUntil(l.ExpiresAt), stamp(s.now()), cancel, refuse,
		strconv.FormatInt(issued, 10))
	if err != nil {
		return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), s.fail(err))
	}
	if n, _ := v.(int64); n == 0 {
		return fmt.Errorf("store: put stream log %s: %w", RedactID(l.ResponseID), ErrStreamLogDeleted)
	}
	s.stats.streamLogsWritten.Add(1)
	return nil
}

// GetStreamLog loads a record; ErrNotFound when absent or expired,
// ErrStreamLogDeleted when its tombstone says it was deleted.
func (s *RedisStore) GetStreamLog(ctx context.Context, responseID string) (StreamLog, error) {
	if err := validID("response id", responseID); err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log %s: %w", RedactID(responseID), err)
	}
	defer release()
	vals, err := s.c.HMGet(ctx, s.streamLogKey(responseID), "r", "c", "w", "f", "i").Result()
	if err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log %s: %w", RedactID(responseID), s.fail(err))
	}
	r, _ := vals[0].(string)
	if vals[0] == nil {
		err := ErrNotFound
		if n, xerr := s.c.Exists(ctx, s.streamLogDeletedKey(responseID)).Result(); xerr != nil {
			err = s.fail(xerr)
		} else if n == 1 {
			err = ErrStreamLogDeleted
		}
		return StreamLog{}, fmt.Errorf("store: get stream log %s: %w", RedactID(responseID), err)
	}
	l, err := decodeStreamLog(responseID, []byte(r))
	if err == nil && expired(l.ExpiresAt, s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return StreamLog{}, fmt.Errorf("store: get stream log %s: %w", RedactID(responseID), err)
	}
	if c, _ := vals[1].(string); c == "1" {
		l.CancelRequested = true
	}
	w, _ := vals[2].(string)
	f, _ := vals[3].(string)
	l.SavedAt, l.FollowedUntil = stampTime(w), stampTime(f)
	if i, _ := vals[4].(string); i != "" {
		l.IssuedBelow, _ = strconv.ParseInt(i, 10, 64)
	}
	return l, nil
}

// stampTime reads a stamp back (zero for none or "~").
func stampTime(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return nanosTime(n)
}

// AppendStreamEvents is PebbleStore.AppendStreamEvents on Redis: one script
// checks the record, skips the numbers already stored and adds the rest.
func (s *RedisStore) AppendStreamEvents(ctx context.Context, responseID string, first int64, events []StreamEvent) error {
	if err := validStreamAppend(responseID, first, len(events)); err != nil {
		return fmt.Errorf("store: append stream events: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, err)
	}
	defer release()
	last := first + int64(len(events)) - 1
	if len(events) == 0 {
		last = first
	}
	args := make([]any, 0, 3+2*len(events))
	args = append(args, stamp(s.now()), strconv.FormatInt(first, 10), strconv.FormatInt(last, 10))
	for i := range events {
		ev := events[i]
		ev.Seq = first + int64(i)
		v := encodeStreamEvent(&ev)
		m := make([]byte, 0, 8+len(v))
		m = binary.BigEndian.AppendUint64(m, uint64(ev.Seq))
		args = append(args, strconv.FormatInt(ev.Seq, 10), append(m, v...))
	}
	v, err := s.exec(ctx, appendStreamEventsScript, s.streamLogKeys(responseID), args...)
	if err != nil {
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, s.fail(err))
	}
	n, _ := v.(int64)
	switch n {
	case 0:
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, ErrNotFound)
	case -1:
		return fmt.Errorf("store: append stream events %s/%d: %w", RedactID(responseID), first, ErrStreamLogDeleted)
	}
	s.stats.streamEventsWritten.Add(uint64(n - 1))
	return nil
}

// StreamEvents is PebbleStore.StreamEvents on Redis: the record's expiry
// and the events from after+1 (ZRANGEBYSCORE … LIMIT) read in one
// transaction.
func (s *RedisStore) StreamEvents(ctx context.Context, responseID string, after int64, limit int) ([]StreamEvent, error) {
	if err := validID("response id", responseID); err != nil {
		return nil, fmt.Errorf("store: stream events: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), err)
	}
	defer release()
	by := &redis.ZRangeBy{Min: "(" + strconv.FormatInt(max(after, -1), 10), Max: "+inf"}
	if limit > 0 {
		by.Count = int64(limit)
	}
	var rec *redis.StringCmd
	var evs *redis.StringSliceCmd
	_, err = s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, s.streamLogKey(responseID), "x")
		evs = p.ZRangeByScore(ctx, s.streamEventsKey(responseID), by)
		return nil
	})
	if err == nil || errors.Is(err, redis.Nil) {
		err = rec.Err()
	}
	if err == nil && !liveStamp(rec.Val(), s.now()) {
		err = ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: stream events %s: %w", RedactID(responseID), s.fail(err))
	}
	events := make([]StreamEvent, 0, len(evs.Val()))
	for _, m := range evs.Val() {
		if len(m) < 8 {
			return nil, fmt.Errorf("store: stream events %s: malformed member: %w", RedactID(responseID), ErrCorrupt)
		}
		seq := int64(binary.BigEndian.Uint64([]byte(m[:8])))
		ev, err := decodeStreamEvent(seq, []byte(m[8:]))
		if err != nil {
			return nil, fmt.Errorf("store: stream events %s/%d: %w", RedactID(responseID), seq, err)
		}
		events = append(events, ev)
	}
	return events, nil
}

// CancelStreamLog sets the live record's cancel flag (a field of its own,
// which PutStreamLog keeps). ErrNotFound when absent or expired.
func (s *RedisStore) CancelStreamLog(ctx context.Context, responseID string) error {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: cancel stream log: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: cancel stream log %s: %w", RedactID(responseID), err)
	}
	defer release()
	v, err := s.exec(ctx, cancelStreamLogScript, []string{s.streamLogKey(responseID)}, stamp(s.now()))
	if err != nil {
		return fmt.Errorf("store: cancel stream log %s: %w", RedactID(responseID), s.fail(err))
	}
	if n, _ := v.(int64); n == 0 {
		return fmt.Errorf("store: cancel stream log %s: %w", RedactID(responseID), ErrNotFound)
	}
	s.stats.streamLogsWritten.Add(1)
	return nil
}

// FollowStreamLog sets the live record's follow mark to until unless it
// holds a later one.
func (s *RedisStore) FollowStreamLog(ctx context.Context, responseID string, until time.Time) error {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: follow stream log: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: follow stream log %s: %w", RedactID(responseID), err)
	}
	defer release()
	v, err := s.exec(ctx, followStreamLogScript, []string{s.streamLogKey(responseID), s.streamLogDeletedKey(responseID)},
		stamp(s.now()), stamp(until))
	if err != nil {
		return fmt.Errorf("store: follow stream log %s: %w", RedactID(responseID), s.fail(err))
	}
	switch n, _ := v.(int64); n {
	case 0:
		return fmt.Errorf("store: follow stream log %s: %w", RedactID(responseID), ErrNotFound)
	case -1:
		return fmt.Errorf("store: follow stream log %s: %w", RedactID(responseID), ErrStreamLogDeleted)
	}
	return nil
}

// DeleteStreamLog removes the record and its events, leaving a live
// record's tombstone. Deleting an absent log is not an error.
func (s *RedisStore) DeleteStreamLog(ctx context.Context, responseID string) error {
	if err := validID("response id", responseID); err != nil {
		return fmt.Errorf("store: delete stream log: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete stream log %s: %w", RedactID(responseID), err)
	}
	defer release()
	if _, err := s.exec(ctx, deleteStreamLogScript, s.streamLogKeys(responseID), stamp(s.now())); err != nil {
		return fmt.Errorf("store: delete stream log %s: %w", RedactID(responseID), s.fail(err))
	}
	return nil
}
