package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
)

// responsesWebSocketBeta is the header value that opts into the Responses
// WebSocket mode.
const responsesWebSocketBeta = "responses_websockets=2026-02-06"

// wsUpstreams keeps WebSocket connections to upstreams, one per (upstream,
// session scope): the upstream's previous_response_id state is local to its
// socket, so a session's follow-ups reuse the socket that made its last
// response. A socket serves one request at a time; later ones wait.
type wsUpstreams struct {
	s       *Server
	max     int
	idleTTL time.Duration

	reaper sync.Once // the idle reaper starts with the first socket

	mu       sync.Mutex
	sockets  map[string]*upstreamSocket
	httpOnly map[string]bool // auto upstreams that answered the upgrade with 426/404
	stop     chan struct{}
	stopped  bool
}

type upstreamSocket struct {
	key     string
	slot    chan struct{} // one request at a time
	waiting int           // requests waiting for the slot (guarded by wsUpstreams.mu)
	conn    *websocket.Conn
	used    time.Time
}

func newWSUpstreams(s *Server, max int, idleTTL time.Duration) *wsUpstreams {
	return &wsUpstreams{s: s, max: max, idleTTL: idleTTL, sockets: map[string]*upstreamSocket{}, httpOnly: map[string]bool{}, stop: make(chan struct{})}
}

// useWebSocket reports whether requests to u go over a WebSocket.
func (w *wsUpstreams) useWebSocket(u *upstream.Upstream) bool {
	switch u.Config().Transport {
	case upstream.TransportWebSocket:
		return true
	case upstream.TransportAuto:
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.httpOnly[u.Name()]
	}
	return false
}

// acquire takes the socket slot of (u, scope), waiting for a request ahead.
func (w *wsUpstreams) acquire(ctx context.Context, key string) (*upstreamSocket, int, error) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, 0, errDraining
	}
	sock := w.sockets[key]
	if sock == nil {
		if len(w.sockets) >= w.max && !w.evictIdleLocked() {
			w.mu.Unlock()
			return nil, 0, fmt.Errorf("the cap of %d upstream WebSockets is reached", w.max)
		}
		sock = &upstreamSocket{key: key, slot: make(chan struct{}, 1)}
		w.sockets[key] = sock
		w.reaper.Do(func() { go w.reap() })
	}
	sock.waiting++
	pending := sock.waiting - 1
	if len(sock.slot) > 0 {
		pending++ // the request holding the slot
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		sock.waiting--
		w.mu.Unlock()
	}()
	select {
	case sock.slot <- struct{}{}:
		return sock, pending, nil
	case <-ctx.Done():
		return nil, 0, context.Cause(ctx)
	case <-w.stop:
		return nil, 0, errDraining
	}
}

// release frees the slot; a socket that is not reusable is closed.
func (w *wsUpstreams) release(sock *upstreamSocket, reusable bool) {
	w.mu.Lock()
	sock.used = time.Now()
	if !reusable && sock.conn != nil {
		sock.conn.CloseNow()
		sock.conn = nil
	}
	w.mu.Unlock()
	<-sock.slot
}

// evictIdleLocked drops one socket nobody is using or waiting for.
func (w *wsUpstreams) evictIdleLocked() bool {
	for key, sock := range w.sockets {
		if sock.waiting == 0 && len(sock.slot) == 0 {
			if sock.conn != nil {
				sock.conn.CloseNow()
			}
			delete(w.sockets, key)
			return true
		}
	}
	return false
}

// reap closes sockets idle longer than idleTTL.
func (w *wsUpstreams) reap() {
	t := time.NewTicker(w.idleTTL / 2)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			w.mu.Lock()
			for key, sock := range w.sockets {
				if sock.waiting == 0 && len(sock.slot) == 0 && now.Sub(sock.used) > w.idleTTL {
					if sock.conn != nil {
						sock.conn.CloseNow()
					}
					delete(w.sockets, key)
				}
			}
			w.mu.Unlock()
		}
	}
}

// close fails waiters and closes every socket.
func (w *wsUpstreams) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	close(w.stop)
	for key, sock := range w.sockets {
		if sock.conn != nil {
			sock.conn.CloseNow()
		}
		delete(w.sockets, key)
	}
}

// send runs req over u's WebSocket for the request's session scope.
func (w *wsUpstreams) send(upCtx context.Context, idle *idleTimer, req *clientRequest, u *upstream.Upstream) (*upstreamAnswer, error) {
	kind, scopeID := req.scope.tightest()
	key := u.Name() + "\x00" + kind.String() + "\x00" + scopeID
	sock, pending, err := w.acquire(upCtx, key)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			w.release(sock, false)
		}
	}()
	if sock.conn == nil {
		conn, ans, err := w.dial(upCtx, req, u)
		if err != nil || ans != nil {
			if ans != nil {
				ans.done = func(bool) {}
			}
			return ans, err
		}
		sock.conn = conn
	}
	frame, err := sjson.SetBytes(req.body, "type", "response.create")
	if err == nil {
		frame, err = sjson.DeleteBytes(frame, "stream")
	}
	if err != nil {
		return nil, fmt.Errorf("building response.create: %w", err)
	}
	if err := sock.conn.Write(upCtx, websocket.MessageText, frame); err != nil {
		return nil, fmt.Errorf("sending response.create: %w", err)
	}
	ok = true
	idle.arm()
	src := &wsSource{conn: sock.conn, ctx: upCtx, idle: idle, max: w.s.opts.MaxEventBytes}
	// The first frame says how the upstream took the request, as an HTTP
	// answer's status line does; attempt reads it under first_token and
	// handles a refusal with a status as that status (wsStatusAnswer).
	return &upstreamAnswer{status: http.StatusOK, src: src, statusFrames: true, pending: pending,
		done: func(reusable bool) { w.release(sock, reusable) }}, nil
}

