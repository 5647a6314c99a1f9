package gateway

import (
	"container/list"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/internal/logtext"
)

// The listener side of the gateway's limits (docs/ARCHITECTURE.md,
// "Untrusted input"): at most MaxConnections client connections are open at
// once (further clients wait in the kernel's accept queue instead of
// exhausting file descriptors), and each connection remembers whether the
// client only half-closed it, so a request whose client shut its write side
// after sending is still answered. A client that finds every slot taken
// gets one from a keep-alive connection idle between requests, the oldest
// first, which the gateway closes for it (as web servers do at their
// connection limit, SECURITY.md "Limits"): idle pooled connections of SDK
// clients must not keep new clients, health probes included, waiting for
// the idle timeout. A connection with a request in flight, or a WebSocket,
// is never closed for it, nor is one whose next request has started to
// arrive (trackedConn.Read): net/http reports it active only once it has
// read the whole request head.

// limitListener caps open connections. Accept blocks while the cap is
// reached and no connection is idle; a log line (at most one per 10s for a
// wait, and one for an idle connection closed) says so.
type limitListener struct {
	net.Listener
	s     *Server
	slots chan struct{}

	mu sync.Mutex
	// idle holds the connections between requests (connState), the one
	// idle longest at the front: the first closed when a client waits.
	idle *list.List // of *trackedConn
	// wentIdle wakes a waiting Accept when a connection turns idle, so a
	// client that found every connection busy takes the first to finish.
	wentIdle chan struct{}

	waitLog  logtext.Every // spaces the "limit reached; waiting" lines
	evictLog logtext.Every // spaces the "limit reached; idle closed" lines
	done     chan struct{}
	once     sync.Once
}

func newLimitListener(ln net.Listener, s *Server, max int) *limitListener {
	return &limitListener{Listener: ln, s: s, slots: make(chan struct{}, max), done: make(chan struct{}),
		idle: list.New(), wentIdle: make(chan struct{}, 1),
		waitLog: logtext.Every{Interval: 10 * time.Second}, evictLog: logtext.Every{Interval: 10 * time.Second}}
}

// Accept takes a connection, then a slot for it: a connection that finds
// every slot taken takes the slot of the connection idle longest, or
// waits, accepted but not served, until one frees (the next clients wait in
// the kernel's backlog meanwhile, as before any accept). Taking the slot
// after the connection counts a wait only when a client really waits
// (sluice_connection_limit_waits_total), not whenever the limit is reached
// with nobody behind it, nor when an idle connection's slot is taken at
// once (sluice_connection_limit_idle_closed_total).
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
	default:
		if err := l.waitForSlot(); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	l.s.metrics.openConns.Inc()
	tc := &trackedConn{Conn: c}
	tc.release = func() { <-l.slots; l.s.metrics.openConns.Dec() }
	tc.leaveIdle = func() { l.leaveIdle(tc) }
	return tc, nil
}

