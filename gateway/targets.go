package gateway

import (
	"context"
	"errors"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/eventring"
)

var (
	errFirstByteTimeout  = errors.New("no response headers within the route's first_byte timeout")
	errFirstTokenTimeout = errors.New("no content event within the route's first_token timeout")
)

// tryState is the attempt in flight, shared by forward (which decides what
// comes next) and attempt (which says what happened).
type tryState struct {
	target upstream.Target
	route  *Route // nil without a matching route
	retry  bool   // the host allows a same-target retry (once per target, within the attempt budget)

	// Where the attempt stands, for the replay policy's facts (replayFacts).
	cands     *candidates // nil outside forward
	attempt   int         // 0-based attempt number of the request
	limit     int         // the attempt bound
	sameTries int         // same-target retries and replays already made on target

	cont *contAttempt // a continuation after content (continuation.go); nil otherwise

	events *eventring.Ring // the attempt's last upstream events while hook calls are recorded (recordevents.go); nil otherwise

	answered bool              // the upstream answered 2xx with a body or a first event
	fail     *upstream.Failure // charged to the target when forward moves on (or ends)
	connect  bool              // a connect failure: the upstream cools down when forward moves on
	noRetry  bool              // the upstream's error answer said x-should-retry: false (upstreamSaysNoRetry)
	settled  bool              // the outcome was reported to the pool (settle): once per attempt
}

// tryOf is req's attempt in flight (a blank one outside forward).
func tryOf(req *clientRequest) *tryState {
	if req.try == nil {
		req.try = &tryState{}
	}
	return req.try
}

// candidates yields the targets of one request, in order.
type candidates struct {
	s     *Server
	ctx   context.Context // the request's: bounds the wait for on-demand probes
	req   *clientRequest
	route *Route
	// list is the route's targets, restricted to the pinned owner or the
	// policy's upstream; nil without a route (the pool picks upstreams).
	list      []upstream.Target
	tried     map[upstream.Target]bool
	skipModel map[string]bool // models that exceeded their context: never again
	why       string          // why the last usable-looking target was skipped
	probed    bool            // the down upstreams were probed on demand (once per request)
	opened    bool            // a failure of this request opened a target's circuit (settle)
	// curable: a failure of this request so far did not carry the
	// upstream's x-should-retry: false, so a retry may fare better
	// (noRetryAnswer).
	curable bool
}

// noRetryAnswer reports whether the client's error answer after the
// request's failed attempts says x-should-retry: false, the one rule for
// the gateway's own error and a relayed one (keepNoRetryOnly): only when
// every failure carried the upstream's x-should-retry: false (failed: at
// least one did) and no target was left out for something a retry could
// cure: one cooling down, behind an open circuit or down, or not reached
// within the attempt budget (an eligible target left). stopped: the request
// ended on an answer the route does not fail over from (the replay
// policy's no, a relayed client error): the targets after it were never
// going to be tried, by a retry either.
func (c *candidates) noRetryAnswer(failed, stopped bool) bool {
	if !failed || c.curable {
		return false
	}
	if stopped {
		return true
	}
	left := false
	c.each(func(upstream.Target) { left = true })
	return !left
}

func (s *Server) candidatesFor(ctx context.Context, req *clientRequest) *candidates {
	c := &candidates{s: s, ctx: ctx, req: req, tried: map[upstream.Target]bool{}, skipModel: map[string]bool{}}
	c.route = s.rtable.match(req.model)
	if c.route == nil {
		return c
	}
	c.list = c.route.targets(s.pool, req.model)
	var only *upstream.Upstream
	switch {
	case req.pinned != nil:
		only = req.pinned
	case req.upstreamName != "":
		if only = s.pool.Get(req.upstreamName); only == nil {
			c.list = []upstream.Target{} // unknown: nothing to try
			return c
		}
	}
	if only != nil {
		var kept []upstream.Target
		for _, t := range c.list {
			if t.Upstream == only {
				kept = append(kept, t)
			}
		}
		if len(kept) == 0 { // the owner (or the policy's choice) serves the client's model itself
			kept = []upstream.Target{{Upstream: only, Model: req.model}}
		}
		c.list = kept
	}
	if only == nil {
		c.list = preferSocketHolder(req, c.list)
	}
	return c
}

