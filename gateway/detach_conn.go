package gateway

import "context"

// closeGoneClientConn closes the connection of a client its stream found
// gone (a write to it failed: clientStream.goneLocked), out being the
// stream's responder and ctx its request's context: the connection's
// limits.max_connections slot is given back now, not when the request's
// handler returns, which a stream that runs on detached (README "The stream
// goes on without its client") puts off for streams.detach_grace while
// nothing can be written on it any more. SECURITY.md: work that runs on
// holds no connection.
//
// A WebSocket's socket is closed (its session has no more client); an
// HTTP/1.x request's own connection is closed (closeClientConn). Anything
// else has no connection of its own to give back: a streaming-input
// dispatch answers into its session, a background run's client has its
// answer, and an HTTP/2 connection would carry other streams.
func closeGoneClientConn(ctx context.Context, out responder) {
	for {
		switch o := out.(type) {
		case *meterResponder:
			out = o.responder
		case *wsResponder:
			// In its own goroutine: closing the socket waits for a message
			// writer to let go of it, and the caller holds the stream's lock.
			go func() { _ = o.ws.conn.CloseNow() }()
			return
		default:
			closeClientConn(ctx)
			return
		}
	}
}
