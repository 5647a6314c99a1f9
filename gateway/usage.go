package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/logtext"
	"github.com/sluice-gw/sluice/store"
)

// accounts is the gateway's side of keys, limits and usage.
type accounts struct {
	s       *Server
	opts    AccountsOptions
	keys    *keyring
	limiter Limiter
	tokens  *prometheus.CounterVec // sluice_usage_tokens_total{key,route,target,model,kind}
	reqs    *prometheus.CounterVec // sluice_usage_requests_total{key,route,target,model}
	cost    *prometheus.CounterVec // sluice_usage_cost_usd_total{key,route,target,model}
	// estimated counts the requests charged an estimate (estimateUsage,
	// attemptEnded):
	// sluice_usage_estimated_requests_total{key,route,target,model}.
	estimated *prometheus.CounterVec
	usage     *usageBatch // nil without a usage store
	models    modelLabels // the usage metrics' model label values
	// badUsageLog spaces the warnings of usage an upstream reported that
	// is not a token count (parseUsage): a broken upstream reports it on
	// every answer.
	badUsageLog logtext.Every
}

// maxModelLabels bounds how many model names the usage metrics label
// separately; later ones are labelled "other". Upstreams such as llama.cpp's
// server accept and echo any model name, so without a bound each new name a
// client sends would add series to /metrics for the life of the process.
const maxModelLabels = 256

// modelLabels hands out the usage metrics' model label: the model itself
// for the first maxModelLabels names, "other" after.
type modelLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
	full bool // logged once
}

// of is model's label value; warn is called once, when the bound is hit.
func (l *modelLabels) of(model string, warn func()) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[model]; ok {
		return model
	}
	if len(l.seen) < maxModelLabels {
		if l.seen == nil {
			l.seen = map[string]struct{}{}
		}
		l.seen[model] = struct{}{}
		return model
	}
	if !l.full {
		l.full = true
		warn()
	}
	return "other"
}

func newAccounts(s *Server, o AccountsOptions, reg prometheus.Registerer) (*accounts, error) {
	if o.KeyRefresh <= 0 {
		o.KeyRefresh = 5 * time.Second
	}
	kr, err := newKeyring(o.Keys, o.KeyStore, o.KeyRefresh)
	if err != nil {
		return nil, err
	}
	kr.log = s.log.Named("keys")
	if err := kr.reload(context.Background()); err != nil {
		// A replica starts while its shared store is down (README
		// "Scale-out"): the keys from the config work at once, the stored
		// ones once a request's read of them succeeds (requests try again
		// at most once a second while reads fail).
		s.log.Warn("reading the stored keys failed; only the config's keys are known until the store answers", "error", err)
	}
	a := &accounts{s: s, opts: o, keys: kr, limiter: o.Limiter, badUsageLog: logtext.Every{Interval: 10 * time.Second}}
	var seed func(ctx context.Context, key, from, to string) (int64, error)
	if o.Usage != nil {
		a.usage = newUsageBatch(o.Usage, s.log.Named("usage"), o.UsageFlushInterval)
		seed = func(ctx context.Context, key, from, to string) (int64, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			name, id := splitLimitKey(key)
			recs, err := o.Usage.Usage(ctx, name, from, to)
			if err != nil {
				s.log.Warn("reading a key's usage for its budget failed; the budget counts from what this replica knows until a read succeeds", "key", name, "error", err)
				return 0, err
			}
			var n int64
			for _, r := range recs {
				if r.KeyID == id { // the key's own: not a deleted key's of the same name
					n += r.Tokens()
				}
			}
			return n, nil
		}
	}
	if o.Usage == nil {
		// Without a usage store a budget counts in memory: say so once,
		// rather than let a restart quietly hand every key a fresh budget.
		for _, k := range o.Keys {
			if k.Limits.TokensPerDay > 0 || k.Limits.TokensPerMonth > 0 {
				s.log.Warn("token budgets are counted in memory only: without a store (continuity.disabled) a restart starts them from 0", "key", k.Name)
			}
		}
	}
	switch l := a.limiter.(type) {
	case nil:
		a.limiter = &LocalLimiter{Seed: seed}
	case *RedisLimiter:
		if l.Seed == nil {
			l.Seed = seed
		}
		if a.usage != nil {
			// A key's totals are written after its tokens count in the
			// budgets' shared counters, which may be seeded from them.
			a.usage.holds = l.holdsUsage
		}
		if l.Logger == nil {
			l.Logger = s.log.Named("limits")
		}
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_fallback_total",
			Help: "Admissions and settlements of the shared (Redis) limiter that Redis could not answer: limits held per replica (fail open)."},
			func() float64 { return float64(l.Fallbacks()) }))
	}
	if f, ok := a.limiter.(interface{ Forget(limitKey string) }); ok {
		kr.forget = f.Forget
	}
	labels := []string{"key", "route", "target", "model"}
	a.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_usage_tokens_total",
		Help: "Tokens used, from the upstreams' usage, by key, route, target, model and kind (input, output, cached, reasoning)."},
		append(labels, "kind"))
	a.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_usage_requests_total",
		Help: "Requests that reached an upstream, by key, route, target and model."}, labels)
	a.cost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_usage_cost_usd_total",
		Help: "Cost in USD from the pricing table, by key, route, target and model."}, labels)
	a.estimated = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_usage_estimated_requests_total",
		Help: "Requests that ended without the upstream's usage after the upstream sent output (to the client, or to a detached stream), or were continued after such an attempt, charged an estimate, by key, route, target and model."}, labels)
	reg.MustRegister(a.tokens, a.reqs, a.cost, a.estimated)
	return a, nil
}