// preferSocketHolder moves to the front the targets of the upstream whose
// WebSocket holds the previous response of a store:false follow-up that is
// not pinned (selfContainedChain): there it goes as the incremental frame
// (sessionChainBodyOverSocket), anywhere else in full. The others keep the
// route's order behind it, for failover.
func preferSocketHolder(req *clientRequest, list []upstream.Target) []upstream.Target {
	if !selfContainedChain(req) || req.memory.wasContinued(req.previousResponseID) {
		return list
	}
	holder := req.memory.heldBy(req.previousResponseID)
	if holder == "" {
		return list
	}
	out := make([]upstream.Target, 0, len(list))
	for _, t := range list {
		if t.Upstream.Name() == holder {
			out = append(out, t)
		}
	}
	for _, t := range list {
		if t.Upstream.Name() != holder {
			out = append(out, t)
		}
	}
	return out
}

// limit is the attempt bound: MaxAttempts, and with a route of T targets at
// least T+1 (every target once, plus one same-target retry or replay). A
// same-target retry is only taken while the rest of the budget still
// covers every target not yet tried (remaining), so the bound never costs a
// target its turn. Each target is tried at most twice per request, plus
// replays, which the replay policy bounds (one by default).
func (c *candidates) limit(maxAttempts int) int {
	if c.route == nil {
		return maxAttempts
	}
	return max(maxAttempts, len(c.route.Targets)+1)
}

func (c *candidates) eligible(t upstream.Target) bool {
	req := c.req
	switch {
	case c.tried[t], c.skipModel[t.Model]:
		return false
	case req.pinned != nil:
		return t.Upstream == req.pinned
	case req.upstreamName != "":
		return t.Upstream.Name() == req.upstreamName
	}
	return true
}

// next begins the first eligible, usable target (which may become its
// circuit's half-open probe; settle ends it). When there is none, the
// eligible upstreams that are down are probed at once (once per request;
// the pool bounds and shares the probes, upstream.Pool.ProbeDown) and the
// selection is made again: an upstream that came back since its last
// periodic probe serves the request.
func (c *candidates) next() (upstream.Target, bool) {
	if t, ok := c.pick(); ok || c.probed {
		return t, ok
	}
	if !c.probeDown(upstream.Target{}) {
		return upstream.Target{}, false
	}
	return c.pick()
}

// probeDown probes, at once, the down upstreams of the eligible targets
// other than except, within the request's context (the pool bounds each
// probe in time and shares it: upstream.Pool.ProbeDown), and reports
// whether it waited for any: the caller then selects again (README "A
// down upstream is not an outage until the next probe").
func (c *candidates) probeDown(except upstream.Target) bool {
	c.probed = true
	return c.s.pool.ProbeDown(c.ctx, c.upstreams(except))
}

// upstreams are the distinct upstreams of the eligible targets other than
// except.
func (c *candidates) upstreams(except upstream.Target) []*upstream.Upstream {
	var out []*upstream.Upstream
	seen := map[*upstream.Upstream]bool{}
	c.each(func(t upstream.Target) {
		if t != except && !seen[t.Upstream] {
			seen[t.Upstream] = true
			out = append(out, t.Upstream)
		}
	})
	return out
}

// each calls f for every eligible target: the route's, or without a route
// one per pool upstream.
func (c *candidates) each(f func(upstream.Target)) {
	if c.list != nil {
		for _, t := range c.list {
			if c.eligible(t) {
				f(t)
			}
		}
		return
	}
	for _, u := range c.s.pool.Upstreams() {
		if t := (upstream.Target{Upstream: u, Model: c.req.model}); c.eligible(t) {
			f(t)
		}
	}
}