// waitForSlot takes a slot for a connection that found none: it closes the
// connection idle longest, whose Close gives its slot back, and while none
// is idle it waits for one to close or to turn idle. The wait is counted
// once, when there was no idle connection to take the slot of at once.
func (l *limitListener) waitForSlot() error {
	waited := false
	for {
		if l.closeOldestIdle() {
			l.s.metrics.connLimitIdleClosed.Inc()
			if n, ok := l.evictLog.Allow(time.Now()); ok {
				l.s.log.Warn("connection limit reached; a new client takes the slot of the keep-alive connection idle longest, which is closed", "max_connections", cap(l.slots), "idle_closed", n)
			}
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		default:
		}
		if !waited {
			waited = true
			l.s.metrics.connLimitWaits.Inc()
			if n, ok := l.waitLog.Allow(time.Now()); ok {
				l.s.log.Warn("connection limit reached and no keep-alive connection idle; a new client waits until one closes or turns idle", "max_connections", cap(l.slots), "waits", n)
			}
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.wentIdle:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// closeOldestIdle closes the keep-alive connection idle longest, if any,
// and reports whether it did. Only a connection that has received no byte
// of a next request is idle (leaveIdle), so no request the gateway has
// started to read is lost. A client may still send its next request while
// the connection closes;
// HTTP clients expect that of a keep-alive connection (RFC 9112 §9.3.1)
// and net/http's http.Server.Shutdown closes idle connections the same way.
func (l *limitListener) closeOldestIdle() (closed bool) {
	l.mu.Lock()
	front := l.idle.Front()
	if front == nil {
		l.mu.Unlock()
		return false
	}
	tc := l.idle.Remove(front).(*trackedConn)
	tc.idleAt = nil
	tc.idle.Store(false)
	l.mu.Unlock()
	_ = tc.Close()
	return true
}

// leaveIdle takes tc off the idle list: its client has sent a byte of its
// next request, which net/http reports (StateActive) only after reading the
// whole request head.
func (l *limitListener) leaveIdle(tc *trackedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.idleAt != nil {
		l.idle.Remove(tc.idleAt)
		tc.idleAt = nil
	}
	tc.idle.Store(false)
}

// connState is the http.Server's ConnState hook: it keeps l.idle to the
// connections between requests (StateIdle). A connection with a request
// in flight (StateActive), a WebSocket (StateHijacked: net/http no longer
// manages it) or a closed one leaves it.
func (l *limitListener) connState(c net.Conn, state http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.idleAt != nil {
		l.idle.Remove(tc.idleAt)
		tc.idleAt = nil
	}
	tc.idle.Store(state == http.StateIdle)
	if state != http.StateIdle {
		return
	}
	tc.idleAt = l.idle.PushBack(tc)
	select {
	case l.wentIdle <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// trackedConn frees its slot once, on Close (also after a WebSocket
// hijack: the hijacked conn is this one), and records a clean EOF from the
// client.
type trackedConn struct {
	net.Conn
	release   func()
	closeOnce sync.Once
	readEOF   atomic.Bool
	// abandoned: the gateway closed the connection itself because a write
	// to its client failed (abandon), while the request's work goes on.
	abandoned atomic.Bool
	// idleAt is the connection's place in its listener's idle list while
	// it is between requests (limitListener.connState), guarded by the
	// listener's mu.
	idleAt *list.Element
	// idle mirrors idleAt != nil (written under the listener's mu), so
	// that Read, on every request's path, takes no lock unless the
	// connection is idle.
	idle atomic.Bool
	// leaveIdle takes the connection off its listener's idle list
	// (limitListener.leaveIdle).
	leaveIdle func()
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.idle.Load() {
		c.leaveIdle()
	}
	if errors.Is(err, io.EOF) {
		c.readEOF.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.release)
	return err
}

// abandon closes a connection whose client is gone while its request's
// handler still runs (a detached stream, README "The stream goes on
// without its client"): its limits.max_connections slot and its file
// descriptor are given back now, not when the handler returns. The Close
// net/http makes afterwards releases nothing again (closeOnce).
func (c *trackedConn) abandon() {
	c.abandoned.Store(true) // before Close: the read it fails must not cancel the work (requestContext)
	_ = c.Close()
}

type connKey struct{}

// connContext puts the connection in its requests' context (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// requestContext is the context a request's work runs under. net/http
// cancels r.Context() when the client's read side reaches EOF, which also
// happens when a client half-closes after sending its whole request and
// still waits for the answer. When the cancellation came from a clean EOF,
// the work goes on, and the EOF is only told to whoever watches for it
// (onClientEOF): a client that really left is noticed when a write to it
// fails (every stream write has a deadline; see timeouts.client_write), and
// a stream probes its client with one (clientStream.clientEOF).
// Any other cancellation (a reset, the handler returning) passes through,
// except the one that follows the gateway closing a connection whose
// client is gone (closeClientConn): the client stream has already decided
// what its work does.
// The returned cancel must be called when the handler returns.
func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	tc, ok := r.Context().Value(connKey{}).(*trackedConn)
	if !ok {
		return context.WithCancel(r.Context())
	}
	// Never cancelled otherwise: a watcher stops watching when its request ends.
	eof, sawEOF := context.WithCancel(context.Background())
	ctx := context.WithValue(context.WithoutCancel(r.Context()), clientEOFKey{}, eof)
	if r.ProtoMajor == 1 {
		// An HTTP/1.x connection carries this one request until it ends,
		// so a client gone from the request is gone from the connection.
		// (An HTTP/2 connection would carry other streams: not given.)
		ctx = context.WithValue(ctx, clientConnKey{}, tc)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.Context(), func() {
		switch {
		case tc.readEOF.Load():
			sawEOF()
		case tc.abandoned.Load():
			// Closed by the gateway after its client left (abandon): the
			// work goes on as the client stream decided (detached or not).
		default:
			cancel()
		}
	})
	return ctx, func() { stop(); cancel() }
}

type clientConnKey struct{}

// closeClientConn closes the HTTP/1.x connection of the request whose
// context is ctx (requestContext), once a write to its client failed
// (closeGoneClientConn). It does nothing for a request served on no
// connection of its own: a WebSocket frame, a streaming-input dispatch, a
// background run (withoutClientEOF).
func closeClientConn(ctx context.Context) {
	if ctx == nil {
		return
	}
	if tc, ok := ctx.Value(clientConnKey{}).(*trackedConn); ok {
		tc.abandon()
	}
}

type clientEOFKey struct{}

// withoutClientEOF is ctx with no client EOF to watch and no client
// connection to close (closeClientConn): for work that goes on whatever its
// client does (a background response, whose client reads one JSON answer,
// and whose connection then serves the client's next request).
func withoutClientEOF(ctx context.Context) context.Context {
	return context.WithValue(context.WithValue(ctx, clientEOFKey{}, nil), clientConnKey{}, nil)
}

// onClientEOF calls f in its own goroutine once the client of the request
// whose context is ctx reached a clean EOF on its read side (at once if it
// already did); stop stops that. f is never called for a request whose
// context requestContext did not make from a tracked connection (a
// WebSocket's response.create, a handler served without the listener).
func onClientEOF(ctx context.Context, f func()) (stop func() bool) {
	eof, ok := ctx.Value(clientEOFKey{}).(context.Context)
	if !ok {
		return func() bool { return false }
	}
	return context.AfterFunc(eof, f)
}