// usage is one request's token counts.
type usage struct {
	input, output, cached, reasoning int64
	known                            bool
	// estimated: the upstream's usage never arrived and these counts are
	// the gateway's estimate (reqMeta.estimateUsage).
	estimated bool
}

func (u usage) total() int64 { return addTokens(u.input, u.output) }

// plus is u and o summed: a continued stream's attempts (README "Keys,
// limits and usage": every attempt's usage summed).
func (u usage) plus(o usage) usage {
	return usage{input: addTokens(u.input, o.input), output: addTokens(u.output, o.output),
		cached: addTokens(u.cached, o.cached), reasoning: addTokens(u.reasoning, o.reasoning),
		known: u.known || o.known, estimated: u.estimated || o.estimated}
}

// sameCounts reports whether u and o count the same tokens.
func (u usage) sameCounts(o usage) bool {
	return u.input == o.input && u.output == o.output && u.cached == o.cached && u.reasoning == o.reasoning
}

// maxUsageTokens bounds one response's token count: no model reads or
// writes 10^12 tokens in one answer. A count over it is an upstream's bug
// (or a number gjson saturated to MaxInt64), not usage to bill.
const maxUsageTokens = 1_000_000_000_000

// parseUsage reads a Responses or Chat usage object. ok is false when o is
// not one, or when a count in it is negative, not an integer or over
// maxUsageTokens (bad then says which): such usage is no usage, and the
// request is charged its estimate as one that reported none is
// (estimateUsage). Upstream answers are untrusted (SECURITY.md): summed,
// such counts would make the usage totals negative and the usage counters
// go backwards. A usage object without both of its counts (input_tokens and
// output_tokens; prompt_tokens and completion_tokens), as "usage":{}, is
// no usage either (ok false, bad ""): the request is charged its estimate,
// as one whose usage is null is (README "Keys, limits and usage"), rather
// than 0 tokens for an answer that streamed output. The details it reports
// are held within their counts (withinCounts).
func parseUsage(o gjson.Result) (u usage, ok bool, bad string) {
	if !o.IsObject() {
		return usage{}, false, ""
	}
	paths := [4]string{"input_tokens", "output_tokens", "input_tokens_details.cached_tokens", "output_tokens_details.reasoning_tokens"} // Responses
	if !o.Get("input_tokens").Exists() && !o.Get("output_tokens").Exists() {
		paths = [4]string{"prompt_tokens", "completion_tokens", "prompt_tokens_details.cached_tokens", "completion_tokens_details.reasoning_tokens"} // Chat
	}
	counts := [4]*int64{&u.input, &u.output, &u.cached, &u.reasoning}
	hasCounts := true
	for i, path := range paths {
		v := o.Get(path)
		n, valid := usageCount(v)
		if !valid {
			return usage{}, false, path
		}
		if i < 2 && v.Type == gjson.Null { // absent or null: the input or output count is missing
			hasCounts = false
		}
		*counts[i] = n
	}
	if !hasCounts {
		return usage{}, false, ""
	}
	u = u.withinCounts()
	u.known = true
	return u, true, ""
}

// withinCounts is u with its cached tokens held to its input and its
// reasoning tokens to its output: they are parts of those counts (OpenAI's
// usage details), and priceOf charges the input less the cached part at
// the input price, so more cached than input tokens would price below zero.
// Upstreams whose input count leaves the cache reads out (as Anthropic's
// input_tokens does) report exactly that. Clamped, the request keeps the
// upstream's own input and output counts, which its limits, budgets and
// the upstream's bill are counted in, and its input is priced as cached;
// the estimate instead would replace both counts with guesses from the
// body's size and the deltas.
func (u usage) withinCounts() usage {
	u.cached = min(u.cached, u.input)
	u.reasoning = min(u.reasoning, u.output)
	return u
}

// usageCount reads one token count of a usage object: absent or null is 0;
// anything but an integer in [0, maxUsageTokens] is not valid.
func usageCount(v gjson.Result) (n int64, valid bool) {
	switch v.Type {
	case gjson.Null:
		return 0, true
	case gjson.Number:
		if v.Num < 0 || v.Num > maxUsageTokens || v.Num != math.Trunc(v.Num) {
			return 0, false
		}
		return int64(v.Num), true
	}
	return 0, false
}

