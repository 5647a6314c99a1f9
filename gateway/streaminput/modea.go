package streaminput

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/httpx"
)

// HeaderStreamingInput marks a Mode A request.
const HeaderStreamingInput = "X-Streaming-Input"

// ModeA is middleware for Mode A, one chunked request: a POST to
// /v1/responses or /v1/chat/completions with "X-Streaming-Input: true" and
// an NDJSON body is served here; every other request goes to next.
//
// The body's first line is the header object, then one chunk object per
// line:
//
//	{"template":{"model":"…","stream":true,"input":[…]},"start_policy":"on_first_chunk"}
//	{"sequence_id":0,"payload":"Summarise this: "}
//	{"payload":"the first page …"}
//	{"modality":"image","format":"png","payload":"<base64>","end_of_input":true}
//
// sequence_id may be left out (it follows the previous line's, from 0);
// the end of the body ends the input. The request is answered with the
// normal answer (streamed when the template streams), assembled and sent to
// Options.Dispatch as soon as the start policy allows, even while the body
// is still arriving (the connection is switched to full duplex). Dispatch,
// not next: the assembled request runs on the session's context, which
// holds nothing the client request's middleware put in its context (the
// key gate found), so it must pass the gate again, as a REST session's
// does, for its key's models, limits and usage to apply; its context
// carries the client request's (ModeAClient), so that middleware can tell
// it is that same client request. A bad line fails the request: with a
// JSON error before the answer began, with a terminal event after (the
// dispatch is cancelled with ErrInputFailed). Mode A sessions are held in
// memory only.
func (m *Manager) ModeA(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Start()
		if !isModeA(r) {
			next.ServeHTTP(w, r)
			return
		}
		m.serveModeA(w, r, next)
	})
}

// reasonClientGone is the close reason of a Mode A session whose client
// went away.
const reasonClientGone = "client_gone"

type modeAClientKey struct{}

// ModeAClient is, in the context of a request Options.Dispatch serves, the
// context of the Mode A client request it was assembled from; nil for any
// other request (a REST session's). The assembled request is that client
// request sent on: middleware around ModeA finds there what it put in the
// client request's context, and can account for the two as one request
// (Sluice counts and logs it once, README "Observability"). Only its values
// are meant to be read: it ends with the client request.
func ModeAClient(ctx context.Context) context.Context {
	c, _ := ctx.Value(modeAClientKey{}).(context.Context)
	return c
}

func isModeA(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(r.Header.Get(HeaderStreamingInput))) {
	case "true", "1":
	default:
		return false
	}
	return r.URL.Path == EndpointResponses || r.URL.Path == EndpointChat
}

