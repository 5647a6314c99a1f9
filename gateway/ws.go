package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/clientkey"
)

// wsWriteTimeout bounds one frame write to a client that stopped reading.
const wsWriteTimeout = 30 * time.Second

// handleWebSocket serves the Responses WebSocket mode on GET /v1/responses:
// flat {"type":"response.create",…} frames in, one JSON text frame per event
// out, requests on a socket answered one at a time in order. A stream_id
// lane is echoed on its frames (wsResponder.write) but does not get a turn
// of its own: lanes share the session's order, as on a WebSocket upstream
// its requests share one socket per scope (README "WebSocket").
func (s *Server) handleWebSocket(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		w.Header().Set("Upgrade", "websocket")
		(&apierr.Error{Status: http.StatusUpgradeRequired, Type: apierr.TypeInvalidRequest, Code: apierr.CodeWebSocketRequired,
			Message: "GET /v1/responses is the Responses WebSocket mode; upgrade to WebSocket or POST /v1/responses"}).Write(w)
		return
	}
	if !s.trackWebSocket() {
		// 426 makes clients such as Codex fall back to HTTP, where they
		// learn the gateway is draining. (An upgrade request has no status
		// recorder in gate: counted here.)
		// A 426 names the protocol to use (RFC 9110 §15.5.22): the upgrade
		// this one refuses is no use, so it names HTTP/1.1.
		aerr := &apierr.Error{Status: http.StatusUpgradeRequired, Type: apierr.TypeServer, Code: apierr.CodeUpstreamUnavailable,
			Message: "the gateway is shutting down; retry over HTTP or on another instance"}
		s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, statusLabel(aerr.Status)).Inc()
		m := metaOf(r)
		m.counted, m.status, m.code = true, aerr.Status, aerr.Code
		w.Header().Set("Upgrade", "HTTP/1.1")
		w.Header().Set("Connection", "Upgrade")
		aerr.Write(w)
		return
	}
	defer s.wsSessions.Done()
	if aerr := scopeOf(r.Header, "").overlong(); aerr != nil {
		aerr.Write(w)
		s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, statusLabel(aerr.Status)).Inc()
		m := metaOf(r)
		m.counted, m.status, m.code = true, aerr.Status, aerr.Code
		return
	}
	turnState := r.Header.Get("X-Codex-Turn-State")
	if turnState == "" {
		turnState = "turn_" + uuid.NewString()
	}
	w.Header().Set("X-Codex-Turn-State", turnState)
	refusal := &upgradeRefusal{ResponseWriter: w}
	conn, err := websocket.Accept(refusal, r, nil)
	if err != nil {
		s.log.Debug("websocket accept failed", "error", err)
		s.refuseUpgrade(w, r, refusal)
		return
	}
	conn.SetReadLimit(s.opts.MaxWSInboundBytes)

	header := r.Header.Clone()
	header.Set("X-Codex-Turn-State", turnState)
	for _, k := range []string{"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
		header.Del(k)
	}
	metaOf(r).ws = true // each frame logs its own access line
	sess := &wsSession{s: s, conn: conn, header: header, fwd: forwardingOf(r, s.opts.TrustedProxies), keyHash: clientkey.Hash(header), key: keyOf(r), requestID: metaOf(r).requestID, memory: newSessionMemory(s.opts.WSSessionMemoryBytes, s.sessionTotal),
		// Its chunks count in the streaming-input chunk series, as REST
		// and Mode A chunks do (gateway/streaminput/README.md, "Metrics").
		input: streaminput.NewAccumulator(streaminput.AccumulatorOptions{MaxBytes: s.opts.MaxWSFrameBytes, MaxJSONDepth: s.opts.MaxJSONDepth,
			Registerer: s.reg})}
	sess.run()
	sess.memory.release()
}

// upgradeRefusal stands between websocket.Accept and the client: the
// library answers a handshake it refuses (a missing or bad
// Sec-WebSocket-Key or version, no Connection: Upgrade, HTTP/1.0, a foreign
// Origin) with http.Error's text/plain, and has no hook to change that. Its
// status and message are held here instead, for refuseUpgrade to answer in
// OpenAI's error shape (README: errors are OpenAI-shaped everywhere). The
// 101 of a successful upgrade passes through; Unwrap lets the library find
// the Hijacker.
type upgradeRefusal struct {
	http.ResponseWriter
	switched bool // the 101 went out: the connection is the library's
	status   int
	message  []byte
}

