package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
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
// credential headers, client, session scope): the upstream bills a socket's
// requests to the credentials it was opened with, so a socket serves only
// requests that would open it with the same ones (socketPool); and the
// upstream's previous_response_id state is local to its socket, so a
// session's follow-ups reuse the socket that made its last response. A
// socket serves one request at a time; later ones wait. A request that
// needs no such state (needsScopeSocket) waits for nobody: it takes an idle
// free socket of the upstream opened with its credentials, or a new one
// (acquireFree).
//
// A socket is put back for reuse only when it is in step with its upstream:
// the last frame read ended the response (wsSource.settle). While it waits
// for the next request a watcher reads it (watch): between responses the
// upstream has nothing to send, so a frame, a close or a broken connection
// there means the socket cannot serve the next request, and it is closed.
type wsUpstreams struct {
	s       *Server
	max     int
	idleTTL time.Duration

	reaper sync.Once // the idle reaper starts with the first socket

	mu       sync.Mutex
	sockets  map[string]*upstreamSocket
	httpOnly map[string]bool // auto upstreams that answered the upgrade with 426/404
	// noMode: transport: websocket upstreams that answered the upgrade
	// with 426/404, and until when they are not asked again
	// (wsUpgradeRefusedError).
	noMode  map[string]*wsUpgradeRefusedError
	freeSeq uint64 // names free sockets apart (acquireFree)
	// idleFree holds, per upstream and credential headers (socketPool),
	// the free sockets nobody uses, the one released last at the end (its
	// connection the likeliest still open); a socket reaped or evicted
	// meanwhile is dropped when met (acquireFree, reap).
	idleFree map[string][]*upstreamSocket
	stop     chan struct{}
	stopped  bool

	drain     <-chan struct{} // closed when the gateway's drain begins (nil: never)
	keepAlive time.Duration   // timeouts.keepalive
}

type upstreamSocket struct {
	key     string
	free    bool          // serves requests that need no session scope (acquireFree)
	pool    string        // a free socket's idleFree entry (socketPool)
	slot    chan struct{} // one request at a time
	waiting int           // requests waiting for the slot (guarded by wsUpstreams.mu)
	conn    *websocket.Conn
	used    time.Time

	// idle is the watcher's read on conn while no request uses the socket
	// (guarded by wsUpstreams.mu).
	idle *idleRead
	// turn: a request has taken conn (take) and may have sent its
	// response.create, so what the watcher reads is that request's
	// (guarded by wsUpstreams.mu).
	turn bool
	// last is the response conn served last: an event naming it in a
	// later turn is a leftover of that response (guarded by the slot).
	last servedResponse
	// held is the responses conn served, newest last, at most
	// maxHeldPerConnection: the upstream keeps a store:false response on
	// the connection that made it only, so only these may be named by an
	// incremental follow-up sent over conn (wsSource.frameForConn); a new
	// connection holds none (attach). Guarded by the slot.
	held []string
}

// maxHeldPerConnection bounds the response ids a socket remembers its
// connection served: a follow-up naming an older one is sent in full from
// the session's memory, which is always correct, only larger.
const maxHeldPerConnection = 64

// served reports whether sock's connection served response id (held).
func (sock *upstreamSocket) served(id string) bool {
	return id != "" && slices.Contains(sock.held, id)
}

// keepHeld notes that sock's connection served response id (held).
func (sock *upstreamSocket) keepHeld(id string) {
	if len(sock.held) == maxHeldPerConnection {
		sock.held = slices.Delete(sock.held, 0, 1)
	}
	sock.held = append(sock.held, id)
}

// servedResponse is what identifies a response a socket served: its id and
// the ids of the output items its events named.
type servedResponse struct {
	id    string
	items map[string]bool
}

// idleRead is one read of an idle socket's connection (watch).
type idleRead struct {
	done chan struct{} // closed once the read returned
	typ  websocket.MessageType
	data []byte
	err  error
}

// returned reports whether the read returned, without waiting for it.
func (r *idleRead) returned() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// errUpstreamSocketsFull: limits.upstream_sockets upstream WebSockets are
// open and none is idle. It is the gateway's own limit, not a failure of
// the upstream (upstreamSocketsFull).
var errUpstreamSocketsFull = errors.New("upstream WebSockets are all in use")

// errForeignFrame: a frame of another response than the one the socket's
// request asked for; the socket is out of step and closed.
var errForeignFrame = errors.New("the upstream WebSocket sent an event of another response")

