package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/logtext"
	"github.com/sluice-gw/sluice/store"
)

// ScriptRunner runs an atomic script on a shared store (store.RedisStore):
// keys are prefixed with the store's key prefix.
type ScriptRunner interface {
	RunScript(ctx context.Context, sc *store.Script, keys []string, args ...any) (any, error)
}

// RedisLimiter is the Limiter shared by the replicas of one Redis store:
// one Lua script per admission decides every limit of a key atomically,
// and one per request end settles it, so a limit holds whichever replica a
// request reaches. Under the store's prefix, per key (<key> is its
// limitKey: a key created under a deleted key's name has counters of its
// own):
//
//	rl:<key>:r          rpm: GCRA, the theoretical arrival time (ms), expiring when the bucket is full
//	rl:<key>:t          tpm: hash {t tokens, ts ms}, a token bucket that may go into debt
//	rl:<key>:c          concurrent: sorted set of lease ids scored by their expiry (ms): a replica that
//	                    dies mid-request leaks its slot for LeaseTTL at most
//	rl:<key>:d:<day>    tokens used this UTC day, expiring at its end (seeded from the usage totals)
//	rl:<key>:m:<month>  tokens used this UTC month, likewise
//	rl:<key>:b          budgets: sorted set of "<lease id>:<estimate>", the requests in flight under a
//	                    budget scored by their expiry (ms); a budget counts their estimates with the
//	                    tokens used, so concurrent requests cannot all pass it
//	rl:<key>:x:<token>  a charge of tokens used under Fallback, counted (keyCharges), kept to the month's end
//
// The clock is Redis's (TIME), so replicas' clocks need not agree. While
// Redis is unavailable it fails open to Fallback (each replica's own
// limits), logs it, and counts it in Fallbacks. The default fallback
// starts each key's budgets from the totals this replica last saw in
// Redis, so an outage does not hand a spent budget out again.
type RedisLimiter struct {
	Store ScriptRunner
	// Fallback is used while Redis is unavailable; nil: a LocalLimiter.
	Fallback Limiter
	// Seed returns the tokens a key (its limitKey) already used in [from,
	// to] (UTC days), read when a budget's counter does not exist yet;
	// nil: 0. (With AccountsOptions.Usage set, the gateway fills it in.)
	// While it fails, the counter is not created and admissions go to
	// Fallback.
	Seed func(ctx context.Context, key, from, to string) (int64, error)
	// LeaseTTL bounds how long a concurrency slot is held without Done
	// (a request longer than that stops counting); default 15m.
	LeaseTTL time.Duration
	// Logger; nil: the gateway's (set by the gateway when nil).
	Logger hclog.Logger
	// Now is the clock of the period names (day, month); nil: time.Now.
	Now func() time.Time

	fallbacks atomic.Int64
	once      sync.Once
	lastWarn  atomic.Int64

	// Settlements that could not reach Redis (a stall, an outage) are
	// settled again later (settleLater): unsettled holds each one by lease
	// id until Redis takes it or its lease would have expired anyway, and
	// one timer at a time (retryTimer, armed while unsettled is not empty)
	// retries them.
	settleMu  sync.Mutex
	unsettled map[string]settlement
	// unsettledUsed counts, per key name, the settlements in unsettled
	// that count tokens used (holdsUsage); waiting is their sum, read
	// without settleMu.
	unsettledUsed map[string]int
	waiting       atomic.Int64
	retryTimer    *time.Timer
	retryDelay    time.Duration
	notRetried    logtext.Every

	// charges holds, per key name, the tokens that admissions of Fallback
	// used while Redis was unavailable, to be added to the budgets' shared
	// counters once Redis answers (README "Limits across replicas"): the
	// usage totals have them, but a counter is seeded from those only when
	// it does not exist yet. owing is len(charges), read without settleMu
	// on every admission.
	charges map[string]*keyCharges
	owing   atomic.Int64
}

// keyCharges is one key's tokens used under Fallback and not yet counted in
// Redis. A charge is sent with an idempotency token, and one that failed is
// sent again as it was (sent), since Redis may have run it; what is used
// meanwhile is summed in owed, per period, and sent after it.
type keyCharges struct {
	sent *settlement
	owed []settlement
}

const (
	// settleRetryFirst and settleRetryMax bound the backoff between the
	// attempts to settle what Redis did not take: at most the Redis store's
	// longest wait between health pings, so that a slot frees within
	// seconds of Redis answering again.
	settleRetryFirst = 250 * time.Millisecond
	settleRetryMax   = 2 * time.Second
	// maxUnsettled bounds the settlements waiting to be retried (a few
	// hundred bytes each): past it, during a long outage, a new one is not
	// retried, and its lease expires after LeaseTTL as before.
	maxUnsettled = 100_000
)

