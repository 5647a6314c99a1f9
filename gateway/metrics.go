package gateway

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/hostabi"
)

// metrics are the gateway's Prometheus series, registered on a per-server
// registry (no global state).
type metrics struct {
	requests         *prometheus.CounterVec   // surface, code
	upstreamAttempts *prometheus.CounterVec   // upstream, outcome
	streamTerminal   *prometheus.CounterVec   // surface, reason
	activeStreams    prometheus.Gauge         // streams being served now, detached ones included: they still read and meter their upstream
	firstEvent       *prometheus.HistogramVec // surface: request start → first event to client
	ownerResolution  *prometheus.CounterVec   // surface, source, outcome
	failClosed       *prometheus.CounterVec   // surface, reason
	skippedEvents    *prometheus.CounterVec   // surface, reason: upstream events the gateway skipped
	rescues          *prometheus.CounterVec   // surface, kind, outcome: continuations after content
	keepalives       *prometheus.CounterVec   // surface: SSE comments / WebSocket pings while the upstream was silent
	resumes          *prometheus.CounterVec   // via (sse, websocket): streams resumed from their log (resume.go)
	rehydrations     *prometheus.CounterVec   // surface, reason: conversations sent elsewhere because their owner is gone (portable.go)

	anchorsWaiting      prometheus.Gauge   // anchors whose write failed, waiting to be written again (continuity.go)
	anchorsNotRetried   prometheus.Counter // failed anchors not retried: too many were waiting
	bodyBudgetRefusals  prometheus.Counter // requests refused because the body-memory budget was spent
	connLimitWaits      prometheus.Counter // accepts that waited at max_connections
	connLimitIdleClosed prometheus.Counter // idle keep-alive connections closed for a new client at max_connections
	openConns           prometheus.Gauge   // client connections open now
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total", Help: "Client requests by surface and HTTP status (README, Observability: API surfaces, models, responses_resource, streaming_input, and other for unknown endpoints and methods; not the operator endpoints).",
		}, []string{"surface", "code"}),
		upstreamAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_attempts_total", Help: "Requests sent to upstreams, by upstream and outcome.",
		}, []string{"upstream", "outcome"}),
		streamTerminal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_stream_terminal_total", Help: "Client streams ended, by surface and the reason they ended.",
		}, []string{"surface", "reason"}),
		activeStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_active_streams", Help: "Streams being served now, detached ones (whose client left; README \"The stream goes on without its client\") included.",
		}),
		firstEvent: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_time_to_first_event_seconds", Help: "From request arrival to the first event written to the client.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"surface"}),
		ownerResolution: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuity_owner_resolution_total", Help: "previous_response_id owner resolutions by surface, source and outcome.",
		}, []string{"surface", "source", "outcome"}),
		failClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuity_fail_closed_total", Help: "Requests failed closed to keep continuity, by surface and reason.",
		}, []string{"surface", "reason"}),
		anchorsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuity_anchors_waiting", Help: "Anchors whose write to the store failed, waiting to be written again.",
		}),
		anchorsNotRetried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "continuity_anchors_not_retried_total", Help: "Anchors whose write failed and that were not retried, because too many were waiting.",
		}),
		bodyBudgetRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_body_budget_refusals_total", Help: "Requests refused with 503 because limits.body_memory_bytes was spent.",
		}),
		connLimitWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_connection_limit_waits_total", Help: "Client connections that waited for a slot because limits.max_connections were open and none was idle.",
		}),
		connLimitIdleClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_connection_limit_idle_closed_total", Help: "Idle keep-alive connections closed to give their slot to a new client because limits.max_connections were open.",
		}),
		openConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_client_connections", Help: "Client connections open now.",
		}),
	}
	reg.MustRegister(m.bodyBudgetRefusals, m.connLimitWaits, m.connLimitIdleClosed, m.openConns, m.anchorsWaiting, m.anchorsNotRetried)
	m.skippedEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_stream_skipped_events_total", Help: "Upstream stream events skipped (not relayed), by surface and reason.",
	}, []string{"surface", "reason"})
	reg.MustRegister(m.skippedEvents)
	m.rescues = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rescues_total", Help: "Continuation attempts of streams that failed after content reached the client, one count per attempt (a refused prefill and its restart are two), by surface, kind (prefill, restart) and how the attempt ended (outcome).",
	}, []string{"surface", "kind", "outcome"})
	m.keepalives = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_keepalives_total", Help: "Keepalives written to streaming clients while the upstream was silent (SSE comments, WebSocket pings), by surface.",
	}, []string{"surface"})
	m.resumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_stream_resumes_total", Help: "Streams resumed from their log (GET /v1/responses/{id}?stream=true or a response.resume frame), by how (sse, websocket).",
	}, []string{"via"})
	reg.MustRegister(m.rescues, m.keepalives, m.resumes)
	m.rehydrations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_continuity_rehydrations_total", Help: "Follow-ups whose previous_response_id owner was gone, rehydrated from the kept items on another upstream, by surface and reason (owner_removed, owner_down, policy).",
	}, []string{"surface", "reason"})
	reg.MustRegister(m.rehydrations)
	reg.MustRegister(m.requests, m.upstreamAttempts, m.streamTerminal, m.activeStreams, m.firstEvent, m.ownerResolution, m.failClosed)
	return m
}

