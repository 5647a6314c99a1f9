// Package gateway is Sluice's HTTP surface: routing, the request pipeline,
// the upstream attempt loop and the event pump that keeps the terminal-event
// promise on every stream.
package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/logtext"
	"github.com/sluice-gw/sluice/store"
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	Pool   *upstream.Pool // required
	Policy Policy         // nil: BuiltinPolicy
	Logger hclog.Logger   // nil: discard
	// FailClosedRewrites names the rewrite policies the request may not go
	// on without (policies.NAME.sluice_fail_closed): when one cannot
	// complete its rewrite the client gets a 503 policy_unavailable rather
	// than the request sent on unrewritten. Needs a Policy that checks as
	// the chain runs (plugins.Runtime).
	FailClosedRewrites []string

	// Registry receives the gateway's metrics and is served on /metrics;
	// nil creates one with the Go and process collectors.
	Registry *prometheus.Registry

	MaxBodyBytes   int64         // client request body cap; default 32 MiB
	MaxEventBytes  int           // one upstream SSE event; default 16 MiB
	ConnectTimeout time.Duration // default 5s
	HeaderTimeout  time.Duration // upstream response headers; default 120s
	IdleTimeout    time.Duration // between upstream events; default 300s
	ReadHeader     time.Duration // client request headers; default 10s
	DrainGrace     time.Duration // in-flight streams on shutdown; default 30s
	// ClientWriteTimeout bounds each write to a streaming client; one that
	// stops reading is cut and its upstream released. Default 60s.
	ClientWriteTimeout time.Duration
	MaxAttempts        int // upstream attempts per request before the first byte; default 3 (a route of T targets: at least T+1)

	// Routes map client models to ordered targets (first match wins); none:
	// every usable upstream serves every model, as the pool chooses.
	Routes []Route
	// RetryMaxWait is the longest Retry-After honoured by waiting and then
	// retrying the same target once; default 5s; negative: never wait.
	RetryMaxWait time.Duration
	// KeepAlive is how often a client stream gets an SSE comment or a
	// WebSocket ping while the upstream is silent; default 15s.
	KeepAlive time.Duration

	// MaxJSONDepth bounds the nesting of every JSON document from a client
	// or an upstream; default 128 (internal/jsonx).
	MaxJSONDepth int
	// BodyMemoryBytes is the budget for request bodies being read at once;
	// beyond it requests get 503 server_overloaded. Default 256 MiB.
	BodyMemoryBytes int64
	// ReadBodyTimeout bounds reading one request body (408 beyond); default 30s.
	ReadBodyTimeout time.Duration
	// MaxConnections caps client connections open at once (Serve only);
	// further accepts wait. Default 10000.
	MaxConnections int
	// WSIdleTimeout closes a client WebSocket that sent no frame and had no
	// request in flight for this long; default 10m.
	WSIdleTimeout time.Duration
	// MetricsPublic leaves /metrics open when AdminToken is set.
	MetricsPublic bool

	// LifecycleHold is how long a Responses stream's response.created and
	// response.in_progress wait for the first content event before they go
	// out, so a failure right after them (a quota error) can still be
	// replayed invisibly; default 250ms; negative: not held.
	LifecycleHold time.Duration
	// MalformedEvents is what an unparseable upstream event does: "skip"
	// (default: skipped and counted; 3 in a row still fail the stream) or
	// "fail" (the first fails the stream).
	MalformedEvents string

	MaxWSFrameBytes    int64         // one response.create frame; larger → payload_too_large; default 15 MiB
	MaxWSInboundBytes  int64         // any client frame; larger closes the socket (1009); default 64 MiB
	UpstreamSockets    int           // cap on upstream WebSockets kept open; default 1024
	UpstreamSocketIdle time.Duration // an idle upstream WebSocket is closed after this; default 5m
	// WSSessionMemoryBytes bounds the store:false turns one client
	// WebSocket keeps for its follow-ups (sessionMemory); the oldest are
	// evicted first; default 64 MiB.
	WSSessionMemoryBytes int64
	// WSSessionMemoryTotalBytes bounds what all client WebSockets' session
	// memories hold together (sessionMemoryTotal); default 1 GiB.
	WSSessionMemoryTotalBytes int64

	// Store keeps response anchors for previous_response_id continuity;
	// nil turns continuity off.
	Store store.Store
	// Conversations keeps the items of responses served by Chat upstreams
	// (previous_response_id in front of them); nil keeps none.
	Conversations store.ConversationStore
	// AnchorTTL is how long an anchor lives (recorded as its expiry); default 7 days.
	AnchorTTL time.Duration
	// AnchorCacheSize bounds the in-memory anchor cache; default 100000.
	AnchorCacheSize int
	// Portable keeps the input and output items of every response relayed
	// in Conversations (not only those of Chat upstreams), so a follow-up
	// whose owner is gone can be rehydrated on another upstream
	// (continuity.portable; README "Continuity").
	Portable bool
	// RehydrateAfter is how long an owner must have been down before the
	// default recover decision rehydrates (continuity.rehydrate_after);
	// default 5m.
	RehydrateAfter time.Duration
	// Now is the continuity clock (anchor creation and expiry); nil means
	// time.Now. Tests inject a fake clock here, the same as the store's.
	Now func() time.Time

	// Transport carries upstream requests; nil builds one from the timeouts.
	Transport http.RoundTripper
	// Ready reports extra readiness conditions (e.g. policies loaded).
	Ready func() bool
	// StoreHealth, when set, reports whether a store that lives in a
	// server (Redis) answers; /readyz shows it as "store". It does not make
	// the gateway unready: every replica shares that store, and requests
	// without previous_response_id are still served while it is down
	// (continuity fails closed).
	StoreHealth func() error
	// Admin mounts extra admin handlers, keyed by path (e.g. "/admin/policies").
	Admin map[string]http.Handler
	// AdminPost mounts extra admin handlers for POST (e.g. "/admin/record").
	AdminPost map[string]http.Handler
	// AdminToken, when set, is required as "Authorization: Bearer <token>"
	// on every /admin/ endpoint (they reveal upstreams, policies and owners).
	AdminToken string
	// TrustedProxies are the peers whose X-Forwarded-*, Forwarded and
	// X-Real-IP headers are believed (see ParseTrustedProxies); every other
	// peer's are replaced with what the gateway itself saw.
	TrustedProxies []netip.Prefix
	// Accounts: Sluice keys, their limits, usage accounting and the access
	// log (auth.go); the zero value keeps the drop-in behaviour.
	Accounts AccountsOptions
	// Resume configures resumable streams, background requests and the
	// responses resource API (resume.go, resource.go).
	Resume ResumeOptions
	// TracerProvider, when set, traces every request and upstream attempt
	// (tracing.go; NewOTLPTracerProvider builds the OTLP/HTTP one). The
	// server owns it: Shutdown flushes and stops it. nil: no tracing.
	TracerProvider trace.TracerProvider
}