func (m *Manager) serveModeA(w http.ResponseWriter, r *http.Request, next http.Handler) {
	start := time.Now()
	if m.isDraining() {
		aerr := errShutdown()
		aerr.Write(w)
		m.traceRefusal(r, start, aerr)
		return
	}
	rc := http.NewResponseController(w)
	// A session closed while its body is still arriving (idle, shutdown,
	// a bad line), a header line that does not arrive within ReadTimeout,
	// or an error answered before the body ended, cuts the body short with
	// a read deadline: this handler can return, and the server does not
	// wait on a stalled client to drain the rest. Once the body has ended
	// the deadline must not be touched: the server's background read on
	// the connection would fail and poison the next request on it.
	//
	// An answer that begins while the body is still arriving closes the
	// connection after it: in full duplex the server does not drain an
	// unread body before answering, and a connection whose request body
	// was cut (or ends after the answer) must not carry another request.
	bc := &bodyCutter{rc: rc, reading: true}
	closeIfUnfinished := func(cut bool) {
		if bc.unfinished() {
			if cut {
				bc.cut()
			}
			w.Header().Set("Connection", "close")
		}
	}
	fail := func(aerr *apierr.Error) {
		closeIfUnfinished(true) // the rest of the body is not read
		writeError(w, aerr)
		m.traceRefusal(r, start, aerr)
	}
	enc := httpx.ContentCoding(r.Header) // every Content-Encoding line, as the gateway reads a body
	switch enc {
	case "", "identity", "gzip", "x-gzip", "zstd":
	default:
		fail(&apierr.Error{Status: http.StatusUnsupportedMediaType, Type: apierr.TypeInvalidRequest, Code: CodeUnsupportedEncoding,
			Message: fmt.Sprintf("Content-Encoding %.40q is not supported; send identity, gzip or zstd", enc)})
		return
	}
	if m.full() {
		fail(m.errTooManySessions())
		return
	}
	_ = rc.EnableFullDuplex() // answer while the body still arrives (HTTP/1.1)

	// The header line (and a gzip header before it) must arrive within
	// ReadTimeout; later lines are bounded by the session's idle timer.
	headerTimer := time.AfterFunc(m.opts.ReadTimeout, bc.expire)
	body, closeBody, aerr := m.modeABody(&eofReader{r: r.Body, onEOF: bc.ended}, enc)
	var line []byte
	var err error
	// No ctx for the line reader: net/http ends r.Context when a read of
	// the body fails, and the read's own error (a body cut short: 400)
	// is what the client is answered, after the lines it completed.
	lr := &lineReader{max: m.opts.maxHeaderLine()}
	if aerr == nil {
		defer closeBody() // after the body is done with (bodyDone, below)
		lr.r = bufio.NewReaderSize(body, 64<<10)
		line, err = lr.next()
		for err == nil && len(line) == 0 {
			line, err = lr.next()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			aerr = m.bodyError(err, "the header line")
		}
	}
	headerTimer.Stop()
	if bc.timedOut() {
		aerr = errRequestTimeout("the streaming-input header line", m.opts.ReadTimeout)
	}
	switch {
	case aerr != nil:
		fail(aerr)
		return
	case len(line) == 0:
		fail(apierr.Invalid("", apierr.CodeMissingField, "a streaming-input body starts with a header line {\"template\":{…},\"start_policy\":…}"))
		return
	}
	tpl, policy, aerr := parseModeAHeader(r.Context(), r.URL.Path, line, m.opts.MaxJSONDepth)
	if aerr != nil {
		fail(aerr)
		return
	}
	lr.max = m.opts.maxChunkRequest()
	s, aerr := m.create(r.Context(), sessionParams{tpl: tpl, policy: policy, header: r.Header, modeA: true, onClose: bc.cut, peer: r.RemoteAddr,
		client: r.Context()})
	if aerr != nil {
		fail(aerr)
		return
	}
	// The request's context also ends when reading its body fails (net/http
	// cancels it on a connection read error, a client's half-close mid-body
	// among them), while the client may still be reading: then the body's
	// reader answers for it, with 400 invalid_body (endModeA). Only once
	// the body has ended does the context's end mean the client left.
	stop := context.AfterFunc(r.Context(), func() {
		if !bc.arriving() {
			s.close(errClientGone(), reasonClientGone)
		}
	})
	defer stop()
	bodyDone := make(chan struct{})
	go func() {
		defer close(bodyDone)
		if err != nil { // io.EOF: the header was the last line
			s.endModeA(r.Context(), err)
			return
		}
		s.readModeA(r.Context(), lr)
	}()
	// Cutting the body short (onClose) also cancels r.Context, so the
	// answer is served on a context that only a closed session ends: a
	// client that really leaves closes the session through the AfterFunc.
	ctx := context.WithoutCancel(r.Context())
	res, aerr := s.waitResult(ctx)
	switch {
	case aerr != nil:
		fail(aerr)
	case res != nil:
		closeIfUnfinished(false) // the body goes on arriving while the answer streams
		res.serve(ctx, w, serveOptions{startingAfter: -1, extra: s.sawHeaders(), keepAlive: m.opts.KeepAlive})
	}
	if m.isDraining() {
		s.close(m.shutdownErr, "shutdown") // do not wait for audit-only input
	}
	// The handler must not return while the body is being read. The idle
	// timer bounds a body that neither ends nor sends.
	<-bodyDone
	s.close(errCancelled(), "completed")
	// A body the reader left unfinished (a decoder that stopped before the
	// raw body's end) is cut, so that the server does not wait for its
	// rest; its connection was marked to close when the answer began.
	bc.cut()
}

