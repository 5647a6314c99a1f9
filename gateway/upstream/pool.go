// Package upstream is the pool of upstream LLM APIs the gateway forwards to:
// their configuration, health (probes, cooldowns, auth failures), load and
// selection.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/logtext"
)

// Protocols an upstream may speak.
const (
	ProtocolResponses = "responses"
	ProtocolChat      = "chat"
)

// Transports an upstream may be reached over.
const (
	TransportHTTP      = "http"
	TransportWebSocket = "websocket"
	TransportAuto      = "auto"
)

// Config describes one upstream.
type Config struct {
	Name      string
	BaseURL   string // e.g. https://api.openai.com/v1, no trailing slash
	APIKey    string
	Weight    int // relative share of the pool's requests (see Pool.Pick); <=0 (unset) means 1: config refuses a written 0, which would read as no share
	Protocol  string
	Transport string
	// ForwardHeaders names client headers that still reach this upstream
	// when it has its own APIKey (X-Api-Key, Api-Key, OpenAI-Organization
	// and OpenAI-Project are dropped otherwise).
	ForwardHeaders []string
	// Prefill says whether the upstream accepts a trailing assistant message
	// (a prefill) to continue from; nil means it does (see AcceptsPrefill).
	Prefill *bool
}

// AcceptsPrefill reports whether the upstream may be sent a trailing
// assistant message (upstreams[].prefill; default true).
func (c Config) AcceptsPrefill() bool { return c.Prefill == nil || *c.Prefill }

// State is an upstream's health as the pool sees it.
type State string

// Health states.
const (
	StateUnknown State = "unknown" // not probed yet; usable
	StateHealthy State = "healthy"
	StateDown    State = "down"   // the last probe failed
	StateFailed  State = "failed" // credentials rejected; parked until a probe shows they work
)

// Upstream is one member of the pool. Its methods are safe for concurrent use.
type Upstream struct {
	cfg      Config
	inflight atomic.Int64

	mu         sync.Mutex
	state      State
	reason     string
	coolUntil  time.Time
	coolReason string
	models     []string
	// entries are the models' entries as the upstream listed them (its
	// GET /models answer's data[]), by id: the first one for an id.
	entries   map[string]json.RawMessage
	lastProbe time.Time
	// downSince is when the upstream last became down or failed (zero while
	// it is usable): how long its conversations have been out of reach
	// (DownSince; continuity's rehydrate_after).
	downSince time.Time
	targets   map[string]*targetState // by model; see target.go
	// reasonChanges bounds the lines for a down upstream's reason changing
	// (probeWithin): a reason that names an ephemeral port or alternates
	// between two would otherwise log at every probe.
	reasonChanges logtext.Every

	// On-demand probes (ProbeDown): the one in flight, closed when it
	// ends (nil when none), and when the last one started.
	demand   chan struct{}
	demandAt time.Time

	// A request's rejected credentials (MarkFailed): when the park began
	// (zero when none), how long it lasts unless a probe may lift it
	// (credProbeLifts) and shows the credentials work, and when the last
	// park was lifted (see clearsCredentialPark).
	credParkedAt   time.Time
	credRetry      time.Duration
	credProbeLifts bool
	credLiftedAt   time.Time

	// shared is the pool's shared-health cache (nil without
	// Options.Shared): Status shows the skips it learnt from the other
	// replicas.
	shared *sharedCache
}

// Name is the upstream's configured name.
func (u *Upstream) Name() string { return u.cfg.Name }

// Config returns the upstream's configuration.
func (u *Upstream) Config() Config { return u.cfg }

// URL joins the base URL and an API path such as "/responses". A query in
// the base URL (Azure OpenAI's ?api-version=…) follows the path, joined to
// a query the path has.
func (u *Upstream) URL(path string) string {
	base, query, ok := strings.Cut(u.cfg.BaseURL, "?")
	if !ok || query == "" {
		return base + path
	}
	if p, pathQuery, ok := strings.Cut(path, "?"); ok {
		return base + p + "?" + query + "&" + pathQuery
	}
	return base + path + "?" + query
}