// Server is the gateway. Create it with New, serve it with Serve or mount
// Handler, and stop it with Shutdown.
type Server struct {
	opts    Options
	pool    *upstream.Pool
	policy  Policy
	log     hclog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	client  *http.Client
	router  *httprouter.Router
	handler http.Handler // router, possibly wrapped by Wrap
	cont    *continuity  // nil when continuity is off
	wsUp    *wsUpstreams
	convs   *conversations
	logs    *streamLogs    // client-visible event logs (resume.go); nil when off
	bgRuns  sync.WaitGroup // background requests running (resource.go)
	bgCount atomic.Int64   // …and how many: at most MaxConnections, as if each held a connection
	scrub   *scrubber      // upstream API keys → [redacted]; nil when no upstream has a key
	bodies  *bodyBudget    // memory of request bodies being read
	// sessionTotal is what all client WebSockets' session memories hold
	// together (limits.ws_session_memory_total_bytes).
	sessionTotal *sessionMemoryTotal
	rtable       *routeTable // nil without routes
	targetM      *targetMetrics
	acct         *accounts // keys, limits, usage (auth.go)
	tracing      *tracing  // nil when tracing is off (tracing.go)
	// failedClosedLog spaces the warnings of requests refused because a
	// rewrite policy held to its edits could not run (failedClosed): one a
	// request would flood the log while, say, its file lacks the hook.
	failedClosedLog logtext.Every

	wsMu       sync.Mutex     // orders wsSessions.Add before Shutdown's Wait
	wsSessions sync.WaitGroup // client WebSockets (hijacked: http.Server does not track them)
	drainCh    chan struct{}  // closed when draining starts
	drainOnce  sync.Once

	draining atomic.Bool
	// streamsCtx is canceled (with cause errDraining) when the drain grace
	// ends: every in-flight stream then writes its terminal event and returns.
	streamsCtx    context.Context
	cancelStreams context.CancelCauseFunc

	mu      sync.Mutex
	srv     *http.Server
	onDrain []func()
}