// addTokens is a+b, held at math.MaxInt64 rather than wrapping: a total of
// token counts must never turn negative.
func addTokens(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

// priceOf prices u for model (per 1M tokens; cached input at
// CachedInput, which may be 0: free cache hits; the config's cached_input
// defaults to input before it gets here, config.Price.CachedInputPrice):
// model's own price, else, for a dated snapshot's name, the price of the
// model it is a snapshot of (snapshotBase): OpenAI answers a request for
// gpt-5 with gpt-5-2025-08-07, and the usage totals keep the served name.
// The cached tokens are held to the input (withinCounts) here too, for
// totals stored before parseUsage held them: a cost is never negative.
func (a *accounts) priceOf(model string, u usage) (float64, bool) {
	p, ok := a.opts.Pricing[model]
	if base, dated := snapshotBase(model); !ok && dated {
		p, ok = a.opts.Pricing[base]
	}
	if !ok {
		return 0, false
	}
	u = u.withinCounts()
	return (float64(u.input-u.cached)*p.Input + float64(u.cached)*p.CachedInput + float64(u.output)*p.Output) / 1e6, true
}

// roundUSD rounds a cost to 10^-12 USD, for GET /admin/usage: a sum of
// float64 costs carries binary noise (0.0016059999999999994 for 0.001606),
// and a row and the total are rounded alike.
func roundUSD(c float64) float64 { return math.Round(c*1e12) / 1e12 }

// snapshotBase is the model a dated snapshot's name names: the name less
// its date suffix, -YYYY-MM-DD (gpt-5-2025-08-07) or -YYYYMMDD
// (claude-sonnet-4-20250514); dated is false for any other name.
func snapshotBase(model string) (base string, dated bool) {
	digits := func(s string) bool {
		for _, c := range []byte(s) {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	n := len(model)
	switch {
	case n > 11 && model[n-11] == '-' && model[n-6] == '-' && model[n-3] == '-' &&
		digits(model[n-10:n-6]) && digits(model[n-5:n-3]) && digits(model[n-2:]):
		return model[:n-11], true
	case n > 9 && model[n-9] == '-' && digits(model[n-8:]):
		return model[:n-9], true
	}
	return "", false
}

// admit runs before a request goes upstream: the key's model check (403)
// and its limits (429). It returns false when the request was answered.
func (a *accounts) admit(ctx context.Context, out responder, req *clientRequest) bool {
	m := req.meta
	k := req.key
	est := estimateTokens(req.body)
	if m != nil {
		m.inputEstimate = est // charged if the request ends without usage (estimateUsage), with a key or without
	}
	if k == nil {
		return true
	}
	if aerr := modelAllowed(k, req.model); aerr != nil {
		out.fail(req, aerr, failInvalid)
		return false
	}
	adm, lerr := a.limiter.Admit(ctx, k.limitKey, k.limits, est)
	if lerr != nil {
		if m != nil && m.header != nil {
			lerr.State.setHeaders(m.header)
		}
		out.fail(req, lerr.apiError(), failInvalid)
		return false
	}
	if m != nil {
		m.admission = adm
		if m.header != nil {
			adm.State().setHeaders(m.header)
		}
	}
	return true
}

// settle runs when a request ends: the limiter learns what it really cost,
// and its usage is counted and added to the day's totals.
func (a *accounts) settle(req *clientRequest) {
	m := req.meta
	if m == nil {
		return
	}
	m.mu.Lock()
	// A background run settles after its handler has answered and set the
	// status: everything read here is read under the lock.
	if !m.settled {
		switch {
		case !m.usage.known && m.status/100 == 2:
			if est, ok := m.estimateUsage(); ok {
				m.usage = est // the access log and the request span show what the key was charged
			}
		case m.replaced.known && !m.attemptsEnded && m.usage.sameCounts(m.replaced):
			// A continued stream whose last attempt reported nothing: the
			// usage the client got is the replaced attempts' alone, and
			// the last attempt is charged its estimate on top.
			if est, ok := m.estimateUsage(); ok {
				m.usage = m.usage.plus(est)
			}
		}
		// The attempts a continuation replaced that reported no usage are
		// charged their estimate on top (attemptEnded).
		if m.cutAttempts.known {
			m.usage = m.usage.plus(m.cutAttempts)
		}
	}
	u, adm, settled, status, badUsage, charged := m.usage, m.admission, m.settled, m.status, m.badUsage, m.chargedAttempt()
	m.settled = true
	m.mu.Unlock()
	if settled {
		return
	}
	if badUsage != "" {
		if n, ok := a.badUsageLog.Allow(time.Now()); ok {
			a.s.log.Warn("an upstream reported usage that is not a token count (negative, not an integer, or over 10^12); the request is charged its estimate",
				"field", badUsage, "target", label(charged.name()), "model", label(m.model), "occurrences", n)
		}
	}
	if adm != nil {
		adm.Done(u.total())
	}
	if len(m.targets) == 0 {
		return // no upstream was asked: nothing to account
	}
	key := m.keyName()
	// The usage is charged to the attempt that produced it
	// (chargedAttempt): the last one, unless a continuation that added
	// nothing ended the stream (README "Keys, limits and usage").
	route, target := label(m.route), label(charged.name())
	// An answer is priced by the model that served it (README "Keys,
	// limits and usage"): the one the upstream named, else the one the
	// attempt asked it for, which is a route target's model, not the
	// client's alias; an estimate too, as the upstream may never name it.
	model := firstNonEmpty(charged.servedModel, charged.target.Model, req.model)
	if !u.known && status/100 != 2 {
		// No upstream accepted the request (a 400 for its model, rejected
		// credentials, …): it still counts as one request (README "Keys,
		// limits and usage"), but its model may be any name a client
		// chose, and each would add series and store totals for good.
		model = a.s.boundedUsageModel(model, charged.target)
	}
	model = label(model)
	modelLabel := a.models.of(model, func() {
		a.s.log.Warn("the usage metrics label this many models; later ones are labelled \"other\" (GET /admin/usage has every model)", "models", maxModelLabels)
	})
	// A request without usage and without output (a stream cut before its
	// first delta) still counts as one request, in the store's totals as in
	// the metric; its token counts are zero. One that sent output counts
	// its estimate (estimateUsage), marked in the metric only: the store's
	// totals have no field for it.
	a.reqs.WithLabelValues(key, route, target, modelLabel).Inc()
	if u.estimated {
		a.estimated.WithLabelValues(key, route, target, modelLabel).Inc()
	}
	for kind, n := range map[string]int64{"input": u.input, "output": u.output, "cached": u.cached, "reasoning": u.reasoning} {
		if n > 0 {
			a.tokens.WithLabelValues(key, route, target, modelLabel, kind).Add(float64(n))
		}
	}
	if c, ok := a.priceOf(model, u); ok && c > 0 {
		a.cost.WithLabelValues(key, route, target, modelLabel).Add(c)
	}
	if a.usage == nil {
		return
	}
	a.usage.add(store.UsageRecord{Day: time.Now().UTC().Format(time.DateOnly), Key: key, KeyID: m.keyID(), Route: route, Target: target, Model: model,
		Requests: 1, InputTokens: u.input, OutputTokens: u.output, CachedTokens: u.cached, ReasoningTokens: u.reasoning})
}

// label makes a client- or upstream-chosen string a valid, bounded label
// value without control characters: a NUL would make the usage store refuse
// the total (store.ErrInvalid), and control characters have no place in a
// metric label or a log line.
func label(s string) string {
	s = logtext.Printable(s)
	if len(s) > 128 {
		s = strings.ToValidUTF8(s[:128], "")
	}
	return s
}

// ---- observing what the client is sent ----

// meterResponder wraps a request's responder: it notes the status, the
// first event's time, the terminal event and its usage.
type meterResponder struct {
	responder
	m *reqMeta
}

func (o *meterResponder) fail(req *clientRequest, e *apierr.Error, kind failKind) {
	status, terminal := e.Status, ""
	if _, overHTTP := o.responder.(*httpResponder); overHTTP && !failsWithStatus(req, kind) {
		status, terminal = http.StatusOK, "failed" // the error ends a stream the client gets with 200
	}
	o.m.mu.Lock()
	if o.m.status == 0 || !o.m.committed {
		o.m.status, o.m.code = status, e.Code
		if terminal != "" {
			o.m.terminal = terminal
		}
	}
	if o.m.reason == "" {
		o.m.reason = "gateway_error"
	}
	o.m.mu.Unlock()
	o.responder.fail(req, e, kind)
}

func (o *meterResponder) relay(req *clientRequest, status int, header http.Header, body []byte) {
	if req.ep.chat && status/100 == 2 {
		// Every Chat client's JSON answer passes here: content sent as
		// parts becomes the strings its chunks would have carried
		// (chatjson.go), before it is metered and relayed.
		if joined := chatCompletionPartsJoined(body); joined != nil {
			body = joined
		}
	}
	o.m.mu.Lock()
	o.m.status = status
	o.m.firstEvent()
	if status/100 == 2 {
		o.m.noteUsage(gjson.GetBytes(body, "usage"))
		if !o.m.usage.known {
			o.m.answerOutput = estimateTokens(answerOutputText(body)) // charged if no usage comes (estimateUsage)
		}
		if mod := gjson.GetBytes(body, "model"); mod.Type == gjson.String {
			o.m.servedModel = mod.Str
		}
		o.m.noteFailure(gjson.ParseBytes(body))
		if o.m.traced {
			o.m.noteFinish("", body)
		}
		if o.m.reason == "" {
			o.m.reason = "json"
		}
	} else {
		if e, ok := apierr.Parse(body); ok {
			o.m.code = e.Code
		}
		if o.m.reason == "" {
			o.m.reason = "upstream_error"
		}
	}
	o.m.mu.Unlock()
	o.responder.relay(req, status, header, body)
}

func (o *meterResponder) commit(header http.Header) eventSink {
	o.m.mu.Lock()
	o.m.committed = true
	if o.m.status == 0 {
		o.m.status = http.StatusOK
	}
	o.m.mu.Unlock()
	return &meterSink{eventSink: o.responder.commit(header), m: o.m}
}

// meterSink notes the first event's time and reads usage from the events
// that carry it (the Responses terminal event, the Chat usage chunk).
type meterSink struct {
	eventSink
	m *reqMeta
	// finalUsage is the usage-only chunk Done writes before [DONE] when
	// the upstream sent its final usage on a finish chunk and no usage-only
	// chunk followed; nil when there is none to write (chatusage.go).
	// usageChunkSent: a usage-only chunk came, so Done writes none.
	finalUsage     []byte
	usageChunkSent bool
	// plain: the first event was noted and the request is not traced, so
	// plainEvent has nothing to note. The sink is written to under the
	// client stream's lock, one event at a time.
	plain bool
}

var usageField = []byte(`"usage"`)

func (k *meterSink) Event(name string, data []byte) error {
	o := k.m.observe(name, data)
	k.plain = !k.m.traced
	k.noteChatUsage(name, data, o) // chatusage.go: before the usage is nulled
	if o.hide {
		return nil // counted; the client did not ask for it
	}
	if o.nullUsage {
		data = withNullUsage(data)
	}
	k.m.countDelta(name, data, o)
	return k.eventSink.Event(name, data)
}

// countDelta counts the output deltas of an event the upstream sent
// through the stream, whether or not its client gets it: a Responses delta
// event is one, a Chat chunk one per choice whose delta holds output
// (chatOutputDeltas; a usage-only chunk has none). o is what observe
// learned of it.
func (m *reqMeta) countDelta(name string, data []byte, o observation) {
	if name == "" && o.usageRead && o.usageOnly {
		return
	}
	m.countPlainDelta(name, data)
}

// noteUsage takes the usage an upstream reported (o) as the request's. One
// that is not valid (parseUsage) is not: the request keeps what it had (an
// earlier running count, else nothing, and settle charges the estimate),
// and settle warns of it once. Called under m.mu.
func (m *reqMeta) noteUsage(o gjson.Result) {
	u, ok, bad := parseUsage(o)
	switch {
	case ok:
		m.usage = u
	case bad != "":
		m.badUsage = bad
	}
}

// observation is what observe learned of an event.
type observation struct {
	hide bool // a Chat usage chunk the client did not ask for: counted, not written
	// usageRead: a Chat chunk whose usage observe read; usageOnly then says
	// it has no choice, nullUsage that the client gets its usage as null
	// (withNullUsage), and finalUsage that it is a finish chunk's, which a
	// client that asked gets in the usage-only chunk (meterSink.Done).
	usageRead, usageOnly, nullUsage, finalUsage bool
}

// observe notes one event the client stream sends (or, detached, would
// send): the first event's time, and usage from the events that carry it.
// It reports what it learned of a Chat chunk's usage on the way.
func (m *reqMeta) observe(name string, data []byte) (o observation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.firstEvent()
	if bytes.Contains(data, usageField) {
		if typ := gjson.GetBytes(data, "type").Str; strings.HasPrefix(typ, "response.") {
			if isTerminalType(typ) {
				m.terminal = strings.TrimPrefix(typ, "response.")
				m.noteFailure(gjson.GetBytes(data, "response"))
				m.noteUsage(gjson.GetBytes(data, "response.usage"))
				if mod := gjson.GetBytes(data, "response.model"); mod.Type == gjson.String {
					m.servedModel = mod.Str
				}
			}
		} else if u := gjson.GetBytes(data, "usage"); u.IsObject() { // a Chat chunk
			m.noteUsage(u)
			if mod := gjson.GetBytes(data, "model"); mod.Type == gjson.String {
				m.servedModel = mod.Str
			}
			o.usageRead, o.usageOnly = true, usageOnlyChunk(data)
			o.hide = m.hideChatUsage && o.usageOnly
			o.nullUsage = !o.usageOnly && !m.showRunningUsage
			o.finalUsage = !o.usageOnly && !m.hideChatUsage && finishesAChoice(data)
		}
	} else if name != "" && isTerminalType(name) {
		m.terminal = strings.TrimPrefix(name, "response.")
		m.noteFailure(gjson.GetBytes(data, "response"))
	}
	if m.traced && !o.hide {
		m.noteFinish(name, data)
	}
	return o
}

// meterSkipsResponsesEvent reports whether a Responses event of type typ
// carries nothing the meter keeps: it reads usage from terminal events only
// (Event). terminal is isTerminalType(typ), which the client stream has
// already asked for every event; it asks this to pass such events as plain.
func meterSkipsResponsesEvent(typ string, terminal bool) bool {
	return !terminal && strings.HasPrefix(typ, "response.")
}

// plainEvent writes an event that the client stream has read and found
// without a usage member and not terminal (clientStream.eventLocked): it
// carries nothing for the meter, which then passes it on without reading it.
// Searching every text delta for "usage" was most of the meter's cost per
// event (docs/ARCHITECTURE.md §11).
func (k *meterSink) plainEvent(name string, data []byte) error {
	if !k.plain {
		return k.Event(name, data)
	}
	k.m.countPlainDelta(name, data)
	return k.eventSink.Event(name, data)
}

// countPlainDelta counts the output deltas among the plain events (see
// plainEvent) the upstream sent through the stream, whether or not its
// client got them: a detached stream's are counted like any other stream's
// (README "Resuming a stream"), or a client that leaves after the first
// delta would be charged a handful of tokens for what the upstream went on
// generating.
func (m *reqMeta) countPlainDelta(name string, data []byte) {
	switch {
	case name == "":
		// A Chat chunk: only a delta with output is one (chatOutputDeltas).
		if n := chatOutputDeltas(data); n > 0 {
			m.outputDeltas.Add(n)
		}
	case isDeltaType(name): // a Responses event is a delta by its name
		m.outputDeltas.Add(1)
	}
}

// observeUnsent meters an event of a detached stream, which nobody reads
// but the upstream bills: its usage, as observe reads it, and its output
// deltas, as Event and plainEvent count them. plain is plainEvent's.
func (m *reqMeta) observeUnsent(name string, data []byte, plain bool) {
	if plain {
		m.countPlainDelta(name, data)
		return
	}
	m.countDelta(name, data, m.observe(name, data))
}

// isAnswerText reports whether a member named name of a JSON answer's
// output carries what the model generated, the text a stream would have
// sent as deltas (isDeltaType): Responses output text, refusals, function
// call arguments, custom tool input and reasoning text; Chat message
// content, refusals, reasoning and tool call arguments.
func isAnswerText(name string) bool {
	switch name {
	case "text", "refusal", "arguments", "input", "content", "reasoning_content", "reasoning":
		return true
	}
	return false
}

// answerOutputText is the text a JSON answer generated (isAnswerText), from
// its output (Responses) or choices (Chat), concatenated: what
// estimateUsage estimates the output of a JSON answer from.
func answerOutputText(body []byte) []byte {
	var text []byte
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		v.ForEach(func(k, e gjson.Result) bool {
			switch {
			case e.Type == gjson.String && k.Type == gjson.String && isAnswerText(k.Str):
				text = append(text, e.Str...)
			case e.IsObject() || e.IsArray():
				walk(e)
			}
			return true
		})
	}
	for _, member := range [...]string{"output", "choices"} {
		if v := gjson.GetBytes(body, member); v.IsArray() {
			walk(v)
		}
	}
	return text
}

// isDeltaType reports whether a Responses event of type typ streams a piece
// of output (text, arguments, reasoning, …): the events estimateUsage
// counts. A Chat chunk has no name.
func isDeltaType(typ string) bool { return strings.HasSuffix(typ, ".delta") }

// estimateUsage is the usage a request is charged when it ends without the
// upstream's (the client left, a cut that was not continued, a drain, a
// JSON answer without usage) after the upstream sent output: the
// admission's input estimate (body bytes / 4, as the limits reserve) and
// one output token per delta the upstream sent through the stream
// (countDelta), whether the client got it or had left, since
// OpenAI-compatible upstreams stream about a token per delta; a JSON
// answer, which has no deltas, its output text's bytes / 4
// (answerOutput), as the input is estimated. Charging nothing would let a
// client that always leaves before the usage chunk, or an upstream that
// leaves usage out, take answers past its key's token limits. A request
// that sent no output (no upstream answered, a cut before the first delta)
// is not estimated. Called under m.mu.
func (m *reqMeta) estimateUsage() (usage, bool) {
	out := m.outputDeltas.Load() - m.deltasAccounted + m.answerOutput // an earlier attempt's deltas are its own (attemptEnded)
	if out <= 0 {
		return usage{}, false
	}
	return usage{input: m.inputEstimate, output: out, known: true, estimated: true}, true
}

// boundedUsageModel is the usage model of a request no upstream accepted,
// by the per-target series' rule (targetMetrics.modelLabel): model when a
// route names it or t's upstream lists or configures it, else "other".
func (s *Server) boundedUsageModel(model string, t upstream.Target) string {
	if t.Upstream == nil || s.targetM == nil {
		return otherModel
	}
	return s.targetM.modelLabel(upstream.Target{Upstream: t.Upstream, Model: model})
}

// attemptEnded notes the end of an attempt that a continuation replaces
// (continueAfter); reported says whether the attempt reported its usage,
// and summed is the usage the attempts so far reported, which the continued
// stream adds the next attempt's to. One that did not report, after sending
// output, is charged what a stream that was not continued is
// (estimateUsage): the input estimate and one output token per delta this
// attempt sent the client. The deltas of a restart's attempt that only
// reproduced what the client had were not sent, so they are never charged
// twice. Nil-safe.
func (m *reqMeta) attemptEnded(reported bool, summed []byte) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replaced, _, _ = parseUsage(gjson.ParseBytes(summed))
	sent := m.outputDeltas.Load()
	deltas := sent - m.deltasAccounted
	m.deltasAccounted = sent
	if reported || deltas > 0 || !m.producer.made() {
		// The first replaced attempt, and then each one that produced
		// something, is the attempt a stream that gives up is charged to
		// (chargedAttempt).
		m.producer = m.lastAttempt()
	}
	if reported || deltas <= 0 {
		return
	}
	m.cutAttempts = m.cutAttempts.plus(usage{input: m.inputEstimate, output: deltas, known: true, estimated: true})
}

// everyAttemptEnded records that the stream ended with no attempt after
// the ones attemptEnded counted (giveUp): its usage is theirs alone, and
// no last attempt is left to estimate, nor to charge it to
// (chargedAttempt). Nil-safe.
func (m *reqMeta) everyAttemptEnded() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.attemptsEnded = true
	m.mu.Unlock()
}

