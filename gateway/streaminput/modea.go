package streaminput

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/apierr"
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
// next as soon as the start policy allows, even while the body is still
// arriving (the connection is switched to full duplex). A bad line fails
// the request: with a JSON error before the answer began, with a terminal
// event after. Mode A sessions are held in memory only.
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
	if m.isDraining() {
		errShutdown().Write(w)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // answer while the body still arrives (HTTP/1.1)
	lr := &lineReader{r: bufio.NewReaderSize(r.Body, 64<<10), max: m.opts.MaxTemplateBytes + m.opts.maxChunkRequest()}

	line, err := lr.next()
	for err == nil && len(line) == 0 {
		line, err = lr.next()
	}
	if len(line) == 0 {
		apierr.Invalid("", apierr.CodeMissingField, "a streaming-input body starts with a header line {\"template\":{…},\"start_policy\":…}").Write(w)
		return
	}
	tpl, policy, aerr := parseModeAHeader(r.URL.Path, line)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	// A session closed while its body is still arriving (idle, shutdown,
	// a bad line) cuts the body short with a read deadline, so that this
	// handler can return. Once the body has ended the deadline must not be
	// touched: the server's background read on the connection would fail
	// and poison the next request on it.
	var bodyMu sync.Mutex
	reading, cut := true, false
	lr.onEnd = func() {
		bodyMu.Lock()
		defer bodyMu.Unlock()
		reading = false
	}
	cutBody := func() {
		bodyMu.Lock()
		defer bodyMu.Unlock()
		if reading {
			cut = true
			_ = rc.SetReadDeadline(time.Now())
		}
	}
	s, aerr := m.create(r.Context(), sessionParams{tpl: tpl, policy: policy, header: r.Header, modeA: true, dispatch: next, onClose: cutBody})
	if aerr != nil {
		aerr.Write(w)
		return
	}
	stop := context.AfterFunc(r.Context(), func() { s.close(errClientGone(), "client_gone") })
	defer stop()
	bodyDone := make(chan struct{})
	go func() {
		defer close(bodyDone)
		if err != nil { // the header was the last line
			lr.onEnd()
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
		bodyMu.Lock()
		if cut || reading {
			w.Header().Set("Connection", "close") // the rest of the body is not read
		}
		bodyMu.Unlock()
		aerr.Write(w)
	case res != nil:
		res.serve(ctx, w, serveOptions{startingAfter: -1, extra: s.sawHeaders()})
	}
	if m.isDraining() {
		s.close(m.shutdownErr, "shutdown") // do not wait for audit-only input
	}
	// The handler must not return while the body is being read. The idle
	// timer bounds a body that neither ends nor sends.
	<-bodyDone
	s.close(errCancelled(), "completed")
}

func parseModeAHeader(endpoint string, line []byte) (template, startPolicy, *apierr.Error) {
	if !gjson.ValidBytes(line) || !gjson.ParseBytes(line).IsObject() {
		return template{}, startPolicy{}, apierr.Invalid("", apierr.CodeInvalidJSON, "the first line of a streaming-input body must be a JSON header object")
	}
	root := gjson.ParseBytes(line)
	raw := root.Get("template")
	if !raw.Exists() {
		return template{}, startPolicy{}, apierr.Invalid("template", apierr.CodeMissingField,
			"the first line of a streaming-input body must carry the request template: {\"template\":{…},\"start_policy\":…}")
	}
	tpl, aerr := parseTemplate(endpoint, []byte(raw.Raw))
	if aerr != nil {
		return template{}, startPolicy{}, aerr
	}
	sp := root.Get("start_policy")
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
		line, err := lr.next()
		if len(line) > 0 {
			if !gjson.ValidBytes(line) {
				s.close(apierr.Invalid("", apierr.CodeInvalidJSON, "line %d of the body is not valid JSON", n), "rejected")
				return
			}
			c, aerr := parseChunk(gjson.ParseBytes(line), &auto)
			if aerr == nil {
				auto = c.seq + 1
				_, aerr = s.accept(ctx, c)
			}
			if aerr != nil {
				aerr.Message = "line " + strconv.Itoa(n) + ": " + aerr.Message
				s.close(aerr, "rejected")
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
			s.close(aerr, "rejected")
		}
	case errors.Is(err, errLineTooLong):
		s.close(errTooLarge(s.m.opts.MaxSessionBytes), "too_large")
	default:
		s.close(apierr.Invalid("", "invalid_body", "could not read the request body: %v", err), "rejected")
	}
}

func errClientGone() *apierr.Error {
	return &apierr.Error{Status: 499, Type: apierr.TypeInvalidRequest, Code: "client_closed_request", Message: "the client went away"}
}

var errLineTooLong = errors.New("streaminput: NDJSON line too long")

// lineReader reads NDJSON lines of bounded length.
type lineReader struct {
	r     *bufio.Reader
	max   int64
	buf   []byte
	onEnd func() // called once next returns an error (the body is over)
}

// next returns the next line without its line ending (empty for a blank
// line). At the end of the body it returns the last line, if any, with
// io.EOF.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.read()
	if err != nil && l.onEnd != nil {
		l.onEnd()
	}
	return line, err
}

func (l *lineReader) read() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
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
