package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// failKind says how a gateway error reaches a client that has seen nothing
// of its request yet.
type failKind int

const (
	// failBeforeStream: the request never reached a usable upstream (fail
	// closed, no upstream left). WebSocket clients get an error frame with
	// status; HTTP Responses stream clients get one response.failed event,
	// HTTP Chat stream clients the status and JSON error.
	failBeforeStream failKind = iota
	// failAsTerminal: the upstream answered with an error the gateway
	// rewrote (recovered). Every stream client gets response.failed.
	failAsTerminal
	// failInvalid: the request itself is wrong (a 4xx the gateway decides).
	// HTTP clients get the JSON error even on streams, as for validation.
	failInvalid
)

// responder is the client side of one request: an HTTP response, or one
// response.create on a WebSocket.
type responder interface {
	// fail answers with a gateway error before any event was sent.
	fail(req *clientRequest, e *apierr.Error, kind failKind)
	// relay passes a complete upstream answer through as it is.
	relay(req *clientRequest, status int, header http.Header, body []byte)
	// commit starts the event stream; header holds the upstream's headers.
	commit(header http.Header) eventSink
}

// httpResponder answers over HTTP: JSON, or SSE for stream requests.
type httpResponder struct {
	s *Server
	w http.ResponseWriter
}

// failsWithStatus reports whether an HTTP client that has seen nothing of
// req gets a gateway error of kind as its status and JSON body; otherwise
// it gets a 200 event stream that ends with the error. A Chat stream that
// failed before anything was sent (no stream is committed then:
// clientStream.fail ends a committed one itself) gets the status, as from
// OpenAI's API, so that the SDKs' retries see a 429 or 5xx. A Responses
// stream opens with response.created even then (README).
func failsWithStatus(req *clientRequest, kind failKind) bool {
	return !req.stream || kind == failInvalid || (req.ep.chat && kind == failBeforeStream)
}

// failNothingSent is the failKind of a gateway error for a request no
// upstream was sent and nothing was written for (a follow-up whose owner
// could not be looked up; Server.forward answers a request with no target
// usable by the same rule): an HTTP client, a Responses stream's too,
// gets the status and JSON error with its Retry-After, which SDKs and
// Codex wait out, where they retry a response.failed at once (README
// "Failover and replay", "Scale-out with Redis"); a WebSocket keeps its
// error frame, which carries the status and the wait already.
func failNothingSent(req *clientRequest) failKind {
	if req.viaWebSocket {
		return failBeforeStream
	}
	return failInvalid
}

func (h *httpResponder) fail(req *clientRequest, e *apierr.Error, kind failKind) {
	if failsWithStatus(req, kind) {
		e.Write(h.w)
		return
	}
	h.s.writeGatewayTerminal(req, h.commit(nil), e)
	reason := "gateway_error"
	if req.meta.endReason() == reasonDrain { // stopped by the drain (Server.drained), counted as a stream it cuts is
		reason = reasonDrain
	}
	h.s.metrics.streamTerminal.WithLabelValues(req.surface(), reason).Inc()
}

func (h *httpResponder) relay(_ *clientRequest, status int, header http.Header, body []byte) {
	_ = http.NewResponseController(h.w).SetWriteDeadline(time.Now().Add(h.s.opts.ClientWriteTimeout))
	copyResponseHeaders(h.w.Header(), header)
	h.w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	h.w.WriteHeader(status)
	_, _ = h.w.Write(body)
}

func (h *httpResponder) commit(header http.Header) eventSink {
	hdr := h.w.Header()
	copyResponseHeaders(hdr, header)
	hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	hdr.Del("Content-Length")
	h.w.WriteHeader(http.StatusOK)
	return newSSESink(h.w, h.s.opts.ClientWriteTimeout)
}