func (u *upgradeRefusal) WriteHeader(status int) {
	if status == http.StatusSwitchingProtocols {
		u.switched = true
		u.ResponseWriter.WriteHeader(status)
		return
	}
	u.status = status
}

func (u *upgradeRefusal) Write(b []byte) (int, error) {
	if u.status != 0 && !u.switched {
		u.message = append(u.message, b...)
		return len(b), nil
	}
	return u.ResponseWriter.Write(b)
}

func (u *upgradeRefusal) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// refuseUpgrade answers a handshake websocket.Accept refused, with the
// library's status and reason as an OpenAI error; the upgrade request is
// counted and logged like any other answer. A session that never started
// has no turn state to announce.
func (s *Server) refuseUpgrade(w http.ResponseWriter, r *http.Request, refusal *upgradeRefusal) {
	if refusal.switched || refusal.status == 0 {
		return // the library got as far as the 101 (then failed to hijack): nothing can be written
	}
	e := &apierr.Error{Status: refusal.status, Type: apierr.TypeInvalidRequest, Code: apierr.CodeInvalidValue,
		Message: strings.TrimSpace(string(refusal.message))}
	switch {
	case e.Status == http.StatusUpgradeRequired:
		e.Code = apierr.CodeWebSocketRequired
	case e.Status >= 500:
		e.Type, e.Code = apierr.TypeServer, apierr.CodeInternalError
	}
	w.Header().Del("X-Codex-Turn-State")
	e.Write(w)
	s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, statusLabel(e.Status)).Inc()
	m := metaOf(r)
	m.counted, m.status, m.code = true, e.Status, e.Code
}

// trackWebSocket counts a new session unless draining has begun; Shutdown
// waits for the counted ones. The lock orders every Add before the Wait.
func (s *Server) trackWebSocket() bool {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.wsSessions.Add(1)
	return true
}

// wsSession is one client WebSocket.
type wsSession struct {
	s       *Server
	conn    *websocket.Conn
	header  http.Header
	fwd     forwarding // the upgrade request's hop
	keyHash string
	key     *keyEntry // the Sluice key of the upgrade (auth.go); resolved again for every frame
	// requestID is the x-request-id the upgrade's 101 carried: each frame's
	// access line shows it, so a socket's frames are found by the id its
	// client was given (frames carry no headers of their own).
	requestID string
	memory    *sessionMemory // store:false conversation turns, gone with the socket
	input     *streaminput.Accumulator
	// lastWrite is when a frame was last written to the client (Unix
	// nanoseconds): keepAliveWhileAnswering pings only a socket that was
	// silent for timeouts.keepalive.
	lastWrite atomic.Int64
}

// wsQueueFrames is how many frames of limits.max_ws_frame_bytes a session
// holds read and not yet answered (requests wait their turn behind the one
// in flight). A client that sends more than that ahead of its answers has
// its socket closed with 1008.
const wsQueueFrames = 8

// wsFrameCost is what a queued frame is charged besides its bytes, so that a
// flood of tiny frames is bounded too.
const wsFrameCost = 64

// wsInbox holds the frames a client sent that its session has not answered
// yet, in order. The reader never waits for room in it: reading on is how
// the session sees its client leave (a close frame or EOF arrives behind
// the pipelined frames), so a request it queued is dropped instead of sent
// upstream for nobody.
type wsInbox struct {
	limit int64
	ready chan struct{} // holds a token while frames is not empty

	mu     sync.Mutex
	frames [][]byte
	bytes  int64
}

func newWSInbox(limit int64) *wsInbox {
	return &wsInbox{limit: limit, ready: make(chan struct{}, 1)}
}

