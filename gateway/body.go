package gateway

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/httpx"
)

// Request bodies are the one thing a client can make the gateway hold in
// memory, so reading them is bounded three ways (docs/ARCHITECTURE.md,
// "Untrusted input"): each body by MaxBodyBytes (decoded size, checked while
// decoding), all bodies being read at once by BodyMemoryBytes, and the time
// one body may take by ReadBodyTimeout.

// zstdMaxWindow is the largest zstd window accepted. A zstd frame asks the
// decoder for its window up front; without a bound, a few bytes on the wire
// reserve the window's memory for as long as the upload stalls.
const zstdMaxWindow = 8 << 20

// decoderReserve is what a decoder holds while a body streams through it,
// charged to the body-memory budget before it is created (a stalled zstd
// decoder at the largest window was measured at 9.15 MiB).
var decoderReserve = map[string]int64{"gzip": 64 << 10, "zstd": zstdMaxWindow + 1536<<10}

// overloadRetryAfter is the Retry-After sent when the body budget is spent:
// bodies being read finish or time out within seconds.
const overloadRetryAfter = 2 * time.Second

// bodyBudget is the gateway-wide budget of memory held by request bodies
// being read.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

func (b *bodyBudget) reserve(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *bodyBudget) release(n int64) { b.used.Add(-n) }

// readBody reads r's body within the gateway's limits, decoding a gzip or
// zstd Content-Encoding. The memory it reserves is released when it
// returns: the body is then owned by the request, whose count is bounded by
// max_connections.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apierr.Error) {
	return s.readBodyUpTo(w, r, s.opts.MaxBodyBytes)
}

// readBodyUpTo is readBody with a smaller size limit than the gateway's
// (an admin API body): every body the gateway reads is read by this one
// rule, within read_body and the body-memory budget.
func (s *Server) readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) (_ []byte, aerr *apierr.Error) {
	rc := http.NewResponseController(w)
	enc := httpx.ContentCoding(r.Header)
	if refused := refusedByHeaders(r, enc, limit); refused != nil {
		// Answered before a byte of the body is read: a read would make
		// net/http send 100 Continue to a client that asked with Expect
		// whether to upload (RFC 9110 §10.1.1 wants the final status at
		// once when the header fields decide it). The gate's declaredBody
		// closes the connection after the answer and reads what the client
		// sent only then (finish); a body it does not track is drained
		// here, as any refused body is.
		w.Header().Set("Connection", "close")
		if _, tracked := r.Body.(*declaredBody); !tracked {
			discardBody(rc, r, time.Time{})
		}
		return nil, refused
	}
	var bodyDeadline time.Time // zero until the body's deadline is set
	defer func() {
		if aerr != nil {
			// The rest of the body is not read in full: without this,
			// net/http would try to drain it before answering, and a stalled
			// upload would hold the answer (and the connection) forever.
			// Only a bounded part is read, so the close is not a reset.
			w.Header().Set("Connection", "close")
			discardBody(rc, r, bodyDeadline)
		}
	}()
	// The deadline covers the whole body; it is lifted after, so a long
	// stream's response is not cut by it.
	bodyDeadline = time.Now().Add(s.opts.ReadBodyTimeout)
	if err := rc.SetReadDeadline(bodyDeadline); err == nil {
		defer func() {
			if aerr == nil {
				_ = rc.SetReadDeadline(time.Time{})
			}
		}()
	}
	var held int64
	defer func() { s.bodies.release(held) }()
	charge := func(n int64) bool {
		if !s.bodies.reserve(n) {
			return false
		}
		held += n
		return true
	}
	overloaded := func() *apierr.Error {
		s.metrics.bodyBudgetRefusals.Inc()
		return apierr.Overloaded(overloadRetryAfter, "the gateway is reading too many request bodies at once; retry shortly")
	}

	raw := io.Reader(http.MaxBytesReader(w, r.Body, limit))
	var body io.Reader = raw
	if enc == "x-gzip" {
		enc = "gzip"
	}
	if enc == "gzip" || enc == "zstd" {
		if !charge(decoderReserve[enc]) {
			return nil, overloaded()
		}
		var err error
		if body, err = newDecoder(enc, raw, limit); err != nil {
			return nil, s.bodyError(err, limit, fmt.Sprintf("the %s request body is corrupt", enc))
		}
		if c, ok := body.(io.Closer); ok {
			defer c.Close()
		}
	}

	// Grow the buffer by doubling, charging each growth before making it, so
	// the budget counts what is really allocated.
	size := int64(4 << 10)
	if enc == "" && r.ContentLength > 0 {
		size = r.ContentLength + 1 // +1 sees EOF without another growth
	}
	size = min(size, limit+1)
	if !charge(size) {
		return nil, overloaded()
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, apierr.TooLarge(limit)
			}
			grown := min(int64(cap(buf))*2, limit+1)
			if !charge(grown) {
				return nil, overloaded()
			}
			next := make([]byte, len(buf), grown)
			copy(next, buf)
			s.bodies.release(int64(cap(buf)))
			held -= int64(cap(buf))
			buf = next
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, s.bodyError(err, limit, "could not read the request body")
		}
	}
	if int64(len(buf)) > limit {
		return nil, apierr.TooLarge(limit)
	}
	return buf, nil
}

