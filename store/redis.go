package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-gw/sluice/internal/httpx"
)

// Redis defaults applied by OpenRedis.
const (
	// DefaultRedisKeyPrefix starts every key Sluice writes.
	DefaultRedisKeyPrefix = "sluice:"
	// DefaultRedisTimeout bounds dialing and each command.
	DefaultRedisTimeout = time.Second
	// DefaultRedisWaitTimeout bounds WAIT when WaitReplicas is set.
	DefaultRedisWaitTimeout = time.Second
	// DefaultRedisHealthInterval is the period of the health ping while
	// Redis answers; while it does not, the ping backs off from
	// redisMinBackoff to redisMaxBackoff.
	DefaultRedisHealthInterval = time.Second

	redisMinBackoff = 100 * time.Millisecond
	redisMaxBackoff = 2 * time.Second
	redisPoolSize   = 64

	// UnavailableRetryAfter is the wait a client is told (Retry-After) when
	// a request fails because the store does not answer: the longest wait
	// between the Redis store's health pings while it is down, so a retry
	// after it finds a Redis that is back already serving. (A Pebble store
	// that stopped on a write error rechecks its directory less often, but
	// needs an operator anyway.)
	UnavailableRetryAfter = redisMaxBackoff
)

// ClientRetryAfter is the wait to tell a client whose request failed on
// err, a store's error (Retry-After): UnavailableRetryAfter while the store
// is out for the moment, and 0 when err is ErrUnavailableUntilRestart, a
// store closed until an operator restores it and restarts the gateway,
// which no wait brings back (README "Continuity"). The answer that carries
// it is apierr.StoreUnavailable.
func ClientRetryAfter(err error) time.Duration {
	if errors.Is(err, ErrUnavailableUntilRestart) {
		return 0
	}
	return UnavailableRetryAfter
}

// RedisOptions configure OpenRedis. Only URL is required.
type RedisOptions struct {
	// URL is redis://[user:password@]host:port/db, or rediss://… for TLS.
	URL string
	// Username and Password, when set, replace the URL's (so a password
	// with URL-special characters can come from the environment as is).
	Username, Password string
	// KeyPrefix starts every key (default "sluice:"). Replicas that share
	// state use the same prefix; two fleets sharing one Redis use two.
	KeyPrefix string
	// Timeout bounds dialing and each command (default 1s). A Redis slower
	// than this is treated as unavailable: the gateway fails closed.
	Timeout time.Duration
	// WaitReplicas, when positive, makes every acknowledged write also
	// wait (WAIT) until that many Redis replicas have it, within
	// WaitTimeout (default 1s); fewer is a failed write.
	WaitReplicas int
	WaitTimeout  time.Duration
	// HealthInterval is the period of the health ping (default 1s).
	HealthInterval time.Duration
	// TLS adds a CA, a client certificate or a server name to a rediss://
	// URL's TLS; with a redis:// URL it is an error.
	TLS RedisTLS

	// Options holds what both backends share: TTLs, size caps, Logger and
	// Now. Dir, SweepInterval and CacheSize do not apply: Redis expires
	// records itself.
	Options
}

// RedisStore is the Store, ConversationStore and SharedInputSessionStore
// kept in Redis (or Valkey), for several gateway replicas that share
// continuity, streaming-input sessions and target health. It is safe for
// concurrent use.
//
// Records are the same values PebbleStore writes (records.go), one Redis key
// each, with the record's ExpiresAt as the key's expiry (PEXPIRE, relative to
// the store's clock); reads check ExpiresAt too, so a record past its expiry
// is a miss whichever comes first. Every write that checks or changes more
// than one key is one Lua script, so it is atomic on the server. Keys, under
// KeyPrefix:
//
//	a:<response_id>                      anchor (string)
//	s:<kind>:<hex sha256(scope_id)>      scope (hash: l = latest response id, r = record)
//	t:<response_id>                      conversation turn (string)
//	i:<session_id>                       input session (hash: r = record, la = last activity,
//	                                     x = expiry, ro = result parts, tok = creator)
//	c:<session_id>                       its chunks (hash: decimal sequence id → chunk)
//	o:<session_id>                       its answer (stream of result parts)
//	sessions                             the session ids (set; an index for ListInputSessions)
//	l:<response_id>                      stream log (hash: r = record, x = expiry, c = cancel requested,
//	                                     w = written at, f = followed until)
//	ld:<response_id>                     tombstone of a deleted stream log ("1"; expires with the record)
//	e:<response_id>                      its events (sorted set: score = sequence number,
//	                                     member = 8-byte big-endian number and event)
//	h:<len>:<upstream>:<model>           a target's shared cooldown (string: reason; expiry: its end)
//	meta:schema                          the key layout's version
//
// While Redis does not answer (a failed health ping, or a command that
// failed for want of a connection), every operation fails at once with an
// error wrapping ErrUnavailable instead of waiting for a timeout; a
// background ping reconnects with backoff and clears the state.
type RedisStore struct {
	opts RedisOptions
	log  hclog.Logger
	c    *redis.Client
	p    string // key prefix
	addr string // host:port, for logs and Health (never the credentials)

	mu     sync.RWMutex // held shared by operations, exclusively by Close
	closed bool

	healthy   atomic.Bool
	healthErr atomic.Pointer[string]
	schemaOK  atomic.Bool
	pingNanos atomic.Int64
	wake      chan struct{}
	// backMu guards back, the channel Reachable hands out, closed when
	// the health loop finds Redis answering again.
	backMu   sync.Mutex
	back     chan struct{}
	stopPing context.CancelFunc
	pingDone chan struct{}

	stats counters
}