// push queues a frame; false when the session already holds its limit (a
// frame is always taken while nothing waits, whatever its size: it is
// answered, if need be with payload_too_large).
func (q *wsInbox) push(data []byte) bool {
	cost := int64(len(data)) + wsFrameCost
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.frames) > 0 && q.bytes+cost > q.limit {
		return false
	}
	q.frames = append(q.frames, data)
	q.bytes += cost
	q.signalLocked()
	return true
}

// pop takes the oldest frame; ok is false when none waits.
func (q *wsInbox) pop() (data []byte, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.frames) == 0 {
		return nil, false
	}
	data = q.frames[0]
	q.frames[0] = nil
	q.frames = q.frames[1:]
	q.bytes -= int64(len(data)) + wsFrameCost
	if len(q.frames) > 0 {
		q.signalLocked()
	}
	return data, true
}

func (q *wsInbox) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.frames)
}

func (q *wsInbox) signalLocked() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (ws *wsSession) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inbox := newWSInbox(wsQueueFrames * ws.s.opts.MaxWSFrameBytes)
	go func() {
		// Reading continuously keeps pings answered while a request runs and
		// notices the client leaving even behind queued frames: a read error
		// (client gone) cancels the session, the request in flight detaches
		// or ends as the client stream's rules say (README "Resuming a
		// stream"), and no queued frame starts.
		defer cancel()
		for {
			typ, data, err := ws.conn.Read(ctx)
			if err != nil {
				return
			}
			switch {
			case typ != websocket.MessageText:
				data = nil // answered below as an unsupported frame
			case !utf8.Valid(data):
				// RFC 6455 §8.1: a text frame that is not UTF-8 fails the
				// connection with 1007.
				_ = ws.conn.Close(websocket.StatusInvalidFramePayloadData, "text frames must be UTF-8")
				return
			}
			if !inbox.push(data) {
				_ = ws.conn.Close(websocket.StatusPolicyViolation, "too many frames sent ahead of their answers")
				return
			}
		}
	}()
	// A socket that sends nothing and has no request in flight is closed
	// after WSIdleTimeout, so idle sockets cannot pile up (pings answered by
	// the library do not count as activity).
	idle := time.NewTimer(ws.s.opts.WSIdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			// The client left (or broke the protocol): the frames it queued
			// were never answered and start nothing now.
			if n := inbox.len(); n > 0 {
				ws.s.log.Debug("client WebSocket ended; dropping the frames it queued", "frames", n)
			}
			ws.conn.CloseNow()
			return
		case <-inbox.ready:
			if ctx.Err() != nil {
				continue // the case above ends the session
			}
			data, ok := inbox.pop()
			if !ok {
				continue
			}
			ws.handleFrame(ctx, data)
			idle.Reset(ws.s.opts.WSIdleTimeout)
		case <-idle.C:
			ws.s.log.Debug("closing an idle client WebSocket", "idle", ws.s.opts.WSIdleTimeout.String())
			_ = ws.conn.Close(websocket.StatusNormalClosure, "idle timeout")
			return
		case <-ws.s.drainCh:
			// The request in flight was answered above (handleFrame returns
			// once its stream ends); nothing new starts. Each frame already
			// read gets its answer first, as handleFrame gives it while
			// draining, so that every response.create is answered once
			// whichever case the select picked (README "Running it"). Only
			// the frames queued now are answered: a client that keeps
			// sending cannot hold the drain open.
			for n := inbox.len(); n > 0 && ctx.Err() == nil; n-- {
				if data, ok := inbox.pop(); ok {
					ws.handleFrame(ctx, data)
				}
			}
			_ = ws.conn.Close(websocket.StatusNormalClosure, "the gateway is shutting down")
			return
		}
	}
}

// errShuttingDown is the refusal of a request that arrives once the drain
// began, an HTTP request (proxy.go) or a WebSocket frame alike: a 503 the
// client may retry on another instance.
func errShuttingDown() *apierr.Error {
	return apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the gateway is shutting down; retry on another instance")
}