var (
	errDraining    = errors.New("the gateway is shutting down")
	errIdleTimeout = errors.New("no upstream event within the idle timeout")
)

// New builds a Server.
func New(opts Options) (*Server, error) {
	if opts.Pool == nil {
		return nil, errors.New("gateway: an upstream pool is required")
	}
	if opts.Policy == nil {
		opts.Policy = BuiltinPolicy{}
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// Zero values take config.Defaults(): the defaults live in one place.
	def := config.Defaults()
	setDefault(&opts.MaxBodyBytes, def.Limits.MaxBodyBytes)
	setDefault(&opts.MaxEventBytes, def.Limits.MaxEventBytes)
	setDefault(&opts.ConnectTimeout, def.Timeouts.Connect.D())
	setDefault(&opts.HeaderTimeout, def.Timeouts.Header.D())
	setDefault(&opts.IdleTimeout, def.Timeouts.Idle.D())
	setDefault(&opts.ReadHeader, def.Timeouts.ReadHeader.D())
	setDefault(&opts.DrainGrace, def.Timeouts.DrainGrace.D())
	setDefault(&opts.ClientWriteTimeout, def.Timeouts.ClientWrite.D())
	setDefault(&opts.MaxAttempts, 3)
	if opts.LifecycleHold == 0 {
		opts.LifecycleHold = defaultLifecycleHold
	}
	switch opts.MalformedEvents {
	case "":
		opts.MalformedEvents = malformedSkip
	case malformedSkip, malformedFail:
	default:
		return nil, fmt.Errorf("gateway: MalformedEvents %q is not skip or fail", opts.MalformedEvents)
	}
	if opts.RetryMaxWait == 0 {
		opts.RetryMaxWait = def.Retry.MaxWait.D()
	}
	setDefault(&opts.KeepAlive, def.Timeouts.KeepAlive.D())
	setDefault(&opts.MaxJSONDepth, jsonx.DefaultMaxDepth)
	setDefault(&opts.BodyMemoryBytes, def.Limits.BodyMemoryBytes)
	setDefault(&opts.ReadBodyTimeout, def.Timeouts.ReadBody.D())
	setDefault(&opts.MaxConnections, def.Limits.MaxConnections)
	setDefault(&opts.WSIdleTimeout, def.Timeouts.WSIdle.D())
	setDefault(&opts.AnchorTTL, def.Continuity.AnchorTTL.D())
	setDefault(&opts.AnchorCacheSize, 100000)
	setDefault(&opts.RehydrateAfter, def.Continuity.RehydrateAfter.D())
	if opts.Now == nil {
		opts.Now = time.Now
	}
	setDefault(&opts.MaxWSFrameBytes, def.Limits.MaxWSFrameBytes)
	setDefault(&opts.MaxWSInboundBytes, 64<<20)
	if opts.MaxWSInboundBytes < opts.MaxWSFrameBytes {
		opts.MaxWSInboundBytes = opts.MaxWSFrameBytes + 1<<20
	}
	setDefault(&opts.UpstreamSockets, def.Limits.UpstreamSockets)
	setDefault(&opts.UpstreamSocketIdle, def.Timeouts.UpstreamIdle.D())
	setDefault(&opts.WSSessionMemoryBytes, def.Limits.WSSessionMemoryBytes)
	setDefault(&opts.WSSessionMemoryTotalBytes, def.Limits.WSSessionMemoryTotalBytes)
	if opts.Transport == nil {
		opts.Transport = NewTransport(opts.ConnectTimeout, opts.HeaderTimeout)
	}
	s := &Server{
		failedClosedLog: logtext.Every{Interval: 10 * time.Second},
		opts:            opts,
		pool:            opts.Pool,
		policy:          opts.Policy,
		log:             opts.Logger,
		reg:             opts.Registry,
		metrics:         newMetrics(opts.Registry),
		client:          upstream.FollowNoRedirects(&http.Client{Transport: opts.Transport}),
		drainCh:         make(chan struct{}),
		bodies:          &bodyBudget{limit: opts.BodyMemoryBytes},
		sessionTotal:    &sessionMemoryTotal{limit: opts.WSSessionMemoryTotalBytes},
	}
	s.scrub = scrubberFor(opts.Pool)
	if len(opts.Routes) > 0 {
		rt, err := newRouteTable(opts.Routes, opts.Pool)
		if err != nil {
			return nil, err
		}
		s.rtable = rt
	}
	s.targetM = newTargetMetrics(opts.Registry, opts.Pool, s.rtable)
	s.wsUp = newWSUpstreams(s, opts.UpstreamSockets, opts.UpstreamSocketIdle)
	s.convs = &conversations{durable: opts.Conversations, log: opts.Logger.Named("conversations"), portable: opts.Portable, scrub: s.scrub}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s.logs = newStreamLogs(opts.Resume, now, opts.Logger.Named("resume"))
	if opts.Store != nil {
		s.cont = &continuity{store: opts.Store, cache: newAnchorCache(opts.AnchorCacheSize), ttl: opts.AnchorTTL,
			log: opts.Logger.Named("continuity"), m: s.metrics, now: opts.Now, stop: make(chan struct{}),
			writeFailLog:  logtext.Every{Interval: continuityLogEvery},
			notDurableLog: logtext.Every{Interval: continuityLogEvery},
			droppedLog:    logtext.Every{Interval: continuityLogEvery}}
	}
	acct, err := newAccounts(s, opts.Accounts, opts.Registry)
	if err != nil {
		return nil, err
	}
	s.acct = acct
	s.tracing = newTracing(opts.TracerProvider)
	s.streamsCtx, s.cancelStreams = context.WithCancelCause(context.Background())
	s.router = s.routes()
	s.handler = http.HandlerFunc(s.dispatch)
	return s, nil
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// MaxUpstreamHeaderBytes bounds an upstream answer's header block (status
// line and headers; on HTTP/2 the header list). The gateway relays an
// answer's headers, and a client's HTTP stack refuses big blocks (Node's
// 16 KiB): a larger block is a failed attempt before anything reaches the
// client, not Go's default of 10 MB relayed (SECURITY.md, Limits). OpenAI's
// answers carry a few KiB.
const MaxUpstreamHeaderBytes = 64 << 10

// NewTransport is the upstream transport: pooled keep-alive connections,
// bounded connect and header waits, a bounded header block, and no
// transparent compression (the gateway parses streams as they arrive).
func NewTransport(connect, header time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: header,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		// Events are small and large bodies bypass these buffers, so smaller
		// ones cost nothing per event and save memory per held stream.
		ReadBufferSize:         2 << 10,
		WriteBufferSize:        2 << 10,
		MaxResponseHeaderBytes: MaxUpstreamHeaderBytes,
	}
}

// Handler is the gateway's HTTP handler.
func (s *Server) Handler() http.Handler { return s.gate(s.handler) }

// Registry is the registry the gateway's metrics are on.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) routes() *httprouter.Router {
	r := httprouter.New()
	r.HandleMethodNotAllowed = true
	// An API answers a path it does not serve with its 404, never a
	// redirect: clients do not reliably follow a 307 with a POST body.
	r.RedirectTrailingSlash, r.RedirectFixedPath = false, false
	r.POST("/v1/responses", s.handleResponses)
	r.GET("/v1/responses", s.handleWebSocket)
	r.GET("/v1/responses/:response_id", s.handleGetResponse)
	r.GET("/v1/responses/:response_id/input_items", s.handleInputItems)
	r.DELETE("/v1/responses/:response_id", s.handleDeleteResponse)
	r.POST("/v1/responses/:response_id/cancel", s.handleCancelResponse)
	// compact and input_tokens are words where a response id stands: the
	// router takes no static segment beside a parameter (relay_endpoints.go).
	r.POST("/v1/responses/:response_id", s.handleResponsesAction)
	r.POST("/v1/chat/completions", s.handleChat)
	r.GET("/v1/models", s.handleModels)
	r.GET(modelRoutePrefix+"*model", s.handleModel)
	r.GET("/healthz", s.handleHealthz)
	r.GET("/readyz", s.handleReadyz)
	metricsHandler := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
	if s.opts.MetricsPublic {
		r.Handler(http.MethodGet, "/metrics", metricsHandler)
	} else {
		r.GET("/metrics", s.admin(func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) { metricsHandler.ServeHTTP(w, r) }))
	}
	r.GET("/admin/upstreams", s.admin(s.handleUpstreams))
	s.mountAdminKeys(r)
	// Mounted with continuity off too: the documented endpoint then says
	// why it has nothing (as /admin/keys and /admin/usage do without a
	// store), behind the admin token like every /admin/ endpoint.
	r.GET("/admin/continuity/:response_id", s.admin(s.handleAnchorOrDisabled))
	for path, h := range s.opts.Admin {
		r.GET(path, s.admin(func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) { h.ServeHTTP(w, r) }))
	}
	for path, h := range s.opts.AdminPost {
		r.POST(path, s.admin(func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) { h.ServeHTTP(w, r) }))
	}
	// Under /admin/ (and /metrics unless public) a request without the admin
	// token learns nothing from the router: it gets the guard's 401, not a
	// 404 or 405 that would map the admin routes (SECURITY.md).
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.answerNotFound(w, req, fmt.Sprintf("unknown endpoint %s %s", label(req.Method), label(req.URL.Path)))
	})
	// The router answers OPTIONS itself, with the Allow header of a known
	// path: under an admin surface only with the token too.
	// Its 200 is written here: net/http's implicit one would reach no
	// status recorder, and the request would be counted and logged with
	// status 0. An OPTIONS is no call of the path's API: it counts as
	// "other" (README "Observability").
	r.GlobalOPTIONS = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Counted on the API's paths; on the operator's endpoints (the
		// paths with a route outside /v1/: /healthz, /readyz, /metrics,
		// /admin/…), whose requests are not counted, not either (README
		// "Observability").
		api := strings.HasPrefix(req.URL.Path, "/v1/")
		if s.refuseAdmin(w, req) {
			if api {
				s.countUnrouted(req, http.StatusUnauthorized)
			}
			return
		}
		allowHead(w.Header(), req)
		w.WriteHeader(http.StatusOK)
		if api {
			s.countUnrouted(req, http.StatusOK)
		}
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		allowHead(w.Header(), req)
		s.answerMethodNotAllowed(w, req, fmt.Sprintf("%s is not allowed on %s", label(req.Method), label(req.URL.Path)))
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.Error("handler panic", "path", req.URL.Path, "panic", fmt.Sprint(v))
		(&apierr.Error{Status: http.StatusInternalServerError, Type: apierr.TypeServer, Code: apierr.CodeInternalError,
			Message: "the gateway hit an internal error"}).Write(w)
	}
	return r
}

