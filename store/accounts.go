package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble"
)

// Sluice keys and usage totals (README, "Keys, limits and usage"). Two more key families, in the
// layout of keys.go:
//
//	famKey      'k' | name
//	            One Sluice key record per key name (KeyRecord, JSON). The
//	            record holds the SHA-256 of the secret, never the secret.
//
//	famUsage    'u' | day (YYYY-MM-DD) | 0 | key | 0 | route | 0 | target | 0 | model [| 0 | key_id]
//	            One usage total per (day, key, route, target, model, key
//	            id) (UsageRecord counters, JSON). Sorting by day first lets
//	            a date range be one iterator. A total without a key id (a
//	            config key's, or one written by an older version) ends at
//	            the model, as it always did.
const (
	famKey   byte = 'k'
	famUsage byte = 'u'
)

// KeyLimits are a Sluice key's limits; zero is unlimited.
type KeyLimits struct {
	RPM            int64 `json:"rpm,omitempty"`              // requests per minute
	TPM            int64 `json:"tpm,omitempty"`              // tokens per minute
	Concurrent     int64 `json:"concurrent,omitempty"`       // requests in flight at once
	TokensPerDay   int64 `json:"tokens_per_day,omitempty"`   // budget, UTC day
	TokensPerMonth int64 `json:"tokens_per_month,omitempty"` // budget, UTC month
}

