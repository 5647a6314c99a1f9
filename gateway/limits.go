package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// Limiter enforces the Sluice keys' limits: requests and tokens per minute,
// requests in flight, and token budgets per UTC day and month. LocalLimiter
// holds them in this process; a shared implementation (Redis, with an
// atomic script) makes them hold across replicas.
type Limiter interface {
	// Admit decides whether a request of key (the key's limitKey: its
	// limits are the key's, not its name's), expected to cost estimate
	// tokens, may start now. Admitted, it returns the Admission whose Done
	// must be called exactly once when the request ends; refused, the
	// LimitError says why and when to retry.
	Admit(ctx context.Context, key string, l store.KeyLimits, estimate int64) (Admission, *LimitError)
}

// Admission is one admitted request.
type Admission interface {
	// State is the key's limits after the admission (x-ratelimit-* headers).
	State() LimitState
	// Done settles the request: used is the tokens it really cost (input
	// plus output; the estimate is returned or the difference charged), and
	// its concurrency slot is released.
	Done(used int64)
}

// limitKey is what a key's limits and budgets are kept under, in the
// limiters and in the usage totals budgets are seeded from: the key's
// name, and its id when it has one (store.KeyRecord.ID). A key created
// under the name of a deleted key has another id, so it starts with no
// requests in flight, full buckets and an unspent budget, and the deleted
// key's requests still in flight release their own slots (README "Keys,
// limits and usage"). A key without an id (a config key, or one an older
// version created) is its name, as it always was, so it keeps its counters
// and totals across a restart or an upgrade. A key name has no "/"
// (config.KeyNamePattern, the admin API's), so the two parts never blur.
func limitKey(name, id string) string {
	if id == "" {
		return name
	}
	return name + "/" + id
}

// splitLimitKey is the name and id limitKey joined.
func splitLimitKey(key string) (name, id string) {
	name, id, _ = strings.Cut(key, "/")
	return name, id
}

// keyNameOf is the name of the key whose limitKey is key: what refusals
// call the key.
func keyNameOf(key string) string {
	name, _ := splitLimitKey(key)
	return name
}

// LimitState is what the x-ratelimit-* headers say; a zero limit is none.
type LimitState struct {
	LimitRequests, RemainingRequests int64
	ResetRequests                    time.Duration
	LimitTokens, RemainingTokens     int64
	ResetTokens                      time.Duration
}

// LimitError is a refused admission.
type LimitError struct {
	Code       string // rate_limit_exceeded | insufficient_quota
	Message    string
	RetryAfter time.Duration
	State      LimitState
	// PerMinuteTokens: the refusal is the tpm limit's.
	PerMinuteTokens bool
}

// apiError is the 429 the client gets.
func (e *LimitError) apiError() *apierr.Error {
	typ := "requests"
	switch {
	case e.Code == CodeInsufficientQuota:
		typ = CodeInsufficientQuota
	case e.PerMinuteTokens:
		typ = "tokens" // as OpenAI types its tokens-per-minute refusals ("requests" is its rpm's)
	}
	return &apierr.Error{Status: http.StatusTooManyRequests, Type: typ, Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter}
}