// answerNotFound answers a path the gateway does not serve: 404 not_found
// with message, or the admin guard's 401 under an admin surface
// (refuseAdmin).
func (s *Server) answerNotFound(w http.ResponseWriter, req *http.Request, message string) {
	if s.refuseAdmin(w, req) {
		s.countUnrouted(req, http.StatusUnauthorized)
		return
	}
	s.countUnrouted(req, http.StatusNotFound)
	(&apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound,
		Message: message}).Write(w)
}

// answerMethodNotAllowed answers a method the path does not serve (its
// Allow header set): 405 method_not_allowed with message, or the admin
// guard's 401 under an admin surface (refuseAdmin).
func (s *Server) answerMethodNotAllowed(w http.ResponseWriter, req *http.Request, message string) {
	if s.refuseAdmin(w, req) {
		s.countUnrouted(req, http.StatusUnauthorized)
		return
	}
	s.countUnrouted(req, http.StatusMethodNotAllowed)
	(&apierr.Error{Status: http.StatusMethodNotAllowed, Type: apierr.TypeInvalidRequest, Code: apierr.CodeMethodNotAllowed,
		Message: message}).Write(w)
}

// Handle mounts an extra handler on the router. Call it before serving.
func (s *Server) Handle(method, path string, h http.Handler) {
	s.router.Handler(method, path, h)
}