// Fallbacks is how many admissions and settlements went to the fallback
// (or were dropped) because Redis was unavailable
// (sluice_limiter_fallback_total).
func (l *RedisLimiter) Fallbacks() int64 { return l.fallbacks.Load() }

func (l *RedisLimiter) init() {
	l.once.Do(func() {
		if l.Fallback == nil {
			l.Fallback = &LocalLimiter{Seed: l.Seed, Now: l.Now}
		}
		if l.LeaseTTL <= 0 {
			l.LeaseTTL = 15 * time.Minute
		}
		if l.Logger == nil {
			l.Logger = hclog.NewNullLogger()
		}
		l.notRetried.Interval = 10 * time.Second
	})
}

// degraded counts and logs (at most every 10 s) a failure to reach Redis.
func (l *RedisLimiter) degraded(what, key string, err error) {
	l.fallbacks.Add(1)
	now := time.Now().UnixNano()
	if last := l.lastWarn.Load(); now-last > int64(10*time.Second) && l.lastWarn.CompareAndSwap(last, now) {
		l.Logger.Warn("shared rate limits unavailable: limits hold per replica until Redis answers", "op", what, "key", key, "error", err)
	}
}

// admitScript: KEYS rpm, tpm, concurrent, day, month, budget reservations.
// ARGV rpm, tpm, concurrent, tokens_per_day, tokens_per_month, estimate,
// lease id, lease ttl ms, day end ms, month end ms, reservation ("<lease
// id>:<estimate>", "": none), day seed, month seed (-1: unknown). Reply
// {code, retry ms, rpm remaining, rpm reset ms, tpm remaining, tpm reset
// ms, day used, month used (-1: not read)}; code 0 admitted, 1 day budget,
// 2 month budget, 3 concurrent, 4 rpm, 5 tpm, 6 a budget's counter needs
// its seed (nothing was taken), 7 day budget and 8 month budget reached
// only with the requests in flight, 9 day budget and 10 month budget with
// too little left for the estimate (budgetNeed: the same rule as
// LocalLimiter's).
var admitScript = store.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tpd, tpmo, est = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local lease, ttl = ARGV[7], tonumber(ARGV[8])
local dayEnd, monthEnd = tonumber(ARGV[9]), tonumber(ARGV[10])
local reservation = ARGV[11]
local daySeed, monthSeed = tonumber(ARGV[12]), tonumber(ARGV[13])

local rrem, rreset, trem, treset = 0, 0, 0, 0
local tat, newTat, interval = now, now, 0
if rpm > 0 then
  interval = 60000 / rpm
  tat = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now)
  newTat = tat + interval
  rrem = math.floor((now - (tat - rpm * interval)) / interval)
  if rrem > rpm then rrem = rpm end
  rreset = tat - now
end
local tokens = 0
if tpm > 0 then
  local rate = tpm / 60000
  local h = redis.call('HMGET', KEYS[2], 't', 'ts')
  tokens = tonumber(h[1]) or tpm
  local ts = tonumber(h[2]) or now
  if now > ts then tokens = math.min(tpm, tokens + (now - ts) * rate) end
  trem = math.floor(tokens)
  treset = math.ceil((tpm - tokens) / rate)
end
local dayUsed, monthUsed
local function reply(code, retry)
  return {code, math.ceil(retry), rrem, math.ceil(rreset), trem, treset, dayUsed or -1, monthUsed or -1}
end

local function used(k, limit, seed, ends)
  local v = redis.call('GET', k)
  if v then return tonumber(v) end
  if seed < 0 then return nil end
  redis.call('SET', k, seed, 'PXAT', ends)
  return seed
end
local unseeded = false
if tpd > 0 then
  dayUsed = used(KEYS[4], tpd, daySeed, dayEnd)
  if dayUsed == nil then unseeded = true elseif dayUsed >= tpd then return reply(1, dayEnd - now) end
end
if tpmo > 0 then
  monthUsed = used(KEYS[5], tpmo, monthSeed, monthEnd)
  if monthUsed == nil then unseeded = true elseif monthUsed >= tpmo then return reply(2, monthEnd - now) end