// Inflight is the number of requests currently in flight to this upstream.
func (u *Upstream) Inflight() int64 { return u.inflight.Load() }

// Acquire counts a request in flight; call the returned func when it ends.
func (u *Upstream) Acquire() (release func()) {
	u.inflight.Add(1)
	var once sync.Once
	return func() { once.Do(func() { u.inflight.Add(-1) }) }
}

// Usable reports whether requests may be sent now, and if not, why.
func (u *Upstream) Usable(now time.Time) (ok bool, why string) {
	un, out := u.unavailable(now)
	return !out, un.Why
}

// unavailable says why u takes no request at now; out is false when it does.
func (u *Upstream) unavailable(now time.Time) (un Unavailability, out bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch u.state {
	case StateDown:
		return Unavailability{Why: "down: " + u.reason}, true
	case StateFailed:
		return Unavailability{Why: "failed: " + u.reason}, true
	}
	if now.Before(u.coolUntil) {
		return Unavailability{Why: fmt.Sprintf("cooling down for %s: %s", u.coolUntil.Sub(now).Round(time.Millisecond), u.coolReason),
			RetryIn: u.coolUntil.Sub(now)}, true
	}
	return Unavailability{}, false
}

// DownSince reports since when u has been down (its probes fail) or failed
// (its credentials were rejected), and false while it is neither.
func (u *Upstream) DownSince() (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state != StateDown && u.state != StateFailed {
		return time.Time{}, false
	}
	return u.downSince, !u.downSince.IsZero()
}

// markDownLocked keeps downSince across down and failed: the first of them
// starts it, a usable state clears it. u.mu is held.
func (u *Upstream) markDownLocked(state State, now time.Time) {
	switch {
	case state != StateDown && state != StateFailed:
		u.downSince = time.Time{}
	case u.downSince.IsZero():
		u.downSince = now
	}
}

// Status is a point-in-time view of an upstream for admin endpoints and tests.
type Status struct {
	Name       string `json:"name"`
	State      State  `json:"state"`
	Reason     string `json:"reason,omitempty"`
	CoolingFor string `json:"cooling_for,omitempty"`
	CoolReason string `json:"cool_reason,omitempty"`
	// Shared: the cooldown is one another replica reported through the
	// shared health (this replica skips the upstream for it too).
	Shared      bool      `json:"shared,omitempty"`
	Inflight    int64     `json:"inflight"`
	Models      []string  `json:"models,omitempty"`
	LastProbeAt time.Time `json:"last_probe_at,omitzero"`
	// Targets are the (upstream, model) pairs with model-specific state:
	// those routes name with a model, and those that have failed (a clean
	// one may be forgotten when MaxTargets are kept).
	Targets []TargetStatus `json:"targets,omitempty"`
}

// Status returns the upstream's current status, with the cooldowns and
// open circuits this replica learnt from the shared health (marked Shared)
// where they outlast its own.
func (u *Upstream) Status(now time.Time) Status {
	shared := u.shared.skipsOf(u.cfg.Name, now) // before u.mu: the cache has its own lock
	u.mu.Lock()
	defer u.mu.Unlock()
	s := Status{Name: u.cfg.Name, State: u.state, Reason: u.reason, Inflight: u.inflight.Load(),
		Models: append([]string(nil), u.models...), LastProbeAt: u.lastProbe, Targets: u.targetStatuses(now, shared)}
	if now.Before(u.coolUntil) {
		s.CoolingFor = u.coolUntil.Sub(now).Round(time.Millisecond).String()
		s.CoolReason = u.coolReason
	}
	if e, ok := shared[""]; ok && e.until.After(u.coolUntil) {
		s.CoolingFor, s.CoolReason, s.Shared = e.until.Sub(now).Round(time.Millisecond).String(), e.reason, true
	}
	return s
}

