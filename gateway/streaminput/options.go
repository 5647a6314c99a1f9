package streaminput

import (
	"math"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/store"
)

// Defaults applied by New to zero-valued Options fields.
const (
	DefaultIdleTimeout       = 300 * time.Second
	DefaultMaxSessionBytes   = 32 << 20
	DefaultMaxSessionsPerKey = 16
	DefaultReorderWindow     = 64
	DefaultResultBuffer      = 16 << 20
	DefaultMaxTemplateBytes  = 16 << 20
	DefaultReadTimeout       = 30 * time.Second
	DefaultMaxSessions       = 10000
	DefaultMaxTotalBytes     = 1 << 30
)

// Options configure a Manager. Only Dispatch is required.
type Options struct {
	// Store keeps sessions and chunks durably. Nil keeps REST sessions in
	// memory only: acknowledgements then do not survive a restart.
	Store store.InputSessionStore
	// Dispatch serves the assembled requests: POST /v1/responses and
	// POST /v1/chat/completions. In Sluice it is the gateway's handler.
	// A request's context is cancelled when its session closes; when the
	// client deleted the session, its cause matches ErrSessionDeleted
	// (errors.Is), and the response should be cancelled, not kept running;
	// when the session's input failed the request, it matches
	// ErrInputFailed, and the request should fail at once with the
	// session's error. A Mode A request's context carries its client
	// request's (ModeAClient).
	Dispatch http.Handler
	// ModelAllowed, when set, is the key's models rule of Dispatch: the
	// error a request r would get for model (403 model_not_allowed), or
	// nil. A session is refused at its creation with it, rather than after
	// its whole input was sent. In Sluice it is the gateway's own check.
	ModelAllowed func(r *http.Request, model string) *apierr.Error
	// Logger receives the package's log lines; nil discards them. Session
	// ids are logged redacted.
	Logger hclog.Logger
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer

	// KeepAlive is how long a reader of an event-stream answer may get no
	// byte before it gets an SSE comment, between events (Sluice:
	// timeouts.keepalive): a quiet upstream, or a replica running the
	// answer that went quiet, does not look like a dead connection to the
	// proxies between. Zero: none.
	KeepAlive time.Duration
	// IdleTimeout closes a session that has received nothing for this long
	// (or whose answer finished this long ago) and deletes its data.
	// Default 300s.
	IdleTimeout time.Duration
	// MaxSessionBytes caps the decoded payload bytes of one session; a
	// chunk that crosses it gets 413 payload_too_large and closes the
	// session. Default 32 MiB.
	MaxSessionBytes int64
	// MaxRequestBytes is the largest request Dispatch takes (Sluice:
	// limits.max_body_bytes). A chunk that would make the session's
	// assembled request larger (the template, text JSON-escaped, bytes
	// base64-encoded, the JSON around each part; bounded from above, not
	// assembled) gets 413 payload_too_large and closes the session, so an
	// accepted input can always be sent. Zero: no bound but
	// MaxSessionBytes.
	MaxRequestBytes int64
	// MaxSessionsPerKey caps the sessions one client key (the SHA-256 of
	// its Authorization or Api-Key header) may have open or running at
	// once; the next create gets 429. Default 16.
	MaxSessionsPerKey int
	// ReorderWindow bounds out-of-order buffering: a sequence id at or
	// beyond next expected + ReorderWindow gets 409. Default 64.
	ReorderWindow int
	// ResultBuffer is how many bytes of an answer are kept for readers that
	// attach late or re-attach. Default 16 MiB.
	ResultBuffer int64
	// MaxTemplateBytes caps a session's request template: a larger one is
	// refused with 413 payload_too_large when the session is created.
	// Default 16 MiB, and never more than MaxRequestBytes.
	MaxTemplateBytes int64
	// MaxJSONDepth caps the nesting of every JSON document a client sends
	// (create and chunk bodies, Mode A lines, templates): a deeper one is
	// refused with 400 nesting_too_deep before any recursive parser sees
	// it. Default jsonx.DefaultMaxDepth (128).
	MaxJSONDepth int
	// ReadTimeout bounds how long a REST request body (create, chunk,
	// finish) may take to arrive, and how long a Mode A request may take
	// to send its header line: 408 request_timeout beyond. Later Mode A
	// lines get IdleTimeout each. Default 30s.
	ReadTimeout time.Duration
	// MaxSessions caps the sessions held at once, all clients together
	// (REST and Mode A, until they are closed or expire): a create beyond
	// it gets 503 server_overloaded with Retry-After. Default 10000.
	MaxSessions int
	// MaxTotalBytes caps the bytes all sessions hold together (templates
	// and chunk payloads, in memory or in the store): a create or chunk
	// that would cross it gets 503 server_overloaded with Retry-After (the
	// session stays open); a template larger than the whole cap, which no
	// retry could fit, gets 413 payload_too_large. Default 1 GiB.
	MaxTotalBytes int64
	// Now is the clock for timestamps and expiry times; nil means
	// time.Now. It must agree with the store's clock.
	Now func() time.Time
	// Trace, if set, hears each request the package answers itself once
	// it is answered: every REST call, and a Mode A request refused before
	// its session dispatched it (one dispatched is Dispatch's request),
	// with the time it arrived, its status and its error code ("" for a
	// success). In Sluice it is the gateway's TraceStreamingInput: each
	// becomes a server span (README "Tracing").
	Trace func(r *http.Request, start time.Time, status int, code string)
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxSessionBytes <= 0 {
		o.MaxSessionBytes = DefaultMaxSessionBytes
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = math.MaxInt64
	}
	if o.MaxSessionsPerKey <= 0 {
		o.MaxSessionsPerKey = DefaultMaxSessionsPerKey
	}
	if o.ReorderWindow <= 0 {
		o.ReorderWindow = DefaultReorderWindow
	}
	if o.ResultBuffer <= 0 {
		o.ResultBuffer = DefaultResultBuffer
	}
	if o.MaxTemplateBytes <= 0 {
		o.MaxTemplateBytes = DefaultMaxTemplateBytes
	}
	// A template larger than the request Dispatch takes could never be
	// sent, whatever its input: it is refused when the session is created
	// (README "Limits": an accepted input can always be sent).
	o.MaxTemplateBytes = min(o.MaxTemplateBytes, o.MaxRequestBytes)
	if o.MaxJSONDepth <= 0 {
		o.MaxJSONDepth = jsonx.DefaultMaxDepth
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = DefaultMaxTotalBytes
	}
}

// maxChunkRequest is the largest chunk request body: a payload as large as
// the whole session, base64-encoded, plus the JSON around it.
func (o *Options) maxChunkRequest() int64 { return o.MaxSessionBytes/3*4 + 64<<10 }

// maxHeaderLine is the longest Mode A header line: a template and the JSON
// around it.
func (o *Options) maxHeaderLine() int64 { return o.MaxTemplateBytes + 64<<10 }

// maxDecodedModeA caps the decoded size of a compressed Mode A body: the
// header line and twice what the session's payload can be, base64-encoded
// (room for per-line JSON and retransmitted duplicates). It is what stops a
// small compressed body from expanding into an endless stream of lines.
func (o *Options) maxDecodedModeA() int64 { return o.maxHeaderLine() + 2*o.maxChunkRequest() }