end
if unseeded then return reply(6, 0) end
local function need(limit) return math.min(math.max(est, 1), limit) end
if tpd > 0 and dayUsed + need(tpd) > tpd then return reply(9, dayEnd - now) end
if tpmo > 0 and monthUsed + need(tpmo) > tpmo then return reply(10, monthEnd - now) end
if tpd > 0 or tpmo > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  local reserved = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
    reserved = reserved + (tonumber(string.match(m, ':(%d+)$')) or 0)
  end
  if tpd > 0 and dayUsed + reserved + need(tpd) > tpd then return reply(7, 1000) end
  if tpmo > 0 and monthUsed + reserved + need(tpmo) > tpmo then return reply(8, 1000) end
end

if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then return reply(3, 1000) end
end
if rpm > 0 and newTat - rpm * interval > now then
  return reply(4, newTat - rpm * interval - now)
end
if tpm > 0 and tokens < math.min(est, tpm) then
  return reply(5, (math.min(est, tpm) - tokens) / (tpm / 60000))
end

if rpm > 0 then
  redis.call('SET', KEYS[1], string.format('%.3f', newTat), 'PX', math.ceil(newTat - now) + 1)
  rrem = math.max(rrem - 1, 0)
  rreset = newTat - now
end
if tpm > 0 then
  local rate = tpm / 60000
  tokens = tokens - math.min(est, tpm)
  redis.call('HSET', KEYS[2], 't', string.format('%.3f', tokens), 'ts', now)
  redis.call('PEXPIRE', KEYS[2], math.ceil((tpm - tokens) / rate) + 1000)
  trem = math.floor(tokens)
  treset = math.ceil((tpm - tokens) / rate)
end
if conc > 0 then
  redis.call('ZADD', KEYS[3], now + ttl, lease)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
if reservation ~= '' then
  redis.call('ZADD', KEYS[6], now + ttl, reservation)
  redis.call('PEXPIRE', KEYS[6], ttl)
end
return reply(0, 0)
`)

// settleScript: KEYS tpm, concurrent, day, month, budget reservations,
// charge token. ARGV tpm, refund (the estimate minus what was used), lease
// id, used, day end ms, month end ms, reservation ("": none), retry ("1": a
// settlement tried before, whose reply may have been lost after it ran),
// charge ("": none; else the tokens used under Fallback, counted once per
// charge token, which is kept to the month's end), day seed, month seed
// (a charge's: -1 unknown, -2 no budget). The reservation is dropped in the
// step that counts the tokens used, so no admission sees a request between
// the two. A retry whose lease and reservation are both gone already ran
// (or its lease expired): it refunds and counts nothing again. A charge
// whose budget counter does not exist, in a period not over, creates it
// from its seed before adding to it, as an admission would: the usage
// totals the seed is read from do not hold the charge's tokens yet (the
// gateway writes a key's usage only once its charges are counted,
// RedisLimiter.holdsUsage), so they count once whether the counter exists
// or not. Without the seed it runs nothing and answers 1 as its third
// value. Reply {day used, month used} (-1: no counter).
var settleScript = store.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tpm, refund, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local function totals()
  return {tonumber(redis.call('GET', KEYS[3]) or -1), tonumber(redis.call('GET', KEYS[4]) or -1)}
end
if ARGV[9] ~= '' then
  if redis.call('EXISTS', KEYS[6]) == 1 then return totals() end
  local seeds = {{KEYS[3], tonumber(ARGV[10]), tonumber(ARGV[5])}, {KEYS[4], tonumber(ARGV[11]), tonumber(ARGV[6])}}
  if used > 0 then
    for _, c in ipairs(seeds) do
      if c[2] == -1 and c[3] > now and redis.call('EXISTS', c[1]) == 0 then
        local r = totals()
        r[3] = 1
        return r
      end
    end
    for _, c in ipairs(seeds) do
      if c[2] >= 0 and c[3] > now then redis.call('SET', c[1], c[2], 'NX', 'PXAT', c[3]) end
    end
  end
  redis.call('SET', KEYS[6], '1', 'PXAT', ARGV[6])
end
local released = 0
if ARGV[3] ~= '' then released = released + redis.call('ZREM', KEYS[2], ARGV[3]) end
if ARGV[7] ~= '' then released = released + redis.call('ZREM', KEYS[5], ARGV[7]) end
if ARGV[8] == '1' and released == 0 then return totals() end
if tpm > 0 and refund ~= 0 then
  local rate = tpm / 60000
  local h = redis.call('HMGET', KEYS[1], 't', 'ts')
  local tokens = tonumber(h[1]) or tpm
  local ts = tonumber(h[2]) or now
  if now > ts then tokens = math.min(tpm, tokens + (now - ts) * rate) end
  tokens = math.min(tpm, tokens + refund)
  redis.call('HSET', KEYS[1], 't', string.format('%.3f', tokens), 'ts', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((tpm - tokens) / rate) + 1000)
end
if used > 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('INCRBY', KEYS[3], used) end
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('INCRBY', KEYS[4], used) end
end
return totals()
`)

