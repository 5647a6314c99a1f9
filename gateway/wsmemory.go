package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/apierr"
)

// A client WebSocket's store:false follow-up (Codex's incremental frame:
// previous_response_id, store:false and only the new items) works against
// an upstream's WebSocket, whose socket holds the previous response, but not
// over HTTP: an upstream keeps no store:false response there (OpenAI answers
// previous_response_not_found). The session keeps its store:false turns in
// memory (keepsSessionTurn), so such a follow-up is sent over HTTP as one
// self-contained request, as for a Chat upstream (README "Privacy").

// sessionChainError is a store:false follow-up sessionChainBody could not
// make self-contained: no upstream is called for it. failClosed is the
// continuity_fail_closed_total reason, "" for an error that is no
// continuity failure (a conversation longer than the gateway keeps).
type sessionChainError struct {
	aerr       *apierr.Error
	failClosed string
}

func (e *sessionChainError) Error() string { return e.aerr.Message }

// sessionChainBody is body as it goes to an upstream over HTTP: for a
// store:false follow-up on a client WebSocket, the conversation's items
// from the session's memory (then the store, for a stored start of the
// chain) followed by body's own input, without previous_response_id, so the
// upstream needs nothing it does not keep. Any other request's body is
// returned as it is. A chain the session does not hold (made on another
// socket, or before the socket was reopened) fails closed
// (sessionChainError) rather than going to an upstream that cannot have it.
func (s *Server) sessionChainBody(ctx context.Context, req *clientRequest, body []byte) ([]byte, error) {
	if !keepsSessionTurn(req) || req.previousResponseID == "" || req.ep.chat {
		return body, nil
	}
	history, aerr := s.convs.history(ctx, req)
	switch {
	case aerr == nil:
	case aerr.Code == apierr.CodePreviousResponseNotFound:
		return nil, &sessionChainError{failClosed: failPreviousNotFound, aerr: apierr.UpstreamUnavailable(http.StatusServiceUnavailable,
			"previous_response_id '%s' names a store: false response whose conversation this WebSocket session does not hold (it was made on another socket, or its oldest turns were dropped past limits.ws_session_memory_bytes or, for all sockets together, limits.ws_session_memory_total_bytes), and the upstream it goes to keeps no store: false response for it; send the conversation's input in full",
			req.previousResponseID)}
	case aerr.Code == apierr.CodeUpstreamUnavailable: // the store could not be read (storeUnavailable)
		return nil, &sessionChainError{failClosed: failOwnerLookupFailed, aerr: aerr}
	default:
		return nil, &sessionChainError{aerr: aerr}
	}
	out, err := rehydratedBody(body, history)
	if err != nil {
		return nil, &notSentError{err: err}
	}
	return out, nil
}

// sessionChainFailure answers a follow-up sessionChainBody refused (ok
// false for any other error), before any upstream was called: a chain the
// session does not hold fails closed with the retryable
// upstream_unavailable (README, "Privacy").
func (s *Server) sessionChainFailure(out responder, req *clientRequest, err error) (res attemptResult, ok bool) {
	var chainErr *sessionChainError
	if !errors.As(err, &chainErr) {
		return attemptResult{}, false
	}
	if chainErr.failClosed != "" {
		s.failClosedWith(out, req, chainErr.failClosed, chainErr.aerr)
	} else {
		out.fail(req, chainErr.aerr, failBeforeStream)
	}
	return attemptResult{next: nextDone}, true
}

// refuseFailedSessionTurn answers a follow-up on a client WebSocket whose
// previous_response_id names a store:false turn of the same session that
// ended response.failed (putFailed), and reports whether it did. No
// upstream is called: an upstream keeps no store:false response, and a
// failed one has no conversation to continue, so a retry could never
// succeed; the 503 a chain the socket does not hold gets would say
// otherwise. The answer is OpenAI's for a response it cannot continue,
// 400 previous_response_not_found on previous_response_id: it is what an
// upstream answers for any store:false response over HTTP, what the
// gateway answers for a conversation with a deleted or expired part
// (conversations.history), and the code clients such as Codex take as
// "resend the conversation in full". It is not counted in
// continuity_fail_closed_total: the gateway lost nothing the client could
// continue from.
func (s *Server) refuseFailedSessionTurn(out responder, req *clientRequest) bool {
	if !req.viaWebSocket || req.memory == nil || req.previousResponseID == "" || req.ep.chat || !req.memory.failedTurn(req.previousResponseID) {
		return false
	}
	out.fail(req, apierr.Invalid("previous_response_id", apierr.CodePreviousResponseNotFound,
		"Previous response with id '%s' cannot be continued: it failed (response.failed) on this WebSocket, and a failed store: false response is kept by no upstream; send the conversation's input in full, or name the last response that completed",
		req.previousResponseID), failInvalid)
	return true
}

// sessionChainBodyOverSocket is req's body as it goes over a connection
// to u's WebSocket; connServed says whether that connection served the
// response previous_response_id names. A store:false follow-up stays
// incremental only where the previous response is held: on the connection
// that served it (the upstream keeps a store:false response on that
// connection only, so one it closed, after OpenAI's 60-minute limit or a
// restart, holds it nowhere), unless it was continued after a failure (the
// upstream that finished it holds it with its own tool call ids, while the
// client keeps those it was shown, README "Continuation", so an output
// naming the client's call id would find no call there). Sent to any other
// upstream or connection (the follow-up is not pinned to its owner when the
// session's memory holds its turn: selfContainedChain), or after a
// continuation, it goes in full from the session's memory, with the calls
// as the client has them, as over HTTP. A follow-up whose turn the memory
// does not hold (made on another client socket, before a reconnect) is
// pinned to its owner: it stays incremental on the connection that served
// it (the same session scope's socket, still open), and on any other
// connection, which cannot hold it, it is judged as over HTTP
// (sessionChainBody): in full from a stored chain, else it fails closed
// before the upstream is called, rather than meeting
// previous_response_not_found on every retry (README "Privacy").
func (s *Server) sessionChainBodyOverSocket(ctx context.Context, req *clientRequest, u *upstream.Upstream, connServed bool) ([]byte, error) {
	if !keepsSessionTurn(req) || req.previousResponseID == "" {
		return req.body, nil
	}
	if connServed && (!req.memory.holds(req.previousResponseID) ||
		req.memory.heldBy(req.previousResponseID) == u.Name() && !req.memory.wasContinued(req.previousResponseID)) {
		return req.body, nil
	}
	return s.sessionChainBody(ctx, req, req.body)
}

// selfContainedChain reports whether req is a store:false follow-up on a
// client WebSocket whose previous response the session's memory holds: it
// can go in full to any target (sessionChainBody), so it is routed,
// replayed and continued like any request, not pinned to the upstream that
// owns previous_response_id (README "Failover and replay"). An ancestor
// the memory no longer holds (evicted past limits.ws_session_memory_bytes)
// fails it closed when its body is built, before any upstream is called.
func selfContainedChain(req *clientRequest) bool {
	return keepsSessionTurn(req) && req.previousResponseID != "" && !req.ep.chat && req.memory.holds(req.previousResponseID)
}