// wsStatusAnswer turns an upstream's refusal of a response.create, a first
// frame {"type":"error","status":N,"error":{…},"headers":{…}}, into the
// HTTP answer N it stands for, so that statusFailure treats it as it treats
// that status from an HTTP upstream: a client error (or
// context_length_exceeded) passes through with its status and error body,
// a 500 is retried (README "Routes and fallbacks"). Capacity and overload
// refusals stay the stream's first event, which the replay policy replays
// before content as the README describes for WebSocket error frames. nil:
// the frame is not such a refusal.
func wsStatusAnswer(first sse.Event, err error) *upstreamAnswer {
	if err != nil || first.Name != "error" {
		return nil
	}
	code, status, _ := errorShaped(first, false)
	e := gjson.GetBytes(first.Data, "error")
	if status < 400 || status > 599 || !e.IsObject() {
		return nil
	}
	switch eventClass(code, status) {
	case hostabi.FailureClientError, hostabi.FailureContextLength, hostabi.FailureServerError:
	default:
		return nil
	}
	header := http.Header{}
	gjson.GetBytes(first.Data, "headers").ForEach(func(k, v gjson.Result) bool {
		header.Set(k.String(), v.String())
		return true
	})
	header.Set("Content-Type", "application/json")
	body, err := sjson.SetRawBytes([]byte(`{}`), "error", []byte(e.Raw))
	if err != nil {
		return nil
	}
	return &upstreamAnswer{status: status, header: header, body: body}
}

// dial opens u's Responses WebSocket. A refused upgrade with an HTTP answer
// comes back as an upstreamAnswer; an auto upstream that does not offer the
// mode is remembered as HTTP-only and reported as errWebSocketUnsupported.
func (w *wsUpstreams) dial(ctx context.Context, req *clientRequest, u *upstream.Upstream) (*websocket.Conn, *upstreamAnswer, error) {
	url := u.URL("/responses")
	switch {
	case strings.HasPrefix(url, "https://"):
		url = "wss://" + strings.TrimPrefix(url, "https://")
	case strings.HasPrefix(url, "http://"):
		url = "ws://" + strings.TrimPrefix(url, "http://")
	}
	h := upstreamHeaders(req, u.Config(), false)
	for _, k := range []string{"Content-Type", "Accept", "Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
		h.Del(k)
	}
	if !strings.Contains(h.Get("OpenAI-Beta"), "responses_websockets") {
		h.Add("OpenAI-Beta", responsesWebSocketBeta)
	}
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: w.s.client, HTTPHeader: h})
	if err == nil {
		conn.SetReadLimit(int64(w.s.opts.MaxEventBytes))
		return conn, nil, nil
	}
	if resp == nil {
		return nil, nil, err
	}
	body := []byte(nil)
	if resp.Body != nil {
		if _, ok := decodeAnswer(resp); ok { // else not read, as for an HTTP answer (post)
			// In memory already: the WebSocket library read it, bounded.
			body, _ = io.ReadAll(io.LimitReader(resp.Body, maxUpstreamErrorBody))
		}
		resp.Body.Close()
	}
	if (resp.StatusCode == http.StatusUpgradeRequired || resp.StatusCode == http.StatusNotFound) && u.Config().Transport == upstream.TransportAuto {
		w.mu.Lock()
		w.httpOnly[u.Name()] = true
		w.mu.Unlock()
		w.s.log.Info("upstream does not offer the Responses WebSocket mode; using HTTP", "upstream", u.Name(), "status", resp.StatusCode)
		return nil, nil, errWebSocketUnsupported
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil, nil, err
	}
	if len(body) == 0 {
		b, _ := (&apierr.Error{Type: apierr.TypeServer, Code: apierr.CodeWebSocketRefused, Message: fmt.Sprintf("the upstream refused the WebSocket upgrade with HTTP %d", resp.StatusCode)}).MarshalJSON()
		body = b
	}
	return nil, &upstreamAnswer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// wsSource reads upstream WebSocket frames as events.
type wsSource struct {
	conn *websocket.Conn
	ctx  context.Context
	idle *idleTimer
	max  int
}

func (src *wsSource) Next() (sse.Event, error) {
	for {
		src.idle.touch()
		typ, data, err := src.conn.Read(src.ctx)
		if err != nil {
			if strings.Contains(err.Error(), "read limited") {
				return sse.Event{}, fmt.Errorf("%w: a WebSocket frame exceeds %d bytes", sse.ErrEventTooLarge, src.max)
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return sse.Event{}, fmt.Errorf("the upstream closed the WebSocket (%d %s): %w", ce.Code, ce.Reason, io.ErrUnexpectedEOF)
			}
			return sse.Event{}, err
		}
		if typ != websocket.MessageText || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		return sse.Event{Name: gjson.GetBytes(data, "type").String(), Data: data}, nil
	}
}