// Surfaces of sluice_requests_total besides the API surfaces
// (hostabi.Surface*), which serveAPI and the WebSocket frames count.
const (
	surfaceModels            = "models"             // GET /v1/models and /v1/models/{model}
	surfaceResponsesResource = "responses_resource" // GET/DELETE /v1/responses/{id}, its input_items, cancel
	surfaceStreamingInput    = "streaming_input"    // the streaming-input REST API (Mode B)
	surfaceOther             = "other"              // no such endpoint (404) or method (405)
	// POST /v1/responses/compact and /v1/responses/input_tokens, relayed
	// as they are (relay_endpoints.go): JSON only, so one label each.
	surfaceResponsesCompact     = "responses_compact"
	surfaceResponsesInputTokens = "responses_input_tokens"
)

// responsesResourcePrefix starts the paths of the stored-response API; the
// segment after it is a response id.
const responsesResourcePrefix = "/v1/responses/"

// requestSurface labels a /v1/ request no API handler counted (an auth
// failure, a 426, /v1/models, the stored-response API, streaming-input
// sessions); the access log shows the same label.
func requestSurface(r *http.Request) string {
	switch p := r.URL.Path; {
	case p == "/v1/responses" && r.Method == http.MethodGet:
		return hostabi.SurfaceWebSocket
	case p == "/v1/responses":
		return hostabi.SurfaceResponsesJSON
	case p == "/v1/chat/completions":
		return hostabi.SurfaceChatJSON
	case r.Method == http.MethodPost && p == "/v1"+responsesCompactEndpoint.path:
		return surfaceResponsesCompact
	case r.Method == http.MethodPost && p == "/v1"+responsesInputTokensEndpoint.path:
		return surfaceResponsesInputTokens
	case p == "/v1/models" || strings.HasPrefix(p, "/v1/models/"):
		return surfaceModels
	case strings.HasPrefix(p, responsesResourcePrefix):
		return surfaceResponsesResource
	case strings.HasPrefix(p, streaminput.PathPrefix):
		return surfaceStreamingInput
	}
	return surfaceOther
}

// countRequest counts a /v1/ request in sluice_requests_total. The
// operator's endpoints (/healthz, /readyz, /metrics, /admin/…) are not
// counted; unknown paths and methods anywhere are (countUnrouted).
func (s *Server) countRequest(r *http.Request, status int) {
	s.metrics.requests.WithLabelValues(requestSurface(r), statusLabel(status)).Inc()
}

// countUnrouted counts a 404 or 405, or an OPTIONS answered with its Allow,
// as surface "other", wherever its path, and its access line says so.
func (s *Server) countUnrouted(r *http.Request, status int) {
	s.metrics.requests.WithLabelValues(surfaceOther, statusLabel(status)).Inc()
	if m, ok := r.Context().Value(metaCtxKey{}).(*reqMeta); ok {
		m.counted, m.surface = true, surfaceOther
	}
}

// keptAlive counts a keepalive written to a streaming client on surface in
// sluice_keepalives_total: an SSE comment (a live stream's or a resume's,
// under the Responses stream's surface) or a WebSocket ping, each written
// while the client had nothing else to read (README, timeouts.keepalive).
func (m *metrics) keptAlive(surface string) {
	m.keepalives.WithLabelValues(surface).Inc()
}