// Options tune the pool.
type Options struct {
	Client        *http.Client  // used for probes; NewPool makes it follow no redirects (FollowNoRedirects)
	ProbeInterval time.Duration // default DefaultProbeInterval
	ProbeTimeout  time.Duration // default DefaultProbeTimeout
	// OnDemandProbeTimeout bounds a probe a request triggers when every
	// upstream it may use is down (ProbeDown); default
	// DefaultOnDemandProbeTimeout, at most ProbeTimeout.
	OnDemandProbeTimeout time.Duration
	// OnDemandProbeEvery is the least time between two on-demand probes of
	// one upstream, so a flood of requests is not a flood of probes;
	// default DefaultOnDemandProbeEvery.
	OnDemandProbeEvery time.Duration
	Logger             hclog.Logger
	Now                func() time.Time

	// CircuitFailures is how many consecutive failures open a target's
	// circuit; default 3.
	CircuitFailures int
	// CircuitOpenFor is how long an open circuit is skipped before its
	// half-open probe; default 30s.
	CircuitOpenFor time.Duration
	// MaxTargets bounds the targets an upstream keeps state for (clients
	// choose model names); default 1024.
	MaxTargets int
	// Jitter returns a number in [0,1) for cooldown and retry jitter;
	// default math/rand/v2.Float64.
	Jitter func() float64

	// Shared, when set, shares target cooldowns and open circuits with the
	// other gateway replicas (see SharedHealth): a target one replica saw
	// fail is skipped by all. SharedRefresh (default and at most 1s) is how
	// long a replica trusts what it last read of a target; SharedTimeout
	// (default 100ms) bounds one read or write.
	Shared        SharedHealth
	SharedRefresh time.Duration
	SharedTimeout time.Duration
}

// Probe defaults (gateway/config takes its timeouts.probe_interval default
// from here).
const (
	DefaultProbeInterval        = 15 * time.Second
	DefaultProbeTimeout         = 5 * time.Second
	DefaultOnDemandProbeTimeout = 2 * time.Second
	DefaultOnDemandProbeEvery   = time.Second
)