// rateLimitHeaders are the x-ratelimit-* headers, as OpenAI names them, in
// their two families: requests, then tokens, each limit, remaining, reset.
// A family's three values describe one limit together, so a client gets
// each family from one source, the upstream's or Sluice's
// (copyResponseHeaders).
var rateLimitHeaders = [2][3]string{
	{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
}

// setHeaders writes the x-ratelimit-* headers.
func (st LimitState) setHeaders(h http.Header) {
	set := func(family [3]string, limit, remaining int64, reset time.Duration) {
		h.Set(family[0], strconv.FormatInt(limit, 10))
		h.Set(family[1], strconv.FormatInt(max(remaining, 0), 10))
		h.Set(family[2], resetString(reset))
	}
	if st.LimitRequests > 0 {
		set(rateLimitHeaders[0], st.LimitRequests, st.RemainingRequests, st.ResetRequests)
	}
	if st.LimitTokens > 0 {
		set(rateLimitHeaders[1], st.LimitTokens, st.RemainingTokens, st.ResetTokens)
	}
}

func resetString(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// bucket is a token bucket that may go into debt and take refunds, which a
// settle-after-the-fact token count needs (golang.org/x/time/rate cannot
// return a reservation once its time has passed).
type bucket struct {
	capacity float64 // also the refill per minute
	tokens   float64
	at       time.Time
}

func newBucket(perMinute int64, now time.Time) *bucket {
	return &bucket{capacity: float64(perMinute), tokens: float64(perMinute), at: now}
}

func (b *bucket) rate() float64 { return b.capacity / 60 } // per second

func (b *bucket) advance(now time.Time) {
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = math.Min(b.capacity, b.tokens+dt*b.rate())
	}
	b.at = now
}

// take takes n if that many are there; else it says how long until they are.
func (b *bucket) take(n float64, now time.Time) (bool, time.Duration) {
	b.advance(now)
	n = math.Min(n, b.capacity) // more than the capacity could never pass
	if b.tokens >= n {
		b.tokens -= n
		return true, 0
	}
	return false, time.Duration((n - b.tokens) / b.rate() * float64(time.Second))
}

// adjust adds n (a refund) or removes -n (a debt) after the fact.
func (b *bucket) adjust(n float64, now time.Time) {
	b.advance(now)
	b.tokens = math.Min(b.capacity, b.tokens+n)
}

// rebucket is the bucket for a new rate of perMinute (0: none), given the
// key's current one b: b itself when its rate did not change, else a
// bucket at the new rate that keeps b's level, at most the new capacity.
// Changing one limit must not hand out a fresh minute of another, nor a
// new rate more than it allows at once; a limit newly set starts full, as
// a new key's does.
func rebucket(b *bucket, perMinute int64, now time.Time) *bucket {
	switch {
	case perMinute <= 0:
		return nil
	case b == nil:
		return newBucket(perMinute, now)
	case b.capacity == float64(perMinute):
		return b
	}
	b.advance(now)
	return &bucket{capacity: float64(perMinute), tokens: math.Min(b.tokens, float64(perMinute)), at: now}
}

// untilFull is how long until the bucket is full again.
func (b *bucket) untilFull() time.Duration {
	return time.Duration((b.capacity - b.tokens) / b.rate() * float64(time.Second))
}

// LocalLimiter is the Limiter of one process: token buckets per key for
// rpm and tpm, a counter for concurrent, and day/month totals for the
// budgets (seeded from the usage store, so a restart keeps them). A budget
// counts the estimates of the requests in flight with the tokens used, as
// tpm does: concurrent requests cannot all pass a budget that the first
// of them to end would show spent.
type LocalLimiter struct {
	// Seed returns the tokens a key (its limitKey) already used in [from,
	// to] (UTC days, YYYY-MM-DD), read once per key and period, when a
	// budget first needs it; nil: 0. A read that fails is tried again at
	// the key's first admission seedRetryEvery later (a store that is down
	// must not make a spent budget whole for the rest of the period, nor
	// cost every admission a read that waits for its timeout).
	Seed func(ctx context.Context, key, from, to string) (int64, error)
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu   sync.Mutex
	keys map[string]*keyLimits
}

type keyLimits struct {
	key        string // its limitKey
	forgotten  bool   // Forget was called with requests in flight: dropped when the last ends
	limits     store.KeyLimits
	rpm, tpm   *bucket
	inFlight   int64
	day, month string // the periods the totals are of
	dayUsed    int64
	monthUsed  int64
	// daySeeded and monthSeeded: the totals of day and month were read
	// from the usage store (or learnt from the shared limiter, observe),
	// which happens once a budget needs them (a key may get its budget
	// mid-period).
	daySeeded, monthSeeded bool
	// seedRetryAt: a seed read failed; none is tried before then.
	seedRetryAt time.Time
	// reserved is the estimates of the requests in flight admitted under a
	// budget; they end in today's totals, whichever day they began.
	reserved int64
}

func (l *LocalLimiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// stateOf renders k's headers.
func (k *keyLimits) state() LimitState {
	var st LimitState
	if k.rpm != nil {
		st.LimitRequests, st.RemainingRequests, st.ResetRequests = int64(k.rpm.capacity), int64(math.Floor(k.rpm.tokens)), k.rpm.untilFull()
	}
	if k.tpm != nil {
		st.LimitTokens, st.RemainingTokens, st.ResetTokens = int64(k.tpm.capacity), int64(math.Floor(k.tpm.tokens)), k.tpm.untilFull()
	}
	return st
}

// entry returns key's state, (re)built for lim and rolled over to now's
// day and month. The caller holds l.mu.
func (l *LocalLimiter) entry(key string, lim store.KeyLimits, now time.Time) *keyLimits {
	if l.keys == nil {
		l.keys = map[string]*keyLimits{}
	}
	k := l.keys[key]
	if k == nil {
		k = &keyLimits{key: key}
		l.keys[key] = k
	}
	if k.limits != lim {
		k.limits = lim
		k.rpm, k.tpm = rebucket(k.rpm, lim.RPM, now), rebucket(k.tpm, lim.TPM, now)
	}
	day, month := now.UTC().Format(time.DateOnly), now.UTC().Format("2006-01")
	if k.day != day {
		k.day, k.dayUsed, k.daySeeded = day, 0, false
	}
	if k.month != month {
		k.month, k.monthUsed, k.monthSeeded = month, 0, false
	}
	return k
}

// seed reads what the usage store has for the periods of key's budgets that
// this process has not read yet (a restart, or a budget set mid-period),
// outside l.mu: a slow store holds this admission only, not every key's.
// The store may lack what this process settled but has not flushed yet, and
// this process lacks what it settled before a restart: the larger is the
// nearer.
func (l *LocalLimiter) seed(ctx context.Context, key string, lim store.KeyLimits, now time.Time) {
	if l.Seed == nil || (lim.TokensPerDay <= 0 && lim.TokensPerMonth <= 0) {
		return
	}
	day, month := now.UTC().Format(time.DateOnly), now.UTC().Format("2006-01")
	l.mu.Lock()
	k := l.entry(key, lim, now)
	needDay, needMonth := lim.TokensPerDay > 0 && !k.daySeeded, lim.TokensPerMonth > 0 && !k.monthSeeded
	retryAt := k.seedRetryAt
	l.mu.Unlock()
	if !needDay && !needMonth || now.Before(retryAt) {
		return
	}
	var dayUsed, monthUsed int64
	var dayErr, monthErr error
	if needDay {
		dayUsed, dayErr = l.Seed(ctx, key, day, day)
	}
	if needMonth {
		monthUsed, monthErr = l.Seed(ctx, key, month+"-01", day)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k = l.entry(key, lim, now)
	if needDay && dayErr == nil && k.day == day && !k.daySeeded {
		k.dayUsed, k.daySeeded = max(k.dayUsed, dayUsed), true
	}
	if needMonth && monthErr == nil && k.month == month && !k.monthSeeded {
		k.monthUsed, k.monthSeeded = max(k.monthUsed, monthUsed), true
	}
	if dayErr != nil || monthErr != nil {
		k.seedRetryAt = now.Add(seedRetryEvery)
	}
}

// seedRetryEvery spaces a key's budget seed reads while they fail.
const seedRetryEvery = 10 * time.Second

// observe raises key's day and month totals to what the shared limiter
// last saw of them (-1: not seen), and counts them as seeded: they are
// the budgets' totals across the replicas, so this process, used as the
// fallback while the shared limiter is unavailable, starts from them
// rather than from a usage store that is down with it (README "Limits
// across replicas").
func (l *LocalLimiter) observe(key string, lim store.KeyLimits, now time.Time, dayUsed, monthUsed int64) {
	if dayUsed < 0 && monthUsed < 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.entry(key, lim, now)
	if dayUsed >= 0 {
		k.dayUsed, k.daySeeded = max(k.dayUsed, dayUsed), true
	}
	if monthUsed >= 0 {
		k.monthUsed, k.monthSeeded = max(k.monthUsed, monthUsed), true
	}
}

// Forget drops the state of key (a limitKey) whose key was deleted: a
// limitKey is never used again (a key created under the deleted one's name
// has another id), so without this every delete and re-create would leave
// an entry behind for the process's life. A request of it still in flight
// keeps the entry until its Done.
func (l *LocalLimiter) Forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	switch {
	case k == nil:
	case k.inFlight > 0:
		k.forgotten = true
	default:
		delete(l.keys, key)
	}
}

// Admit implements Limiter.
func (l *LocalLimiter) Admit(ctx context.Context, key string, lim store.KeyLimits, estimate int64) (Admission, *LimitError) {
	now := l.now()
	l.seed(ctx, key, lim, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.entry(key, lim, now)
	name := keyNameOf(key)
	refuse := func(code string, retry time.Duration, format string, args ...any) *LimitError {
		if retry < time.Second {
			retry = time.Second
		}
		return &LimitError{Code: code, RetryAfter: retry, State: k.state(), Message: fmt.Sprintf(format, args...)}
	}
	utc := now.UTC()
	if lim.TokensPerDay > 0 && k.dayUsed >= lim.TokensPerDay {
		midnight := time.Date(utc.Year(), utc.Month(), utc.Day()+1, 0, 0, 0, 0, time.UTC)
		return nil, refuse(CodeInsufficientQuota, midnight.Sub(utc), "the key %q used its budget of %d tokens for today (UTC)", name, lim.TokensPerDay)
	}
	if lim.TokensPerMonth > 0 && k.monthUsed >= lim.TokensPerMonth {
		next := time.Date(utc.Year(), utc.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		return nil, refuse(CodeInsufficientQuota, next.Sub(utc), "the key %q used its budget of %d tokens for this month (UTC)", name, lim.TokensPerMonth)
	}
	// The request's own estimate must fit too, as tpm's does: what is left
	// of a budget after the tokens used is for the rest of the period (no
	// retry of this request fits before it ends).
	if lim.TokensPerDay > 0 && k.dayUsed+budgetNeed(estimate, lim.TokensPerDay) > lim.TokensPerDay {
		midnight := time.Date(utc.Year(), utc.Month(), utc.Day()+1, 0, 0, 0, 0, time.UTC)
		return nil, refuse(CodeInsufficientQuota, midnight.Sub(utc), budgetLeftMessage, name, lim.TokensPerDay, "today", lim.TokensPerDay-k.dayUsed, estimate)
	}
	if lim.TokensPerMonth > 0 && k.monthUsed+budgetNeed(estimate, lim.TokensPerMonth) > lim.TokensPerMonth {
		next := time.Date(utc.Year(), utc.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		return nil, refuse(CodeInsufficientQuota, next.Sub(utc), budgetLeftMessage, name, lim.TokensPerMonth, "this month", lim.TokensPerMonth-k.monthUsed, estimate)
	}
	// Full only with what is in flight: the budget may have room again as
	// soon as those requests end (with less than their estimates).
	if lim.TokensPerDay > 0 && k.dayUsed+k.reserved+budgetNeed(estimate, lim.TokensPerDay) > lim.TokensPerDay {
		return nil, refuse(CodeInsufficientQuota, time.Second, budgetInFlightMessage, name, lim.TokensPerDay, "today")
	}
	if lim.TokensPerMonth > 0 && k.monthUsed+k.reserved+budgetNeed(estimate, lim.TokensPerMonth) > lim.TokensPerMonth {
		return nil, refuse(CodeInsufficientQuota, time.Second, budgetInFlightMessage, name, lim.TokensPerMonth, "this month")
	}
	if lim.Concurrent > 0 && k.inFlight >= lim.Concurrent {
		return nil, refuse(CodeRateLimitExceeded, time.Second, "the key %q has %d requests in flight, its limit", name, lim.Concurrent)
	}
	if k.rpm != nil {
		k.rpm.advance(now)
		if k.rpm.tokens < 1 {
			_, wait := k.rpm.take(1, now)
			return nil, refuse(CodeRateLimitExceeded, wait, "the key %q reached its limit of %d requests per minute", name, lim.RPM)
		}
	}
	if k.tpm != nil {
		if ok, wait := k.tpm.take(float64(estimate), now); !ok {
			lerr := refuse(CodeRateLimitExceeded, wait, tpmMessage, name, lim.TPM)
			lerr.PerMinuteTokens = true
			return nil, lerr
		}
	}
	if k.rpm != nil {
		k.rpm.take(1, now)
	}
	return k.admitted(l, lim, estimate), nil
}

// admitted counts an admission in flight (its tpm estimate is already
// taken, its rpm slot too). The caller holds l.mu.
func (k *keyLimits) admitted(l *LocalLimiter, lim store.KeyLimits, estimate int64) *localAdmission {
	k.inFlight++
	var reserved int64
	if lim.TokensPerDay > 0 || lim.TokensPerMonth > 0 {
		reserved = max(estimate, 0)
		k.reserved += reserved
	}
	return &localAdmission{l: l, k: k, estimate: float64(min(estimate, max(lim.TPM, 0))), reserved: reserved, state: k.state()}
}

// register counts an admission the shared limiter decided (RedisLimiter)
// as if this process had made it: in flight until Done, its request and
// estimate taken from the rpm and tpm buckets (into debt if need be). Used
// as the fallback while Redis is unavailable, this process then starts
// from what it admitted itself, not from empty buckets and no request in
// flight (README "Limits across replicas": N replicas admit at most N
// times a limit). One lock and no store read: it is on every request.
func (l *LocalLimiter) register(key string, lim store.KeyLimits, estimate int64) *localAdmission {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.entry(key, lim, now)
	if k.rpm != nil {
		k.rpm.adjust(-1, now)
	}
	if k.tpm != nil {
		k.tpm.adjust(-math.Min(float64(max(estimate, 0)), k.tpm.capacity), now)
	}
	return k.admitted(l, lim, estimate)
}

// tpmMessage is the refusal of the tpm limit: key, limit.
const tpmMessage = "the key %q reached its limit of %d tokens per minute"

// budgetNeed is what a request of estimate tokens needs left of a budget
// to be admitted (README "Limits"): its estimate, at least one token (every
// request answered uses some, so a budget that is full refuses), and at
// most the whole budget, as tpm takes at most its capacity: a request
// larger than the budget is admitted while nothing of it is used or in
// flight, rather than refused forever. The Redis admission script
// (limits_redis.go) applies the same rule.
func budgetNeed(estimate, budget int64) int64 {
	return min(max(estimate, 1), budget)
}

// budgetLeftMessage is the refusal of a request whose estimate does not
// fit in what the tokens used leave of a budget: key, budget, period,
// tokens left, estimate.
const budgetLeftMessage = "the key %q has too little left of its budget of %d tokens for %s (UTC): %d tokens left, and this request is estimated at %d"

// budgetInFlightMessage is the refusal of a budget that only the requests
// in flight fill: key, budget, period.
const budgetInFlightMessage = "the key %q reached its budget of %d tokens for %s (UTC), counting the tokens estimated for its requests in flight; retry when they end"

type localAdmission struct {
	l        *LocalLimiter
	k        *keyLimits
	estimate float64 // taken from the tpm bucket
	reserved int64   // counted against the budgets until Done
	state    LimitState
	once     sync.Once
}

func (a *localAdmission) State() LimitState { return a.state }

func (a *localAdmission) Done(used int64) {
	a.once.Do(func() {
		a.l.mu.Lock()
		defer a.l.mu.Unlock()
		k := a.k
		k.inFlight--
		if k.tpm != nil {
			k.tpm.adjust(a.estimate-float64(used), a.l.now())
		}
		k.reserved -= a.reserved
		k.dayUsed = addTokens(k.dayUsed, used) // held, not wrapped: a wrapped total would reopen the budget
		k.monthUsed = addTokens(k.monthUsed, used)
		if k.forgotten && k.inFlight == 0 && a.l.keys[k.key] == k {
			delete(a.l.keys, k.key) // its key was deleted while it ran (Forget)
		}
	})
}

// estimateTokens is the token estimate reserved before a request: its
// body's bytes / 4.
func estimateTokens(body []byte) int64 { return int64(len(body)+3) / 4 }