var (
	_ Store                   = (*RedisStore)(nil)
	_ ConversationStore       = (*RedisStore)(nil)
	_ SharedInputSessionStore = (*RedisStore)(nil)
	_ HealthReporter          = (*RedisStore)(nil)
	_ ReachabilityNotifier    = (*RedisStore)(nil)
)

// redisSchemaVersion is the key layout's version under meta:schema.
const redisSchemaVersion = "1"

// OpenRedis connects to Redis and starts the health ping. An unusable URL is
// an error, and so is a Redis that answers but refuses the configuration
// (credentials, ACL, database number, key layout, TLS trust: see
// classifyRedisStartError), which no waiting heals; an unreachable Redis is
// not (it is logged, reported by Health, and every operation fails with
// ErrUnavailable until it answers), so a replica that starts during a Redis
// outage serves what needs no store.
func OpenRedis(ctx context.Context, opts RedisOptions) (*RedisStore, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: open redis: %w", err)
	}
	ro, err := redisClientOptions(opts)
	if err != nil {
		return nil, err
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultRedisKeyPrefix
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultRedisTimeout
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = DefaultRedisWaitTimeout
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultRedisHealthInterval
	}
	opts.Options = opts.withCommonDefaults()
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout, ro.PoolTimeout = opts.Timeout, opts.Timeout, opts.Timeout, opts.Timeout
	if opts.WaitReplicas > 0 { // a pipeline's reply (the write, then WAIT) is read within ReadTimeout
		ro.ReadTimeout += opts.WaitTimeout
	}
	ro.ContextTimeoutEnabled = true
	// Retries cover a pooled connection that died with a Redis restart;
	// every write is idempotent (see the scripts), so a retry after a lost
	// reply is harmless.
	ro.MaxRetries, ro.MinRetryBackoff, ro.MaxRetryBackoff = 2, 8*time.Millisecond, 128*time.Millisecond
	ro.DialerRetries = 1
	ro.PoolSize = redisPoolSize
	ro.DisableIdentity = true
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	setRedisLogger()

	s := &RedisStore{
		opts: opts, log: opts.Logger.Named("store").With("backend", "redis"), c: redis.NewClient(ro),
		p: opts.KeyPrefix, addr: ro.Addr, wake: make(chan struct{}, 1), pingDone: make(chan struct{}),
	}
	s.c.AddHook(commandBound{command: opts.Timeout, pipeline: ro.ReadTimeout})
	s.setDown(errors.New("not connected yet"))
	pctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	pinged := make(chan error, 1)
	go func() { pinged <- s.ping(pctx) }()
	select {
	case err = <-pinged:
	case <-ctx.Done():
		// Stopped while starting (a signal): go-redis reads until the
		// deadline whatever the context says, so closing the client is
		// what ends the wait. Not an outage to report.
		_ = s.c.Close()
		<-pinged
		cancel()
		return nil, fmt.Errorf("store: open redis: %w", context.Cause(ctx))
	}
	cancel()
	if m, ok := classifyRedisStartError(err); ok {
		_ = s.c.Close()
		return nil, &redisConfigError{addr: s.addr, m: m, err: err}
	}
	if ro.TLSConfig != nil && ro.TLSConfig.InsecureSkipVerify {
		s.log.Warn("the redis server's TLS certificate is not verified (skip_verify=true in store.redis.url): anyone on the path can pose as it; "+
			"trust its CA with store.redis.tls.ca_file instead", "addr", s.addr)
	}
	if err != nil {
		s.setDown(err)
		s.log.Error("redis unreachable at start; continuing (continuity fails closed until it answers)", "addr", s.addr, "error", err)
	} else {
		s.setUp()
		s.log.Info("redis connected", "addr", s.addr, "key_prefix", s.p)
	}
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopPing = stop
	go s.healthLoop(hctx)
	return s, nil
}