// ---- GET /admin/usage ----

// handleUsage serves GET /admin/usage?key=&from=&to= (UTC days,
// YYYY-MM-DD; default: today): the per-day totals, with cost when the
// pricing table has the model, and their sum.
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	a := s.acct
	if a.opts.Usage == nil {
		(&apierr.Error{Status: http.StatusNotImplemented, Type: apierr.TypeInvalidRequest, Code: apierr.CodeUsageNotRecorded,
			Message: "usage totals are not recorded: the gateway has no store (continuity.disabled)"}).Write(w)
		return
	}
	q := r.URL.Query()
	today := time.Now().UTC().Format(time.DateOnly)
	from, to := q.Get("from"), q.Get("to")
	if from == "" {
		from = today
	}
	if to == "" {
		to = today
	}
	var days [2]time.Time
	for i, p := range [...]struct{ name, value string }{{"from", from}, {"to", to}} {
		d, err := time.Parse(time.DateOnly, p.value)
		if err != nil {
			apierr.Invalid(p.name, apierr.CodeInvalidDate, "%s must be a date, YYYY-MM-DD", p.name).Write(w)
			return
		}
		days[i] = d
	}
	if from > to { // YYYY-MM-DD sorts as the dates do
		apierr.Invalid("from", apierr.CodeInvalidDate, "from (%s) is after to (%s)", from, to).Write(w)
		return
	}
	// The range's bound is the client's to keep, whichever store is
	// behind: refused here, never reported as a store failure.
	if !store.UsageRangeAllowed(days[0], days[1]) {
		apierr.Invalid("from", apierr.CodeInvalidDate, "from (%s) is more than %d days before to (%s): ask for a shorter range",
			from, store.MaxUsageDays, to).Write(w)
		return
	}
	// Traffic without a Sluice key is totalled under the key "", which
	// ?key= cannot select (no key means every key): ?anonymous=true does.
	anonymous := false
	if v := q.Get("anonymous"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			apierr.Invalid("anonymous", apierr.CodeInvalidValue, "anonymous must be true or false, not %q", logtext.Printable(v)).Write(w)
			return
		}
		anonymous = b
	}
	if anonymous && q.Get("key") != "" {
		apierr.Invalid("anonymous", apierr.CodeInvalidValue, "give key or anonymous=true, not both").Write(w)
		return
	}
	a.usage.flush(r.Context()) // this replica's pending totals first: a request that ended is counted
	recs, err := a.opts.Usage.Usage(r.Context(), q.Get("key"), from, to)
	if err != nil {
		// The store's error (its address, the dial error) stays in the log
		// (SECURITY.md).
		s.log.Error("reading usage totals failed", "error", err)
		apierr.StoreUnavailable(apierr.CodeStoreUnavailable, store.ClientRetryAfter(err), "the usage totals could not be read (see the gateway log)").Write(w)
		return
	}
	if anonymous {
		recs = slices.DeleteFunc(recs, func(rec store.UsageRecord) bool { return rec.Key != "" })
	}
	recs = usageByName(recs)
	// Every row and the total carry cost_usd, null when no price applies
	// to any of it: the answer's shape does not depend on the data.
	type row struct {
		store.UsageRecord
		CostUSD *float64 `json:"cost_usd"`
	}
	type totals struct {
		Requests        int64    `json:"requests"`
		InputTokens     int64    `json:"input_tokens"`
		OutputTokens    int64    `json:"output_tokens"`
		CachedTokens    int64    `json:"cached_tokens"`
		ReasoningTokens int64    `json:"reasoning_tokens"`
		TotalTokens     int64    `json:"total_tokens"`
		CostUSD         *float64 `json:"cost_usd"`
	}
	rows := make([]row, 0, len(recs))
	var t totals
	// A cost too large for a float64 (a price config.MaxPrice refuses, set
	// through AccountsOptions) has no JSON number: it is null, and so is
	// the total it is part of, said in the log, rather than an answer that
	// is not JSON.
	var unpriceable []string // models
	finite := func(c float64) bool { return !math.IsInf(c, 0) && !math.IsNaN(c) }
	for _, rec := range recs {
		rw := row{UsageRecord: rec}
		if c, ok := a.priceOf(rec.Model, usage{input: rec.InputTokens, output: rec.OutputTokens, cached: rec.CachedTokens}); ok {
			c = roundUSD(c)
			if finite(c) {
				rw.CostUSD = &c
			} else if !slices.Contains(unpriceable, rec.Model) {
				unpriceable = append(unpriceable, rec.Model)
			}
			if t.CostUSD == nil {
				t.CostUSD = new(float64)
			}
			*t.CostUSD += c
		}
		rows = append(rows, rw)
		t.Requests = addTokens(t.Requests, rec.Requests)
		t.InputTokens = addTokens(t.InputTokens, rec.InputTokens)
		t.OutputTokens = addTokens(t.OutputTokens, rec.OutputTokens)
		t.CachedTokens = addTokens(t.CachedTokens, rec.CachedTokens)
		t.ReasoningTokens = addTokens(t.ReasoningTokens, rec.ReasoningTokens)
	}
	t.TotalTokens = addTokens(t.InputTokens, t.OutputTokens)
	if t.CostUSD != nil {
		if *t.CostUSD = roundUSD(*t.CostUSD); !finite(*t.CostUSD) {
			t.CostUSD = nil
			s.log.Warn("a usage cost is too large for a JSON number: cost_usd is null; lower the price", "models", unpriceable)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Day < rows[j].Day })
	writeJSON(w, http.StatusOK, map[string]any{"object": "usage", "key": q.Get("key"), "anonymous": anonymous, "from": from, "to": to, "data": rows, "total": t})
}