func parseModeAHeader(ctx context.Context, endpoint string, line []byte, maxDepth int) (template, startPolicy, *apierr.Error) {
	if aerr := checkDepth(ctx, line, maxDepth, "the header line"); aerr != nil {
		return template{}, startPolicy{}, aerr
	}
	if !gjson.ValidBytes(line) || !gjson.ParseBytes(line).IsObject() {
		return template{}, startPolicy{}, apierr.Invalid("", apierr.CodeInvalidJSON, "the first line of a streaming-input body must be a JSON header object")
	}
	var raw, sp gjson.Result
	if aerr := forEachMember(ctx, gjson.ParseBytes(line), "", func(key string, v gjson.Result) {
		switch key {
		case "template":
			raw = v
		case "start_policy":
			sp = v
		}
	}); aerr != nil {
		return template{}, startPolicy{}, aerr
	}
	if !raw.Exists() {
		return template{}, startPolicy{}, apierr.Invalid("template", apierr.CodeMissingField,
			"the first line of a streaming-input body must carry the request template: {\"template\":{…},\"start_policy\":…}")
	}
	tpl, aerr := parseTemplate(ctx, endpoint, []byte(raw.Raw), maxDepth)
	if aerr != nil {
		return template{}, startPolicy{}, aerr
	}
	if sp.Exists() && sp.Type != gjson.String && sp.Type != gjson.Null {
		return template{}, startPolicy{}, apierr.Invalid("start_policy", apierr.CodeInvalidType, "start_policy must be a string")
	}
	policy, aerr := parsePolicy(sp.Str)
	if aerr != nil {
		return template{}, startPolicy{}, aerr
	}
	return tpl, policy, nil
}

// readModeA accepts the body's chunk lines until it ends.
func (s *session) readModeA(ctx context.Context, lr *lineReader) {
	auto := uint64(0)
	for n := 2; ; n++ {
		// A read that fails because the client left (or cut the body
		// short) fails here too: endModeA answers it; a session already
		// closed by then keeps its own error.
		line, err := lr.next()
		if len(line) > 0 && (err == nil || errors.Is(err, io.EOF)) {
			if aerr := checkJSON(ctx, line, s.m.opts.MaxJSONDepth, "line "+strconv.Itoa(n)+" of the body"); aerr != nil {
				s.close(aerr, reasonRejected)
				return
			}
			c, aerr := parseChunk(ctx, gjson.ParseBytes(line), &auto)
			if aerr == nil {
				auto = c.seq + 1
				s.m.makeRoomForChunk(int64(len(c.payload)))
				_, aerr = s.acceptNamingConflict(ctx, c)
			}
			if aerr != nil {
				// A copy: the error may be the session's own (already closed,
				// and being written to the client by serveModeA).
				e := *aerr
				e.Message = "line " + strconv.Itoa(n) + ": " + e.Message
				s.close(&e, reasonRejected)
				return
			}
		}
		if err != nil {
			s.endModeA(ctx, err)
			return
		}
	}
}

// endModeA handles the end of a Mode A body: EOF ends the input; any other
// error fails the request unless the session is already gone.
func (s *session) endModeA(ctx context.Context, err error) {
	switch {
	case errors.Is(err, io.EOF):
		aerr := s.finish(ctx)
		s.mu.Lock()
		started := s.started
		s.mu.Unlock()
		if aerr != nil && !started {
			s.close(aerr, reasonRejected)
		}
	default:
		aerr := s.m.bodyError(err, "the body")
		reason := reasonRejected
		if aerr.Status == http.StatusRequestEntityTooLarge {
			reason = reasonTooLarge
		}
		s.close(aerr, reason)
	}
}

// bodyError maps the error that ended the reading of a Mode A body. A
// body cut off (its client half-closed, the connection broke) is the 400
// a plain request's cut body gets, whether or not the request's context
// has ended with it (net/http ends it on any read error from the
// connection): a client still reading gets a real status, and one that
// left gets nothing either way.
func (m *Manager) bodyError(err error, what string) *apierr.Error {
	switch {
	case errors.Is(err, errLineTooLong):
		e := apierr.TooLarge(m.opts.maxChunkRequest())
		e.Message = fmt.Sprintf("a line of the streaming-input body exceeds the gateway limit (%d bytes for the header line, %d for a chunk line)",
			m.opts.maxHeaderLine(), m.opts.maxChunkRequest())
		return e
	case errors.Is(err, errBodyTooLarge):
		e := apierr.TooLarge(m.opts.maxDecodedModeA())
		e.Message = fmt.Sprintf("the decoded streaming-input body exceeds the gateway limit of %d bytes", m.opts.maxDecodedModeA())
		return e
	}
	return apierr.Invalid("", apierr.CodeInvalidBody, "could not read %s: %v", what, err)
}