// wsUpgradeRefusedError: a transport: websocket upstream answered the
// upgrade with 426 or 404 (refusesWebSocketMode), which says it does not
// offer the Responses WebSocket mode. That is no connect failure: the
// upstream answered, and its non-streaming requests, sent as HTTP POST,
// work. So it cools down only the upstream's WebSocket transport, for
// upstream.ConnectFailureCooldown: its streaming requests fail over at
// once without asking again (webSocketRefused), and nothing is charged
// to the upstream or its targets.
type wsUpgradeRefusedError struct {
	status int
	until  time.Time
}

func (e *wsUpgradeRefusedError) Error() string {
	return fmt.Sprintf("the upstream refused the WebSocket upgrade with HTTP %d: it does not offer the Responses WebSocket mode that transport: websocket asks for", e.status)
}

// refusedMode is u's refusal of the WebSocket mode while it is remembered
// (wsUpgradeRefusedError), else nil.
func (w *wsUpstreams) refusedMode(u *upstream.Upstream) *wsUpgradeRefusedError {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.noMode[u.Name()]
	if e != nil && !time.Now().Before(e.until) {
		delete(w.noMode, u.Name())
		return nil
	}
	return e
}

func newWSUpstreams(s *Server, max int, idleTTL time.Duration) *wsUpstreams {
	w := &wsUpstreams{s: s, max: max, idleTTL: idleTTL, sockets: map[string]*upstreamSocket{}, httpOnly: map[string]bool{}, noMode: map[string]*wsUpgradeRefusedError{}, idleFree: map[string][]*upstreamSocket{}, stop: make(chan struct{})}
	if s != nil {
		w.drain, w.keepAlive = s.drainCh, s.opts.KeepAlive
	}
	return w
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
// That wait is the gateway's and may last as long as the request ahead
// runs: once it passes timeouts.keepalive, waited runs (it commits the
// client's stream, which keeps itself alive from then on; README "Upstream
// WebSockets"). A wait the drain finds fails with errDraining.
func (w *wsUpstreams) acquire(ctx context.Context, key string, waited func()) (*upstreamSocket, int, error) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, 0, errDraining
	}
	sock := w.sockets[key]
	if sock == nil {
		if len(w.sockets) >= w.max && !w.evictIdleLocked() {
			w.mu.Unlock()
			return nil, 0, fmt.Errorf("%w: the cap of %d (limits.upstream_sockets) is reached", errUpstreamSocketsFull, w.max)
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
	case sock.slot <- struct{}{}: // free: a request that arrived before the drain goes on
		return sock, pending, nil
	default:
	}
	// A request queued behind another has started nothing: once the drain
	// begins it is refused as a request arriving then is, rather than
	// started upstream when the socket frees (README "Running it").
	var keepAlive <-chan time.Time
	if d := w.keepAlive; d > 0 && waited != nil {
		t := time.NewTimer(d)
		defer t.Stop()
		keepAlive = t.C
	}
	for {
		select {
		case sock.slot <- struct{}{}:
			select {
			case <-w.drain: // the drain and the slot came together
				<-sock.slot
				return nil, 0, errDraining
			default:
			}
			return sock, pending, nil
		case <-keepAlive:
			waited() // once: the stream it commits keeps itself alive from then on
			keepAlive = nil
		case <-ctx.Done():
			return nil, 0, context.Cause(ctx)
		case <-w.drain:
			return nil, 0, errDraining
		case <-w.stop:
			return nil, 0, errDraining
		}
	}
}

// acquireFree takes the slot of a free socket of pool (socketPool) that
// nobody uses, the one released last (idleFree), or of a new one: a request
// that needs no session scope never waits behind another (README "Upstream
// WebSockets"). The cap and the idle reaper count free sockets as any
// other.
func (w *wsUpstreams) acquireFree(pool string) (*upstreamSocket, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil, errDraining
	}
	var sock *upstreamSocket
	idle := w.idleFree[pool]
	for sock == nil && len(idle) > 0 {
		s := idle[len(idle)-1]
		idle = idle[:len(idle)-1]
		if w.sockets[s.key] == s && len(s.slot) == 0 { // not reaped or evicted meanwhile
			sock = s
		}
	}
	w.idleFree[pool] = idle
	if sock == nil {
		if len(w.sockets) >= w.max && !w.evictIdleLocked() {
			return nil, fmt.Errorf("%w: the cap of %d (limits.upstream_sockets) is reached", errUpstreamSocketsFull, w.max)
		}
		w.freeSeq++
		sock = &upstreamSocket{key: pool + "\x00free\x00" + strconv.FormatUint(w.freeSeq, 10), free: true, pool: pool, slot: make(chan struct{}, 1)}
		w.sockets[sock.key] = sock
		w.reaper.Do(func() { go w.reap() })
	}
	sock.slot <- struct{}{} // free: only acquireFree fills it, under w.mu
	return sock, nil
}

