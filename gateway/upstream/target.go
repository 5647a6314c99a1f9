package upstream

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Target is one (upstream, model) pair: what a route sends a request to, and
// the unit of model-specific health. Rate limits, quota, overload and
// timeouts are charged to the target, so one model's outage does not take
// down the upstream's other models; connect failures and rejected
// credentials stay on the Upstream.
type Target struct {
	Upstream *Upstream
	Model    string // the model name sent upstream
}

func (t Target) String() string { return t.Upstream.Name() + "/" + t.Model }

// Circuit is a target's circuit-breaker state.
type Circuit int

// Circuit states, in the order of the sluice_target_circuit_state gauge.
const (
	// CircuitClosed: requests flow; consecutive failures are counted.
	CircuitClosed Circuit = iota
	// CircuitOpen: CircuitFailures consecutive failures; requests skip the
	// target until CircuitOpenFor (or a longer cooldown) has passed.
	CircuitOpen
	// CircuitHalfOpen: the open period is over; exactly one request (the
	// probe) may go to the target. Its success closes the circuit, its
	// failure opens it again.
	CircuitHalfOpen
)

func (c Circuit) String() string {
	switch c {
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half_open"
	}
	return "closed"
}

// Failure is a model-specific failure charged to a target.
type Failure struct {
	// Class labels the failure in metrics and /admin/upstreams:
	// rate_limited, quota, overloaded, server_error, timeout.
	Class  string
	Reason string // for logs and /admin/upstreams
	// Hint is how long the upstream asked us to wait (Retry-After,
	// retry-after-ms, "try again in Ns", a replay policy's penalty); when
	// f.HasHint, it is honoured as the target's cooldown.
	Hint time.Duration
	// Hinted says the upstream gave a wait even when Hint is zero (TakeHint):
	// "retry now" (Retry-After: 0, a date already past) is no cooldown at
	// all, not a missing hint that gets the default backoff (README "Routes
	// and fallbacks": a shorter wait never gives a longer outage).
	Hinted bool
	// Backoff, when there is no hint (HasHint false), is the base of a jittered exponential
	// cooldown that doubles with each consecutive capacity failure of the
	// target. Zero: no cooldown (the failure only counts toward the circuit).
	Backoff time.Duration
	// Code is the upstream's error code of a capacity failure
	// (rate_limit_exceeded, insufficient_quota, …; CapacityFailure): while
	// the target cools down for it, a request that finds no target usable
	// is answered with it (Unavailability). "" for any other failure.
	Code string
	// Type is the upstream's error type with Code (insufficient_quota,
	// requests, …), answered with it.
	Type string
}

// Unavailability is why a request may not go to a target now.
type Unavailability struct {
	Why string
	// RetryIn is how long until the cooldown or open circuit that keeps the
	// target out ends. Zero when nothing says: an upstream that is down or
	// whose credentials were rejected waits for its next probe, and a
	// half-open circuit for the probe in flight.
	RetryIn time.Duration
	// Code is the upstream's capacity code (Failure.Code) while the target
	// cools down for its capacity, or is behind a circuit that a capacity
	// failure opened; "" for any other reason.
	Code string
	Type string // the upstream's error type with Code
}

// targetState is what the pool knows about one target. Guarded by the
// Upstream's mu.
type targetState struct {
	configured bool // named by a route: listed from the start, never evicted

	failures  int // consecutive failures
	circuit   Circuit
	openUntil time.Time // CircuitOpen: skipped until then, then half-open
	probing   bool      // CircuitHalfOpen: the probe is in flight

	coolUntil  time.Time
	coolReason string
	coolCode   string // Failure.Code of the failure that set coolUntil
	coolType   string // and its Failure.Type
	streak     int    // consecutive cooldowns, for the exponential backoff

	lastFailure   string
	lastFailureAt time.Time
	// openCode and openType are the Failure.Code and Type of the failure
	// that opened the circuit: a circuit a run of rate limits opened keeps
	// its target out for its capacity, as a cooldown does (Unavailability).
	openCode, openType string
}

// clean reports whether the state says nothing (evictable).
func (ts *targetState) clean(now time.Time) bool {
	return !ts.configured && ts.failures == 0 && ts.circuit == CircuitClosed && !now.Before(ts.coolUntil)
}

// circuitAt is the circuit as a request at now sees it: an open circuit
// whose period is over is half-open.
func (ts *targetState) circuitAt(now time.Time) Circuit {
	if ts.circuit == CircuitOpen && !now.Before(ts.openUntil) {
		return CircuitHalfOpen
	}
	return ts.circuit
}