// IsHTTPURL reports whether u is an absolute http(s) URL with a host: the
// one rule for an upstream's base URL, applied by NewPool, gateway/config
// (base_url) and --upstream (config.UpstreamFromURL).
func IsHTTPURL(u *url.URL) bool {
	return u != nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// CheckBaseURL is IsHTTPURL for a base URL as configured. Its error does
// not repeat the URL, which may hold a key; the caller names the upstream.
func CheckBaseURL(raw string) error {
	if u, err := url.Parse(raw); err != nil || !IsHTTPURL(u) {
		return errors.New("is not an http(s) URL")
	}
	return nil
}

// Pool selects upstreams and tracks their health.
type Pool struct {
	ups    []*Upstream
	byName map[string]*Upstream
	opts   Options
	shared *sharedCache // nil without Options.Shared

	// pickMu guards credit: each upstream's smooth weighted round-robin
	// credit (by index in ups), which shares the picks among equally loaded
	// upstreams in proportion to their weights (see Pick).
	pickMu sync.Mutex
	credit []int64
}

// ErrNoUpstream is returned by Pick when no upstream is usable.
var ErrNoUpstream = errors.New("no healthy upstream")

// NewPool validates the upstream configs and builds a pool.
func NewPool(cfgs []Config, opts Options) (*Pool, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("upstream: at least one upstream is required")
	}
	opts.Client = FollowNoRedirects(opts.Client) // the probe carries the api_key
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.OnDemandProbeTimeout <= 0 {
		opts.OnDemandProbeTimeout = DefaultOnDemandProbeTimeout
	}
	opts.OnDemandProbeTimeout = min(opts.OnDemandProbeTimeout, opts.ProbeTimeout)
	if opts.OnDemandProbeEvery <= 0 {
		opts.OnDemandProbeEvery = DefaultOnDemandProbeEvery
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CircuitFailures <= 0 {
		opts.CircuitFailures = 3
	}
	if opts.CircuitOpenFor <= 0 {
		opts.CircuitOpenFor = 30 * time.Second
	}
	if opts.MaxTargets <= 0 {
		opts.MaxTargets = 1024
	}
	if opts.Jitter == nil {
		opts.Jitter = rand.Float64
	}
	p := &Pool{byName: make(map[string]*Upstream), opts: opts, credit: make([]int64, len(cfgs))}
	p.shared = newSharedCache(p)
	for i, c := range cfgs {
		if c.Name == "" {
			c.Name = fmt.Sprintf("upstream-%d", i+1)
		}
		if _, dup := p.byName[c.Name]; dup {
			return nil, fmt.Errorf("upstream: duplicate name %q", c.Name)
		}
		if err := CheckBaseURL(c.BaseURL); err != nil {
			return nil, fmt.Errorf("upstream %q: base_url %w", c.Name, err)
		}
		c.BaseURL = strings.TrimRight(c.BaseURL, "/")
		if c.Weight <= 0 {
			c.Weight = 1
		}
		if c.Protocol == "" {
			c.Protocol = ProtocolResponses
		}
		if c.Transport == "" {
			c.Transport = TransportHTTP
		}
		up := &Upstream{cfg: c, state: StateUnknown, shared: p.shared, reasonChanges: logtext.Every{Interval: time.Minute}}
		p.ups = append(p.ups, up)
		p.byName[c.Name] = up
	}
	return p, nil
}

// Upstreams returns the pool's members in configuration order.
func (p *Pool) Upstreams() []*Upstream { return p.ups }

// Get returns the upstream with that name, or nil.
func (p *Pool) Get(name string) *Upstream { return p.byName[name] }

// Pick chooses the usable upstream with the least load per unit of weight
// (requests in flight / weight), skipping any for which skip returns true.
// Among those equally loaded, which at low concurrency is all of them (none
// has a request in flight), a smooth weighted round-robin decides, so
// sequential traffic too is shared in proportion to the weights (README:
// `weight`): 3:1 picks A, A, B, A and again, equal weights alternate. skip
// is asked once about each upstream, in configuration order.
func (p *Pool) Pick(skip func(*Upstream) bool) (*Upstream, error) {
	now := p.opts.Now()
	var buf [16]int
	least := buf[:0] // indexes in p.ups of the usable upstreams with the lowest score
	var leastScore float64
	for i, u := range p.ups {
		if skip != nil && skip(u) {
			continue
		}
		if ok, _ := u.Usable(now); !ok {
			continue
		}
		// Equal ratios of small integers divide to the same float64 (the
		// division is correctly rounded), so equal loads do tie.
		score := float64(u.inflight.Load()) / float64(u.cfg.Weight)
		switch {
		case len(least) == 0 || score < leastScore:
			least, leastScore = append(least[:0], i), score
		case score == leastScore:
			least = append(least, i)
		}
	}
	if len(least) == 0 {
		return nil, ErrNoUpstream
	}
	return p.ups[p.roundRobin(least)], nil
}

// roundRobin is one step of nginx's smooth weighted round-robin among the
// upstreams at indexes in p.ups: each gains its weight in credit, the one
// with the most (the first on a tie) is chosen and pays the sum of their
// weights. Over any run of picks among the same upstreams each is chosen in
// proportion to its weight, interleaved rather than in bursts. An upstream
// left out of a step (down, cooling, busier, skipped) keeps its credit.
func (p *Pool) roundRobin(among []int) int {
	if len(among) == 1 {
		return among[0] // nothing to share: the credits stay as they are
	}
	p.pickMu.Lock()
	defer p.pickMu.Unlock()
	best := -1
	var total int64
	for _, i := range among {
		w := int64(p.ups[i].cfg.Weight)
		total += w
		p.credit[i] += w
		if best < 0 || p.credit[i] > p.credit[best] {
			best = i
		}
	}
	p.credit[best] -= total
	return best
}

// Healthy reports whether at least one upstream is usable now.
func (p *Pool) Healthy() bool {
	now := p.opts.Now()
	for _, u := range p.ups {
		if ok, _ := u.Usable(now); ok {
			return true
		}
	}
	return false
}

// Cooldown keeps u out of selection for d.
func (p *Pool) Cooldown(u *Upstream, d time.Duration, reason string) {
	if d <= 0 {
		return
	}
	until := p.opts.Now().Add(d)
	u.mu.Lock()
	if until.After(u.coolUntil) {
		u.coolUntil = until
		u.coolReason = reason
	}
	u.mu.Unlock()
	p.opts.Logger.Warn("upstream cooling down", "upstream", u.cfg.Name, "for", d.String(), "reason", reason)
	if p.shared != nil {
		p.shared.publish(sharedKey{u.cfg.Name, ""}, p.opts.Now(), d, sharedRecord{reason: reason})
	}
}

// How long a credential park lasts when no probe lifts it
// (clearsCredentialPark): the first credentialRetryFirst, one that follows
// soon after the last was lifted twice the last, up to credentialRetryMax.
const (
	credentialRetryFirst = time.Minute
	credentialRetryMax   = 30 * time.Minute
)

// MarkFailed parks u after a request's credentials were rejected
// (clearsCredentialPark says until when).
func (p *Pool) MarkFailed(u *Upstream, reason string) {
	now := p.opts.Now()
	u.mu.Lock()
	if u.credParkedAt.IsZero() {
		// Rejected again soon after the last park was lifted, whether by a
		// probe or by its time: the credentials still fail where requests
		// use them, so this park lasts twice as long and no probe lifts it
		// (a key that lists models but may not create responses passes
		// every probe).
		if !u.credLiftedAt.IsZero() && now.Sub(u.credLiftedAt) <= credentialRetryMax {
			u.credRetry, u.credProbeLifts = min(2*u.credRetry, credentialRetryMax), false
		} else {
			u.credRetry, u.credProbeLifts = credentialRetryFirst, true
		}
		u.credParkedAt = now
	}
	retry, probeLifts := u.credRetry, u.credProbeLifts
	u.state, u.reason = StateFailed, reason
	u.markDownLocked(StateFailed, now)
	u.mu.Unlock()
	until := "for " + retry.String()
	if probeLifts {
		until = "until a probe shows they work, or for " + retry.String()
	}
	p.opts.Logger.Error("upstream credentials rejected; parked "+until, "upstream", u.cfg.Name, "reason", reason)
}

// Models is the de-duplicated, sorted union of the models listed by usable upstreams.
func (p *Pool) Models() []string {
	now := p.opts.Now()
	seen := map[string]bool{}
	var out []string
	for _, u := range p.ups {
		if ok, _ := u.Usable(now); !ok {
			continue
		}
		u.mu.Lock()
		for _, m := range u.models {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
		u.mu.Unlock()
	}
	sort.Strings(out)
	return out
}

// ModelEntry is a model as an upstream listed it.
type ModelEntry struct {
	Upstream string // the upstream's name
	// Entry is the upstream's own entry object for the model (id, object,
	// created, owned_by and any field of its own, such as vLLM's
	// max_model_len), as it listed it.
	Entry json.RawMessage
}

// ModelEntries maps each model the usable upstreams list to its entry in
// the list of the first of them, in configuration order, that lists it.
func (p *Pool) ModelEntries() map[string]ModelEntry {
	now := p.opts.Now()
	out := map[string]ModelEntry{}
	for _, u := range p.ups {
		if ok, _ := u.Usable(now); !ok {
			continue
		}
		u.mu.Lock()
		for _, m := range u.models {
			if _, listed := out[m]; !listed {
				out[m] = ModelEntry{Upstream: u.cfg.Name, Entry: u.entries[m]}
			}
		}
		u.mu.Unlock()
	}
	return out
}

// Run probes every upstream now and then every ProbeInterval until ctx ends.
func (p *Pool) Run(ctx context.Context) {
	p.ProbeAll(ctx)
	t := time.NewTicker(p.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.ProbeAll(ctx)
		}
	}
}

// ProbeAll probes every upstream concurrently and waits for the answers.
func (p *Pool) ProbeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range p.ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Probe(ctx, u)
		}()
	}
	wg.Wait()
}

