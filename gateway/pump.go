package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/apierr"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
)

// eventSink is where a pump writes client-facing events: SSE here, WebSocket
// frames in the WebSocket bridge.
type eventSink interface {
	// Event writes one Responses event or one Chat Completions chunk.
	Event(name string, data []byte) error
	// Done writes the Chat Completions [DONE] sentinel.
	Done() error
}

// sseSink writes SSE to an HTTP client. With auto off it leaves flushing to
// Flush, which the pump calls just before it would block on the upstream:
// events that arrived together go out in one write, and none waits.
type sseSink struct {
	w       *sse.Writer
	rc      *http.ResponseController
	auto    bool
	dirty   bool
	timeout time.Duration // per flush: a client that stops reading is cut
}

// writeOnly hides the ResponseWriter's flush methods from the sse.Writer.
type writeOnly struct{ w io.Writer }

func (o writeOnly) Write(p []byte) (int, error) { return o.w.Write(p) }

func newSSESink(w http.ResponseWriter, writeTimeout time.Duration) *sseSink {
	return &sseSink{w: sse.NewWriter(writeOnly{w}), rc: http.NewResponseController(w), auto: true, timeout: writeTimeout}
}

func (s *sseSink) Event(name string, data []byte) error {
	if err := s.w.WriteEvent(name, data); err != nil {
		return err
	}
	return s.wrote()
}

func (s *sseSink) Done() error {
	if err := s.w.WriteDone(); err != nil {
		return err
	}
	return s.wrote()
}

func (s *sseSink) wrote() error {
	s.dirty = true
	if s.auto {
		return s.Flush()
	}
	return nil
}

// Flush sends what was written since the last flush.
func (s *sseSink) Flush() error {
	if !s.dirty {
		return nil
	}
	s.dirty = false
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("flushing to the client: %w", err)
	}
	return nil
}

// Reasons a client stream ended, as counted in sluice_stream_terminal_total.
const (
	reasonCompleted     = "completed"
	reasonFailed        = "failed"
	reasonIncomplete    = "incomplete"
	reasonDone          = "done"
	reasonUpstreamError = "upstream_error"
	reasonRecovered     = "recovered"
	reasonCut           = "upstream_cut"
	reasonIdle          = "idle_timeout"
	reasonOversize      = "oversize_event"
	reasonGarbage       = "unparseable_event"
	reasonDrain         = "drain"
	reasonClientGone    = "client_gone"
)

// pump moves one upstream stream to the client and guarantees the client
// exactly one terminal event, whatever the upstream does.
type pump struct {
	s       *Server
	ctx     context.Context // the client's
	upCtx   context.Context // the upstream attempt's (carries the cancel cause)
	req     *clientRequest
	u       *upstream.Upstream
	sink    eventSink
	surface string

	lastSeq    int64
	responseID string
	sawFinish  bool // chat: a chunk carried a finish_reason

	anchor   *pendingAnchor // the response's anchor write, once response.created was seen
	cleanEnd bool           // the upstream ended the response itself (its connection may be reused)
}

// run forwards first and every later event until a terminal one.
func (p *pump) run(src eventSource, first sse.Event, start time.Time) string {
	ev := first
	firstWritten := false
	for {
		reason, done, wrote := p.handle(ev)
		if wrote && !firstWritten {
			firstWritten = true
			p.s.metrics.firstEvent.WithLabelValues(p.surface).Observe(time.Since(start).Seconds())
		}
		if done {
			return reason
		}
		var err error
		ev, err = src.Next()
		if err != nil {
			if p.ctx.Err() != nil {
				return reasonClientGone
			}
			reason, e := p.readFailure(err)
			return p.terminate(reason, e)
		}
	}
}

// readFailure classifies why reading the upstream stopped.
func (p *pump) readFailure(err error) (string, *apierr.Error) {
	switch cause := context.Cause(p.upCtx); {
	case errors.Is(cause, errDraining):
		return reasonDrain, apierr.StreamIncomplete("the gateway is shutting down; retry the request")
	case errors.Is(cause, errIdleTimeout):
		return reasonIdle, apierr.StreamIncomplete("the upstream sent nothing for %s", p.s.opts.IdleTimeout)
	case errors.Is(err, sse.ErrEventTooLarge):
		return reasonOversize, apierr.StreamIncomplete("the upstream sent an event larger than %d bytes", p.s.opts.MaxEventBytes)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return reasonCut, apierr.StreamIncomplete("the upstream closed the stream before it was complete")
	default:
		return reasonCut, apierr.StreamIncomplete("the upstream stream broke: %s", upstream.RedactError(err))
	}
}