// unavailable names every eligible target (without a route: upstream) that
// is not usable and why (a down upstream's last probe error, a cooldown, an
// open circuit), scrubbed of upstream credentials, for the 503.
func (c *candidates) unavailable() string { return c.unavailableBut(upstream.Target{}) }

// unavailableBut is unavailable without the target except: the targets a
// continuation after except skipped (nextFor).
func (c *candidates) unavailableBut(except upstream.Target) string {
	var parts []string
	c.each(func(t upstream.Target) {
		if t == except {
			return
		}
		if ok, why := c.s.pool.TargetUsable(t); !ok {
			name := t.String()
			if c.list == nil {
				name = t.Upstream.Name()
			}
			parts = append(parts, name+": "+why)
		}
	})
	return c.s.scrub.String(strings.Join(parts, "; "))
}

// pick is one selection (next without the on-demand probe).
func (c *candidates) pick() (upstream.Target, bool) {
	pool := c.s.pool
	if c.list != nil {
		for _, t := range c.list {
			if !c.eligible(t) {
				continue
			}
			_, ok, why := pool.BeginTarget(t)
			if ok {
				return t, true
			}
			c.why = t.String() + ": " + why
		}
		return upstream.Target{}, false
	}
	for {
		u, err := pool.Pick(func(u *upstream.Upstream) bool {
			t := upstream.Target{Upstream: u, Model: c.req.model}
			if !c.eligible(t) {
				return true
			}
			if ok, why := pool.TargetUsable(t); !ok {
				c.why = t.String() + ": " + why
				return true
			}
			return false
		})
		if err != nil {
			return upstream.Target{}, false
		}
		t := upstream.Target{Upstream: u, Model: c.req.model}
		_, ok, why := pool.BeginTarget(t)
		if ok {
			return t, true
		}
		c.why = t.String() + ": " + why
		c.tried[t] = true // taken by a concurrent request in between
	}
}

// altModel reports whether a target after cur serves another model and is
// usable: a context_length_exceeded on cur may then move on to it.
func (c *candidates) altModel(cur upstream.Target) bool {
	for _, t := range c.list {
		if t != cur && t.Model != cur.Model && c.eligible(t) {
			if ok, _ := c.s.pool.TargetUsable(t); ok {
				return true
			}
		}
	}
	return false
}

// remaining counts the usable targets other than cur still to try: a
// same-target retry is only taken while the attempt budget covers them all.
func (c *candidates) remaining(cur upstream.Target) int {
	n := 0
	count := func(t upstream.Target) {
		if t != cur && c.eligible(t) {
			if ok, _ := c.s.pool.TargetUsable(t); ok {
				n++
			}
		}
	}
	if c.list != nil {
		for _, t := range c.list {
			count(t)
		}
		return n
	}
	for _, u := range c.s.pool.Upstreams() {
		count(upstream.Target{Upstream: u, Model: c.req.model})
	}
	return n
}

// settle ends a begun target after its last attempt in this request:
// charge its failure, cool its upstream after a connect failure, record
// its success, or give its half-open probe back.
func (s *Server) settle(t upstream.Target, try *tryState) {
	if try.settled { // charged early, while its failure was still the client's to be told (continueAfter)
		return
	}
	try.settled = true
	switch {
	case try.fail != nil: // also a connect failure the replay policy gave a penalty
		s.targetM.failed(t, try.fail.Class)
		if _, opened := s.pool.TargetFailed(t, *try.fail); opened && try.cands != nil {
			try.cands.opened = true // the client's wait may be the circuit's (capacityWait)
		}
	case try.answered && !try.connect:
		s.pool.TargetSucceeded(t)
	default:
		s.pool.TargetReleased(t)
	}
	if try.connect {
		s.pool.Cooldown(t.Upstream, upstream.ConnectFailureCooldown, "connect failure")
	}
}