type redisKeys struct{ rpm, tpm, conc, day, month, budget string }

func (l *RedisLimiter) keysOf(key string, now time.Time) (redisKeys, time.Time, time.Time) {
	utc := now.UTC()
	dayEnd := time.Date(utc.Year(), utc.Month(), utc.Day()+1, 0, 0, 0, 0, time.UTC)
	monthEnd := time.Date(utc.Year(), utc.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	p := "rl:" + key + ":"
	return redisKeys{rpm: p + "r", tpm: p + "t", conc: p + "c",
		day: p + "d:" + utc.Format(time.DateOnly), month: p + "m:" + utc.Format("2006-01"), budget: p + "b"}, dayEnd, monthEnd
}

func (l *RedisLimiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Admit implements Limiter.
func (l *RedisLimiter) Admit(ctx context.Context, key string, lim store.KeyLimits, estimate int64) (Admission, *LimitError) {
	l.init()
	if lim == (store.KeyLimits{}) {
		return l.Fallback.Admit(ctx, key, lim, estimate) // no limits: nothing to share
	}
	if l.owing.Load() > 0 {
		// Tokens used under Fallback are counted before this admission
		// reads the budgets.
		if err := l.charge(ctx, key); err != nil {
			l.degraded("charge", key, err)
			return l.fallback(ctx, key, lim, estimate)
		}
	}
	now := l.now()
	ks, dayEnd, monthEnd := l.keysOf(key, now)
	var lease, reservation string
	budgeted := lim.TokensPerDay > 0 || lim.TokensPerMonth > 0
	if lim.Concurrent > 0 || budgeted {
		var b [12]byte
		_, _ = rand.Read(b[:])
		lease = hex.EncodeToString(b[:])
	}
	if budgeted {
		// Even with an estimate of 0: the reservation is what a settlement
		// retried after a Redis error releases, and what tells that retry
		// whether its first try ran (settleScript), so the tokens it used
		// are counted once, not dropped.
		reservation = lease + ":" + strconv.FormatInt(max(estimate, 0), 10)
	}
	daySeed, monthSeed := int64(-1), int64(-1)
	var reply []any
	for attempt := 0; ; attempt++ {
		v, err := l.Store.RunScript(ctx, admitScript, []string{ks.rpm, ks.tpm, ks.conc, ks.day, ks.month, ks.budget},
			lim.RPM, lim.TPM, lim.Concurrent, lim.TokensPerDay, lim.TokensPerMonth, max(estimate, 0), lease,
			l.LeaseTTL.Milliseconds(), dayEnd.UnixMilli(), monthEnd.UnixMilli(), reservation, daySeed, monthSeed)
		if err == nil {
			var ok bool
			if reply, ok = v.([]any); !ok || len(reply) < 6 {
				err = fmt.Errorf("rate-limit script: unexpected reply %v", v)
			}
		}
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, store.ErrUnavailable) {
				return nil, &LimitError{Code: CodeRateLimitExceeded, RetryAfter: time.Second, Message: "the request ended before its limits were checked"}
			}
			l.degraded("admit", key, err)
			return l.fallback(ctx, key, lim, estimate)
		}
		if code, _ := reply[0].(int64); code != 6 || attempt > 0 {
			break
		}
		// A budget's counter does not exist yet (a new day or month): seed it from the usage totals.
		if daySeed, monthSeed, err = l.seeds(ctx, key, lim, now); err != nil {
			l.degraded("seed", key, err)
			return l.fallback(ctx, key, lim, estimate)
		}
	}
	n := func(i int) int64 { v, _ := reply[i].(int64); return v }
	ms := func(i int) time.Duration { return time.Duration(n(i)) * time.Millisecond }
	if len(reply) >= 8 {
		l.observed(key, lim, now, n(6), n(7))
	}
	var st LimitState
	if lim.RPM > 0 {
		st.LimitRequests, st.RemainingRequests, st.ResetRequests = lim.RPM, n(2), ms(3)
	}
	if lim.TPM > 0 {
		st.LimitTokens, st.RemainingTokens, st.ResetTokens = lim.TPM, n(4), ms(5)
	}
	refuse := func(code string, format string, args ...any) *LimitError {
		retry := ms(1)
		if retry < time.Second {
			retry = time.Second
		}
		return &LimitError{Code: code, RetryAfter: retry, State: st, Message: fmt.Sprintf(format, args...)}
	}
	name := keyNameOf(key)
	switch n(0) {
	case 0:
		a := &redisAdmission{l: l, key: key, lim: lim, lease: lease, reservation: reservation,
			estimate: min(max(estimate, 0), max(lim.TPM, 0)), state: st, leaseEnds: time.Now().Add(l.LeaseTTL)}
		if local, ok := l.Fallback.(*LocalLimiter); ok {
			a.local = local.register(key, lim, estimate)
		}
		return a, nil
	case 1:
		return nil, refuse(CodeInsufficientQuota, "the key %q used its budget of %d tokens for today (UTC)", name, lim.TokensPerDay)
	case 2:
		return nil, refuse(CodeInsufficientQuota, "the key %q used its budget of %d tokens for this month (UTC)", name, lim.TokensPerMonth)
	case 3:
		return nil, refuse(CodeRateLimitExceeded, "the key %q has %d requests in flight, its limit", name, lim.Concurrent)
	case 4:
		return nil, refuse(CodeRateLimitExceeded, "the key %q reached its limit of %d requests per minute", name, lim.RPM)
	case 5:
		lerr := refuse(CodeRateLimitExceeded, tpmMessage, name, lim.TPM)
		lerr.PerMinuteTokens = true
		return nil, lerr
	case 7:
		return nil, refuse(CodeInsufficientQuota, budgetInFlightMessage, name, lim.TokensPerDay, "today")
	case 8:
		return nil, refuse(CodeInsufficientQuota, budgetInFlightMessage, name, lim.TokensPerMonth, "this month")
	case 9:
		return nil, refuse(CodeInsufficientQuota, budgetLeftMessage, name, lim.TokensPerDay, "today", lim.TokensPerDay-n(6), estimate)
	case 10:
		return nil, refuse(CodeInsufficientQuota, budgetLeftMessage, name, lim.TokensPerMonth, "this month", lim.TokensPerMonth-n(7), estimate)
	}
	l.degraded("admit", key, fmt.Errorf("rate-limit script: unexpected code %d", n(0)))
	return l.fallback(ctx, key, lim, estimate)
}

