package otlphttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-gw/sluice/internal/httpx"
)

const (
	// maxAttempts bounds the POSTs of one export (the first and its retries).
	maxAttempts = 3
	// defaultBackoff is the wait before the first retry when the collector
	// sent no Retry-After; it doubles for the next.
	defaultBackoff = 500 * time.Millisecond
	// maxRetryWait caps a collector's Retry-After.
	maxRetryWait = 30 * time.Second
	// clientTimeout bounds one POST, response included.
	clientTimeout = 10 * time.Second
	// drainLimit is how much of a response body is read (and dropped) so
	// that the connection can be reused.
	drainLimit = 64 << 10
	// excerptLimit is how much of an error response's body an error quotes.
	excerptLimit = 512
)

var errShutdown = errors.New("otlphttp: exporter is shut down")

// Exporter is an sdktrace.SpanExporter that POSTs spans, OTLP/HTTP protobuf,
// to a collector's traces URL. It never logs: ExportSpans returns its
// errors, which the SDK's span processor hands to otel.Handle.
type Exporter struct {
	url       string // the traces URL
	shownURL  string // url as errors show it (httpx.RedactURL)
	client    *http.Client
	ownClient bool // client is ours: Shutdown closes its idle connections
	header    http.Header
	backoff   time.Duration

	mu       sync.Mutex
	stopped  bool
	inflight sync.WaitGroup
	stopCtx  context.Context // cancelled by Shutdown: exports in flight end
	stop     context.CancelFunc
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// Option configures New.
type Option func(*config)

type config struct {
	client  *http.Client
	header  http.Header
	backoff time.Duration
}

// WithHTTPClient makes the exporter POST with c instead of its own client
// (10s timeout, its own Transport). Shutdown leaves c's connections alone.
func WithHTTPClient(c *http.Client) Option {
	return func(cfg *config) { cfg.client = c }
}

// WithHeaders adds headers to every POST (a collector's authorization, say).
func WithHeaders(h map[string]string) Option {
	return func(cfg *config) {
		for k, v := range h {
			cfg.header.Set(k, v)
		}
	}
}

// WithRetryBackoff sets the wait before the first retry of a throttled
// export whose response had no Retry-After (default 500ms); it doubles for
// the next.
func WithRetryBackoff(d time.Duration) Option {
	return func(cfg *config) { cfg.backoff = max(0, d) }
}

// New is an exporter that POSTs to tracesURL, an http or https URL with a
// host (a collector's {endpoint}/v1/traces, used as given). It makes no
// connection until the first export.
func New(tracesURL string, opts ...Option) (*Exporter, error) {
	u, err := url.Parse(tracesURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, fmt.Errorf("otlphttp: traces URL is not a URL: %w", err)
	}
	shown := httpx.RedactURL(tracesURL)
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("otlphttp: traces URL %q: scheme must be http or https", shown)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("otlphttp: traces URL %q has no host", shown)
	}
	cfg := config{header: http.Header{}, backoff: defaultBackoff}
	for _, o := range opts {
		o(&cfg)
	}
	e := &Exporter{
		url:      tracesURL,
		shownURL: shown,
		client:   cfg.client,
		header:   cfg.header,
		backoff:  cfg.backoff,
	}
	e.stopCtx, e.stop = context.WithCancel(context.Background())
	if e.client == nil {
		e.client, e.ownClient = newClient(), true
	}
	return e, nil
}

// newClient is the exporter's own client: a Transport of its own (its
// connections are closed by Shutdown, never shared with the gateway's
// traffic) that, like the official exporter's, honours the proxy
// environment variables.
func newClient() *http.Client {
	return &http.Client{
		Timeout: clientTimeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          2,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: clientTimeout,
			ExpectContinueTimeout: time.Second,
		},
	}
}

// ExportSpans sends spans in one request, retrying (at most 3 POSTs in all,
// and never past ctx's deadline) while the collector answers 429, 502, 503
// or 504, waiting for its Retry-After. After Shutdown it sends nothing and
// fails.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return errShutdown
	}
	e.inflight.Add(1)
	e.mu.Unlock()
	defer e.inflight.Done()

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("otlphttp: exporting spans: %w", err)
	}
	if len(spans) == 0 {
		return nil
	}
	body, err := marshalRequest(spans)
	if err != nil {
		return err
	}
	if len(body) == 0 { // only nil spans
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.stopCtx, cancel)() // Shutdown cancels the export
	return e.send(ctx, body)
}

// send POSTs body until it is taken, refused, or the attempts, ctx or
// the exporter end.
func (e *Exporter) send(ctx context.Context, body []byte) error {
	backoff := e.backoff
	for attempt := 1; ; attempt++ {
		wait, err := e.post(ctx, body)
		if err == nil {
			return nil
		}
		if wait < 0 { // not retryable
			return err
		}
		if attempt == maxAttempts {
			return fmt.Errorf("%w (%d attempts)", err, attempt)
		}
		if wait == 0 {
			wait = backoff
			backoff *= 2
		}
		wait = min(wait, maxRetryWait)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("%w (not retried: the retry would be due in %v, past the export's deadline)", err, wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (retry abandoned: %w)", err, e.cause(ctx))
		case <-t.C:
		}
	}
}

// cause is why ctx ended: the export's own context, or Shutdown.
func (e *Exporter) cause(ctx context.Context) error {
	if e.stopCtx.Err() != nil {
		return errShutdown
	}
	return ctx.Err()
}

// post makes one POST. wait is negative when err is final, else (a
// retryable status) the collector's Retry-After, 0 when it sent none.
func (e *Exporter) post(ctx context.Context, body []byte) (wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("otlphttp: POST %s: %w", e.shownURL, err)
	}
	for k, v := range e.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = e.cause(ctx)
		} else {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its message repeats the URL, password included
			}
		}
		return -1, fmt.Errorf("otlphttp: POST %s: %w", e.shownURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// The body is an ExportTraceServiceResponse; its partial_success is
		// not read.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return 0, nil
	}
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, excerptLimit+1))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	err = fmt.Errorf("otlphttp: POST %s: %s%s", e.shownURL, resp.Status, quoteBody(excerpt))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfter(resp.Header.Get("Retry-After"), time.Now()), err
	}
	return -1, err
}

// retryAfter is a Retry-After header's wait (delay-seconds or an HTTP date);
// 0 when absent, unparseable or past. A Retry-After of 0 is 1ns.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0
		}
		if secs > int64(maxRetryWait/time.Second) {
			return maxRetryWait
		}
		return max(time.Duration(secs)*time.Second, time.Nanosecond)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// quoteBody is ": body excerpt" for an error, printable and at most
// excerptLimit bytes; empty for an empty body.
func quoteBody(b []byte) string {
	cut := len(b) > excerptLimit
	if cut {
		b = b[:excerptLimit]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if s == "" {
		return ""
	}
	s = strconv.Quote(s)
	if cut {
		s += "…"
	}
	return ": " + s
}

// Shutdown stops the exporter: exports in flight are cancelled and waited
// for (at most until ctx ends), its own client's idle connections closed,
// and later exports fail. Calling it again does nothing.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	e.stop()
	e.mu.Unlock()

	done := make(chan struct{})
	go func() {
		e.inflight.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("otlphttp: shutdown: %w", ctx.Err())
	}
	if e.ownClient {
		e.client.CloseIdleConnections()
	}
	return err
}