// refusedByHeaders is the refusal of r's body that its header fields
// decide alone: a declared length over limit, or a Content-Encoding
// (enc, httpx.ContentCoding) the gateway does not decode.
func refusedByHeaders(r *http.Request, enc string, limit int64) *apierr.Error {
	if r.ContentLength > limit {
		return apierr.TooLarge(limit)
	}
	switch enc {
	case "", "identity", "gzip", "x-gzip", "zstd":
		return nil
	}
	return &apierr.Error{Status: http.StatusUnsupportedMediaType, Type: apierr.TypeInvalidRequest, Code: apierr.CodeUnsupportedEncoding,
		Message: fmt.Sprintf("Content-Encoding %q is not supported; send identity, gzip or zstd", enc)}
}

// Bounds on reading what remains of a refused body: long enough for what
// a client already sent to arrive, too short for a client to hold the
// connection with it.
const (
	bodyDrainWait  = 500 * time.Millisecond
	bodyDrainBytes = 256 << 10
)

// discardBody reads and drops what remains of a body refused before it was
// read to the end, up to bodyDrainBytes and for at most bodyDrainWait
// (never past the body's own deadline), then closes it. A socket closed
// with unread bytes in it is reset by the kernel, and the reset discards
// the answer the client has not read yet: a small gzip or zstd bomb sent
// with Connection: close would get a reset instead of its 413, and an
// upload without a key its 401 (gate). net/http does not drain the body
// itself when the request said Connection: close.
func discardBody(rc *http.ResponseController, r *http.Request, bodyDeadline time.Time) {
	deadline := time.Now().Add(bodyDrainWait)
	if !bodyDeadline.IsZero() && bodyDeadline.Before(deadline) {
		deadline = bodyDeadline
	}
	_ = rc.SetReadDeadline(deadline)
	_, _ = io.CopyN(io.Discard, r.Body, bodyDrainBytes)
	_ = r.Body.Close()
}

// declaredBody is the body a client declared (a Content-Length or chunked
// encoding) on an HTTP/1.x connection, tracked for the handler's answer
// (trackBody). Before it writes an answer's header, net/http reads what
// the handler left of the body (up to 256 KiB) so that the connection can
// carry the next request, and it does so with no deadline: a client that
// declares a body and does not send it would hold every answer that does
// not read it (a keyless 401, /healthz, a stored response's GET) and its
// connection forever, which read_body is there to bound (SECURITY.md,
// "Limits"). So an answer that begins while the body is unread closes the
// connection (net/http then skips its drain) and what the client sent is
// read only once the handler returned, bounded as a refused body is
// (discardBody).
type declaredBody struct {
	io.ReadCloser
	ended      atomic.Bool // read to its end, or closed
	fullDuplex atomic.Bool // the handler answers while it arrives (streaming input's Mode A)
	leftUnread bool        // the answer began before its end: drained after the handler (finish)
}

// trackBody is r with its body tracked (a shallow copy: net/http's own
// request keeps its body, whose state it reads before answering), or r
// and nil when there is nothing to track: no body declared, a request not
// read from a client connection (a streaming-input dispatch) or HTTP/2,
// whose streams carry no next request.
func trackBody(r *http.Request) (*http.Request, *declaredBody) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ProtoMajor != 1 ||
		r.Context().Value(http.ServerContextKey) == nil {
		return r, nil
	}
	b := &declaredBody{ReadCloser: r.Body}
	r = r.WithContext(r.Context())
	r.Body = b
	return r, b
}

func (b *declaredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.ended.Store(true)
	}
	return n, err
}

func (b *declaredBody) Close() error {
	b.ended.Store(true)
	return b.ReadCloser.Close()
}

// answerBegins is told, before the answer's header is written, whose
// header is h: a body not read to its end marks the answer to close the
// connection. b may be nil (nothing tracked).
func (b *declaredBody) answerBegins(h http.Header) {
	if b == nil || b.leftUnread || b.ended.Load() || b.fullDuplex.Load() {
		return
	}
	b.leftUnread = true
	h.Set("Connection", "close")
}

// answeredInFullDuplex notes that the handler reads the body while it
// answers, closing the connection itself when the answer begins first.
// b may be nil.
func (b *declaredBody) answeredInFullDuplex() {
	if b != nil {
		b.fullDuplex.Store(true)
	}
}