// Probe asks GET {base_url}/models and updates u's state and model list.
func (p *Pool) Probe(ctx context.Context, u *Upstream) {
	p.probeWithin(ctx, u, p.opts.ProbeTimeout, "periodic")
}

// probeWithin is Probe bounded by timeout. A change to down or failed is
// logged at WARN, any other change at INFO.
func (p *Pool) probeWithin(ctx context.Context, u *Upstream, timeout time.Duration, kind string) {
	models, entries, state, reason := p.probe(ctx, u, timeout)
	if ctx.Err() != nil {
		return // the pool is stopping (or never started): the upstream is not down
	}
	if state == StateHealthy {
		if keep, why := p.clearsCredentialPark(ctx, u, timeout); !keep {
			state, reason = StateFailed, why
		}
	}
	u.mu.Lock()
	prev, prevReason := u.state, u.reason
	u.state, u.reason, u.lastProbe = state, reason, p.opts.Now()
	u.markDownLocked(state, u.lastProbe)
	if state == StateHealthy {
		u.models, u.entries = models, entries
		u.credParkedAt = time.Time{}
	}
	u.mu.Unlock()
	switch {
	case prev != state:
		log := p.opts.Logger.Info
		if state == StateDown || state == StateFailed {
			log = p.opts.Logger.Warn
		}
		log("upstream state changed", "upstream", u.cfg.Name, "from", string(prev), "to", string(state), "reason", reason, "probe", kind)
	case state == StateDown && reason != prevReason:
		// Still down, for another reason (its port refused connections, now
		// it answers 503): logged once per change, at the level the change
		// to down was, so that the log tells what /admin/upstreams shows
		// (Status.Reason), not only the first reason; at most one line a
		// minute, with the number of changes it stands for. A credential park's
		// reason (failed) counts down its wait at each probe, and is logged
		// when it starts (MarkFailed).
		if n, ok := u.reasonChanges.Allow(p.opts.Now()); ok {
			p.opts.Logger.Warn("upstream down reason changed", "upstream", u.cfg.Name, "from", prevReason, "to", reason, "probe", kind, "changes", n)
		}
	}
}