// Wrap puts middleware around the handler that Serve and Handler use (for
// example streaming input's Mode A, which takes over some POSTs). Call it
// before serving.
func (s *Server) Wrap(mw func(http.Handler) http.Handler) {
	s.handler = mw(s.handler)
}

// handleAnchorOrDisabled serves GET /admin/continuity/{response_id}. With
// continuity.disabled no anchor is ever kept, so the answer is the 501 the
// other endpoints that need the store give (/admin/keys, /admin/usage): no
// retry, and no other id, can get one from this gateway as configured.
func (s *Server) handleAnchorOrDisabled(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	if s.cont == nil {
		(&apierr.Error{Status: http.StatusNotImplemented, Type: apierr.TypeInvalidRequest, Code: apierr.CodeContinuityOff,
			Message: "continuity is disabled (continuity.disabled: true): the gateway keeps no anchors"}).Write(w)
		return
	}
	s.handleAnchor(w, r, ps)
}

// admin guards an admin handler with AdminToken, when one is set.
func (s *Server) admin(h httprouter.Handle) httprouter.Handle {
	if s.opts.AdminToken == "" {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		if !s.adminAuthorized(r) {
			writeAdminRefusal(w)
			return
		}
		h(w, r, ps)
	}
}

// adminAuthorized reports whether r carries the admin token (compared in
// constant time).
func (s *Server) adminAuthorized(r *http.Request) bool {
	got := clientkey.BearerToken(r.Header.Get("Authorization"))
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.AdminToken)) == 1
}