// KeyRecord is one Sluice key: its name, the hex SHA-256 of its secret,
// the model patterns it may use (none: all) and its limits.
type KeyRecord struct {
	Name   string    `json:"name"`
	SHA256 string    `json:"key_sha256"`
	Models []string  `json:"models,omitempty"`
	Limits KeyLimits `json:"limits"`
	// ID tells this key from another created under its name after it was
	// deleted: the limits and budgets are the key's, not its name's
	// (README "Keys, limits and usage"). The gateway gives one to each key
	// it creates; a config key has none (its name is its identity, stable
	// across restarts), nor has a record written by an older version,
	// which loads as before and keeps the name's counters and totals.
	ID        string    `json:"id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// KeyStore keeps the Sluice keys created at run time, so that every
// replica sharing the store agrees on them and they survive a restart.
type KeyStore interface {
	// CreateKey stores a new key, synced; ErrExists when the name is taken.
	CreateKey(ctx context.Context, k KeyRecord) error
	// UpdateKey replaces the key named k.Name, synced, if it is still the
	// key the caller read: the one whose secret hash is k.SHA256. It is
	// ErrNotFound when that key was deleted meanwhile, or deleted and
	// created again under its name with another secret: an update racing
	// a delete never brings the deleted key, or its secret, back.
	UpdateKey(ctx context.Context, k KeyRecord) error
	// GetKey loads a key by name; ErrNotFound when absent.
	GetKey(ctx context.Context, name string) (KeyRecord, error)
	// DeleteKey removes a key; ErrNotFound when absent.
	DeleteKey(ctx context.Context, name string) error
	// ListKeys returns every key, by name.
	ListKeys(ctx context.Context) ([]KeyRecord, error)
}

// UsageRecord is the usage of one (UTC day, key, route, target, model).
type UsageRecord struct {
	Day string `json:"day"` // YYYY-MM-DD, UTC
	Key string `json:"key"` // the key name ("" without auth)
	// KeyID is the key's KeyRecord.ID ("": a config key, or a total
	// written by an older version): a key's budgets count its own totals,
	// not those of a deleted key that had its name. Usage reports by name
	// sum a name's totals across its ids.
	KeyID           string `json:"key_id,omitempty"`
	Route           string `json:"route"`
	Target          string `json:"target"` // upstream name
	Model           string `json:"model"`
	Requests        int64  `json:"requests"`
	InputTokens     int64  `json:"input_tokens"`
	OutputTokens    int64  `json:"output_tokens"`
	CachedTokens    int64  `json:"cached_tokens"`
	ReasoningTokens int64  `json:"reasoning_tokens"`
}

// Tokens is input plus output tokens (what budgets count).
func (u UsageRecord) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// AddCounts adds o's counters (requests and tokens) to u's.
func (u *UsageRecord) AddCounts(o UsageRecord) {
	u.Requests += o.Requests
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CachedTokens += o.CachedTokens
	u.ReasoningTokens += o.ReasoningTokens
}

// UsageStore keeps per-day usage totals.
type UsageStore interface {
	// AddUsage adds u's counters to the total of its (day, key, route,
	// target, model, key id).
	AddUsage(ctx context.Context, u UsageRecord) error
	// Usage returns the totals of the days from..to (inclusive,
	// YYYY-MM-DD), of one key or of every key when key is "". A store may
	// refuse a range UsageRangeAllowed refuses (ErrInvalid).
	Usage(ctx context.Context, key, from, to string) ([]UsageRecord, error)
}

// MaxUsageDays bounds one Usage query (a decade): its last day is at most
// this many days after its first. The Redis store reads the range day by
// day, so an unbounded one would hold a request for as long as it takes;
// GET /admin/usage refuses a longer one before any store (README "Keys,
// limits and usage").
const MaxUsageDays = 3660

// UsageRangeAllowed reports whether one Usage query may span the days
// first..last (UTC midnights): at most MaxUsageDays from first to last.
func UsageRangeAllowed(first, last time.Time) bool {
	return last.Sub(first) <= MaxUsageDays*24*time.Hour
}

var (
	_ KeyStore   = (*PebbleStore)(nil)
	_ UsageStore = (*PebbleStore)(nil)
)

func keyKey(name string) []byte { return append([]byte{famKey}, name...) }

func validName(what, s string) error {
	if s == "" || len(s) > 256 || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s must be 1-256 bytes without NUL", ErrInvalid, what)
	}
	return nil
}

// CreateKey stores a new key; ErrExists when one has that name.
func (s *PebbleStore) CreateKey(ctx context.Context, k KeyRecord) error {
	return s.putKey(ctx, k, true)
}

// UpdateKey replaces a key if it still has the secret hash k.SHA256;
// ErrNotFound otherwise. The key's lock (the one CreateKey and DeleteKey
// take) makes the check and the write one step.
func (s *PebbleStore) UpdateKey(ctx context.Context, k KeyRecord) error {
	return s.putKey(ctx, k, false)
}

// putKey creates the key named k.Name (create) or replaces it (otherwise).
func (s *PebbleStore) putKey(ctx context.Context, k KeyRecord, create bool) (err error) {
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
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: %s key %q: %w", op, k.Name, err)
	}
	defer release(&err)
	mu := s.sessionLock("key\x00" + k.Name)
	mu.Lock()
	defer mu.Unlock()
	if create {
		_, closer, err := db.Get(keyKey(k.Name))
		switch {
		case err == nil:
			closer.Close()
			return fmt.Errorf("store: create key %q: %w", k.Name, ErrExists)
		case !errors.Is(err, pebble.ErrNotFound):
			return fmt.Errorf("store: create key %q: %w", k.Name, err)
		}
	} else {
		var cur KeyRecord
		err := get(db, keyKey(k.Name), func(v []byte) error { return decodeJSON(v, &cur) })
		switch {
		case errors.Is(err, pebble.ErrNotFound), err == nil && cur.SHA256 != k.SHA256:
			return fmt.Errorf("store: update key %q: %w", k.Name, ErrNotFound)
		case err != nil:
			return fmt.Errorf("store: update key %q: %w", k.Name, err)
		}
	}
	if err := db.Set(keyKey(k.Name), v, pebble.Sync); err != nil {
		return fmt.Errorf("store: %s key %q: %w", op, k.Name, err)
	}
	return nil
}

// GetKey loads a key by name.
func (s *PebbleStore) GetKey(ctx context.Context, name string) (_ KeyRecord, err error) {
	var k KeyRecord
	if err := validName("key name", name); err != nil {
		return k, fmt.Errorf("store: get key: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return k, fmt.Errorf("store: get key %q: %w", name, err)
	}
	defer release(&err)
	err = get(db, keyKey(name), func(v []byte) error { return decodeJSON(v, &k) })
	if errors.Is(err, pebble.ErrNotFound) {
		return k, fmt.Errorf("store: get key %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return k, fmt.Errorf("store: get key %q: %w", name, err)
	}
	return k, nil
}

// DeleteKey removes a key.
func (s *PebbleStore) DeleteKey(ctx context.Context, name string) (err error) {
	if err := validName("key name", name); err != nil {
		return fmt.Errorf("store: delete key: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: delete key %q: %w", name, err)
	}
	defer release(&err)
	mu := s.sessionLock("key\x00" + name)
	mu.Lock()
	defer mu.Unlock()
	_, closer, err := db.Get(keyKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("store: delete key %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: delete key %q: %w", name, err)
	}
	closer.Close()
	if err := db.Delete(keyKey(name), pebble.Sync); err != nil {
		return fmt.Errorf("store: delete key %q: %w", name, err)
	}
	return nil
}

// ListKeys returns every key, by name.
func (s *PebbleStore) ListKeys(ctx context.Context) (_ []KeyRecord, err error) {
	db, release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	defer release(&err)
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte{famKey}, UpperBound: []byte{famKey + 1}})
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	defer it.Close()
	var out []KeyRecord
	for it.First(); it.Valid(); it.Next() {
		var k KeyRecord
		if err := decodeJSON(it.Value(), &k); err != nil {
			return nil, fmt.Errorf("store: list keys: %w", err)
		}
		out = append(out, k)
	}
	return out, it.Error()
}

func usageKey(u UsageRecord) []byte {
	b := make([]byte, 0, 1+len(u.Day)+len(u.Key)+len(u.Route)+len(u.Target)+len(u.Model)+len(u.KeyID)+5)
	b = append(b, famUsage)
	b = append(b, u.Day...)
	for _, f := range []string{u.Key, u.Route, u.Target, u.Model} {
		b = append(b, 0)
		b = append(b, f...)
	}
	if u.KeyID != "" { // without one, the key totals have always had
		b = append(b, 0)
		b = append(b, u.KeyID...)
	}
	return b
}

func validDay(d string) error {
	if _, err := time.Parse(time.DateOnly, d); err != nil {
		return fmt.Errorf("%w: day %q is not YYYY-MM-DD", ErrInvalid, d)
	}
	return nil
}

// AddUsage adds u to its day's total, synced (see AddUsages).
func (s *PebbleStore) AddUsage(ctx context.Context, u UsageRecord) error {
	return s.AddUsages(ctx, "", []UsageRecord{u})[0]
}

// AddUsages adds each of us to its day's total in one synced write: once it
// returns, a crash of the process or of the machine keeps the totals it
// added. An unsynced write stays in the process's WAL buffer until a later
// synced write, however long that takes, so a killed process would lose
// totals added long before (README "Keys, limits and usage": a crash loses
// at most the last 250 ms of counts). One call is one fsync, which is why
// the gateway adds a whole flush of its usage batch at once.
//
// batch, the flush's idempotency token, is not kept: a write that fails
// here did not happen (a synced local batch), so a retry counts once
// without it. It is there for RedisStore.AddUsages, whose failed write may
// have run.
//
// errs[i] is us[i]'s outcome: nil when added; an error wrapping ErrInvalid
// (a name the store refuses: no retry changes that) or ErrCorrupt (its
// stored total cannot be read) when that record was left out and the others
// were added; or the write's error, for every other record, when the write
// failed and added none.
func (s *PebbleStore) AddUsages(ctx context.Context, batch string, us []UsageRecord) (errs []error) {
	errs = make([]error, len(us))
	for i, u := range us {
		if err := validUsage(u); err != nil {
			errs[i] = fmt.Errorf("store: add usage: %w", err)
		}
	}
	failRest := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("store: add usage: %w", err)
			}
		}
		return errs
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return failRest(err)
	}
	// Deferred first so that it runs after release: a fatal error in
	// Pebble is every remaining record's outcome.
	var fatal error
	defer func() {
		if fatal != nil {
			failRest(fatal)
		}
	}()
	defer release(&fatal)
	// Each total is read, summed and written back: one lock for every usage
	// total keeps two calls from summing the same old value (the gateway
	// writes one flush at a time, so nothing waits for it in practice).
	mu := s.sessionLock("usage")
	mu.Lock()
	defer mu.Unlock()
	b := db.NewIndexedBatch() // reads see the batch's own writes: a total twice in us is summed twice
	defer b.Close()
	for i, u := range us {
		if errs[i] != nil {
			continue
		}
		k := usageKey(u)
		var cur UsageRecord
		if err := getUsage(b, k, &cur); err != nil {
			errs[i] = fmt.Errorf("store: add usage: %w", err)
			continue
		}
		u.AddCounts(cur)
		v, _ := json.Marshal(u)
		if err := b.Set(k, v, nil); err != nil {
			errs[i] = fmt.Errorf("store: add usage: %w", err)
		}
	}
	if b.Empty() {
		return errs
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return failRest(err)
	}
	return errs
}

// validUsage checks the names and day of a usage record.
func validUsage(u UsageRecord) error {
	if err := validDay(u.Day); err != nil {
		return err
	}
	for _, f := range []string{u.Key, u.Route, u.Target, u.Model, u.KeyID} {
		if len(f) > 256 || strings.IndexByte(f, 0) >= 0 {
			return fmt.Errorf("%w: names must be at most 256 bytes without NUL", ErrInvalid)
		}
	}
	return nil
}

// getUsage reads the total at k from b into cur; an absent total is zero.
func getUsage(b *pebble.Batch, k []byte, cur *UsageRecord) error {
	v, closer, err := b.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return decodeJSON(v, cur)
}

// Usage returns the totals of days from..to (inclusive) of key, or of
// every key when key is "".
func (s *PebbleStore) Usage(ctx context.Context, key, from, to string) (_ []UsageRecord, err error) {
	if err := errors.Join(validDay(from), validDay(to)); err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	db, release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer release(&err)
	lower := append([]byte{famUsage}, from...)
	upper := append(append([]byte{famUsage}, to...), 1) // every key of day "to" sorts below to|1
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer it.Close()
	var out []UsageRecord
	for it.First(); it.Valid(); it.Next() {
		var u UsageRecord
		if err := decodeJSON(it.Value(), &u); err != nil {
			return nil, fmt.Errorf("store: usage: %w", err)
		}
		if key == "" || u.Key == key {
			out = append(out, u)
		}
	}
	return out, it.Error()
}

func decodeJSON(v []byte, dst any) error {
	if err := json.Unmarshal(v, dst); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return nil
}