// ProbeDown probes, now, those of ups that are down (their last probe
// failed) and waits for the answers or for ctx. A request calls it when it
// finds no usable upstream, so an upstream that came back since its last
// probe serves it at once rather than after the next ProbeInterval.
// Upstreams cooling down (a 429, a connect failure) or parked after
// rejected credentials are not probed. Probes are single-flight per
// upstream (a caller waits for the one in flight), at most one per
// OnDemandProbeEvery per upstream, each bounded by OnDemandProbeTimeout
// and not tied to the caller: one caller leaving does not cut the probe
// others wait for. It reports whether it waited for any probe (the caller
// then selects again).
func (p *Pool) ProbeDown(ctx context.Context, ups []*Upstream) bool {
	now := p.opts.Now()
	var wait []chan struct{}
	for _, u := range ups {
		u.mu.Lock()
		ch := u.demand
		if ch == nil && u.state == StateDown && (u.demandAt.IsZero() || now.Sub(u.demandAt) >= p.opts.OnDemandProbeEvery) {
			ch = make(chan struct{})
			u.demand, u.demandAt = ch, now
			go p.demandProbe(u, ch)
		}
		u.mu.Unlock()
		if ch != nil {
			wait = append(wait, ch)
		}
	}
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return len(wait) > 0
}