// fallback admits through Fallback while Redis is unavailable. Under a
// budget, the tokens the request uses are charged to Redis's counters
// later (owe).
func (l *RedisLimiter) fallback(ctx context.Context, key string, lim store.KeyLimits, estimate int64) (Admission, *LimitError) {
	a, lerr := l.Fallback.Admit(ctx, key, lim, estimate)
	if lerr != nil || (lim.TokensPerDay <= 0 && lim.TokensPerMonth <= 0) {
		return a, lerr
	}
	return &fallbackAdmission{Admission: a, l: l, key: key, lim: lim}, nil
}

// fallbackAdmission is an admission of Fallback under a budget.
type fallbackAdmission struct {
	Admission
	l    *RedisLimiter
	key  string
	lim  store.KeyLimits
	once sync.Once
}

func (a *fallbackAdmission) Done(used int64) {
	a.once.Do(func() {
		a.Admission.Done(used)
		if used > 0 {
			a.l.owe(a.key, a.lim, used)
		}
	})
}

// owe keeps used, the tokens of a request admitted by Fallback, to be added
// to key's budget counters once Redis answers: by the next admission of
// the key, or the retry timer, whichever comes first.
func (l *RedisLimiter) owe(key string, lim store.KeyLimits, used int64) {
	now := l.now()
	ks, dayEnd, monthEnd := l.keysOf(key, now)
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if l.charges == nil {
		l.charges = map[string]*keyCharges{}
	}
	kc := l.charges[key]
	if kc == nil {
		if len(l.charges) >= maxUnsettled {
			if n, ok := l.notRetried.Allow(time.Now()); ok {
				l.Logger.Error("tokens used while Redis was unavailable are not counted in the shared budgets: too many keys are waiting",
					"key", key, "tokens", used, "waiting", maxUnsettled, "not_counted", n)
			}
			return
		}
		kc = &keyCharges{}
		l.charges[key] = kc
		l.owing.Store(int64(len(l.charges)))
	}
	for i := range kc.owed {
		if kc.owed[i].keys == ks {
			kc.owed[i].used = addTokens(kc.owed[i].used, used)
			kc.owed[i].lim = lim
			return
		}
	}
	kc.owed = append(kc.owed, settlement{key: key, lim: lim, keys: ks, dayEnd: dayEnd, monthEnd: monthEnd,
		used: used, leaseEnds: monthEnd, periodsAt: now, daySeed: unknownSeed(lim.TokensPerDay), monthSeed: unknownSeed(lim.TokensPerMonth)})
	l.armRetryLocked()
}