// usageByName sums the totals that differ only in their key id into one
// row per (day, key name, route, target, model), in the order recs has
// them: usage is reported by the key's name, the label operators chart
// and bill by, so a name's rows include the usage of a deleted key that
// had the name (README "Keys, limits and usage"); only the budgets tell
// the keys apart (limitKey).
func usageByName(recs []store.UsageRecord) []store.UsageRecord {
	type row struct{ day, key, route, target, model string }
	at := make(map[row]int, len(recs))
	out := recs[:0]
	for _, rec := range recs {
		rec.KeyID = ""
		r := row{rec.Day, rec.Key, rec.Route, rec.Target, rec.Model}
		if i, seen := at[r]; seen {
			addUsageCounts(&out[i], rec)
			continue
		}
		at[r] = len(out)
		out = append(out, rec)
	}
	return out
}

// ---- per-request facts (the access log reads them too) ----

type metaCtxKey struct{}

// reqMeta is what one client request did, for its access log line, its
// usage and its limits.
type reqMeta struct {
	mu          sync.Mutex
	start       time.Time
	requestID   string // the x-request-id the gateway minted (newRequestID); a WebSocket frame's is its socket's
	method      string
	endpoint    string
	surface     string
	key         *keyEntry
	header      http.Header // the HTTP response's headers (x-ratelimit-*); nil on WebSocket
	ws          bool        // a WebSocket: each frame logs its own line
	logged      bool        // the request logged its line itself
	counted     bool        // a handler counted it in sluice_requests_total (gate counts the rest)
	route       string
	targets     []upstream.Target // each attempt's target (tried): kept whole, as an upstream's name and a model may contain "/"
	model       string
	servedModel string // the model this attempt's upstream named (noteServedModel, observe, relay); "" before it names one
	status      int
	code        string
	committed   bool
	ttfe        time.Duration
	sawEvent    bool
	terminal    string // completed | failed | incomplete (Responses)
	reason      string // how the stream ended (the client stream's reason)
	usage       usage
	admission   Admission
	settled     bool
	// hideChatUsage: the gateway asked a Chat upstream for usage the
	// client did not ask for; its usage-only chunk is counted, not sent
	// (chatusage.go).
	hideChatUsage bool
	// showRunningUsage: the Chat client asked for usage on every chunk
	// (stream_options.continuous_usage_stats); others get the usage of a
	// chunk that is not the usage-only chunk as null (chatusage.go).
	showRunningUsage bool
	// inputEstimate is the admission's token estimate of the request
	// (body bytes / 4), and outputDeltas counts the output deltas the
	// upstream sent through the client stream, whether the client got them
	// or had left (atomic: the client stream writes while a background run
	// may settle): the usage charged when the upstream's never came
	// (estimateUsage).
	inputEstimate int64
	outputDeltas  atomic.Int64
	// answerOutput is a JSON answer without usage's output estimate: its
	// output text's bytes / 4 (answerOutputText), in place of the deltas
	// it has none of (estimateUsage).
	answerOutput int64
	traced       bool     // the request is traced: finish reasons are noted (tracing.go)
	continuity   string   // "rehydrated" when the conversation was rehydrated on another upstream (portable.go)
	finish       []string // the finish reasons the client was sent (traced only)
	chatFailed   bool     // an error chunk ended the Chat stream the client was sent (traced only; tracing.go failed)

	// attemptsEnded: every attempt ended and was counted by attemptEnded
	// (everyAttemptEnded); settle estimates no last one.
	attemptsEnded bool
	// producer is the last attempt attemptEnded counted that produced
	// output or reported usage (else the first it counted): the one a
	// stream whose continuations added nothing is charged to
	// (chargedAttempt).
	producer attemptRef
	// deltasAccounted is how many of outputDeltas the attempts a
	// continuation replaced sent, cutAttempts the estimate charged for
	// those of them that reported no usage, and replaced the usage they
	// reported, summed (attemptEnded).
	deltasAccounted int64
	cutAttempts     usage
	replaced        usage
	// badUsage names the count of the upstream's usage that was not valid
	// (noteUsage), for settle's warning; "" when none was.
	badUsage string

	// background: a background request (its line with the run's outcome
	// says background=ended). A background create answered before its run
	// ended (runBackground: bgDetached) logs two lines, its answer's and,
	// once its run ended at bgEnded, the run's (accesslog.go);
	// bgAnswerLogged: the first is written.
	background, bgDetached, bgAnswerLogged bool
	bgEnded                                time.Time

	// A Mode A client request's record is taken over by the request
	// assembled from it (gate), unless the client request's gate let go of
	// it first (its handler returned before any dispatch): one of the two
	// counts and logs the request.
	takenOver, letGone bool
}