// demandProbe is one on-demand probe of u; done is closed when it ends.
func (p *Pool) demandProbe(u *Upstream, done chan struct{}) {
	defer func() {
		u.mu.Lock()
		u.demand = nil
		u.mu.Unlock()
		close(done)
	}()
	p.probeWithin(context.Background(), u, p.opts.OnDemandProbeTimeout, "on demand")
}

// clearsCredentialPark decides whether a successful probe lifts the park of
// an upstream whose credentials a request had rejected (MarkFailed). A
// first park is lifted by a probe that checked the credentials: its model
// list refuses a request without them. Some servers list their models to
// anyone (llama.cpp's /models is public even with --api-key), and there a
// successful probe says nothing about the key; and a key may list models
// but not create responses. So a park stays, until its time is up (a
// minute, doubling while rejections follow each lift, at most half an
// hour), when the probe cannot check the credentials or when the
// credentials were rejected again soon after the last park was lifted; then
// the next request tries them again. Lifting it at each probe sent one
// request in every probe interval to a certain 401 and made /readyz flap.
// The park's reason is returned when it stays.
func (p *Pool) clearsCredentialPark(ctx context.Context, u *Upstream, timeout time.Duration) (bool, string) {
	u.mu.Lock()
	parked, since, retry, probeLifts, reason := !u.credParkedAt.IsZero(), u.credParkedAt, u.credRetry, u.credProbeLifts, u.reason
	u.mu.Unlock()
	if !parked {
		return true, ""
	}
	now := p.opts.Now()
	left := since.Add(retry).Sub(now)
	base, _, _ := strings.Cut(reason, " (")
	switch {
	case left <= 0:
		p.opts.Logger.Info("trying an upstream's rejected credentials again", "upstream", u.cfg.Name, "parked_for", retry.String())
	case !probeLifts:
		return false, fmt.Sprintf("%s (rejected again soon after its last park; tried again in %s)", base, left.Round(time.Second))
	case p.listsModelsToAnyone(ctx, u, timeout):
		return false, fmt.Sprintf("%s (its model list needs no credentials, so a probe cannot check them; tried again in %s)",
			base, left.Round(time.Second))
	}
	u.mu.Lock()
	u.credLiftedAt = now
	u.mu.Unlock()
	return true, ""
}

// listsModelsToAnyone reports whether u's GET /models answers 2xx to a
// request without credentials. Anything else (a refusal, an error, a
// timeout) counts as not: the credentialed probe is then believed.
func (p *Pool) listsModelsToAnyone(ctx context.Context, u *Upstream, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := p.getModels(ctx, u, false)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode/100 == 2
}

// FollowNoRedirects returns a copy of c (a new client when nil) that
// follows no redirect: a 3xx is the answer. Every client that carries an
// upstream's api_key goes through it: on a redirect to the same host on
// another port (or to a subdomain) Go's client would send the Authorization
// header along, and an upstream's answer is untrusted (SECURITY.md: upstream
// keys are sent only to their own upstream).
func FollowNoRedirects(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	}
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &out
}

// getModels sends GET {base_url}/models to u, with its api_key when
// withKey (probe) or without any credential (listsModelsToAnyone).
func (p *Pool) getModels(ctx context.Context, u *Upstream, withKey bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL("/models"), nil)
	if err != nil {
		return nil, err
	}
	if withKey && u.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+u.cfg.APIKey)
	}
	// The gateway's transport decodes nothing, and a request without
	// Accept-Encoding accepts any coding (RFC 9110 §12.5.3).
	req.Header.Set("Accept-Encoding", "identity")
	return p.opts.Client.Do(req)
}