func (ws *wsSession) handleFrame(ctx context.Context, data []byte) {
	start := time.Now()
	s := ws.s
	defer ws.keepAliveWhileAnswering(ctx)()
	// The lane is read before anything else so that every answer to the
	// frame, its refusals included, carries it (streamIDOf).
	lane, laneErr := streamIDOf(data)
	out := &wsResponder{ws: ws, ctx: ctx}
	if lane != "" {
		out.lane, out.laneField = lane, laneField(lane)
	}
	meta := &reqMeta{start: start, method: "WS", endpoint: "/v1/responses", surface: hostabi.SurfaceWebSocket, key: ws.key, requestID: ws.requestID}
	// A frame that is answered (refused, or a response.create taken up) is
	// counted once it ends, with the status its access line writes: the
	// metric and the line describe the same request (README
	// "Observability"). A streaming-input chunk that was accepted is not
	// a request of its own; a resume is, answered with its stream.
	answered, chunkTaken := false, false
	defer func() {
		if answered {
			meta.mu.Lock()
			status := meta.status
			meta.mu.Unlock()
			s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, statusLabel(status)).Inc()
		}
		if !chunkTaken { // an accepted chunk has no answer, so no line (README "Access log": one per request)
			s.accessLog(meta)
		}
	}()
	req := &clientRequest{ep: responsesEndpoint, stream: true}
	fail := func(e *apierr.Error) {
		answered = true
		meta.status, meta.code = e.Status, e.Code
		if meta.model == "" { // README "Access log": a refused frame's model, when it names one
			meta.model = gjson.GetBytes(data, "model").Str
		}
		s.traceRefusal(ws.header, meta.key, responsesEndpoint, hostabi.SurfaceWebSocket, start, e, meta.model)
		out.fail(req, e, failInvalid) // the frame itself was refused: no stream began
	}
	if s.draining.Load() {
		// No frame starts work once the drain began, whether it was read
		// before or after (README "Running it"): a request is refused as
		// over HTTP, and a streaming-input chunk, not a request of its own,
		// is dropped with the session.
		if !streaminput.IsInputChunk(data) {
			fail(errShuttingDown())
		}
		return
	}
	key := ws.key
	if key != nil {
		// The key as it is now, not as it was at the upgrade: a socket may
		// stay open as long as it sends frames, and a deleted key must stop
		// working on it as it does over HTTP, a changed one's models and
		// limits apply to its next frame.
		if key = s.acct.keys.current(key); key == nil {
			fail(errInvalidAPIKey())
			return
		}
		meta.key = key
	}
	if data == nil {
		fail(apierr.Invalid("", apierr.CodeUnsupportedFrame, "only text frames carrying JSON are supported"))
		return
	}
	if int64(len(data)) > s.opts.MaxWSFrameBytes {
		fail(apierr.TooLarge(s.opts.MaxWSFrameBytes))
		return
	}
	if aerr := validJSON(ctx, data, s.opts.MaxJSONDepth, "the frame"); aerr != nil {
		fail(aerr)
		return
	}
	if laneErr != nil && !streaminput.IsInputChunk(data) {
		fail(laneErr)
		return
	}
	if streaminput.IsInputChunk(data) {
		// Streaming input: chunks accumulate into the next response.create;
		// only a rejected chunk is answered.
		if err := ws.input.Add(data); err != nil {
			fail(asAPIError(err))
			return
		}
		chunkTaken = true
		return
	}
	if gjson.GetBytes(data, "type").String() == "response.resume" {
		if aerr := ws.resume(ctx, out, data); aerr != nil {
			fail(aerr)
			return
		}
		// Answered with the stream it asked for: counted and logged with
		// its 200, as the same resume over HTTP is.
		answered = true
		meta.mu.Lock()
		meta.status = http.StatusOK
		meta.mu.Unlock()
		return
	}
	if gjson.GetBytes(data, "type").String() == "response.create" {
		merged, err := ws.input.Apply(data)
		if err != nil {
			fail(asAPIError(err))
			return
		}
		if int64(len(merged)) > s.opts.MaxWSFrameBytes {
			fail(apierr.TooLarge(s.opts.MaxWSFrameBytes))
			return
		}
		data = merged
	}
	if typ := gjson.GetBytes(data, "type"); typ.Str != "response.create" {
		fail(unsupportedFrame(data, typ))
		return
	}
	// The frame is checked whole, "type" included, so that a repeated
	// "type" is refused like any repeated key; "type" is removed after.
	// "stream" is the gateway's to set, unless the frame spells it in
	// another case: the check then names the client's key alone, as over
	// HTTP, not a "stream" the client never sent.
	body, err := data, error(nil)
	if !hasMiscasedKey(data, "stream") {
		body, err = sjson.SetBytes(data, "stream", true)
	}
	if err != nil {
		fail(apierr.Invalid("", apierr.CodeInvalidJSON, "the frame could not be read: %v", err))
		return
	}
	parsed, aerr := parseRequest(ctx, responsesEndpoint, body, s.opts.MaxJSONDepth)
	if aerr != nil {
		fail(aerr)
		return
	}
	if parsed.body, err = sjson.DeleteBytes(parsed.body, "type"); err != nil {
		fail(apierr.Invalid("", apierr.CodeInvalidJSON, "the frame could not be read: %v", err))
		return
	}
	if lane != "" {
		// stream_id is WebSocket envelope, not part of a response request
		// (OpenAI's spec: "not part of POST /v1/responses"): no upstream,
		// HTTP or WebSocket, gets it, and the lane is echoed here
		// (wsResponder.write), not by an upstream.
		if parsed.body, err = sjson.DeleteBytes(parsed.body, "stream_id"); err != nil {
			fail(apierr.Invalid("", apierr.CodeInvalidJSON, "the frame could not be read: %v", err))
			return
		}
	}
	req = parsed
	req.ep = responsesEndpoint
	req.header = ws.header
	req.fwd = ws.fwd
	req.clientKeyHash = ws.keyHash
	req.viaWebSocket = true
	req.memory = ws.memory
	req.key, req.meta = key, meta
	if aerr := s.rewrite(ctx, req); aerr != nil {
		fail(aerr)
		return
	}
	answered = true
	s.process(ctx, out, req, start)
}

