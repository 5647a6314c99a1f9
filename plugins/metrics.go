package plugins

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/hostabi"
)

// metrics are one Runtime's collectors (never registered globally).
type metrics struct {
	calls      *prometheus.CounterVec   // policy, hook, outcome
	faults     *prometheus.CounterVec   // policy, hook, kind
	fallbacks  *prometheus.CounterVec   // hook, reason
	swaps      *prometheus.CounterVec   // policy, result
	rejections *prometheus.CounterVec   // policy
	rollbacks  *prometheus.CounterVec   // policy
	duration   *prometheus.HistogramVec // policy, hook
	active     *prometheus.GaugeVec     // policy, sha256, source, state
	logDropped *prometheus.CounterVec   // policy

	// logBudgets is, by policy name, the *logBudget its log lines are
	// charged to (host.go): kept here, with the counter it feeds, as the
	// Runtime's per-policy state that outlives a version.
	logBudgets sync.Map
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_calls_total",
			Help: "Hook calls into Wasm policies, by outcome (ok, defer, error, fault, canceled, tripped; stand_in: a parked embedded policy's native twin answered).",
		}, []string{"policy", "hook", "outcome"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_faults_total",
			Help: "Policy faults (the instance was discarded and the built-in default used), by hook (init: an instance could not be created) and kind (trap, timeout, memory, exit, invalid_output, invalid_alloc).",
		}, []string{"policy", "hook", "kind"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_fallbacks_total",
			Help: "Hook decisions taken by the built-in default, by reason (no_policy, deferred, fault, error, tripped, canceled; failed_closed: a rewrite policy held to its edits could not complete and the request was refused).",
		}, []string{"hook", "reason"}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_swaps_total",
			Help: "Changes of the active policy set, by policy and result (loaded, unloaded, rolled_back, tripped).",
		}, []string{"policy", "result"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_rejections_total",
			Help: "Policy files rejected at load (not Wasm, wrong ABI, failing self-test, trap at init).",
		}, []string{"policy"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_rollbacks_total",
			Help: "Policies rolled back (or tripped to the built-in default) after consecutive faults.",
		}, []string{"policy"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_policy_call_duration_seconds",
			Help:    "Duration of hook calls into Wasm policies, including the host functions they call.",
			Buckets: []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 10e-3, 50e-3},
		}, []string{"policy", "hook"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_policy_active",
			Help: "1 for each loaded policy version, labelled with its sha256, source and state.",
		}, []string{"policy", "sha256", "source", "state"}),
		logDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_policy_log_dropped_total",
			Help: fmt.Sprintf("Lines a policy logged that the gateway dropped: past %d in one call or the policy's %d lines/s (burst %d) budget.",
				logLinesPerCall, logLinesPerSecond, logLinesBurst),
		}, []string{"policy"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.faults, m.fallbacks, m.swaps, m.rejections, m.rollbacks, m.duration, m.active, m.logDropped}
}

// hookMetrics are the per-version, per-hook children, resolved once at
// load for the hooks the version exports (and only those: a series for a
// hook a policy lacks could never be non-zero).
type hookMetrics struct {
	ok, deferred, errored, faulted, canceled, tripped, standIn prometheus.Counter
	duration                                                   prometheus.Observer
}

func (m *metrics) forHook(policy, hook string) *hookMetrics {
	return &hookMetrics{
		ok:       m.calls.WithLabelValues(policy, hook, "ok"),
		deferred: m.calls.WithLabelValues(policy, hook, "defer"),
		errored:  m.calls.WithLabelValues(policy, hook, "error"),
		faulted:  m.calls.WithLabelValues(policy, hook, "fault"),
		canceled: m.calls.WithLabelValues(policy, hook, "canceled"),
		tripped:  m.calls.WithLabelValues(policy, hook, "tripped"),
		standIn:  m.calls.WithLabelValues(policy, hook, "stand_in"),
		duration: m.duration.WithLabelValues(policy, hook),
	}
}

// forget deletes the per-hook series (calls, durations, faults) of policy
// for the hooks in gone; with all, every one of them, its "init" faults
// included, and its log budget (host.go): the policy is no longer served.
func (m *metrics) forget(policy string, gone hostabi.Hook, all bool) {
	if all {
		match := prometheus.Labels{"policy": policy}
		m.calls.DeletePartialMatch(match)
		m.duration.DeletePartialMatch(match)
		m.faults.DeletePartialMatch(match)
		m.logBudgets.Delete(policy)
		return
	}
	for h := range hookNames {
		if gone&hookBits[h] != 0 {
			match := prometheus.Labels{"policy": policy, "hook": hookNames[h]}
			m.calls.DeletePartialMatch(match)
			m.duration.DeletePartialMatch(match)
			m.faults.DeletePartialMatch(match)
		}
	}
}

// logBudget returns policy's log budget, made full at now if it has none.
func (m *metrics) logBudget(policy string, now time.Time) *logBudget {
	if b, ok := m.logBudgets.Load(policy); ok {
		return b.(*logBudget)
	}
	b, _ := m.logBudgets.LoadOrStore(policy, newLogBudget(m.logDropped.WithLabelValues(policy), now))
	return b.(*logBudget)
}

// hookMetrics is v's children for hook h. They exist from load for every
// hook v exports; a hook it does not export is never called, but should
// one be, its series are made then rather than at load.
func (v *version) hookMetrics(h int) *hookMetrics {
	if hm := v.hm[h]; hm != nil {
		return hm
	}
	return v.rt.m.forHook(v.name, hookNames[h])
}
