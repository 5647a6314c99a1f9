package streaminput

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's Prometheus series.
type metrics struct {
	chunks     *prometheus.CounterVec // outcome: accepted, duplicate, rejected
	bytes      prometheus.Counter
	startDelay prometheus.Histogram
	closed     *prometheus.CounterVec // reason
	sessions   *stateCollector
}

// chunkCounters are the chunk series: sessions (REST and Mode A) and
// WebSocket accumulators count into the same ones (README "Metrics").
type chunkCounters struct {
	chunks *prometheus.CounterVec // outcome: accepted, duplicate, rejected
	bytes  prometheus.Counter
}

func newChunkCounters() chunkCounters {
	return chunkCounters{
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_streaming_input_chunks_total", Help: "Streaming-input chunks by outcome (accepted, duplicate, rejected).",
		}, []string{"outcome"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_streaming_input_bytes_total", Help: "Payload bytes of accepted streaming-input chunks.",
		}),
	}
}

// register registers the counters with r, or takes the ones already
// registered there: the Manager and every WebSocket's Accumulator share
// them, whichever registers first.
func (c *chunkCounters) register(r prometheus.Registerer) error {
	chunks, err := registerOrReuse(r, c.chunks)
	if err != nil {
		return err
	}
	bytes, err := registerOrReuse(r, c.bytes)
	if err != nil {
		return err
	}
	c.chunks, c.bytes = chunks, bytes
	return nil
}

func registerOrReuse[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	err := r.Register(c)
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func newMetrics(m *Manager) *metrics {
	cc := newChunkCounters()
	return &metrics{
		chunks: cc.chunks,
		bytes:  cc.bytes,
		startDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_streaming_input_start_delay_seconds", Help: "From a session's first chunk to the start of its upstream request.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_streaming_input_sessions_closed_total", Help: "Streaming-input sessions closed, by reason.",
		}, []string{"reason"}),
		sessions: &stateCollector{m: m, desc: prometheus.NewDesc("sluice_streaming_input_sessions",
			"Streaming-input sessions held now, by state (open, finished, started, completed).", []string{"state"}, nil)},
	}
}

func (mt *metrics) register(r prometheus.Registerer) error {
	cc := chunkCounters{chunks: mt.chunks, bytes: mt.bytes}
	if err := cc.register(r); err != nil {
		return err
	}
	mt.chunks, mt.bytes = cc.chunks, cc.bytes
	for _, c := range []prometheus.Collector{mt.startDelay, mt.closed, mt.sessions} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// stateCollector counts the sessions by state at scrape time.
type stateCollector struct {
	m    *Manager
	desc *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"open": 0, "finished": 0, "started": 0, "completed": 0}
	for _, s := range c.m.all() {
		s.mu.Lock()
		switch {
		case s.closed:
		case s.done:
			counts["completed"]++
		case s.started:
			counts["started"]++
		case s.finished:
			counts["finished"]++
		default:
			counts["open"]++
		}
		s.mu.Unlock()
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}