// charge adds to Redis what key owes (owe), one charge at a time; it stops
// at the first Redis does not take, which is kept to be sent again as it
// was.
func (l *RedisLimiter) charge(ctx context.Context, key string) error {
	for {
		l.settleMu.Lock()
		kc := l.charges[key]
		for kc != nil && kc.sent == nil {
			if len(kc.owed) == 0 {
				delete(l.charges, key)
				l.owing.Store(int64(len(l.charges)))
				kc = nil
				break
			}
			st := kc.owed[0]
			kc.owed = kc.owed[1:]
			if time.Now().Before(st.leaseEnds) { // else its counters have expired
				st.charge = newChargeToken()
				kc.sent = &st
			}
		}
		if kc == nil {
			l.settleMu.Unlock()
			return nil
		}
		st := *kc.sent
		l.settleMu.Unlock()
		if !time.Now().Before(st.leaseEnds) {
			l.chargeDone(st)
			continue
		}
		err := l.settle(ctx, st, false)
		if errors.Is(err, errChargeNeedsSeed) {
			// A budget counter is gone (expired, evicted, Redis restarted
			// empty): the charge creates it from the totals, which do not
			// hold its tokens yet (holdsUsage).
			if err = l.seedCharge(ctx, st); err == nil {
				continue
			}
		}
		if err != nil && !errors.Is(err, store.ErrClosed) {
			return err
		}
		l.chargeDone(st)
	}
}

// errChargeNeedsSeed: settleScript did not run a charge, since a budget
// counter it adds to does not exist and the charge carries no seed for it.
var errChargeNeedsSeed = errors.New("a budget counter needs its seed")

// unknownSeed is a charge's seed of a budget counter before it is read:
// -1 with a budget, -2 without one (settleScript).
func unknownSeed(budget int64) int64 {
	if budget > 0 {
		return -1
	}
	return -2
}

// seedCharge reads the seeds of st's budget counters and gives them to the
// charge waiting to be sent (st), which is then sent again with them.
func (l *RedisLimiter) seedCharge(ctx context.Context, st settlement) error {
	day, month, err := l.seeds(ctx, st.key, st.lim, l.now())
	if err != nil {
		return err
	}
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if kc := l.charges[st.key]; kc != nil && kc.sent != nil && kc.sent.charge == st.charge {
		if st.lim.TokensPerDay > 0 {
			kc.sent.daySeed = day
		}
		if st.lim.TokensPerMonth > 0 {
			kc.sent.monthSeed = month
		}
	}
	return nil
}

// chargeDone forgets st, a charge Redis took (or that can no longer land).
func (l *RedisLimiter) chargeDone(st settlement) {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if kc := l.charges[st.key]; kc != nil && kc.sent != nil && kc.sent.charge == st.charge {
		kc.sent = nil
	}
}

// newChargeToken names one charge (settleScript).
func newChargeToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// seeds reads the usage totals of key's budgets' periods (0 for a period
// without a budget, or without Seed).
func (l *RedisLimiter) seeds(ctx context.Context, key string, lim store.KeyLimits, now time.Time) (day, month int64, err error) {
	if l.Seed == nil {
		return 0, 0, nil
	}
	utc := now.UTC()
	today := utc.Format(time.DateOnly)
	if lim.TokensPerDay > 0 {
		if day, err = l.Seed(ctx, key, today, today); err != nil {
			return 0, 0, fmt.Errorf("reading the usage of today for the budget: %w", err)
		}
	}
	if lim.TokensPerMonth > 0 {
		if month, err = l.Seed(ctx, key, utc.Format("2006-01")+"-01", today); err != nil {
			return 0, 0, fmt.Errorf("reading the usage of this month for the budget: %w", err)
		}
	}
	return day, month, nil
}

// observed hands the budgets' totals that Redis answered with (-1: none)
// to the default fallback, which starts from them while Redis is
// unavailable (a Fallback of the caller's keeps its own counts).
func (l *RedisLimiter) observed(key string, lim store.KeyLimits, now time.Time, dayUsed, monthUsed int64) {
	if local, ok := l.Fallback.(*LocalLimiter); ok {
		local.observe(key, lim, now, dayUsed, monthUsed)
	}
}

