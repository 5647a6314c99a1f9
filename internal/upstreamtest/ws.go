package upstreamtest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// maxWSMessage bounds one client message (Codex sends whole histories).
const maxWSMessage = 64 << 20

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// serveWebSocket is the Responses WebSocket mode on GET /v1/responses.
func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		s.writeUnauthorized(w, r)
		return
	}
	if !isUpgrade(r) {
		writeError(w, http.StatusBadRequest, ErrorBody("GET /v1/responses expects a WebSocket upgrade.", "invalid_request_error", "", ""))
		return
	}
	if s.opts.DisableWebSocket {
		s.wsRefused.Add(1)
		writeError(w, http.StatusUpgradeRequired, ErrorBody("WebSocket mode is not supported by this upstream; use HTTP.", "invalid_request_error", "websocket_not_supported", ""))
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	connNo := int(s.wsConnects.Add(1))
	made := map[string]bool{} // the responses played on this socket (PreviousPerWebSocket)
	c.SetReadLimit(maxWSMessage)
	var hdr http.Header
	if !s.opts.DisableRecording {
		hdr = r.Header.Clone()
	}
	// The request context is not reliable after a hijack; s.ctx ends the
	// socket on Close, and a read or write error ends it when the client goes.
	ctx := s.ctx
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			if s.wsError(ctx, c, http.StatusBadRequest, "Binary messages are not supported.", "") != nil {
				return
			}
			continue
		}
		var f fields
		jsonErr := json.Unmarshal(msg, &f)
		handle := s.record(Request{
			Method: http.MethodGet, Path: "/v1/responses", Header: hdr, Body: msg, ReceivedAt: time.Now(),
			WebSocket: true, WebSocketConn: connNo, Model: f.Model, Stream: true, PreviousResponseID: f.PreviousResponseID,
		})
		f.Stream = true
		var werr error
		switch {
		case jsonErr != nil:
			werr = s.wsError(ctx, c, http.StatusBadRequest, "We could not parse the JSON body of your request.", "")
		case f.Type != "response.create":
			werr = s.wsError(ctx, c, http.StatusBadRequest, "Unsupported message type '"+f.Type+"'; expected 'response.create'.", "type")
		default:
			if m, ok := s.checkModel(f.Model); !ok {
				werr = s.wsError(ctx, c, http.StatusNotFound, m, "model")
				break
			}
			if f.PreviousResponseID != "" && (s.opts.StrictPrevious && !s.isKnown(f.PreviousResponseID) || s.opts.PreviousPerWebSocket && !made[f.PreviousResponseID]) {
				t := s.newTurn(epResponses, &f)
				t.forget = true
				if !s.playWS(ctx, c, s.prev, t) {
					return
				}
				break
			}
			if s.refusesPrefill(msg, epResponses) {
				body := prefillRefusal(epResponses)
				werr = c.Write(ctx, websocket.MessageText, marshal(obj{{"type", "error"}, {"status", http.StatusBadRequest}, {"error", rawJSON(innerError(body))}}))
				break
			}
			p := s.next()
			t := s.newTurn(epResponses, &f)
			if p.text != nil {
				t.prefill, t.hasPrefill = trailingAssistant(msg, epResponses)
			}
			s.setResponseID(handle, t.id)
			if !p.failed() {
				made[t.id] = true
			}
			if !s.playWS(ctx, c, p, t) {
				return
			}
		}
		if werr != nil {
			return
		}
	}
}

func (s *Server) wsError(ctx context.Context, c *websocket.Conn, status int, msg, param string) error {
	code := ""
	if status == http.StatusNotFound {
		code = "model_not_found"
	}
	ev := marshal(obj{{"type", "error"}, {"status", status}, {"error", errorObject(msg, "invalid_request_error", code, param)}})
	return c.Write(ctx, websocket.MessageText, ev)
}

// playWS plays p on a socket; false when the socket is finished.
func (s *Server) playWS(ctx context.Context, c *websocket.Conn, p *plan, t *turn) bool {
	if !s.wait(ctx, p.latency) {
		return false
	}
	buf := s.getBuf()
	defer s.putBuf(buf)
	if p.failed() {
		*buf = p.wsError.render((*buf)[:0], &t.v)
		return c.Write(ctx, websocket.MessageText, *buf) == nil
	}
	frames := s.frames(p, t)
	s.markKnown(t)
	for i := range frames {
		if i > 0 && p.gap > 0 && !s.wait(ctx, p.gap) {
			return false
		}
		if frames[i].ws == nil {
			continue
		}
		if frames[i].stamped {
			t.v.stamp()
		}
		*buf = frames[i].ws.render((*buf)[:0], &t.v)
		if err := c.Write(ctx, websocket.MessageText, *buf); err != nil {
			return false
		}
	}
	switch p.end {
	case EndCut:
		_ = c.CloseNow()
		return false
	case EndHang:
		// Keep reading (and dropping) client messages so a client close or
		// disconnect is noticed; Close cancels ctx, which ends the read.
		hctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cancel()
			for {
				if _, _, err := c.Read(hctx); err != nil {
					return
				}
			}
		}()
		<-hctx.Done()
		_ = c.CloseNow()
		<-done
		return false
	}
	return true
}