// usable reports whether a request may go to the target now (ignoring the
// upstream's own state).
func (ts *targetState) usable(now time.Time) (bool, string) {
	un, out := ts.unavailable(now)
	return !out, un.Why
}

// unavailable says why a request may not go to the target now (ignoring
// the upstream's own state); out is false when it may.
func (ts *targetState) unavailable(now time.Time) (un Unavailability, out bool) {
	if ts == nil {
		return Unavailability{}, false
	}
	if now.Before(ts.coolUntil) {
		un.Code, un.Type = ts.coolCode, ts.coolType // also behind an open circuit: the capacity failure is what the target waits out
	}
	switch ts.circuitAt(now) {
	case CircuitOpen:
		if un.Code == "" {
			un.Code, un.Type = ts.openCode, ts.openType
		}
		un.Why = fmt.Sprintf("circuit open for %s after %d consecutive failures (last: %s)",
			ts.openUntil.Sub(now).Round(time.Millisecond), ts.failures, ts.lastFailure)
		un.RetryIn = max(ts.openUntil.Sub(now), ts.coolUntil.Sub(now))
		return un, true
	case CircuitHalfOpen:
		if ts.probing {
			return Unavailability{Why: "circuit half-open: a probe request is in flight"}, true
		}
		return Unavailability{}, false
	}
	if now.Before(ts.coolUntil) {
		un.Why = fmt.Sprintf("cooling down for %s: %s", ts.coolUntil.Sub(now).Round(time.Millisecond), ts.coolReason)
		un.RetryIn = ts.coolUntil.Sub(now)
		return un, true
	}
	return Unavailability{}, false
}

// state returns t's state, creating it when create is set. Called with
// u.mu held. A new entry beyond MaxTargets evicts a clean one, or is not
// kept at all when every entry has something to say.
func (p *Pool) state(t Target, create bool, now time.Time) *targetState {
	u := t.Upstream
	ts := u.targets[t.Model]
	if ts != nil || !create {
		return ts
	}
	if u.targets == nil {
		u.targets = map[string]*targetState{}
	}
	if len(u.targets) >= p.opts.MaxTargets {
		for m, old := range u.targets {
			if old.clean(now) {
				delete(u.targets, m)
				break
			}
		}
		if len(u.targets) >= p.opts.MaxTargets {
			return &targetState{} // not kept: the table is full of failing targets
		}
	}
	ts = &targetState{}
	u.targets[t.Model] = ts
	return ts
}

// RegisterTarget makes t known before any request: it is listed in
// Status and TargetStatuses from the start and never evicted. The gateway
// registers the targets its routes name with a fixed model.
func (p *Pool) RegisterTarget(t Target) {
	u := t.Upstream
	u.mu.Lock()
	defer u.mu.Unlock()
	p.state(t, true, p.opts.Now()).configured = true
}

// TargetUsable reports whether a request may go to t now: its upstream is
// usable, and t is neither cooling down nor behind an open circuit (a
// half-open circuit is usable until its probe is taken).
func (p *Pool) TargetUsable(t Target) (bool, string) {
	un, out := p.TargetUnavailable(t)
	return !out, un.Why
}

// TargetUnavailable is TargetUsable with what the gateway tells a client
// that finds no target usable: how long the wait is, and the capacity code
// the target cools down for. out is false when t is usable.
func (p *Pool) TargetUnavailable(t Target) (un Unavailability, out bool) {
	now := p.opts.Now()
	if un, out := t.Upstream.unavailable(now); out {
		return un, true
	}
	u := t.Upstream
	u.mu.Lock()
	un, out = p.state(t, false, now).unavailable(now)
	u.mu.Unlock()
	if out {
		return un, true
	}
	return p.sharedUnavailable(t, now)
}

// BeginTarget is TargetUsable for a request about to be sent: when t's
// circuit is half-open, the request becomes its one probe (probe is true)
// and every other request skips t until the probe ends. The caller ends
// every begun target with TargetSucceeded, TargetFailed or TargetReleased.
func (p *Pool) BeginTarget(t Target) (probe, ok bool, why string) {
	now := p.opts.Now()
	if ok, why := t.Upstream.Usable(now); !ok {
		return false, false, why
	}
	if ok, why := p.sharedUsable(t, now); !ok { // before the lock: it may read the shared store
		return false, false, why
	}
	u := t.Upstream
	u.mu.Lock()
	defer u.mu.Unlock()
	ts := p.state(t, false, now)
	if ok, why := ts.usable(now); !ok {
		return false, false, why
	}
	if ts != nil && ts.circuitAt(now) == CircuitHalfOpen {
		ts.circuit, ts.probing = CircuitHalfOpen, true
		return true, true, ""
	}
	return false, true, ""
}