// needsScopeSocket reports whether a request must go over its session
// scope's socket: it continues a response by previous_response_id, whose
// state may live only on the socket that made it (store: false), or it
// names a session or turn of its own, whose follow-ups may. Anything else
// (a request in its client key's scope, or anonymous) may go over any
// socket of the upstream. So a store: false response made on a free socket
// cannot be continued by previous_response_id, as over HTTP with OpenAI
// (README "Upstream WebSockets").
func needsScopeSocket(req *clientRequest, frame []byte) bool {
	return req.scope.turnState != "" || req.scope.session != "" || gjson.GetBytes(frame, "previous_response_id").Str != ""
}

// take gives the request holding sock's slot the socket's connection (nil:
// none, dial one), the watcher's read in progress on it, and the response
// it served last.
func (w *wsUpstreams) take(sock *upstreamSocket) (*websocket.Conn, *idleRead, servedResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sock.turn = true
	r := sock.idle
	sock.idle = nil
	return sock.conn, r, sock.last
}

// attach makes conn, just dialled, sock's connection.
func (w *wsUpstreams) attach(sock *upstreamSocket, conn *websocket.Conn) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped { // close has run: nothing would close conn
		conn.CloseNow()
		return errDraining
	}
	sock.conn, sock.last, sock.held = conn, servedResponse{}, nil
	return nil
}

// drop closes conn, a connection of sock that cannot be used any more.
func (w *wsUpstreams) drop(sock *upstreamSocket, conn *websocket.Conn) {
	conn.CloseNow()
	w.mu.Lock()
	defer w.mu.Unlock()
	if sock.conn == conn {
		sock.conn = nil
	}
}

// release frees the slot. A socket that is not reusable is closed; one that
// is gets a watcher until the next request takes it.
func (w *wsUpstreams) release(sock *upstreamSocket, reusable bool) {
	w.mu.Lock()
	sock.used = time.Now()
	sock.turn = false
	sock.idle = nil
	if !reusable && sock.conn != nil {
		sock.conn.CloseNow()
		sock.conn = nil
	}
	if sock.conn != nil && !w.stopped {
		r := &idleRead{done: make(chan struct{})}
		sock.idle = r
		go w.watch(sock, sock.conn, r)
	}
	w.mu.Unlock()
	<-sock.slot
	if sock.free { // only now: acquireFree must find its slot empty
		w.mu.Lock()
		if !w.stopped && w.sockets[sock.key] == sock {
			w.idleFree[sock.pool] = append(w.idleFree[sock.pool], sock)
		}
		w.mu.Unlock()
	}
}

// watch reads conn, a connection sock keeps for its next request. What it
// reads before a request has taken the socket ends the connection: a frame
// then belongs to no request (it is dropped, never relayed), and a close or
// an error means the upstream let the connection go (an idle timeout, a
// restart), which the next request must not find out by failing. Once a
// request has taken the socket, what it reads is that request's
// (wsSource.read). The read ends with conn, which every path that drops a
// socket closes.
func (w *wsUpstreams) watch(sock *upstreamSocket, conn *websocket.Conn, r *idleRead) {
	r.typ, r.data, r.err = conn.Read(context.Background())
	close(r.done) // before the lock: a request taking the socket meanwhile sees it (wsSource.open)
	w.mu.Lock()
	defer w.mu.Unlock()
	if sock.turn || sock.conn != conn {
		return
	}
	conn.CloseNow()
	sock.conn, sock.idle = nil, nil
	w.idleEnded(sock, r)
}

// idleEnded logs why a socket that waited for its next request was closed.
func (w *wsUpstreams) idleEnded(sock *upstreamSocket, r *idleRead) {
	if r.err != nil {
		w.s.log.Debug("an idle upstream WebSocket ended", "upstream", upstreamOfKey(sock.key), "why", w.s.scrub.String(upstream.RedactError(r.err)))
		return
	}
	w.s.log.Warn("the upstream sent a frame between responses; its WebSocket is closed and the frame dropped", "upstream", upstreamOfKey(sock.key),
		"type", fmt.Sprintf("%.40q", w.s.scrub.String(gjson.GetBytes(r.data, "type").String())))
}