func writeAdminRefusal(w http.ResponseWriter) {
	(&apierr.Error{Status: http.StatusUnauthorized, Type: apierr.TypeInvalidRequest, Code: apierr.CodeInvalidAdminToken,
		Message: "admin endpoints need Authorization: Bearer <admin_token>"}).Write(w)
}

// refuseAdmin is the router's guard for a path it has no route (or method)
// for: it answers 401 invalid_admin_token, and reports true, when the path
// is under an admin surface (/admin, /metrics unless public, the first
// segment of a mounted admin handler such as --pprof's /debug/) and an
// admin token is set that r does not carry.
func (s *Server) refuseAdmin(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.AdminToken == "" || !s.underAdmin(r.URL.Path) || s.adminAuthorized(r) {
		return false
	}
	w.Header().Del("Allow") // set by the router's own OPTIONS and 405 answers
	writeAdminRefusal(w)
	return true
}

// underAdmin reports whether p is under an admin surface (refuseAdmin).
func (s *Server) underAdmin(p string) bool {
	if p == "/metrics" {
		return !s.opts.MetricsPublic
	}
	under := func(root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	if under("/admin") {
		return true
	}
	for _, mounted := range []map[string]http.Handler{s.opts.Admin, s.opts.AdminPost} {
		for path := range mounted {
			if first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/"); first != "" && under("/"+first) {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	body := func(status string) map[string]string {
		b := map[string]string{"status": status}
		if s.opts.StoreHealth != nil { // the details (addresses) stay in the log and the metrics
			b["store"] = "ok"
			if s.opts.StoreHealth() != nil {
				b["store"] = "unavailable"
			}
		}
		return b
	}
	switch {
	case s.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, body("draining"))
	case s.opts.Ready != nil && !s.opts.Ready(), s.trippedFailClosedRewrite() != "":
		// Not loaded at start, or a fail-closed rewrite policy has no
		// version serving now (its file removed or refused) or its version
		// tripped with none to roll back to: every model request would be
		// refused 503 policy_unavailable.
		writeJSON(w, http.StatusServiceUnavailable, body("policies not loaded"))
	case !s.pool.Healthy():
		writeJSON(w, http.StatusServiceUnavailable, body("no healthy upstream"))
	default:
		writeJSON(w, http.StatusOK, body("ready"))
	}
}

// handleModels serves GET /v1/models: the models of the usable upstreams
// and the routes' plain names (README "Endpoints"), only those the
// request's key may use when its key has a models list.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	models := s.listModels(keyOf(r))
	data := make([]json.RawMessage, len(models))
	for i, m := range models {
		data[i] = m.entry
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// handleModel serves GET /v1/models/{model}: the entry /v1/models lists
// for it (OpenAI's retrieve model), or OpenAI's 404 model_not_found for a
// model it does not list to this key.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	// A catch-all: ids such as meta-llama/Llama-3-8B hold slashes.
	id := strings.TrimPrefix(ps.ByName("model"), "/")
	if id == "" { // GET /v1/models/ is a misspelled path, not a model
		s.router.NotFound.ServeHTTP(w, r)
		return
	}
	for _, m := range s.listModels(keyOf(r)) {
		if m.id == id {
			writeJSON(w, http.StatusOK, m.entry)
			return
		}
	}
	(&apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Code: codeModelNotFound, Param: "model",
		Message: fmt.Sprintf("the model %q does not exist or you do not have access to it", label(id))}).Write(w)
}