// TargetSucceeded records that t served a request: its consecutive
// failures and backoff reset, and a half-open circuit closes.
func (p *Pool) TargetSucceeded(t Target) {
	u := t.Upstream
	u.mu.Lock()
	ts := p.state(t, false, p.opts.Now())
	closed := false
	if ts != nil {
		closed = ts.circuit != CircuitClosed
		ts.failures, ts.streak, ts.probing = 0, 0, false
		ts.circuit, ts.coolUntil, ts.coolReason = CircuitClosed, time.Time{}, ""
	}
	u.mu.Unlock()
	if closed {
		p.opts.Logger.Info("target circuit closed", "upstream", u.cfg.Name, "model", t.Model)
		if p.shared != nil {
			p.shared.clear(sharedKey{u.cfg.Name, t.Model}, p.opts.Now())
		}
	}
}

// TargetReleased ends a begun target without a verdict (the client went
// away, the failure was the request's own): a half-open probe is given
// back, so the next request may probe.
func (p *Pool) TargetReleased(t Target) {
	u := t.Upstream
	u.mu.Lock()
	if ts := p.state(t, false, p.opts.Now()); ts != nil {
		ts.probing = false
	}
	u.mu.Unlock()
}

// TargetFailed charges a failure to t and returns the cooldown it got (the
// upstream's hint, else a jittered exponential backoff, else none) and
// whether its circuit opened: after CircuitFailures consecutive failures, or
// at once when the failing request was the half-open probe.
func (p *Pool) TargetFailed(t Target, f Failure) (cooldown time.Duration, opened bool) {
	now := p.opts.Now()
	u := t.Upstream
	u.mu.Lock()
	ts := p.state(t, true, now)
	ts.failures++
	ts.lastFailure, ts.lastFailureAt = f.Class+": "+f.Reason, now
	switch {
	case f.HasHint():
		cooldown = clampCooldown(f.Hint)
		ts.streak++
	case f.Backoff > 0:
		cooldown = p.backoff(f.Backoff, ts.streak)
		ts.streak++
	}
	if until := now.Add(cooldown); cooldown > 0 && until.After(ts.coolUntil) {
		ts.coolUntil, ts.coolReason, ts.coolCode, ts.coolType = until, f.Class+": "+f.Reason, f.Code, f.Type
	}
	probe := ts.probing
	if probe || (ts.circuit == CircuitClosed && ts.failures >= p.opts.CircuitFailures) {
		ts.circuit, ts.probing, opened = CircuitOpen, false, true
		ts.openUntil = now.Add(max(p.opts.CircuitOpenFor, cooldown))
		ts.openCode, ts.openType = f.Code, f.Type
	}
	failures, openFor := ts.failures, ts.openUntil.Sub(now)
	// What the other replicas skip t for, with the capacity code this
	// replica answers with while t is out for it (unavailable).
	skip, skipRec := cooldown, sharedRecord{reason: f.Class + ": " + f.Reason, code: f.Code, typ: f.Type}
	if ts.circuit == CircuitOpen && openFor > skip {
		here, _ := ts.unavailable(now)
		skip, skipRec = openFor, sharedRecord{reason: fmt.Sprintf(sharedCircuitOpenPrefix+" after %d consecutive failures (last: %s: %s)", failures, f.Class, f.Reason),
			code: here.Code, typ: here.Type}
	}
	u.mu.Unlock()
	if p.shared != nil && skip > 0 {
		p.shared.publish(sharedKey{u.cfg.Name, t.Model}, now, skip, skipRec)
	}
	if opened {
		p.opts.Logger.Warn("target circuit open", "upstream", u.cfg.Name, "model", t.Model, "failures", failures,
			"for", openFor.Round(time.Millisecond).String(), "half_open_probe_failed", probe, "last", f.Class+": "+f.Reason)
	} else if cooldown > 0 {
		p.opts.Logger.Warn("target cooling down", "upstream", u.cfg.Name, "model", t.Model, "for", cooldown.Round(time.Millisecond).String(),
			"reason", f.Class+": "+f.Reason)
	}
	return cooldown, opened
}