// newRequestID mints the x-request-id of an answer the gateway writes
// itself: "req_" and 32 hex digits, as OpenAI's answers carry one and the
// SDKs expose it (requestID, _request_id) for support and log correlation.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "req_" + hex.EncodeToString(b[:])
}

func newReqMeta(r *http.Request) *reqMeta {
	return &reqMeta{start: time.Now(), method: r.Method, endpoint: logEndpoint(r.URL.Path), surface: requestSurface(r)}
}

// metaOf is the request's meta made by gate, or a fresh one.
func metaOf(r *http.Request) *reqMeta {
	if m, ok := r.Context().Value(metaCtxKey{}).(*reqMeta); ok {
		return m
	}
	return newReqMeta(r)
}

// noteAnswerError records the code of the OpenAI error in body, the
// answer the client got (statusWriter.errorCodeOf), as the request's code on its
// access line, unless the request noted one before (noteTerminalCode).
func (m *reqMeta) noteAnswerError(body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.code != "" {
		return
	}
	if e, ok := apierr.Parse(body); ok {
		m.noteTerminalCode(e.Code)
	}
}

// noteFailure records the error code of a Response that failed (a terminal
// event's "response", or a JSON answer), an upstream's unless the gateway
// noted its own first (abortLocked), traced or not: the access line's code
// (README "Access log") and the span's error.type (m.mu held).
func (m *reqMeta) noteFailure(resp gjson.Result) {
	if resp.Get("status").Str == "failed" {
		m.noteTerminalCode(resp.Get("error.code").Str)
	}
}

