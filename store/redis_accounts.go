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

// Sluice keys and usage totals in Redis (accounts.go has the records and
// their rules), so that every replica agrees on the run-time keys and
// counts usage into the same totals:
//
//	keys                     hash: key name → KeyRecord (JSON)
//	u:<YYYY-MM-DD>:<counter> hash per day and counter (requests, input, output, cached, reasoning):
//	                         key NUL route NUL target NUL model [NUL key id] → total (HINCRBY);
//	                         without a key id (a config key's, or one an older version wrote) the field
//	                         ends at the model, as it always did
//	ub:<batch>               a batch of usage added (AddUsages), kept usageBatchTTL
//
// Neither keys nor totals expire, as in Pebble.

var (
	_ KeyStore   = (*RedisStore)(nil)
	_ UsageStore = (*RedisStore)(nil)
)

// usageCounters are the per-day hashes, in UsageRecord's field order.
var usageCounters = [...]string{"requests", "input", "output", "cached", "reasoning"}

func (s *RedisStore) keysKey() string { return s.p + "keys" }

func (s *RedisStore) usageDayKey(day, counter string) string { return s.p + "u:" + day + ":" + counter }

// createKeyScript: KEYS keys; ARGV name, record. 0: the name is taken.
var createKeyScript = redis.NewScript(`return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])`)

// updateKeyScript: KEYS keys; ARGV name, record, the secret hash the key
// must still have. 0: no such key (deleted, or created again with another
// secret). One script, so that no delete falls between the check and the
// write, whichever replica deletes.
var updateKeyScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or cjson.decode(cur).key_sha256 ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// deleteKeyScript: KEYS keys; ARGV name. 0: absent.
var deleteKeyScript = redis.NewScript(`return redis.call('HDEL', KEYS[1], ARGV[1])`)

// addUsagesScript: KEYS the batch's token, then the five counter hashes of
// each total's day; ARGV how long the token is kept (ms, 0: no token),
// then each total's field and five increments. 0: the batch was added
// before (a retry whose first try ran but whose reply was lost), nothing
// is added again.
var addUsagesScript = redis.NewScript(`
if ARGV[1] ~= '0' and not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 0 end
for r = 0, (#ARGV - 1) / 6 - 1 do
  local field = ARGV[2 + r * 6]
  for i = 1, 5 do
    local n = tonumber(ARGV[2 + r * 6 + i])
    if n ~= 0 then redis.call('HINCRBY', KEYS[1 + r * 5 + i], field, n) end
  end
end
return 1
`)

// usageBatchTTL is how long a batch's token is kept: a retry comes within
// seconds of Redis answering again (the gateway's usage batch waits at most
// 10 s between tries), and a batch whose tries Redis refused at once was
// never run, so an hour is ample; one small key per flush is what it costs.
const usageBatchTTL = time.Hour

// CreateKey stores a new key; ErrExists when one has that name.
func (s *RedisStore) CreateKey(ctx context.Context, k KeyRecord) error { return s.putKey(ctx, k, true) }

// UpdateKey replaces a key if it still has the secret hash k.SHA256;
// ErrNotFound otherwise.
func (s *RedisStore) UpdateKey(ctx context.Context, k KeyRecord) error {
	return s.putKey(ctx, k, false)
}

// putKey creates the key named k.Name (create) or replaces it (otherwise).
func (s *RedisStore) putKey(ctx context.Context, k KeyRecord, create bool) error {
	op := "update"
	if create {
		op = "create"
	}
	if err := validName("key name", k.Name); err != nil {
		return fmt.Errorf("store: %s key: %w", op, err)
	}
	if len(k.SHA256) != 64 {
		return fmt.Errorf("store: %s key %q: %w: key_sha256 must be 64 hex digits", op, k.Name, ErrInvalid)
	}
	v, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("store: %s key %q: %w", op, k.Name, err)
	}
	sc, args := updateKeyScript, []any{k.Name, v, k.SHA256}
	if create {
		sc, args = createKeyScript, []any{k.Name, v}
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: %s key %q: %w", op, k.Name, err)
	}
	defer release()
	n, err := s.exec(ctx, sc, []string{s.keysKey()}, args...)
	if err != nil {
		return fmt.Errorf("store: %s key %q: %w", op, k.Name, s.fail(err))
	}
	if n, _ := n.(int64); n == 0 {
		if create {
			return fmt.Errorf("store: create key %q: %w", k.Name, ErrExists)
		}
		return fmt.Errorf("store: update key %q: %w", k.Name, ErrNotFound)
	}
	return nil
}