// position is t's place among the request's targets: its index in the
// route's list, or without a route the number of upstreams tried before it;
// count is the route's targets (as the request may use them: a pinned
// request's are its owner's) or the pool's upstreams.
func (c *candidates) position(t upstream.Target) (index, count int) {
	if c.list == nil {
		return len(c.tried), len(c.s.pool.Upstreams())
	}
	for i, x := range c.list {
		if x == t {
			return i, len(c.list)
		}
	}
	return len(c.tried), len(c.list)
}

// replayFacts fills in the ABI-2 facts about the target list and the
// attempt in flight (hostabi.ReplayInput, ABI.md §3.2): the failed target's
// position, whether an untried usable target remains within the attempt
// budget, whether the next one serves another model, the same-target
// retries made, retry.max_wait and the route's continuation mode.
func (s *Server) replayFacts(req *clientRequest, in *hostabi.ReplayInput) {
	try := tryOf(req)
	in.Surface, in.HasPreviousResponseID = req.policySurface(), req.previousResponseID != ""
	if req.pinned != nil {
		in.PinnedOwner = req.pinned.Name()
	}
	in.MaxWaitMillis = s.opts.RetryMaxWait.Milliseconds()
	in.SameTargetRetries = try.sameTries
	in.Continuation = ContinuationAuto
	if try.route != nil && try.route.Continuation != "" {
		in.Continuation = try.route.Continuation
	}
	if c := try.cands; c != nil {
		in.TargetIndex, in.TargetCount = c.position(try.target)
		in.HasNextTarget = try.attempt+1 < try.limit && c.remaining(try.target) > 0
		in.NextModelDiffers = c.list != nil && c.altModel(try.target)
	}
}

// askReplay puts a failure to the replay policy (in carries the phase, the
// class, the code, the status and the Retry-After; the rest is filled in
// here) and returns what the host does (hostabi.EffectiveReplay). A penalty
// in the answer cools the failed target down like a Retry-After would.
func (s *Server) askReplay(ctx context.Context, req *clientRequest, u *upstream.Upstream, in hostabi.ReplayInput) hostabi.ReplayVerdict {
	in.Upstream = u.Name()
	s.replayFacts(req, &in)
	out := s.policy.Replay(hookCtx(ctx, req), in)
	if out.PenaltyMillis > 0 {
		try := tryOf(req)
		if try.fail == nil {
			try.fail = &upstream.Failure{Class: "replay_penalty", Reason: "replay penalty after " + firstNonEmpty(in.Code, in.FailureClass)}
		}
		// Clamped before the multiplication: a penalty of centuries would
		// overflow into a negative duration, which is no cooldown at all.
		penalty := time.Duration(min(out.PenaltyMillis, upstream.MaxCooldown.Milliseconds())) * time.Millisecond
		try.fail.Hint = max(try.fail.Hint, penalty)
	}
	return hostabi.EffectiveReplay(in, out.Verdict)
}

// rescue asks the replay policy about a failure before anything reached
// the client and says what forward does: the same target again after
// Retry-After (when it is within retry.max_wait) or a short jittered
// backoff; the next target (of another model after
// context_length_exceeded); or, for "no", no further target (nextStop).
func (s *Server) rescue(ctx context.Context, req *clientRequest, u *upstream.Upstream, in hostabi.ReplayInput, why string, clientErr *apierr.Error) attemptResult {
	res := attemptResult{next: nextStop, why: why, clientErr: clientErr}
	switch s.askReplay(ctx, req, u, in) {
	case hostabi.ReplaySameUpstream:
		res.next, res.retryIn = nextRetrySame, s.pool.RetryBackoff()
		if d := time.Duration(in.RetryAfterMillis) * time.Millisecond; d > 0 && d <= s.opts.RetryMaxWait {
			res.retryIn = d
		}
	case hostabi.ReplayOtherUpstream:
		res.next = nextFailover
		if in.FailureClass == hostabi.FailureContextLength {
			res.next = nextOtherModel
		}
	}
	return res
}