// finish is called once the handler returned, with the writer net/http
// gave it: an answer that began with the body unread (or none written,
// which net/http writes next) is sent, then what the client sent of the
// body is read, within discardBody's bounds, so that the connection's
// close does not reset the answer away. b may be nil.
func (b *declaredBody) finish(w http.ResponseWriter, r *http.Request) {
	if b == nil {
		return
	}
	b.answerBegins(w.Header())
	if !b.leftUnread {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	discardBody(rc, r, time.Time{})
}

func newDecoder(enc string, r io.Reader, limit int64) (io.Reader, error) {
	if enc == "gzip" {
		return gzip.NewReader(r)
	}
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(uint64(limit)+1))
	if err != nil {
		return nil, err
	}
	return zstdCloser{zr}, nil
}

// zstdCloser adapts zstd.Decoder's Close (no error) to io.Closer.
type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error { z.Decoder.Close(); return nil }

func (s *Server) bodyError(err error, limit int64, what string) *apierr.Error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return apierr.TooLarge(limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return apierr.RequestTimeout(s.opts.ReadBodyTimeout)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client is gone; nobody reads this answer.
		return apierr.Invalid("", apierr.CodeInvalidBody, "the request was canceled while its body was read")
	case errors.Is(err, zstd.ErrWindowSizeExceeded):
		return apierr.Invalid("", apierr.CodeInvalidBody, "the zstd request body needs a window over %d bytes; compress with a smaller window (e.g. zstd --long=23 or less)", zstdMaxWindow)
	}
	return apierr.Invalid("", apierr.CodeInvalidBody, "%s: %v", what, err)
}

// Upstream answers are asked for unencoded (upstreamHeaders sends
// Accept-Encoding: identity, and the transport neither asks for gzip nor
// decodes it), but an upstream may compress anyway. A gzip body is decoded
// as it is read, so the size and shape checks and the key scrubber see
// plain bytes (SECURITY.md); a body in any other coding is not read.

// decodeAnswer makes resp's body read decoded. A gzip Content-Encoding is
// taken off resp's headers (with Content-Length, which counted the encoded
// bytes) and the body is decoded as it is read. ok is false when the
// coding, returned as one list of every Content-Encoding line
// (httpx.ContentCoding), is not one the gateway decodes: resp is then left as it
// is.
func decodeAnswer(resp *http.Response) (coding string, ok bool) {
	coding = httpx.ContentCoding(resp.Header)
	switch strings.ToLower(coding) {
	case "", "identity":
		return coding, true
	case "gzip", "x-gzip":
	default:
		return coding, false
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Body = &gzipBody{raw: rawReader{ReadCloser: resp.Body}}
	return coding, true
}

// gzipBody decodes a gzip upstream body as it is read. Its decoder is made
// on the first Read, as making one reads the gzip header, which may block
// (the reader's idle bound starts with the first Read). Close closes the
// upstream body only, so a timer may call it while a Read is blocked.
type gzipBody struct {
	raw rawReader
	zr  *gzip.Reader
	err error // the decoder could not be made
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.zr == nil {
		if g.err != nil {
			return 0, g.err
		}
		zr, err := gzip.NewReader(&g.raw)
		switch {
		case errors.Is(err, io.EOF):
			g.err = io.EOF // an empty body
			return 0, g.err
		case err != nil:
			g.err = g.decodeError(err)
			return 0, g.err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		err = g.decodeError(err)
	}
	return n, err
}

// decodeError is err from the decoder as the reader's error: the upstream
// body's own read error as it came (a connection cut in transit is the
// transport's fault), anything else an answerDecodeError.
func (g *gzipBody) decodeError(err error) error {
	if g.raw.err != nil && g.raw.err != io.EOF && errors.Is(err, g.raw.err) {
		return err
	}
	return &answerDecodeError{coding: "gzip", err: err}
}

// rawReader is an upstream body that remembers the last error it returned,
// so that a decoder's error can be told from the transport's.
type rawReader struct {
	io.ReadCloser
	err error
}

func (r *rawReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil {
		r.err = err
	}
	return n, err
}

// answerDecodeError is an upstream body that arrived whole but that its
// Content-Encoding's decoder refuses (not gzip at all, a bad checksum, a
// stream that ends early): the upstream's answer is unusable, not cut in
// transit, and is judged as any other unusable 2xx answer (SECURITY.md,
// Upstreams: 502 upstream_unavailable naming why).
type answerDecodeError struct {
	coding string
	err    error
}

func (e *answerDecodeError) Error() string {
	return fmt.Sprintf("the answer's body could not be decoded (Content-Encoding %s): %v", e.coding, e.err)
}

func (e *answerDecodeError) Unwrap() error { return e.err }

func (g *gzipBody) Close() error { return g.raw.Close() }