// probe asks u for its models: their ids, in the upstream's order, and
// their entries by id (copied, so the body is not kept).
func (p *Pool) probe(ctx context.Context, u *Upstream, timeout time.Duration) ([]string, map[string]json.RawMessage, State, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := p.getModels(ctx, u, true)
	if err != nil {
		return nil, nil, StateDown, "probe: " + RedactError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, nil, StateDown, "probe: reading body: " + err.Error()
	}
	switch {
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && u.cfg.APIKey == "":
		// Without its own api_key the upstream gets each client's credential
		// (README: `sluice serve --upstream https://api.openai.com/v1` is a
		// zero-config drop-in, and OpenAI's model list needs a key). A probe
		// has none to send: the refusal says the upstream answers, not that
		// a credential failed. Its models are unknown.
		return nil, nil, StateHealthy, ""
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, nil, StateFailed, fmt.Sprintf("probe: HTTP %d", resp.StatusCode)
	case resp.StatusCode/100 == 3:
		return nil, nil, StateDown, "probe: " + redirectReason(resp, u.cfg.APIKey)
	case resp.StatusCode/100 != 2:
		return nil, nil, StateDown, fmt.Sprintf("probe: HTTP %d", resp.StatusCode)
	}
	// Not JSON (a login page, a wrong base_url) is a down upstream; a list
	// with an odd entry is an upstream that answers: the entries that name a
	// model count, the others are skipped.
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil && !json.Valid(body) {
		return nil, nil, StateDown, "probe: model list is not JSON: " + err.Error()
	}
	models := make([]string, 0, len(list.Data))
	entries := make(map[string]json.RawMessage, len(list.Data))
	for _, raw := range list.Data {
		var m struct {
			ID any `json:"id"`
		}
		if json.Unmarshal(raw, &m) == nil {
			if id, ok := m.ID.(string); ok && id != "" {
				models = append(models, id)
				if _, dup := entries[id]; !dup {
					entries[id] = bytes.Clone(raw)
				}
			}
		}
	}
	return models, entries, StateHealthy, ""
}

// maxReasonLocation bounds the Location a redirect's reason repeats: the
// header is the upstream's choice, up to the transport's header bound.
const maxReasonLocation = 200

// redirectReason says that u's probe was redirected, and where to: without
// the Location's userinfo, query and fragment (where a key would be), and
// not at all when it holds apiKey (an upstream may echo what it received).
func redirectReason(resp *http.Response, apiKey string) string {
	why := fmt.Sprintf("HTTP %d redirect", resp.StatusCode)
	switch loc, err := resp.Location(); {
	case errors.Is(err, http.ErrNoLocation):
	case err != nil:
		why += " to a Location that does not parse"
	case apiKey != "" && strings.Contains(resp.Header.Get("Location")+loc.Path, apiKey):
		why += " to a Location that holds the api_key (not shown)"
	default:
		shown := (&url.URL{Scheme: loc.Scheme, Host: loc.Host, Path: loc.Path, RawPath: loc.RawPath}).String()
		if loc.RawQuery != "" {
			shown += "?…"
		}
		if len(shown) > maxReasonLocation {
			shown = strings.ToValidUTF8(shown[:maxReasonLocation], "") + "…"
		}
		why += " to " + shown
	}
	return why + " " + NoRedirectsHint
}

// NoRedirectsHint ends the reason of an upstream answer that was a
// redirect, a probe's or a request's (FollowNoRedirects).
const NoRedirectsHint = "(the gateway follows no redirects: check the upstream's base_url)"

// RedactError renders a client error without its URL: the URL may carry
// credentials in userinfo, and the upstream name already says where. The
// method the client named the error by ("Get", "Post") goes too: it tells
// an operator nothing to act on, and README quotes the reason without it
// ("probe: dial tcp …: connection refused").
func RedactError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