// firstByteTimer cancels the attempt with errFirstByteTimeout when the
// route's first_byte passes before the upstream's first response byte. It
// returns the context to send with (it stops the timer on that byte) and
// a stop func for the sends that never make an HTTP request.
func (s *Server) firstByteTimer(upCtx context.Context, cancel context.CancelCauseFunc, req *clientRequest) (context.Context, func()) {
	r := tryOf(req).route
	if r == nil || r.FirstByte <= 0 {
		return upCtx, func() {}
	}
	t := time.AfterFunc(r.FirstByte, func() { cancel(errFirstByteTimeout) })
	stop := func() { t.Stop() }
	return httptrace.WithClientTrace(upCtx, &httptrace.ClientTrace{GotFirstResponseByte: stop}), stop
}

// firstTokenTimer cancels the attempt with errFirstTokenTimeout when the
// route's first_token passes before the upstream's first content event
// (pump.gotContent: lifecycle and keepalive events, and a Chat role-only
// chunk, do not count). It returns the func that stops it.
func (s *Server) firstTokenTimer(cancel context.CancelCauseFunc, req *clientRequest) func() {
	r := tryOf(req).route
	if r == nil || r.FirstToken <= 0 {
		return func() {}
	}
	t := time.AfterFunc(r.FirstToken, func() { cancel(errFirstTokenTimeout) })
	return func() { t.Stop() }
}

// silentTarget handles a read that ended while the client has seen
// nothing (the wait for the first event, or for content after the held
// lifecycle events): a route timeout is put to the replay policy
// (timeoutFailure); a first event marks the target as having answered.
func (s *Server) silentTarget(ctx, upCtx context.Context, req *clientRequest, u *upstream.Upstream, err error) (attemptResult, bool) {
	if err == nil {
		tryOf(req).answered = true
		return attemptResult{}, false
	}
	if ctx.Err() != nil {
		return attemptResult{}, false
	}
	switch cause := context.Cause(upCtx); {
	case errors.Is(cause, errFirstTokenTimeout):
		return s.timeoutFailure(ctx, req, u, "first_token", tryOf(req).route.FirstToken), true
	case errors.Is(cause, errFirstByteTimeout): // fired as the headers arrived
		return s.timeoutFailure(ctx, req, u, "first_byte", tryOf(req).route.FirstByte), true
	}
	return attemptResult{}, false
}

// timeoutFailure is a target that stayed silent: cancelled and charged;
// the replay policy decides what follows (by default the next target,
// never the silent one again). A first_byte timeout is before the headers,
// a first_token timeout before content, and so is an idle one: headers and
// then no event at all within timeouts.idle (put to the policy as a
// first_token failure with the code idle_timeout).
func (s *Server) timeoutFailure(ctx context.Context, req *clientRequest, u *upstream.Upstream, which string, d time.Duration) attemptResult {
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), which+"_timeout").Inc()
	why := which + " timeout: nothing within " + d.String()
	tryOf(req).fail = &upstream.Failure{Class: "timeout", Reason: why}
	s.log.Warn("upstream target silent", "upstream", u.Name(), "model", tryOf(req).target.Model, "timeout", which, "after", d.String())
	in := hostabi.ReplayInput{Phase: hostabi.PhaseBeforeHeaders, FailureClass: hostabi.FailureFirstByte, Code: which + "_timeout"}
	if which == "first_token" || which == "idle" {
		in.Phase, in.FailureClass = hostabi.PhaseBeforeContent, hostabi.FailureFirstToken
	}
	return s.rescue(ctx, req, u, in, why, nil)
}

// sleepCtx waits d unless the client leaves first (false) or the drain
// grace ends (the attempt that follows then fails as draining).
func (s *Server) sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.streamsCtx.Done():
	case <-ctx.Done():
		return false
	}
	return true
}

// targetMetrics are the per-target series: the circuit-state gauge (read
// from the pool at scrape time) and the failures counter.
type targetMetrics struct {
	pool     *upstream.Pool
	failures *prometheus.CounterVec // upstream, model, class
	state    *prometheus.Desc
	named    map[string]bool // the routes' plain model names
}

