package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
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
// out, requests on a socket answered one at a time in order.
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
		s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, statusLabel(http.StatusUpgradeRequired)).Inc()
		metaOf(r).counted = true
		(&apierr.Error{Status: http.StatusUpgradeRequired, Type: apierr.TypeServer, Code: apierr.CodeUpstreamUnavailable,
			Message: "the gateway is shutting down; use HTTP or another instance"}).Write(w)
		return
	}
	defer s.wsSessions.Done()
	turnState := r.Header.Get("X-Codex-Turn-State")
	if turnState == "" {
		turnState = "turn_" + uuid.NewString()
	}
	w.Header().Set("X-Codex-Turn-State", turnState)
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.log.Debug("websocket accept failed", "error", err)
		return
	}
	conn.SetReadLimit(s.opts.MaxWSInboundBytes)

	header := r.Header.Clone()
	header.Set("X-Codex-Turn-State", turnState)
	for _, k := range []string{"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
		header.Del(k)
	}
	metaOf(r).ws = true // each frame logs its own access line
	sess := &wsSession{s: s, conn: conn, header: header, fwd: forwardingOf(r, s.opts.TrustedProxies), keyHash: clientkey.Hash(header), key: keyOf(r), memory: newSessionMemory(),
		input: streaminput.NewAccumulator(streaminput.AccumulatorOptions{MaxBytes: s.opts.MaxWSFrameBytes, MaxJSONDepth: s.opts.MaxJSONDepth})}
	sess.run()
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
	key     *keyEntry      // the Sluice key of the upgrade (auth.go); its model check runs per frame
	memory  *sessionMemory // store:false conversation turns, gone with the socket
	input   *streaminput.Accumulator
}

func (ws *wsSession) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	frames := make(chan []byte, 8)
	go func() {
		// Reading continuously keeps pings answered while a request runs; a
		// read error (client gone) cancels the request in flight.
		defer close(frames)
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
			select {
			case frames <- data:
			case <-ctx.Done():
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
		case data, ok := <-frames:
			if !ok {
				ws.conn.CloseNow()
				return
			}
			ws.handleFrame(ctx, data)
			idle.Reset(ws.s.opts.WSIdleTimeout)
		case <-idle.C:
			ws.s.log.Debug("closing an idle client WebSocket", "idle", ws.s.opts.WSIdleTimeout.String())
			_ = ws.conn.Close(websocket.StatusNormalClosure, "idle timeout")
			return
		case <-ws.s.drainCh:
			// Requests in flight were answered above; nothing new starts.
			_ = ws.conn.Close(websocket.StatusNormalClosure, "the gateway is shutting down")
			return
		}
	}
}

func (ws *wsSession) handleFrame(ctx context.Context, data []byte) {
	start := time.Now()
	s := ws.s
	out := &wsResponder{ws: ws, ctx: ctx}
	meta := &reqMeta{start: start, method: "WS", endpoint: "/v1/responses", surface: hostabi.SurfaceWebSocket, key: ws.key}
	defer s.accessLog(meta)
	req := &clientRequest{ep: responsesEndpoint, stream: true}
	fail := func(e *apierr.Error) {
		s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, statusLabel(e.Status)).Inc()
		meta.status, meta.code = e.Status, e.Code
		out.fail(req, e, failInvalid) // the frame itself was refused: no stream began
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
	if streaminput.IsInputChunk(data) {
		// Streaming input: chunks accumulate into the next response.create;
		// only a rejected chunk is answered.
		if err := ws.input.Add(data); err != nil {
			fail(asAPIError(err))
		}
		return
	}
	if gjson.GetBytes(data, "type").String() == "response.resume" {
		if aerr := ws.resume(ctx, out, data); aerr != nil {
			fail(aerr)
		}
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
	if typ := gjson.GetBytes(data, "type").String(); typ != "response.create" {
		fail(apierr.Invalid("type", apierr.CodeUnsupportedFrame, "unsupported frame type %q; send response.create", typ))
		return
	}
	body, err := sjson.DeleteBytes(data, "type")
	if err == nil {
		body, err = sjson.SetBytes(body, "stream", true)
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
	req = parsed
	req.ep = responsesEndpoint
	req.header = ws.header
	req.fwd = ws.fwd
	req.clientKeyHash = ws.keyHash
	req.viaWebSocket = true
	req.memory = ws.memory
	req.key, req.meta = ws.key, meta
	if aerr := s.rewrite(ctx, req); aerr != nil {
		fail(aerr)
		return
	}
	s.metrics.requests.WithLabelValues(hostabi.SurfaceWebSocket, "101").Inc()
	s.process(ctx, out, req, start)
}

// wsResponder answers one response.create on a client WebSocket.
type wsResponder struct {
	ws  *wsSession
	ctx context.Context
}

func (o *wsResponder) write(data []byte) error {
	ctx, cancel := context.WithTimeout(o.ctx, wsWriteTimeout)
	defer cancel()
	return o.ws.conn.Write(ctx, websocket.MessageText, data)
}

// errorFrame is the WebSocket error frame; Codex acts on it only with status.
func errorFrame(e *apierr.Error) []byte {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "status": status, "error": e.Object()})
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

func (o *wsResponder) relay(_ *clientRequest, status int, _ http.Header, body []byte) {
	if status/100 == 2 {
		b, _ := json.Marshal(map[string]any{"type": "response.completed", "response": json.RawMessage(body)})
		_ = o.write(b)
		return
	}
	e, ok := apierr.Parse(body)
	if !ok {
		e = apierr.Error{Type: apierr.TypeServer, Code: apierr.CodeUpstreamError, Message: strings.TrimSpace(string(body))}
	}
	e.Status = status
	_ = o.write(errorFrame(&e))
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
	after := int64(-1)
	if v := gjson.GetBytes(data, "starting_after"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.Number || v.Num != float64(int64(v.Num)) || v.Num < -1 {
			return apierr.Invalid("starting_after", apierr.CodeInvalidValue, "starting_after must be a sequence number")
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
	sink := wsResumeSink{out}
	if l := s.logs.get(id.Str, ws.keyHash); l != nil {
		s.metrics.resumes.WithLabelValues("websocket").Inc()
		_ = l.follow(ctx, after, sink, s.opts.KeepAlive)
		return nil
	}
	if rec, ok := s.storedLog(ctx, id.Str, ws.keyHash); ok {
		s.metrics.resumes.WithLabelValues("websocket").Inc()
		_ = s.logs.followStored(ctx, rec, after, sink, s.opts.IdleTimeout)
		return nil
	}
	return notResumable(id.Str, window)
}

// wsResumeSink writes a resumed stream as frames (each frame is written
// whole: nothing to flush; the library answers pings, so no keepalive).
type wsResumeSink struct{ out *wsResponder }

func (k wsResumeSink) Event(_ string, data []byte) error { return k.out.write(data) }
func (wsResumeSink) Flush() error                        { return nil }
func (wsResumeSink) KeepAlive(time.Duration) error       { return nil }