// GetKey loads a key by name.
func (s *RedisStore) GetKey(ctx context.Context, name string) (KeyRecord, error) {
	var k KeyRecord
	if err := validName("key name", name); err != nil {
		return k, fmt.Errorf("store: get key: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return k, fmt.Errorf("store: get key %q: %w", name, err)
	}
	defer release()
	v, err := s.c.HGet(ctx, s.keysKey(), name).Bytes()
	if err == nil {
		err = decodeJSON(v, &k)
	}
	if err != nil {
		return KeyRecord{}, fmt.Errorf("store: get key %q: %w", name, s.fail(err))
	}
	return k, nil
}

// DeleteKey removes a key; ErrNotFound when absent.
func (s *RedisStore) DeleteKey(ctx context.Context, name string) error {
	if err := validName("key name", name); err != nil {
		return fmt.Errorf("store: delete key: %w", err)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete key %q: %w", name, err)
	}
	defer release()
	n, err := s.exec(ctx, deleteKeyScript, []string{s.keysKey()}, name)
	if err != nil {
		return fmt.Errorf("store: delete key %q: %w", name, s.fail(err))
	}
	if n, _ := n.(int64); n == 0 {
		return fmt.Errorf("store: delete key %q: %w", name, ErrNotFound)
	}
	return nil
}

// ListKeys returns every key, by name.
func (s *RedisStore) ListKeys(ctx context.Context) ([]KeyRecord, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	defer release()
	all, err := s.c.HGetAll(ctx, s.keysKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", s.fail(err))
	}
	var out []KeyRecord
	for _, v := range all {
		var k KeyRecord
		if err := decodeJSON([]byte(v), &k); err != nil {
			return nil, fmt.Errorf("store: list keys: %w", err)
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b KeyRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// AddUsage adds u to its day's totals (see AddUsages).
func (s *RedisStore) AddUsage(ctx context.Context, u UsageRecord) error {
	return s.AddUsages(ctx, "", []UsageRecord{u})[0]
}

// AddUsages adds each of us to its day's totals in one script: atomic,
// whichever replicas add at once, and all or nothing. batch ("": none) is
// the idempotency token of the write: Redis keeps it for usageBatchTTL, and
// a write under a token it has is not added again. The gateway retries a
// failed write under the same token with the same totals, so that a write
// that timed out after Redis got it (a stalled Redis runs it when it
// resumes) counts once.
//
// errs[i] is us[i]'s outcome: an error wrapping ErrInvalid when that record
// was left out (a name the store refuses) and the others were added; the
// write's error, for every other record, when the write failed.
func (s *RedisStore) AddUsages(ctx context.Context, batch string, us []UsageRecord) []error {
	errs := make([]error, len(us))
	keys := []string{s.p + "ub:" + batch}
	args := []any{int64(0)}
	if batch != "" {
		args[0] = usageBatchTTL.Milliseconds()
	}
	for i, u := range us {
		if err := validUsage(u); err != nil {
			errs[i] = fmt.Errorf("store: add usage: %w", err)
			continue
		}
		for _, c := range usageCounters {
			keys = append(keys, s.usageDayKey(u.Day, c))
		}
		field := u.Key + "\x00" + u.Route + "\x00" + u.Target + "\x00" + u.Model
		if u.KeyID != "" {
			field += "\x00" + u.KeyID
		}
		args = append(args, field,
			u.Requests, u.InputTokens, u.OutputTokens, u.CachedTokens, u.ReasoningTokens)
	}
	failRest := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("store: add usage: %w", err)
			}
		}
		return errs
	}
	if len(keys) == 1 {
		return errs // nothing valid to add
	}
	release, err := s.begin(ctx)
	if err != nil {
		return failRest(err)
	}
	defer release()
	if _, err := s.exec(ctx, addUsagesScript, keys, args...); err != nil {
		return failRest(s.fail(err))
	}
	return errs
}

// Usage returns the totals of days from..to (inclusive) of key, or of
// every key when key is "", ordered by day, then key, route, target and
// model (as PebbleStore).
func (s *RedisStore) Usage(ctx context.Context, key, from, to string) ([]UsageRecord, error) {
	if err := errors.Join(validDay(from), validDay(to)); err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	first, _ := time.Parse(time.DateOnly, from)
	last, _ := time.Parse(time.DateOnly, to)
	if !UsageRangeAllowed(first, last) {
		return nil, fmt.Errorf("store: usage: %w: to may be at most %d days after from", ErrInvalid, MaxUsageDays)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer release()
	var out []UsageRecord
	for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
		day := d.Format(time.DateOnly)
		cmds := make([]*redis.MapStringStringCmd, len(usageCounters))
		if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range usageCounters {
				cmds[i] = p.HGetAll(ctx, s.usageDayKey(day, c))
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("store: usage: %w", s.fail(err))
		}
		byField := map[string]*UsageRecord{}
		for i, cmd := range cmds {
			for field, v := range cmd.Val() {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("store: usage: %w: counter %q", ErrCorrupt, v)
				}
				u := byField[field]
				if u == nil {
					parts := strings.Split(field, "\x00")
					if len(parts) != 4 && len(parts) != 5 { // 4: no key id
						return nil, fmt.Errorf("store: usage: %w: malformed field", ErrCorrupt)
					}
					u = &UsageRecord{Day: day, Key: parts[0], Route: parts[1], Target: parts[2], Model: parts[3]}
					if len(parts) == 5 {
						u.KeyID = parts[4]
					}
					byField[field] = u
				}
				switch i {
				case 0:
					u.Requests = n
				case 1:
					u.InputTokens = n
				case 2:
					u.OutputTokens = n
				case 3:
					u.CachedTokens = n
				case 4:
					u.ReasoningTokens = n
				}
			}
		}
		fields := make([]string, 0, len(byField))
		for f := range byField {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		for _, f := range fields {
			if u := byField[f]; key == "" || u.Key == key {
				out = append(out, *u)
			}
		}
	}
	return out, nil
}
