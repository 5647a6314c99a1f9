package streaminput

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

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
)

// Options configure a Manager. Only Dispatch is required.
type Options struct {
	// Store keeps sessions and chunks durably. Nil keeps REST sessions in
	// memory only: acknowledgements then do not survive a restart.
	Store store.InputSessionStore
	// Dispatch serves the assembled requests: POST /v1/responses and
	// POST /v1/chat/completions. In Sluice it is the gateway's handler.
	Dispatch http.Handler
	// Logger receives the package's log lines; nil discards them. Session
	// ids are logged redacted.
	Logger hclog.Logger
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer

	// IdleTimeout closes a session that has received nothing for this long
	// (or whose answer finished this long ago) and deletes its data.
	// Default 300s.
	IdleTimeout time.Duration
	// MaxSessionBytes caps the decoded payload bytes of one session; a
	// chunk that crosses it gets 413 payload_too_large and closes the
	// session. Default 32 MiB.
	MaxSessionBytes int64
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
	// MaxTemplateBytes caps a session's request template. Default 16 MiB.
	MaxTemplateBytes int64
	// Now is the clock for timestamps and expiry times; nil means
	// time.Now. It must agree with the store's clock.
	Now func() time.Time
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
}

// maxChunkRequest is the largest chunk request body: a payload as large as
// the whole session, base64-encoded, plus the JSON around it.
func (o *Options) maxChunkRequest() int64 { return o.MaxSessionBytes/3*4 + 64<<10 }