// redisClientOptions parses the URL and applies the credentials. Errors
// never show the URL's password.
func redisClientOptions(opts RedisOptions) (*redis.Options, error) {
	if opts.URL == "" {
		return nil, fmt.Errorf("store: redis: the URL is required: %w", ErrInvalid)
	}
	ro, err := redis.ParseURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("store: redis url %q: %s: %w", httpx.RedactURL(opts.URL), strings.ReplaceAll(err.Error(), opts.URL, httpx.RedactURL(opts.URL)), ErrInvalid)
	}
	if opts.Username != "" {
		ro.Username = opts.Username
	}
	if opts.Password != "" {
		ro.Password = opts.Password
	}
	if err := opts.TLS.apply(ro); err != nil {
		return nil, err
	}
	return ro, nil
}

// redisLog receives go-redis's own log lines (connection-pool chatter);
// they are debug-level here: the store logs what an operator needs.
var (
	redisLogOnce sync.Once
	redisLog     atomic.Pointer[hclog.Logger]
)

type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		(*l).Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
	}
}

func setRedisLogger() {
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
}

// Close stops the health ping, waits for operations in flight and closes
// the connections. Calling Close again returns an error wrapping ErrClosed.
func (s *RedisStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("store: close redis %s: %w", s.addr, ErrClosed)
	}
	s.closed = true
	s.stopPing()
	<-s.pingDone
	if err := s.c.Close(); err != nil {
		return fmt.Errorf("store: close redis %s: %w", s.addr, err)
	}
	return nil
}

// SharedByReplicas reports true: several gateway replicas use this store,
// so what one of them caches of it may be changed by another (see IsShared).
func (s *RedisStore) SharedByReplicas() bool { return true }

// Health returns nil while Redis answers, else why it does not.
func (s *RedisStore) Health() error {
	if s.healthy.Load() {
		return nil
	}
	msg := "unavailable"
	if p := s.healthErr.Load(); p != nil {
		msg = *p
	}
	return fmt.Errorf("redis at %s: %s", s.addr, msg)
}

// PingLatency is the round trip of the last successful health ping.
func (s *RedisStore) PingLatency() time.Duration { return time.Duration(s.pingNanos.Load()) }

// Addr is the Redis address (host:port), without credentials.
func (s *RedisStore) Addr() string { return s.addr }

// KeyPrefix is the prefix of every key the store writes.
func (s *RedisStore) KeyPrefix() string { return s.p }

func (s *RedisStore) setUp() {
	if !s.healthy.Swap(true) {
		s.healthErr.Store(nil)
	}
}

func (s *RedisStore) setDown(err error) {
	msg := err.Error()
	s.healthErr.Store(&msg)
	s.healthy.Store(false)
}

// healthLoop pings Redis every HealthInterval while it answers, and with a
// doubling backoff (100ms … 2s) while it does not; an operation that finds
// Redis gone wakes it at once.
func (s *RedisStore) healthLoop(ctx context.Context) {
	defer close(s.pingDone)
	backoff := redisMinBackoff
	var misconfigLogged redisMisconfiguration // the last refusal logged
	t := time.NewTimer(s.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		pctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		err := s.ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		wasUp := s.healthy.Load()
		if err == nil {
			s.setUp()
			backoff = redisMinBackoff
			misconfigLogged = redisMisconfiguration{}
			if !wasUp {
				s.log.Info("redis reachable again", "addr", s.addr)
				s.announceReachable()
			}
			t.Reset(s.opts.HealthInterval)
			continue
		}
		s.setDown(err)
		if m, ok := classifyRedisStartError(err); ok {
			// Up now but refusing the configuration (a start during an
			// outage, or a server reconfigured): say what to fix, once
			// per cause, where an outage says it is unreachable.
			if m != misconfigLogged {
				misconfigLogged = m
				s.log.Error("redis refuses the configuration; it counts as unavailable until fixed", "addr", s.addr,
					"cause", m.cause, "fix", m.setting, "error", err)
			}
		} else if wasUp {
			s.log.Error("redis unreachable; continuity fails closed and streaming input answers 503 until it is back", "addr", s.addr, "error", err)
		}
		t.Reset(backoff)
		backoff = min(2*backoff, redisMaxBackoff)
	}
}

// Reachable implements ReachabilityNotifier.
func (s *RedisStore) Reachable() <-chan struct{} {
	s.backMu.Lock()
	defer s.backMu.Unlock()
	if s.back == nil {
		s.back = make(chan struct{})
	}
	return s.back
}