func (m *reqMeta) firstEvent() {
	if !m.sawEvent {
		m.sawEvent = true
		m.ttfe = time.Since(m.start)
	}
}

func (m *reqMeta) keyName() string {
	if m.key == nil {
		return ""
	}
	return m.key.name
}

// keyID is the id of the request's key (store.KeyRecord.ID; "": none).
func (m *reqMeta) keyID() string {
	if m.key == nil {
		return ""
	}
	_, id := splitLimitKey(m.key.limitKey)
	return id
}

// attemptRef names one attempt of a request: its index (the span's
// sluice.attempt, its entry in the access log's targets), the target it
// tried and the model its upstream named.
type attemptRef struct {
	index       int
	target      upstream.Target // Upstream nil: no attempt
	servedModel string
}

// made says whether the ref names an attempt.
func (a attemptRef) made() bool { return a.target.Upstream != nil }

// name is the attempt's upstream name: the usage's target label.
func (a attemptRef) name() string {
	if !a.made() {
		return ""
	}
	return a.target.Upstream.Name()
}

// lastAttempt is the request's last attempt so far (m.mu held).
func (m *reqMeta) lastAttempt() attemptRef {
	if len(m.targets) == 0 {
		return attemptRef{index: -1}
	}
	return attemptRef{index: len(m.targets) - 1, target: m.targets[len(m.targets)-1], servedModel: m.servedModel}
}