// wsResponder answers one response.create on a client WebSocket.
type wsResponder struct {
	ws  *wsSession
	ctx context.Context
	// lane is the frame's stream_id ("" when it gave none): every frame
	// written for it echoes it (withLane), as laneField.
	lane      string
	laneField []byte
}

func (o *wsResponder) write(data []byte) error {
	if o.lane != "" {
		data = withLane(data, o.lane, o.laneField)
	}
	ctx, cancel := context.WithTimeout(o.ctx, wsWriteTimeout)
	defer cancel()
	err := o.ws.conn.Write(ctx, websocket.MessageText, data)
	o.ws.lastWrite.Store(time.Now().UnixNano())
	return err
}

// keepAliveWhileAnswering pings the client while a frame is answered,
// whenever nothing was written to the socket for timeouts.keepalive
// (README "Continuation": "WebSocket clients a ping once nothing was
// written for a timeouts.keepalive period"), and returns the function that
// stops it. It runs from the frame's start, not from the first event as an
// SSE stream's keepalive does (clientStream.keepAlive): a WebSocket client
// has no HTTP status to keep uncommitted, so the wait for an upstream's
// headers, a Retry-After wait, a failover or a resume's wait for the next
// event are all kept alive, and the client gets the same frames. Each ping
// counts in sluice_keepalives_total{surface="websocket"}.
func (ws *wsSession) keepAliveWhileAnswering(ctx context.Context) (stop func()) {
	every := ws.s.opts.KeepAlive
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		quietSince := time.Now()
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if w := time.Unix(0, ws.lastWrite.Load()); w.After(quietSince) {
				quietSince = w
			}
			if wait := every - time.Since(quietSince); wait > 0 {
				t.Reset(wait)
				continue
			}
			// The ping waits for its pong (the session's reader answers
			// it), bounded by a period: a client that does not answer gets
			// the next ping a period later.
			pingCtx, cancel := context.WithTimeout(ctx, every)
			_ = ws.conn.Ping(pingCtx)
			cancel()
			ws.s.metrics.keptAlive(hostabi.SurfaceWebSocket)
			quietSince = time.Now()
			t.Reset(every)
		}
	}()
	return func() { close(done) }
}

// errorFrame is the WebSocket error frame; Codex acts on it only with status.
func errorFrame(e *apierr.Error) []byte { return errorFrameWith(e, nil) }