// terminate writes the one terminal event for a stream that did not end on
// its own, and returns the reason.
func (p *pump) terminate(reason string, e *apierr.Error) string {
	if p.ctx.Err() != nil {
		return reasonClientGone
	}
	p.s.log.Warn("stream ended by the gateway", "surface", p.surface, "upstream", p.u.Name(), "reason", reason, "response_id", LogID(p.responseID))
	p.writeTerminal(e)
	return reason
}

// writeTerminal writes e as the stream's terminal event.
func (p *pump) writeTerminal(e *apierr.Error) {
	if p.req.ep.chat {
		_ = p.sink.Event("", chatErrorChunk(e))
		_ = p.sink.Done()
		return
	}
	_ = p.sink.Event("response.failed", p.failedEvent(e))
}

// handle forwards one event. done reports that the stream is over (a
// terminal event was written, or the client is gone).
func (p *pump) handle(ev sse.Event) (reason string, done, wrote bool) {
	if p.req.ep.chat {
		return p.handleChat(ev)
	}
	return p.handleResponses(ev)
}

func (p *pump) handleResponses(ev sse.Event) (string, bool, bool) {
	if ev.Error != nil {
		return p.upstreamError(ev.Error, "error"), true, true
	}
	if ev.Done {
		return p.terminate(reasonCut, apierr.StreamIncomplete("the upstream ended the stream without a terminal event")), true, true
	}
	if !gjson.ValidBytes(ev.Data) {
		return p.terminate(reasonGarbage, apierr.StreamIncomplete("the upstream sent an unparseable event")), true, true
	}
	obj := parseJSON(ev.Data)
	typ := obj.Get("type").Str
	if seq := obj.Get("sequence_number"); seq.Type == gjson.Number {
		p.lastSeq = seq.Int()
	}
	switch typ {
	case "error":
		return p.upstreamError(ev.Data, typ), true, true
	case "response.created":
		p.responseID = strings.Clone(obj.Get("response.id").Str)
		if c := p.s.cont; c != nil && p.responseID != "" && p.req.recordable() {
			p.anchor = c.recordAsync(c.anchorFor(p.req, p.responseID, p.u.Name()))
		}
	case "response.completed", "response.incomplete":
		p.confirmAnchor(obj)
	case "response.failed":
		e := obj.Get("response.error")
		verdict := p.s.policy.Recover(p.ctx, hostabi.RecoverInput{Surface: p.surface, Upstream: p.u.Name(), EventType: typ,
			Code: e.Get("code").String(), Type: e.Get("type").String(), Param: e.Get("param").String(), Message: e.Get("message").String()})
		if ce := p.s.recoveredError(verdict); ce != nil {
			p.s.onRecovered(p.ctx, p.req, verdict)
			return p.terminate(verdictReason(verdict), ce), true, true
		}
	}
	if p.responseID == "" {
		if id := obj.Get("response.id"); id.Type == gjson.String {
			p.responseID = strings.Clone(id.Str)
		}
	}
	name := ev.Name
	if name == "" {
		name = typ
	}
	if err := p.sink.Event(name, ev.Data); err != nil {
		return reasonClientGone, true, false
	}
	switch typ {
	case "response.completed":
		p.cleanEnd = true
		return reasonCompleted, true, true
	case "response.failed":
		p.cleanEnd = true
		return reasonFailed, true, true
	case "response.incomplete":
		p.cleanEnd = true
		return reasonIncomplete, true, true
	}
	return "", false, true
}

// confirmAnchor makes the response's anchor durable before the client sees
// its completion: a crash right after completion must not lose it.
func (p *pump) confirmAnchor(obj gjson.Result) {
	c := p.s.cont
	if c == nil || !p.req.recordable() {
		return
	}
	if p.anchor == nil {
		id := strings.Clone(obj.Get("response.id").Str)
		if id == "" {
			id = p.responseID
		}
		if id == "" {
			return
		}
		p.responseID = id
		p.anchor = c.recordAsync(c.anchorFor(p.req, id, p.u.Name()))
	}
	if err := p.anchor.wait(p.ctx); err != nil {
		p.s.log.Error("response completed without a durable anchor", "response_id", LogID(p.responseID), "error", err)
	}
}