// upstreamOfKey is the upstream name a socket key starts with.
func upstreamOfKey(key string) string {
	name, _, _ := strings.Cut(key, "\x00")
	return name
}

// evictIdleLocked drops one socket nobody is using or waiting for.
func (w *wsUpstreams) evictIdleLocked() bool {
	for key, sock := range w.sockets {
		if sock.waiting == 0 && len(sock.slot) == 0 {
			w.closeLocked(sock)
			delete(w.sockets, key)
			return true
		}
	}
	return false
}

// closeLocked closes sock's connection (its watcher, if any, ends with it).
func (w *wsUpstreams) closeLocked(sock *upstreamSocket) {
	if sock.conn != nil {
		sock.conn.CloseNow()
		sock.conn = nil
	}
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
					w.closeLocked(sock)
					delete(w.sockets, key)
				}
			}
			for pool, idle := range w.idleFree { // forget the free sockets gone
				kept := idle[:0]
				for _, s := range idle {
					if w.sockets[s.key] == s {
						kept = append(kept, s)
					}
				}
				clear(idle[len(kept):])
				if len(kept) == 0 { // one pool per client credential: the map does not keep them all
					delete(w.idleFree, pool)
					continue
				}
				w.idleFree[pool] = kept
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
		w.closeLocked(sock)
		delete(w.sockets, key)
	}
	clear(w.idleFree)
}

// send runs req over u's WebSocket: its session scope's socket, or a free
// one (needsScopeSocket). Waiting for the socket is the gateway's time, not
// the upstream's: firstByte starts the attempt's first_byte clock when the
// request has the socket and goes to the upstream.
func (w *wsUpstreams) send(upCtx context.Context, firstByte func() (context.Context, func()), waited func(), idle *idleTimer, req *clientRequest, u *upstream.Upstream) (*upstreamAnswer, error) {
	if e := w.refusedMode(u); e != nil {
		return nil, e
	}
	// The connection is not known yet: as sent, the follow-up picks the
	// session scope's socket, and wsSource.open sends it in full when the
	// connection it gets did not serve the previous response.
	frame, err := w.responseCreate(upCtx, req, u, true)
	if err != nil {
		return nil, err
	}
	header := wsDialHeader(req, u)
	pool := socketPool(u, header, req.clientKeyHash)
	var sock *upstreamSocket
	pending := 0
	if needsScopeSocket(req, frame) {
		kind, scopeID := req.scope.tightest()
		sock, pending, err = w.acquire(upCtx, pool+"\x00"+kind.String()+"\x00"+scopeID, waited)
	} else {
		sock, err = w.acquireFree(pool)
	}
	if err != nil {
		return nil, err
	}
	sendCtx, stopFirstByte := firstByte()
	defer stopFirstByte()
	src := &wsSource{w: w, sock: sock, req: req, u: u, header: header, frame: frame, ctx: sendCtx, idle: idle, max: w.s.opts.MaxEventBytes,
		incremental: keepsSessionTurn(req) && gjson.GetBytes(frame, "previous_response_id").Str != ""}
	ans, err := src.open(sendCtx)
	if err != nil || ans != nil {
		w.release(sock, false)
		if ans != nil {
			ans.done = func(bool) {}
		}
		return ans, err
	}
	idle.arm()
	// The first frame says how the upstream took the request, as an HTTP
	// answer's status line does; attempt reads it under first_token and
	// handles a refusal with a status as that status (wsStatusAnswer).
	return &upstreamAnswer{status: http.StatusOK, src: src, statusFrames: true, pending: pending,
		done: func(reusable bool) { w.release(sock, src.settle(reusable)) }}, nil
}

// responseCreate is req's response.create frame for u's WebSocket, on a
// connection that served the previous response or not (connServed,
// sessionChainBodyOverSocket).
func (w *wsUpstreams) responseCreate(ctx context.Context, req *clientRequest, u *upstream.Upstream, connServed bool) ([]byte, error) {
	body, err := w.s.sessionChainBodyOverSocket(ctx, req, u, connServed) // wsmemory.go
	if err != nil {
		return nil, err
	}
	frame, err := sjson.SetBytes(body, "type", "response.create")
	if err == nil {
		frame, err = sjson.DeleteBytes(frame, "stream")
	}
	if err != nil {
		return nil, fmt.Errorf("building response.create: %w", err)
	}
	return frame, nil
}