// errorFrameWith is the error frame with the headers an HTTP answer of it
// would carry, in OpenAI's frame form ("headers": lower-case names, string
// values): the wait (Retry-After, Retry-After-Ms, from e or the upstream's
// header) and the upstream's x-ratelimit-* headers. Codex reads the wait
// there; without it, it retries a 429 at once and gives up within seconds.
func errorFrameWith(e *apierr.Error, upstream http.Header) []byte {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	h := http.Header{}
	for name, v := range upstream {
		if l := strings.ToLower(name); (l == "retry-after" || l == "retry-after-ms" || strings.HasPrefix(l, "x-ratelimit-")) && len(v) > 0 {
			h.Set(name, v[0])
		}
	}
	e.SetRetryHeaders(h)
	frame := map[string]any{"type": "error", "status": status, "error": e.Object()}
	if len(h) > 0 {
		headers := make(map[string]string, len(h))
		for name, v := range h {
			headers[strings.ToLower(name)] = v[0]
		}
		frame["headers"] = headers
	}
	b, _ := json.Marshal(frame)
	return b
}

func (o *wsResponder) fail(req *clientRequest, e *apierr.Error, kind failKind) {
	if kind != failInvalid {
		// A turn the gateway ended before any event: counted like the SSE
		// surface's (httpResponder.fail).
		o.ws.s.metrics.streamTerminal.WithLabelValues(hostabi.SurfaceWebSocket, "gateway_error").Inc()
	}
	if kind == failAsTerminal {
		o.ws.s.writeGatewayTerminal(req, &wsSink{o}, e)
		return
	}
	_ = o.write(errorFrame(e))
}

func (o *wsResponder) relay(req *clientRequest, status int, header http.Header, body []byte) {
	if status/100 == 2 {
		// validText: a text frame must be UTF-8.
		b, err := json.Marshal(map[string]any{"type": "response.completed", "response": json.RawMessage(validText(body))})
		if err != nil { // not JSON: the turn still ends, with a terminal event
			o.fail(req, apierr.StreamIncomplete("the upstream's answer is not valid JSON"), failAsTerminal)
			return
		}
		_ = o.write(b)
		return
	}
	e := relayedError(status, body) // the HTTP responder's rule (openAIShapedBody)
	_ = o.write(errorFrameWith(&e, header))
}

func (o *wsResponder) commit(http.Header) eventSink { return &wsSink{o} }

// wsSink writes each event as one text frame.
type wsSink struct{ o *wsResponder }

func (k *wsSink) Event(_ string, data []byte) error { return k.o.write(data) }
func (k *wsSink) Done() error                       { return nil }

// KeepAlive pings the client. The ping waits for its pong, so it runs on
// its own, bounded by timeout; the library serialises it with the frames.
func (k *wsSink) KeepAlive(timeout time.Duration) error {
	go func() {
		ctx, cancel := context.WithTimeout(k.o.ctx, timeout)
		defer cancel()
		_ = k.o.ws.conn.Ping(ctx)
	}()
	return nil
}

// asAPIError keeps an OpenAI-style error as it is and wraps anything else.
func asAPIError(err error) *apierr.Error {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae
	}
	return apierr.Invalid("", apierr.CodeInvalidInputChunk, "%v", err)
}

var errWebSocketUnsupported = errors.New("the upstream does not offer the Responses WebSocket mode")