// chargedAttempt is the attempt the request's usage is charged to, its
// per-target series and the span that carries it (m.mu held): the last
// attempt, which on a continued stream that succeeded is charged every
// attempt's usage summed; but when the stream gave up after continuation
// attempts that added nothing (everyAttemptEnded), the last attempt that
// produced output (attemptEnded). A target that failed before it sent a
// byte is not charged tokens it never produced (README "Keys, limits and
// usage").
func (m *reqMeta) chargedAttempt() attemptRef {
	if m.attemptsEnded && m.producer.made() {
		return m.producer
	}
	return m.lastAttempt()
}

// tried notes an attempt on t (called once per attempt; nil-safe).
func (m *reqMeta) tried(t upstream.Target) {
	if m == nil || t.Upstream == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.targets = append(m.targets, t)
	m.servedModel = "" // an earlier attempt's upstream did not serve this one
}

// noteServedModel notes the model the upstream names before the end of a
// stream (its response.created, a Chat stream's first chunk), so that a
// stream that ends without its terminal event or usage chunk is charged
// under it too. Nil-safe.
func (m *reqMeta) noteServedModel(model string) {
	if m == nil || model == "" {
		return
	}
	m.mu.Lock()
	m.servedModel = model
	m.mu.Unlock()
}

// setReason is the client stream's hook: how the stream ended.
func (m *reqMeta) setReason(reason string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.reason = reason
	m.mu.Unlock()
}

// endReason is how the request ended as setReason noted it ("": not
// noted). Nil-safe.
func (m *reqMeta) endReason() string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reason
}