// Forget drops what this process holds of key (a limitKey) whose key was
// deleted: the default fallback's state (LocalLimiter.Forget). Its counters
// in Redis expire by themselves.
func (l *RedisLimiter) Forget(key string) {
	if local, ok := l.Fallback.(*LocalLimiter); ok {
		local.Forget(key)
	}
}

type redisAdmission struct {
	l           *RedisLimiter
	key         string
	lim         store.KeyLimits
	lease       string
	reservation string // the member of rl:<key>:b, "" when none
	estimate    int64  // taken from the tpm bucket
	state       LimitState
	leaseEnds   time.Time // when Redis drops the lease and the reservation by itself (this process's clock)
	// local is the admission as the default fallback counts it
	// (LocalLimiter.register), so that an outage starts each replica's own
	// limits from what it admitted; nil with a Fallback of the caller's.
	local *localAdmission
	once  sync.Once
}

func (a *redisAdmission) State() LimitState { return a.state }

// Done settles in Redis. When Redis does not take the settlement (down, or
// slower than the store's timeout), one that releases a concurrency lease
// or a budget reservation is retried in the background (settleLater): a
// stall at the end of a request would otherwise keep its slot taken on
// every replica for LeaseTTL. One that releases neither (tpm alone) is
// dropped: the bucket refills by itself. The tokens used are counted
// against the budgets when the settlement lands (the usage totals hold
// them either way).
func (a *redisAdmission) Done(used int64) {
	a.once.Do(func() {
		if a.local != nil {
			a.local.Done(used)
		}
		now := a.l.now()
		ks, dayEnd, monthEnd := a.l.keysOf(a.key, now)
		st := settlement{key: a.key, lim: a.lim, keys: ks, dayEnd: dayEnd, monthEnd: monthEnd, refund: a.estimate - used,
			lease: a.lease, used: max(used, 0), reservation: a.reservation, leaseEnds: a.leaseEnds, periodsAt: now}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.l.settle(ctx, st, false); err != nil {
			a.l.degraded("settle", a.key, err)
			if st.releases() && !errors.Is(err, store.ErrClosed) {
				a.l.settleLater(st)
			}
		}
	})
}

// settlement is one request's settleScript call, kept to be retried.
type settlement struct {
	key              string
	lim              store.KeyLimits
	keys             redisKeys // of the periods the request ended in
	dayEnd, monthEnd time.Time
	refund           int64
	lease            string
	used             int64
	reservation      string
	leaseEnds        time.Time // past it, Redis has dropped what it releases
	periodsAt        time.Time // the time the periods were named at
	charge           string    // a charge's token (keyCharges); "": a request's settlement
	// daySeed and monthSeed: a charge's seeds of its budget counters
	// (settleScript: -1 unknown, -2 no budget).
	daySeed, monthSeed int64
}

// releases reports whether the settlement frees something other requests
// wait for: a concurrency slot or a budget reservation.
func (st settlement) releases() bool {
	return (st.lim.Concurrent > 0 && st.lease != "") || st.reservation != ""
}

// settle runs st in Redis (retry: st was tried before and may have run)
// and hands the budgets' totals it answers to the fallback.
func (l *RedisLimiter) settle(ctx context.Context, st settlement, retry bool) error {
	again := ""
	if retry {
		again = "1"
	}
	v, err := l.Store.RunScript(ctx, settleScript,
		[]string{st.keys.tpm, st.keys.conc, st.keys.day, st.keys.month, st.keys.budget, "rl:" + st.key + ":x:" + st.charge},
		st.lim.TPM, st.refund, st.lease, st.used, st.dayEnd.UnixMilli(), st.monthEnd.UnixMilli(), st.reservation, again, st.charge,
		st.daySeed, st.monthSeed)
	if err != nil {
		return fmt.Errorf("settling the request of key %q: %w", st.key, err)
	}
	totals, _ := v.([]any)
	if len(totals) >= 2 {
		day, _ := totals[0].(int64)
		month, _ := totals[1].(int64)
		l.observed(st.key, st.lim, st.periodsAt, day, month)
	}
	if len(totals) == 3 {
		return fmt.Errorf("charging the tokens key %q used while Redis was unavailable: %w", st.key, errChargeNeedsSeed)
	}
	return nil
}