// resume answers a response.resume frame (README "Resuming a stream"):
// {"type":"response.resume","response_id":…,"starting_after":N} replays the
// response's events after N as frames, then follows the live stream to its
// terminal event, like GET /v1/responses/{id}?stream=true over SSE.
func (ws *wsSession) resume(ctx context.Context, out *wsResponder, data []byte) *apierr.Error {
	s := ws.s
	id := gjson.GetBytes(data, "response_id")
	if id.Type != gjson.String || id.Str == "" {
		return apierr.Invalid("response_id", apierr.CodeMissingField, "response.resume needs a response_id")
	}
	if e := overlongID("response_id", id.Str); e != nil {
		return e
	}
	after := int64(-1)
	if v := gjson.GetBytes(data, "starting_after"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.Number || v.Num != float64(int64(v.Num)) || !validStartingAfter(int64(v.Num)) {
			return badStartingAfter(v.Raw)
		}
		after = v.Int()
	}
	window := defaultResumeWindow
	if s.logs != nil {
		window = s.logs.opts.Window
	}
	if s.logs == nil {
		return notResumable(id.Str, window)
	}
	sink := &wsResumeSink{out: out}
	if l := s.logs.current(ctx, id.Str, ws.keyHash); l != nil {
		// Refused before any frame, in the shape of the other refused
		// resumes, as the SSE resume answers these with a 400.
		if aerr := l.unstreamable(after); aerr != nil {
			return aerr
		}
		s.metrics.resumes.WithLabelValues("websocket").Inc()
		return sink.answered(l.follow(ctx, after, sink, s.opts.KeepAlive), id.Str, after)
	}
	rec, ok, aerr := s.lookupStoredLog(ctx, id.Str, ws.keyHash)
	if aerr == nil && !ok { // another replica may be about to write it (resource.go)
		rec, ok, aerr = s.lateStoredLog(ctx, id.Str, ws.keyHash)
	}
	switch {
	case aerr != nil:
		return aerr
	case !ok:
		return notResumable(id.Str, window)
	}
	if aerr := s.logs.storedUnstreamable(ctx, rec, after); aerr != nil {
		return aerr
	}
	s.metrics.resumes.WithLabelValues("websocket").Inc()
	return sink.answered(s.followStored(ctx, rec, after, sink), id.Str, after)
}

// wsResumeSink writes a resumed stream as frames (each frame is written
// whole: nothing to flush; the session pings while it waits,
// keepAliveWhileAnswering).
// It counts them: a resume must answer with at least one.
type wsResumeSink struct {
	out  *wsResponder
	sent int
}

func (k *wsResumeSink) Event(_ string, data []byte) error {
	k.sent++
	return k.out.write(data)
}
func (*wsResumeSink) Flush() error                  { return nil }
func (*wsResumeSink) KeepAlive(time.Duration) error { return nil }

// answered is the error frame for a resume that ended without sending a
// frame: starting_after was the terminal event itself. Over SSE that is an
// empty stream, which its end tells the client; a socket has no such end,
// and every request frame gets an answer. A stream that was running when
// the resume came and ended before starting_after gets follow's error
// frame. nil when frames were sent, or when following failed (the socket
// is gone, or was closed).
func (k *wsResumeSink) answered(followErr error, id string, after int64) *apierr.Error {
	var aerr *apierr.Error
	if errors.As(followErr, &aerr) && k.sent == 0 { // past the end of a stream that was running
		return aerr
	}
	if followErr != nil || k.sent > 0 {
		return nil
	}
	return apierr.Invalid("starting_after", apierr.CodeInvalidValue,
		"starting_after is %d, the terminal event of response '%s'; no event follows it.", after, id)
}

// hasMiscasedKey reports whether the JSON object doc has a top-level key
// that is name in another case.
func hasMiscasedKey(doc []byte, name string) bool {
	found := false
	gjson.ParseBytes(doc).ForEach(func(k, _ gjson.Result) bool {
		found = k.Str != name && strings.EqualFold(k.Str, name)
		return !found
	})
	return found
}

// unsupportedFrame is the 400 for a client frame that is none the socket
// takes (README "Endpoints": response.create, response.resume, and the
// streaming-input input_chunk), saying which it was: not an object, without
// a type, or of another type.
func unsupportedFrame(data []byte, typ gjson.Result) *apierr.Error {
	const takes = "a frame is response.create, response.resume or input_chunk"
	switch {
	case !gjson.ParseBytes(data).IsObject():
		return apierr.Invalid("", apierr.CodeUnsupportedFrame, "the frame must be a JSON object; %s", takes)
	case !typ.Exists():
		return apierr.Invalid("type", apierr.CodeUnsupportedFrame, "the frame has no type; %s", takes)
	}
	return apierr.Invalid("type", apierr.CodeUnsupportedFrame, "unsupported frame type %s; %s", quotedExcerpt(typ.String()), takes)
}