// announceReachable wakes whoever waits on Reachable.
func (s *RedisStore) announceReachable() {
	s.backMu.Lock()
	defer s.backMu.Unlock()
	if s.back != nil {
		close(s.back)
		s.back = nil
	}
}

// probeScript is the first successful ping's check that scripts run.
var probeScript = redis.NewScript(`return redis.call('GET', KEYS[1])`)

// ping checks that Redis answers; the first success also checks the key
// layout's version and warns about a persistence setting that loses
// acknowledged writes.
func (s *RedisStore) ping(ctx context.Context) error {
	start := time.Now()
	if err := s.c.Ping(ctx).Err(); err != nil {
		return err
	}
	s.pingNanos.Store(int64(time.Since(start)))
	if s.schemaOK.Load() {
		return nil
	}
	key := s.p + "meta:schema"
	if err := s.c.SetNX(ctx, key, redisSchemaVersion, 0).Err(); err != nil {
		return err
	}
	v, err := s.c.Get(ctx, key).Result()
	if err != nil {
		return err
	}
	if v != redisSchemaVersion {
		return fmt.Errorf("key layout version %q under %s, want %s (another Sluice version uses this prefix): %w", v, key, redisSchemaVersion, ErrCorrupt)
	}
	// Every write is a Lua script: an ACL that refuses EVALSHA or EVAL
	// refuses them all, and is found here rather than by each write.
	if err := probeScript.Run(ctx, s.c, []string{key}).Err(); err != nil {
		return err
	}
	s.schemaOK.Store(true)
	s.checkPersistence(ctx)
	s.checkReplicas(ctx)
	return nil
}

// checkPersistence warns when an acknowledged write would not survive a
// Redis restart. CONFIG may be disabled (managed Redis): then it says
// nothing.
func (s *RedisStore) checkPersistence(ctx context.Context) {
	if s.opts.WaitReplicas > 0 {
		return
	}
	cfg, err := s.c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return
	}
	if cfg["appendonly"] == "no" {
		s.log.Warn("redis runs without AOF (appendonly no): writes Sluice acknowledged since the last snapshot are lost if Redis restarts; "+
			"set appendonly yes and appendfsync always (or everysec: at most a second), or store.redis.wait_replicas", "addr", s.addr)
	}
}

// checkReplicas warns when fewer replicas are connected than WaitReplicas
// asks for: until enough connect, no write is acknowledged. It does not
// fail the start, as replicas may connect later; INFO may be disabled
// (managed Redis): then it says nothing.
func (s *RedisStore) checkReplicas(ctx context.Context) {
	if s.opts.WaitReplicas <= 0 {
		return
	}
	n, err := s.connectedReplicas(ctx)
	if err != nil || n >= s.opts.WaitReplicas {
		return
	}
	s.log.Warn(fmt.Sprintf("redis has %d connected replicas, fewer than store.redis.wait_replicas (%d): every write fails to be acknowledged until %d are connected. "+
		"Meanwhile each response waits wait_timeout and completes without a durable anchor (it is rewritten in the background), "+
		"streaming input answers 503 store_unavailable and usage totals are retried", n, s.opts.WaitReplicas, s.opts.WaitReplicas),
		"addr", s.addr, "connected_replicas", n, "wait_replicas", s.opts.WaitReplicas)
}

// begin checks ctx, the store's state and Redis's health for one operation;
// release must be called when it ends.
func (s *RedisStore) begin(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	if !s.healthy.Load() {
		s.mu.RUnlock()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, s.Health())
	}
	return s.mu.RUnlock, nil
}

// fail maps an error from go-redis: redis.Nil is ErrNotFound; a failed
// connection, a timeout or a server that cannot serve (loading, read-only
// replica, no auth) is ErrUnavailable and marks Redis down, waking the
// health ping; anything else is returned as is.
func (s *RedisStore) fail(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrConflict) {
		return err
	}
	if unavailable(err) {
		s.setDown(err)
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// unavailable reports whether err means Redis cannot serve now (as opposed
// to a reply error about the command).
func unavailable(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "NOAUTH", "WRONGPASS", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS"} {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "pool timeout")
}

// exec runs one write script and, with WaitReplicas, WAIT on the same
// connection (one pipeline), so that what WAIT counts is this write.
func (s *RedisStore) exec(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	run := func(sha bool) (any, error) {
		p := s.c.Pipeline()
		var cmd *redis.Cmd
		if sha {
			cmd = sc.EvalSha(ctx, p, keys, args...)
		} else {
			cmd = sc.Eval(ctx, p, keys, args...)
		}
		var wait *redis.Cmd
		if s.opts.WaitReplicas > 0 {
			wait = p.Do(ctx, "WAIT", s.opts.WaitReplicas, s.opts.WaitTimeout.Milliseconds())
		}
		if _, err := p.Exec(ctx); err != nil {
			if cmd.Err() != nil {
				return nil, cmd.Err()
			}
			return nil, err
		}
		if wait != nil {
			if n, _ := wait.Int64(); n < int64(s.opts.WaitReplicas) {
				return nil, fmt.Errorf("%w: %d of %d redis replicas acknowledged the write within %s",
					ErrUnavailable, n, s.opts.WaitReplicas, s.opts.WaitTimeout)
			}
		}
		return cmd.Val(), nil
	}
	v, err := run(true)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // Redis restarted: its script cache is empty
		v, err = run(false)
	}
	return v, err
}