func errClientGone() *apierr.Error {
	return &apierr.Error{Status: 499, Type: apierr.TypeInvalidRequest, Code: apierr.CodeClientClosedRequest, Message: "the client went away"}
}

var errLineTooLong = errors.New("streaminput: NDJSON line too long")

// errBodyTooLarge: a compressed Mode A body decodes to more than
// Options.maxDecodedModeA.
var errBodyTooLarge = errors.New("streaminput: decoded body too large")

// modeABody is the body of a Mode A request, decoded for a gzip or zstd
// Content-Encoding (enc, already checked) as it streams, and capped in
// decoded size. Creating a gzip decoder reads the gzip header, so it runs
// under the header timer. closeBody releases the decoder.
func (m *Manager) modeABody(raw io.Reader, enc string) (body io.Reader, closeBody func(), aerr *apierr.Error) {
	switch enc {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return nil, nil, apierr.Invalid("", apierr.CodeInvalidBody, "the gzip request body is corrupt: %v", err)
		}
		return &cappedReader{r: zr, left: m.opts.maxDecodedModeA()}, func() { _ = zr.Close() }, nil
	case "zstd":
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow),
			zstd.WithDecoderMaxMemory(zstdMaxWindow))
		if err != nil {
			return nil, nil, apierr.Invalid("", apierr.CodeInvalidBody, "the zstd request body is corrupt: %v", err)
		}
		return &cappedReader{r: zr, left: m.opts.maxDecodedModeA()}, zr.Close, nil
	}
	return raw, func() {}, nil
}

// zstdMaxWindow is the largest zstd window a Mode A body may ask for: a
// frame names its window up front, and the decoder holds that much memory
// for as long as the body streams.
const zstdMaxWindow = 8 << 20

// cappedReader fails with errBodyTooLarge after left bytes.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body that ends exactly at the cap from one
		// that goes on.
		var one [1]byte
		if n, err := c.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// bodyCutter cuts a Mode A body short, with a read deadline, while it is
// still being read: when the session closes, or when the header line's
// timer expires.
type bodyCutter struct {
	rc      *http.ResponseController
	mu      sync.Mutex
	reading bool // the body has not ended
	cutDone bool
	expired bool // cut by the header timer
}

// cut stops the body being read (the pending and every later read fail).
func (b *bodyCutter) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cutLocked()
}

func (b *bodyCutter) cutLocked() {
	if b.reading && !b.cutDone {
		b.cutDone = true
		_ = b.rc.SetReadDeadline(time.Now())
	}
}

// expire is the header timer's cut.
func (b *bodyCutter) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reading && !b.cutDone {
		b.expired = true
		b.cutLocked()
	}
}

// ended records that the raw body is over (it returned io.EOF).
func (b *bodyCutter) ended() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
}

// arriving reports whether the body is still being read: neither ended
// nor cut.
func (b *bodyCutter) arriving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reading && !b.cutDone
}

func (b *bodyCutter) timedOut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.expired
}

// unfinished reports whether the body was cut or is still arriving: an
// answer sent now must close the connection (the rest is not read).
func (b *bodyCutter) unfinished() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cutDone || b.reading
}

// eofReader reports when the reader it wraps returns io.EOF.
type eofReader struct {
	r     io.Reader
	onEOF func()
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) {
		e.onEOF()
	}
	return n, err
}

// lineReader reads NDJSON lines of bounded length.
type lineReader struct {
	r   *bufio.Reader
	max int64
	ctx context.Context // a line being read stops when it ends
	buf []byte
}

// next returns the next line without its line ending (empty for a blank
// line). At the end of the body it returns the last line, if any, with
// io.EOF.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		if l.ctx != nil && l.ctx.Err() != nil {
			return nil, l.ctx.Err()
		}
		part, err := l.r.ReadSlice('\n')
		l.buf = append(l.buf, part...)
		if int64(len(l.buf)) > l.max {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			return bytes.TrimSpace(l.buf), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return bytes.TrimSpace(l.buf), err
		}
	}
}