// settleLater keeps st to be settled once Redis takes it, retrying with
// backoff (settleRetryFirst doubling to settleRetryMax) until it lands or
// its lease ends. One timer retries every waiting settlement, and at most
// maxUnsettled wait: an outage costs memory in proportion to that bound,
// not to its length, and no goroutine per failure.
func (l *RedisLimiter) settleLater(st settlement) {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if l.unsettled == nil {
		l.unsettled = map[string]settlement{}
	}
	if len(l.unsettled) >= maxUnsettled {
		if n, ok := l.notRetried.Allow(time.Now()); ok {
			l.Logger.Error("a settlement that did not reach Redis is not retried: too many are waiting; its slot frees when its lease expires",
				"key", st.key, "waiting", maxUnsettled, "not_retried", n)
		}
		return
	}
	if _, again := l.unsettled[st.lease]; !again && st.used > 0 {
		if l.unsettledUsed == nil {
			l.unsettledUsed = map[string]int{}
		}
		l.unsettledUsed[st.key]++
		l.waiting.Add(1)
	}
	l.unsettled[st.lease] = st
	l.armRetryLocked()
}

// holdsUsage reports whether tokens key used are not yet counted in the
// budgets' shared counters: a charge of what the fallback admitted, or a
// settlement, waits for Redis. The gateway writes such a key's usage
// totals only after them (usageBatch.holds): a counter seeded from totals
// that held them already would count them twice once they land.
func (l *RedisLimiter) holdsUsage(key string) bool {
	if l.owing.Load() == 0 && l.waiting.Load() == 0 {
		return false
	}
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	return l.charges[key] != nil || l.unsettledUsed[key] > 0
}

// armRetryLocked starts the retry rounds unless one is armed. The caller
// holds settleMu.
func (l *RedisLimiter) armRetryLocked() {
	if l.retryTimer == nil {
		l.retryDelay = settleRetryFirst
		l.retryTimer = time.AfterFunc(l.retryDelay, l.retrySettlements)
	}
}

// retrySettlements tries each waiting settlement once, stopping at the
// first Redis refuses (the rest wait for the next round), drops those
// whose lease has ended, and arms the next round while any is left.
func (l *RedisLimiter) retrySettlements() {
	l.settleMu.Lock()
	batch := make([]settlement, 0, len(l.unsettled))
	for _, st := range l.unsettled {
		batch = append(batch, st)
	}
	l.settleMu.Unlock()
	settled, refused := 0, false
	for _, st := range batch {
		if !time.Now().Before(st.leaseEnds) {
			l.forgetSettlement(st) // Redis has dropped the lease by itself
			continue
		}
		if refused {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.settle(ctx, st, true)
		cancel()
		switch {
		case err == nil:
			l.forgetSettlement(st)
			settled++
		case errors.Is(err, store.ErrClosed): // the gateway is shutting down
			l.forgetSettlement(st)
		default:
			refused = true
		}
	}
	if settled > 0 {
		l.Logger.Info("shared rate limits: requests whose end did not reach Redis are settled after all", "settled", settled)
	}
	if !refused {
		refused = l.retryCharges()
	}
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if len(l.unsettled) == 0 && len(l.charges) == 0 {
		l.retryTimer = nil
		return
	}
	if refused {
		l.retryDelay = min(2*l.retryDelay, settleRetryMax)
	} else {
		l.retryDelay = settleRetryFirst
	}
	l.retryTimer = time.AfterFunc(l.retryDelay, l.retrySettlements)
}

// retryCharges sends what each key owes (charge), stopping at the first
// key whose charge Redis does not take; it reports whether one was not.
func (l *RedisLimiter) retryCharges() (refused bool) {
	l.settleMu.Lock()
	keys := make([]string, 0, len(l.charges))
	for k := range l.charges {
		keys = append(keys, k)
	}
	l.settleMu.Unlock()
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.charge(ctx, k)
		cancel()
		if err != nil {
			return true
		}
	}
	if len(keys) > 0 {
		l.Logger.Info("shared rate limits: tokens used while Redis was unavailable are counted in the budgets", "keys", len(keys))
	}
	return false
}

func (l *RedisLimiter) forgetSettlement(st settlement) {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if _, ok := l.unsettled[st.lease]; !ok {
		return
	}
	delete(l.unsettled, st.lease)
	if st.used > 0 {
		if l.unsettledUsed[st.key]--; l.unsettledUsed[st.key] <= 0 {
			delete(l.unsettledUsed, st.key)
		}
		l.waiting.Add(-1)
	}
}