// upstreamError turns an upstream error payload into the client's terminal
// event through the recover policy: a bare `error` never reaches a Responses
// client (Codex ignores it); it becomes response.failed with the upstream's
// code, or stream_incomplete when recovered.
func (p *pump) upstreamError(payload []byte, eventType string) string {
	p.cleanEnd = true // the upstream ended this response with its error; its connection is fine
	perr, _ := apierr.Parse(payload)
	obj := gjson.ParseBytes(payload)
	if perr.Code == "" && perr.Message == "" {
		// Responses error events carry code/message at the top level.
		perr.Code, perr.Message, perr.Param = obj.Get("code").String(), obj.Get("message").String(), obj.Get("param").String()
	}
	if perr.Message == "" && perr.Code == "" {
		perr.Message = strings.TrimSpace(string(payload))
	}
	verdict := p.s.policy.Recover(p.ctx, hostabi.RecoverInput{Surface: p.surface, Upstream: p.u.Name(), EventType: eventType,
		HTTPStatus: int(obj.Get("status").Int()), Code: perr.Code, Type: perr.Type, Param: perr.Param, Message: perr.Message})
	if ce := p.s.recoveredError(verdict); ce != nil {
		p.s.onRecovered(p.ctx, p.req, verdict)
		return p.terminate(verdictReason(verdict), ce)
	}
	if perr.Type == "" {
		perr.Type = apierr.TypeServer
	}
	if perr.Code == "" {
		perr.Code = "upstream_error"
	}
	p.terminate(reasonUpstreamError, &perr)
	return reasonUpstreamError
}

func verdictReason(v hostabi.RecoverOutput) string {
	if v.Verdict == hostabi.RecoverFailClosed {
		return "fail_closed"
	}
	return reasonRecovered
}

func (p *pump) handleChat(ev sse.Event) (string, bool, bool) {
	if ev.Error != nil {
		return p.chatError(ev.Error), true, true
	}
	if ev.Done {
		if !p.sawFinish {
			return p.terminate(reasonCut, apierr.StreamIncomplete("the upstream ended the stream before a finish chunk")), true, true
		}
		if err := p.sink.Done(); err != nil {
			return reasonClientGone, true, false
		}
		return reasonDone, true, true
	}
	if !gjson.ValidBytes(ev.Data) {
		return p.terminate(reasonGarbage, apierr.StreamIncomplete("the upstream sent an unparseable chunk")), true, true
	}
	obj := parseJSON(ev.Data)
	if obj.Get("error").Exists() {
		return p.chatError(ev.Data), true, true
	}
	for _, fr := range obj.Get("choices.#.finish_reason").Array() {
		if fr.Type == gjson.String && fr.Str != "" {
			p.sawFinish = true
		}
	}
	if err := p.sink.Event("", ev.Data); err != nil {
		return reasonClientGone, true, false
	}
	return "", false, true
}

// chatError relays an upstream error chunk, through the recover policy, then
// ends the stream with [DONE].
func (p *pump) chatError(payload []byte) string {
	perr, _ := apierr.Parse(payload)
	verdict := p.s.policy.Recover(p.ctx, hostabi.RecoverInput{Surface: p.surface, Upstream: p.u.Name(), EventType: "error",
		Code: perr.Code, Type: perr.Type, Param: perr.Param, Message: perr.Message})
	if ce := p.s.recoveredError(verdict); ce != nil {
		return p.terminate(verdictReason(verdict), ce)
	}
	if perr.Message == "" && perr.Code == "" {
		perr = apierr.Error{Type: apierr.TypeServer, Code: "upstream_error", Message: strings.TrimSpace(string(payload))}
	}
	p.terminate(reasonUpstreamError, &perr)
	return reasonUpstreamError
}

// failedEvent is a response.failed event carrying e, numbered after the last
// event the client saw.
func (p *pump) failedEvent(e *apierr.Error) []byte {
	id := p.responseID
	if id == "" {
		id = "resp_sluice_failed"
	}
	ev := map[string]any{
		"type":            "response.failed",
		"sequence_number": p.lastSeq + 1,
		"response": map[string]any{
			"id": id, "object": "response", "created_at": time.Now().Unix(), "status": "failed",
			"model": p.req.model, "output": []any{},
			"error": map[string]any{"code": e.Code, "message": e.Message},
		},
	}
	b, _ := json.Marshal(ev)
	return b
}

// chatErrorChunk is the Chat Completions in-stream error chunk.
func chatErrorChunk(e *apierr.Error) []byte {
	b, err := json.Marshal(e)
	if err != nil {
		return []byte(fmt.Sprintf(`{"error":{"message":%q,"type":"server_error","code":"stream_incomplete","param":null}}`, e.Message))
	}
	return b
}

// parseJSON parses b without copying it: results alias b, so b must not
// change while they are used, and strings kept beyond that are cloned.
func parseJSON(b []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(b), len(b)))
}