// codeModelNotFound is OpenAI's code for a model it does not serve.
const codeModelNotFound = "model_not_found"

// listedModel is one entry of GET /v1/models, as the client sees it.
type listedModel struct {
	id    string
	entry json.RawMessage
}

// listModels is the model list, sorted by id, that key (nil: none) is
// shown: each upstream model with the entry object of the first usable
// upstream that lists it, as that upstream listed it (OpenAI's Model: id,
// object, created, owned_by, plus the upstream's own fields such as
// vLLM's max_model_len), and the routes' plain names, owned by "sluice". A
// key with a models list is shown only the models it may use, by the rule
// that refuses the others with model_not_allowed.
func (s *Server) listModels(key *keyEntry) []listedModel {
	type sluiceModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	// One snapshot of the pool: a probe that changes an upstream's list
	// between two reads cannot leave a model without its entry.
	entries := s.pool.ModelEntries()
	ids := make([]string, 0, len(entries))
	for id := range entries {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	routed := map[string]bool{}
	for _, id := range s.rtable.names() {
		routed[id] = true
	}
	data := make([]listedModel, 0, len(ids)+len(routed))
	listed := make(map[string]bool, len(ids))
	for _, id := range ids {
		// Two upstream ids that differ only in a redacted key read the
		// same to the client: listed once. A name a route serves that an
		// upstream lists keeps that upstream's own entry (README
		// "Endpoints": created, owned_by and fields such as max_model_len).
		shown := s.scrub.String(id)
		if listed[shown] || modelAllowed(key, shown) != nil {
			continue
		}
		listed[shown] = true
		data = append(data, listedModel{id: shown, entry: modelEntry(s.scrub.Bytes(entries[id].Entry), entries[id].Upstream)})
	}
	for id := range routed { // a route name no usable upstream lists: an entry of the gateway's
		if !listed[id] && modelAllowed(key, id) == nil {
			entry, _ := json.Marshal(sluiceModel{ID: id, Object: "model", OwnedBy: "sluice"})
			data = append(data, listedModel{id: id, entry: entry})
		}
	}
	sort.Slice(data, func(i, j int) bool { return data[i].id < data[j].id })
	return data
}

// modelEntry is an upstream's entry for a model with the members OpenAI's
// Model requires that it lacks filled in: object "model", created 0 and
// owned_by the upstream's name. What it has is kept as it is.
func modelEntry(entry json.RawMessage, upstreamName string) json.RawMessage {
	for _, member := range []struct {
		name  string
		value any
	}{{"object", "model"}, {"created", 0}, {"owned_by", upstreamName}} {
		if gjson.GetBytes(entry, member.name).Exists() {
			continue
		}
		if filled, err := sjson.SetBytes(entry, member.name, member.value); err == nil {
			entry = filled
		}
	}
	return entry
}

func (s *Server) handleUpstreams(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	now := time.Now()
	out := make([]upstream.Status, 0, len(s.pool.Upstreams()))
	for _, u := range s.pool.Upstreams() {
		out = append(out, u.Status(now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"upstreams": out})
}

// writeJSON answers v as JSON with status. A value that cannot be encoded
// (a non-finite number) is the gateway's fault, answered as a 500 with an
// OpenAI-style error rather than a status with no JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		(&apierr.Error{Status: http.StatusInternalServerError, Type: apierr.TypeServer, Code: apierr.CodeInternalError,
			Message: "the gateway could not encode its answer as JSON: " + err.Error()}).Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// clean shutdown.