func newTargetMetrics(reg prometheus.Registerer, pool *upstream.Pool, routes *routeTable) *targetMetrics {
	m := &targetMetrics{
		pool:  pool,
		named: map[string]bool{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_target_failures_total",
			Help: "Model-specific failures charged to a target (upstream, model), by class: rate_limited, quota, overloaded, server_error, timeout, replay_penalty. Models no route names and the upstream does not list are labelled \"other\".",
		}, []string{"upstream", "model", "class"}),
		state: prometheus.NewDesc("sluice_target_circuit_state",
			"A target's circuit: 0 closed, 1 open, 2 half-open (a probe may go). Models are labelled as in sluice_target_failures_total; \"other\" shows the worst circuit among its models.", []string{"upstream", "model"}, nil),
	}
	for _, n := range routes.names() {
		m.named[n] = true
	}
	reg.MustRegister(m.failures, m)
	return m
}

// failed counts a failure. The model label is the target's model when a
// route names it or the upstream lists it, else "other": clients choose
// model names, and labels must stay bounded.
func (m *targetMetrics) failed(t upstream.Target, class string) {
	m.failures.WithLabelValues(t.Upstream.Name(), m.modelLabel(t), class).Inc()
}

func (m *targetMetrics) modelLabel(t upstream.Target) string {
	if m.named[t.Model] {
		return t.Model
	}
	st := t.Upstream.Status(time.Now())
	configured := false
	for _, ts := range st.Targets {
		if ts.Model == t.Model {
			configured = ts.Configured
			break
		}
	}
	return m.boundedModel(t.Model, configured, st.Models)
}

// otherModel is the model label of every model no route names and the
// upstream does not list.
const otherModel = "other"

// boundedModel is the one rule for the per-target series' model label:
// model when a route names it (configured, or among the routes' names) or
// the upstream lists it, else otherModel.
func (m *targetMetrics) boundedModel(model string, configured bool, listed []string) string {
	if configured || m.named[model] {
		return model
	}
	for _, id := range listed {
		if id == model {
			return model
		}
	}
	return otherModel
}

// Describe implements prometheus.Collector.
func (m *targetMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.state }

// Collect implements prometheus.Collector: one gauge per target the pool
// keeps state for (bounded by upstream.Options.MaxTargets), labelled as
// the failures counter labels it; the targets labelled "other" share one
// gauge per upstream that shows the worst of their circuits (open, then
// half-open, then closed).
func (m *targetMetrics) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, u := range m.pool.Upstreams() {
		st := u.Status(now)
		other, others := upstream.CircuitClosed, false
		for _, ts := range st.Targets {
			if model := m.boundedModel(ts.Model, ts.Configured, st.Models); model != otherModel {
				ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, float64(ts.State), st.Name, model)
				continue
			}
			if !others || circuitSeverity(ts.State) > circuitSeverity(other) {
				other = ts.State
			}
			others = true
		}
		if others {
			ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, float64(other), st.Name, otherModel)
		}
	}
}

// circuitSeverity orders circuits for the shared "other" gauge: an open
// circuit refuses requests, a half-open one lets a probe through.
func circuitSeverity(c upstream.Circuit) int {
	switch c {
	case upstream.CircuitOpen:
		return 2
	case upstream.CircuitHalfOpen:
		return 1
	}
	return 0
}

// bodyFor is req's body with the target's model: the original when the
// target sends the client's model, else a copy with "model" replaced
// (cached per model for retries and later targets).
func bodyFor(req *clientRequest, orig []byte, t upstream.Target, cache map[string][]byte) []byte {
	req.meta.tried(t) // one call per attempt: the access log's targets
	if t.Model == req.model || t.Model == "" {
		return orig
	}
	if b, ok := cache[t.Model]; ok {
		return b
	}
	b, err := setModel(orig, t.Model)
	if err != nil {
		return orig
	}
	cache[t.Model] = b
	return b
}

// setModel returns body with its top-level "model" set to model.
func setModel(body []byte, model string) ([]byte, error) {
	return sjson.SetBytes(body, "model", model)
}