// upstreamSocketsFull fails an attempt that found limits.upstream_sockets
// upstream WebSockets open and none idle: SECURITY.md says the attempt
// fails. Nothing reached the upstream, so nothing is charged to it (no
// cooldown, no transport_error, no replay-policy penalty). The request
// moves on to the route's next target, as after any failure before the
// headers (README "Routes and fallbacks"); with none left (or no attempt
// left for one), the client gets a 503 it may retry.
func (s *Server) upstreamSocketsFull(out responder, req *clientRequest, u *upstream.Upstream, err error) attemptResult {
	s.log.Warn("no upstream WebSocket available", "upstream", u.Name(), "error", err)
	return s.notTriedOverWebSocket(out, req, err, apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "%s; retry the request", err))
}

// webSocketRefused fails an attempt whose upstream refused the WebSocket
// mode (wsUpgradeRefusedError): not retried on the same target (the
// refusal is the upstream's configuration, not chance), nor charged to it
// (its HTTP transport works); its WebSocket transport alone cools down.
// Like upstreamSocketsFull, the request moves on to the route's next
// target, or the client gets a 503 naming the refusal and the wait.
func (s *Server) webSocketRefused(out responder, req *clientRequest, u *upstream.Upstream, err *wsUpgradeRefusedError) attemptResult {
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "websocket_refused").Inc()
	wait := max(time.Until(err.until), time.Millisecond)
	s.log.Warn("upstream WebSocket transport cooling down", "upstream", u.Name(), "for", wait.Round(time.Millisecond).String(), "reason", err.Error())
	e := apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "%s/%s: %s", u.Name(), tryOf(req).target.Model, err)
	e.RetryAfter = wait
	return s.notTriedOverWebSocket(out, req, err, e)
}

// notTriedOverWebSocket moves a request that its target's WebSocket
// transport could not take on to the route's next target, with e for the
// client should none take it; with none left (or no attempt left for
// one), the client gets e now.
func (s *Server) notTriedOverWebSocket(out responder, req *clientRequest, err error, e *apierr.Error) attemptResult {
	if try := tryOf(req); try.cands != nil && try.attempt+1 < try.limit && try.cands.remaining(try.target) > 0 {
		return attemptResult{next: nextFailover, why: err.Error(), clientErr: e}
	}
	out.fail(req, e, failBeforeStream)
	return attemptResult{next: nextDone}
}

// wsStatusAnswer turns an upstream's refusal of a response.create, a first
// frame {"type":"error","status":N,"error":{…},"headers":{…}}, into the
// HTTP answer N it stands for, so that statusFailure treats it as it treats
// that status from an HTTP upstream: a client error (or
// context_length_exceeded) passes through with its status and error body,
// a 500 is retried, and a rate limit, quota or overload refusal cools the
// target down and waits or moves on as its headers (retry-after,
// retry-after-ms) say, which reach the client as a relayed 429's do
// (README "Routes and fallbacks"). nil: the frame is not such a refusal.
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
	case hostabi.FailureClientError, hostabi.FailureContextLength, hostabi.FailureServerError,
		hostabi.FailureRateLimit, hostabi.FailureQuota, hostabi.FailureOverloaded:
	default:
		return nil
	}
	header := wsFrameHeader(first)
	header.Set("Content-Type", "application/json")
	body, err := sjson.SetRawBytes([]byte(`{}`), "error", []byte(e.Raw))
	if err != nil {
		return nil
	}
	return &upstreamAnswer{status: status, header: header, body: body}
}

// wsFrameHeader is an upstream WebSocket error frame's "headers" object as
// the HTTP headers it stands for: OpenAI's frames carry an HTTP answer's
// headers there (retry-after, retry-after-ms, x-ratelimit-*), so that
// upstream.RetryAfter reads a frame's wait as it reads a response's.
func wsFrameHeader(frame sse.Event) http.Header {
	header := http.Header{}
	gjson.GetBytes(frame.Data, "headers").ForEach(func(k, v gjson.Result) bool {
		header.Set(k.String(), v.String())
		return true
	})
	return header
}

// wsDialHeader is the header of the upgrade request that opens u's
// WebSocket for req: the headers an HTTP request to u would carry
// (upstreamHeaders), less those the WebSocket library sets, plus the beta
// header that opts into the mode.
func wsDialHeader(req *clientRequest, u *upstream.Upstream) http.Header {
	h := upstreamHeaders(req, u.Config(), false)
	for _, k := range []string{"Content-Type", "Accept", "Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
		h.Del(k)
	}
	if !strings.Contains(h.Get("OpenAI-Beta"), "responses_websockets") {
		h.Add("OpenAI-Beta", responsesWebSocketBeta)
	}
	return h
}