func (s *Server) Serve(ln net.Listener) error {
	limited := newLimitListener(ln, s, s.opts.MaxConnections)
	ln = limited
	srv := &http.Server{
		Handler:           s.Handler(),
		ConnContext:       connContext,
		ConnState:         limited.connState,
		ReadHeaderTimeout: s.opts.ReadHeader,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	s.mu.Lock()
	if s.draining.Load() { // Shutdown came first: it found no server to stop
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.srv = srv
	s.mu.Unlock()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: serve: %w", err)
	}
	return nil
}

// OnDrain registers f to run when Shutdown begins, before the server stops
// accepting (e.g. streaming input refusing new chunks).
func (s *Server) OnDrain(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onDrain = append(s.onDrain, f)
}

// Draining reports whether Shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// EndDrainGrace ends a drain's grace now: every stream in flight ends at
// once with its terminal event, as when timeouts.drain_grace runs out, and
// Shutdown still waits for the durable logs and usage totals. Before
// Shutdown has begun it does nothing.
func (s *Server) EndDrainGrace() {
	if s.draining.Load() {
		s.cancelStreams(errDraining)
	}
}

// untilDrained is ctx, cancelled too when the drain grace ends (or a second
// signal ends it), with the drain's cause (errDraining), for work that ends
// with the streams in flight.
func (s *Server) untilDrained(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.streamsCtx, func() { cancel(context.Cause(s.streamsCtx)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// Shutdown drains the gateway: it stops accepting, fails /readyz, lets
// in-flight streams run for up to DrainGrace and then ends each one with its
// terminal event. It returns when every handler has returned or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.wsMu.Lock()
	s.draining.Store(true)
	s.wsMu.Unlock()
	s.drainOnce.Do(func() { close(s.drainCh) })
	s.log.Info("draining", "grace", s.opts.DrainGrace.String())
	grace := time.AfterFunc(s.opts.DrainGrace, func() { s.cancelStreams(errDraining) })
	defer grace.Stop()
	s.mu.Lock()
	srv, hooks := s.srv, s.onDrain
	s.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
	}
	// WebSocket sessions finish their request in flight (cut with a terminal
	// event when the grace ends), then close normally.
	wsDone := make(chan struct{})
	go func() { s.wsSessions.Wait(); close(wsDone) }()
	select {
	case <-wsDone:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	// Background requests run to their end within the grace, like streams.
	bgDone := make(chan struct{})
	go func() { s.bgRuns.Wait(); close(bgDone) }()
	select {
	case <-bgDone:
	case <-ctx.Done():
	}
	s.cancelStreams(errDraining)
	select { // cancelled: each ends with its terminal event at once
	case <-bgDone:
	case <-time.After(5 * time.Second):
	}
	if s.logs != nil {
		s.logs.wait(ctx) // durable logs written before the store closes
	}
	if s.cont != nil {
		s.cont.close(ctx) // so are anchors whose write is being retried
	}
	if s.acct.usage != nil {
		s.acct.usage.close(ctx) // the usage totals too
	}
	s.wsUp.close()
	s.shutdownTracing()
	return err
}