// backoff is base·2^streak, ±20% jitter, at most MaxCooldown.
func (p *Pool) backoff(base time.Duration, streak int) time.Duration {
	d := base
	for i := 0; i < streak && d < MaxCooldown; i++ {
		d *= 2
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*p.opts.Jitter()))
	return clampCooldown(d)
}

// RetryBackoff is the short jittered wait before retrying a target once
// after a 500, a 502 or a connection that failed before the headers:
// 100–200ms.
func (p *Pool) RetryBackoff() time.Duration {
	return time.Duration(float64(100*time.Millisecond) * (1 + p.opts.Jitter()))
}

// TargetStatus is a point-in-time view of a target for /admin/upstreams.
type TargetStatus struct {
	Upstream      string    `json:"upstream"`
	Model         string    `json:"model"`
	Circuit       string    `json:"circuit"` // closed | open | half_open
	Failures      int       `json:"consecutive_failures"`
	OpenFor       string    `json:"open_for,omitempty"`
	CoolingFor    string    `json:"cooling_for,omitempty"`
	CoolReason    string    `json:"cool_reason,omitempty"`
	LastFailure   string    `json:"last_failure,omitempty"`
	LastFailureAt time.Time `json:"last_failure_at,omitzero"`
	Configured    bool      `json:"configured"` // named by a route
	// Shared: the cooldown or open circuit shown is one another replica
	// reported through the shared health (README "Scale-out"): this
	// replica skips the target for it although its own state is clean.
	Shared bool `json:"shared,omitempty"`

	State Circuit `json:"-"` // Circuit as a number, for the gauge
}

// sharedCircuitOpenPrefix starts the reason a replica shares for a target
// whose circuit opened (TargetFailed), so the others show it as open.
const sharedCircuitOpenPrefix = "circuit open"

// targetStatuses lists u's targets, sorted by model, with the skips of
// shared (by model; skipsOf) that outlast a target's own. Called with u.mu
// held.
func (u *Upstream) targetStatuses(now time.Time, shared map[string]sharedSkip) []TargetStatus {
	out := make([]TargetStatus, 0, len(u.targets))
	for m, ts := range u.targets {
		c := ts.circuitAt(now)
		st := TargetStatus{Upstream: u.cfg.Name, Model: m, Circuit: c.String(), State: c, Failures: ts.failures,
			LastFailure: ts.lastFailure, LastFailureAt: ts.lastFailureAt, Configured: ts.configured}
		localUntil := ts.coolUntil
		if c == CircuitOpen {
			st.OpenFor = ts.openUntil.Sub(now).Round(time.Millisecond).String()
			localUntil = later(localUntil, ts.openUntil)
		}
		if now.Before(ts.coolUntil) {
			st.CoolingFor = ts.coolUntil.Sub(now).Round(time.Millisecond).String()
			st.CoolReason = ts.coolReason
		}
		if skip, ok := shared[m]; ok && skip.until.After(localUntil) {
			st.withSharedSkip(skip, now)
		}
		out = append(out, st)
	}
	for m, skip := range shared {
		if _, known := u.targets[m]; known || m == "" { // "": the upstream's own (Status)
			continue
		}
		st := TargetStatus{Upstream: u.cfg.Name, Model: m, Circuit: CircuitClosed.String()}
		st.withSharedSkip(skip, now)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b TargetStatus) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// withSharedSkip shows skip, learnt from the shared health, as st's
// cooldown, and as its open circuit too when the other replica's opened.
func (st *TargetStatus) withSharedSkip(skip sharedSkip, now time.Time) {
	left := skip.until.Sub(now).Round(time.Millisecond).String()
	st.Shared, st.CoolingFor, st.CoolReason = true, left, skip.reason
	if strings.HasPrefix(skip.reason, sharedCircuitOpenPrefix) {
		st.Circuit, st.State, st.OpenFor = CircuitOpen.String(), CircuitOpen, left
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TargetStatuses lists every known target, upstreams in configuration
// order, with the skips learnt from the shared health (Upstream.Status).
func (p *Pool) TargetStatuses() []TargetStatus {
	now := p.opts.Now()
	var out []TargetStatus
	for _, u := range p.ups {
		shared := p.shared.skipsOf(u.cfg.Name, now)
		u.mu.Lock()
		out = append(out, u.targetStatuses(now, shared)...)
		u.mu.Unlock()
	}
	return out
}