// socketPool names u's sockets that a request dialling with header may use
// (the free ones, and the prefix of its session scope's key): the
// upstream's name and a hash of the credential headers the dial sends
// (hostabi.CredentialHeader: the client's own key on an upstream without
// api_key; OpenAI-Organization, OpenAI-Project) and of those the upstream's
// forward_headers names. The upstream bills a socket's requests to the
// credentials it was opened with and keeps its previous_response_id state
// per socket, so a request never goes over a socket opened with other ones
// (SECURITY.md: a client's credentials reach the upstream its request goes
// to). It names the client too (clientKeyHash, the hash of its own
// credential, as clientkey.Hash): on an upstream with api_key every client
// dials with that key, and one client must not wait behind another's
// request, nor ride the socket and per-socket upstream state of another,
// when both send the same session or turn state (SECURITY.md). The hash
// keeps no credential in memory, as clientkey.Hash.
func socketPool(u *upstream.Upstream, header http.Header, clientKeyHash string) string {
	forwarded := u.Config().ForwardHeaders
	names := make([]string, 0, len(header))
	for k := range header {
		if hostabi.CredentialHeader(strings.ToLower(k)) || namesHeader(forwarded, k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	sum := sha256.New()
	for _, k := range names {
		for _, v := range header.Values(k) {
			// Length-prefixed: no two header sets hash the same input.
			fmt.Fprintf(sum, "%d:%s%d:%s", len(k), k, len(v), v)
		}
	}
	// After the length-prefixed headers, under a tag no header entry
	// starts with (they start with a digit).
	fmt.Fprintf(sum, "client:%s", clientKeyHash)
	return u.Name() + "\x00" + hex.EncodeToString(sum.Sum(nil)[:16])
}

// dial opens u's Responses WebSocket with header (wsDialHeader). A refused
// upgrade with an HTTP answer comes back as an upstreamAnswer. An upstream
// that does not offer the mode (refusesWebSocketMode) is no answer for the
// client: an auto upstream is remembered as HTTP-only and reported as
// errWebSocketUnsupported; a transport: websocket one fails the attempt
// with a wsUpgradeRefusedError, so the route's next target is tried.
func (w *wsUpstreams) dial(ctx context.Context, req *clientRequest, u *upstream.Upstream, header http.Header) (*websocket.Conn, *upstreamAnswer, error) {
	url := u.URL("/responses")
	switch {
	case strings.HasPrefix(url, "https://"):
		url = "wss://" + strings.TrimPrefix(url, "https://")
	case strings.HasPrefix(url, "http://"):
		url = "ws://" + strings.TrimPrefix(url, "http://")
	}
	if err := checkPolicyHeaders(req); err != nil { // as post does: the gateway's failure, not the upstream's
		return nil, nil, &notSentError{err: err}
	}
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: w.s.client, HTTPHeader: header})
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
	if refusesWebSocketMode(resp.StatusCode) {
		if u.Config().Transport != upstream.TransportAuto {
			// The gateway's transport does not match the upstream's: a
			// client that never asked for a WebSocket must not be told to
			// upgrade, and the route's other targets may serve it.
			e := &wsUpgradeRefusedError{status: resp.StatusCode, until: time.Now().Add(upstream.ConnectFailureCooldown)}
			w.mu.Lock()
			w.noMode[u.Name()] = e
			w.mu.Unlock()
			return nil, nil, e
		}
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

// refusesWebSocketMode reports whether an upgrade refused with status says
// the upstream does not offer the Responses WebSocket mode at all (426
// Upgrade Required, or no such endpoint), rather than refusing this client.
func refusesWebSocketMode(status int) bool {
	return status == http.StatusUpgradeRequired || status == http.StatusNotFound
}

// wsSource reads upstream WebSocket frames as events: one request's turn on
// a socket.
// servedOverWebSocket reports whether src, an answer's events through the
// wrappers they may pass (chatSourceOf), came over an upstream WebSocket,
// where the upstream keeps the response for an incremental follow-up.
func servedOverWebSocket(src eventSource) bool {
	for {
		switch s := src.(type) {
		case *wsSource:
			return true
		case interface{ wrapped() eventSource }:
			src = s.wrapped()
		default:
			return false
		}
	}
}

type wsSource struct {
	w      *wsUpstreams
	sock   *upstreamSocket
	req    *clientRequest
	u      *upstream.Upstream
	header http.Header // the upgrade request's (wsDialHeader)
	frame  []byte      // the turn's response.create
	conn   *websocket.Conn
	ctx    context.Context
	idle   *idleTimer
	max    int

	first   *idleRead      // the watcher's read on a reused connection: the turn's first frame
	reused  bool           // conn served earlier turns
	last    servedResponse // the response conn served last
	retried bool           // the turn went to a new connection once already
	started bool           // an event went to the reader
	// incremental: frame is a store:false follow-up naming its previous
	// response, which of the upstream's connections only the one that
	// served it holds (frameForConn).
	incremental bool

	opened     bool            // a response lifecycle event of this turn was read
	responseID string          // the response the turn's lifecycle events name
	items      map[string]bool // the output items the turn's events name
	lastItem   string          // the item the previous event named: a run of deltas is checked once
	ended      bool            // the last event ended the turn (settle)
}

// open sends the turn's response.create: on the socket's connection when
// it has one, else on a new one. A reused connection that cannot take it is
// replaced once (replace).
func (src *wsSource) open(ctx context.Context) (*upstreamAnswer, error) {
	for {
		conn, first, last := src.w.take(src.sock)
		src.conn, src.first, src.reused, src.last = conn, first, conn != nil, last
		src.opened, src.responseID, src.items, src.ended = false, "", nil, false
		if first != nil && first.returned() {
			// The watcher read something before this turn sent anything:
			// not the turn's, whatever it is.
			src.w.drop(src.sock, conn)
			src.w.idleEnded(src.sock, first)
			continue
		}
		if err := src.frameForConn(ctx); err != nil {
			return nil, err
		}
		if conn == nil {
			c, ans, err := src.w.dial(ctx, src.req, src.u, src.header)
			if err != nil || ans != nil {
				return ans, err
			}
			if err := src.w.attach(src.sock, c); err != nil {
				return nil, err
			}
			src.conn = c
		}
		err := src.conn.Write(ctx, websocket.MessageText, src.frame)
		if err == nil {
			return nil, nil
		}
		if !src.replace(err) {
			return nil, fmt.Errorf("sending response.create: %w", err)
		}
	}
}

// frameForConn rebuilds an incremental frame in full from the session's
// memory when the turn's connection did not serve the previous response: a
// new one (the socket's was closed by the upstream while it waited, or
// replaced after failing the turn: replace), or one that served other
// responses. The upstream keeps a store:false response on the connection
// that made it only, so it would answer previous_response_not_found, and
// so would every retry of the client's. A chain the memory does not hold
// cannot be rebuilt: it fails closed here, before the upstream is called
// (sessionChainBodyOverSocket).
func (src *wsSource) frameForConn(ctx context.Context) error {
	if !src.incremental || src.reused && src.sock.served(src.req.previousResponseID) {
		return nil
	}
	frame, err := src.w.responseCreate(ctx, src.req, src.u, false)
	if err != nil {
		return err
	}
	src.frame, src.incremental = frame, gjson.GetBytes(frame, "previous_response_id").Str != ""
	return nil
}

// replace gives up a reused connection that failed the turn before the
// upstream answered it anything, or whose first frame belongs to another
// response: the upstream closed it while it waited (a timeout of its own, a
// restart), or it is out of step. The turn goes once to a new connection to
// the same upstream, as a connection reset before the headers is retried on
// the same target (README "Routes and fallbacks"), but at once and without
// charging the upstream: a reused connection proves nothing about it.
// false: the failure is the turn's.
func (src *wsSource) replace(why error) bool {
	if !src.reused || src.retried || src.started || src.ctx.Err() != nil || errors.Is(why, sse.ErrEventTooLarge) {
		return false
	}
	src.retried = true
	src.w.drop(src.sock, src.conn)
	src.w.s.log.Info("a reused upstream WebSocket failed before answering; sending the request on a new one",
		"upstream", src.u.Name(), "why", src.w.s.scrub.String(upstream.RedactError(why)))
	return true
}

// reopen sends the turn again on a new connection (replace).
func (src *wsSource) reopen() error {
	ans, err := src.open(src.ctx)
	if ans != nil {
		return fmt.Errorf("the upstream refused a new WebSocket with HTTP %d", ans.status)
	}
	return err
}

// read reads the turn's next frame: the watcher's read first, if the
// connection had one in progress.
func (src *wsSource) read() (websocket.MessageType, []byte, error) {
	if r := src.first; r != nil {
		select {
		case <-r.done:
			src.first = nil
			return r.typ, r.data, r.err
		case <-src.ctx.Done():
			return 0, nil, context.Cause(src.ctx)
		}
	}
	return src.conn.Read(src.ctx)
}

func (src *wsSource) Next() (sse.Event, error) {
	// timeouts.idle counts from the last event, as on an SSE stream
	// (idleEvents): an empty or binary frame is no event and does not
	// restart it; a replacement socket does.
	src.idle.touch()
	for {
		typ, data, err := src.read()
		if err != nil {
			err = src.readError(err)
			if !src.replace(err) {
				return sse.Event{}, err
			}
			if err := src.reopen(); err != nil {
				return sse.Event{}, err
			}
			src.idle.touch()
			continue
		}
		if typ != websocket.MessageText || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		name := gjson.GetBytes(data, "type").String()
		if src.foreign(name, data) {
			if !src.replace(errForeignFrame) {
				src.w.drop(src.sock, src.conn)
				return sse.Event{}, errForeignFrame
			}
			if err := src.reopen(); err != nil {
				return sse.Event{}, err
			}
			src.idle.touch()
			continue
		}
		src.started = true
		switch name {
		case "response.completed", "response.failed", "response.incomplete":
			src.ended = true
		case "error": // a refusal of the response.create ends the turn; an error within a response does not
			src.ended = !src.opened
		default:
			src.ended = false
		}
		return sse.Event{Name: name, Data: data}, nil
	}
}

// readError says why reading the upstream's frames stopped.
func (src *wsSource) readError(err error) error {
	if strings.Contains(err.Error(), "read limited") {
		return fmt.Errorf("%w: a WebSocket frame exceeds %d bytes", sse.ErrEventTooLarge, src.max)
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Errorf("the upstream closed the WebSocket (%d %s): %w", ce.Code, ce.Reason, io.ErrUnexpectedEOF)
	}
	return err
}

// foreign reports whether an event belongs to another response than the
// turn's, and notes the turn's response from its lifecycle events and its
// output items from the others. Foreign are a lifecycle event naming
// another response than the turn's (or, first on a reused connection, the
// one the connection served last); on a reused connection a response event
// before the turn's first lifecycle event; and, at any point of the turn,
// an event naming an output item of the response the connection served
// last (a late delta of it): item ids are unique, so that one is never the
// turn's own. Besides lifecycle events, only an event's item id is read.
func (src *wsSource) foreign(name string, data []byte) bool {
	switch name {
	case "response.created", "response.in_progress", "response.queued",
		"response.completed", "response.failed", "response.incomplete":
		id := gjson.GetBytes(data, "response.id").Str
		switch {
		case id == "":
		case src.responseID == "":
			if src.reused && id == src.last.id {
				return true
			}
			src.responseID = id
		case id != src.responseID:
			return true
		}
		src.opened = true
		return false
	case "response.keepalive", "response.ping":
		return false
	}
	// An item's run of deltas is checked at its first event: a later one
	// naming the same item was already found to be the turn's own.
	if item := eventItemID(name, data); item != "" && item != src.lastItem {
		if src.last.items[item] {
			return true
		}
		if src.items == nil {
			src.items = map[string]bool{}
		}
		src.items[item], src.lastItem = true, item
	}
	return src.reused && !src.opened && strings.HasPrefix(name, "response.")
}

// eventItemID is the output item a response event is about: its item_id,
// or the item of an output_item event; "" when it names none.
func eventItemID(name string, data []byte) string {
	if strings.HasPrefix(name, "response.output_item.") {
		return gjson.GetBytes(data, "item.id").Str
	}
	return gjson.GetBytes(data, "item_id").Str
}

// settle says whether the connection can serve the next request: the
// caller found the turn's end clean (reusable), and the turn read its last
// frame, which ended the response (a terminal event, or an error refusing
// the response.create). Anything else may leave frames of this response
// for the next request to read. It runs while the turn holds the slot.
func (src *wsSource) settle(reusable bool) bool {
	if !reusable || src.first != nil || !src.ended {
		return false
	}
	if src.responseID != "" {
		src.sock.last = servedResponse{id: src.responseID, items: src.items}
		src.sock.keepHeld(src.responseID)
	}
	return true
}