// Key builders.
func (s *RedisStore) anchorKey(id string) string  { return s.p + "a:" + id }
func (s *RedisStore) turnKey(id string) string    { return s.p + "t:" + id }
func (s *RedisStore) sessionKey(id string) string { return s.p + "i:" + id }
func (s *RedisStore) chunksKey(id string) string  { return s.p + "c:" + id }
func (s *RedisStore) resultKey(id string) string  { return s.p + "o:" + id }
func (s *RedisStore) indexKey() string            { return s.p + "sessions" }

// closedKey holds why a session was closed (CloseInputSession).
func (s *RedisStore) closedKey(id string) string { return s.p + "ix:" + id }

func (s *RedisStore) scopeKey(kind ScopeKind, id string) string {
	return fmt.Sprintf("%ss:%d:%x", s.p, kind, scopeKey(kind, id)[2:])
}

func (s *RedisStore) targetKey(upstream, model string) string {
	return s.p + "h:" + strconv.Itoa(len(upstream)) + ":" + upstream + ":" + model
}

// now is the store's clock.
func (s *RedisStore) now() time.Time { return s.opts.Now() }

// pxUntil is the key expiry, in milliseconds from now (store clock), of a
// record that expires at t: at least 1 (a record written already expired
// lives a millisecond in Redis and reads as a miss, as in Pebble).
func (s *RedisStore) pxUntil(t time.Time) int64 {
	if t.IsZero() {
		return 0 // never expires
	}
	ms := (t.Sub(s.now()) + time.Millisecond - 1) / time.Millisecond
	return max(int64(ms), 1)
}

// stamp renders a time for the scripts: 20 decimal digits of Unix
// nanoseconds (compared in two exact halves), "~" for the zero time (never).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "~"
	}
	n := t.UnixNano()
	if n < 1 {
		n = 1
	}
	return fmt.Sprintf("%020d", n)
}

// Stats returns the store's counters; the Pebble-only fields are zero.
func (s *RedisStore) Stats() Stats {
	c := &s.stats
	return Stats{
		AnchorsWritten: c.anchorsWritten.Load(), AnchorLookups: c.anchorLookups.Load(), AnchorHits: c.anchorHits.Load(),
		AnchorsDeleted: c.anchorsDeleted.Load(), ScopeLookups: c.scopeLookups.Load(), TurnsWritten: c.turnsWritten.Load(),
		HistoryLookups: c.historyLookups.Load(), SessionsWritten: c.sessionsWritten.Load(), ChunksWritten: c.chunksWritten.Load(),
		StreamLogsWritten: c.streamLogsWritten.Load(), StreamEventsWritten: c.streamEventsWritten.Load(),
	}
}

// Sweep does nothing and returns 0: Redis removes expired keys itself (each
// key expires with its record), and reads treat a record past its ExpiresAt
// as absent before that.
func (s *RedisStore) Sweep(ctx context.Context, _ time.Time) (int, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: sweep: %w", err)
	}
	release()
	return 0, nil
}

// commandBound bounds each command, its retries included, by the store's
// timeout (a pipeline, which may carry WAIT, by its read timeout): go-redis
// retries a read timeout, so without it one command against a Redis that
// stopped answering took up to MaxRetries+1 timeouts, where the README
// promises that a Redis slower than timeout counts as down. XREAD blocks by
// design and is bounded by its own BLOCK argument and the caller's context.
type commandBound struct{ command, pipeline time.Duration }

func (b commandBound) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b commandBound) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xread" {
			return next(ctx, cmd)
		}
		ctx, cancel := context.WithTimeout(ctx, b.command)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (b commandBound) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := context.WithTimeout(ctx, b.pipeline)
		defer cancel()
		return next(ctx, cmds)
	}
}
