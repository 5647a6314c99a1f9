package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/apierr"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
)

// Cooldowns applied when an upstream gives no hint of its own.
const (
	defaultRateLimitCooldown = 5 * time.Second
	defaultQuotaCooldown     = 60 * time.Second
	connectFailureCooldown   = 5 * time.Second
	maxUpstreamErrorBody     = 1 << 20
)

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	s.serveAPI(w, r, responsesEndpoint)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	s.serveAPI(w, r, chatEndpoint)
}

// serveAPI is the request pipeline: validate, rewrite, then forward with
// failover.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, ep endpoint) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	surface := ep.jsonLabel
	defer func() { s.metrics.requests.WithLabelValues(surface, statusLabel(sw.status)).Inc() }()

	if s.draining.Load() {
		apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the gateway is shutting down; retry on another instance").Write(sw)
		return
	}
	body, aerr := readBody(sw, r, s.opts.MaxBodyBytes)
	if aerr != nil {
		aerr.Write(sw)
		return
	}
	req, aerr := parseRequest(ep, body)
	if aerr != nil {
		aerr.Write(sw)
		return
	}
	surface = req.surface()
	req.header = r.Header
	req.clientKeyHash = clientKeyHash(r.Header)
	if aerr := s.rewrite(r.Context(), req); aerr != nil {
		aerr.Write(sw)
		return
	}
	surface = req.surface()
	req.scope = scopeOf(r.Header, req.clientKeyHash)
	if !s.pin(r.Context(), sw, req) {
		return
	}
	s.forward(r.Context(), sw, req, start)
}

// pin resolves the owner of previous_response_id. It returns false when the
// request was failed closed: the owner is known but unusable, or the lookup
// failed. A request is never silently sent to another upstream then.
func (s *Server) pin(ctx context.Context, w http.ResponseWriter, req *clientRequest) bool {
	if s.cont == nil || req.previousResponseID == "" || req.ep.chat {
		return true
	}
	res := s.cont.resolve(ctx, req.surface(), req.previousResponseID, req.scope)
	if res.err != nil {
		s.failClosed(w, req, failOwnerLookupFailed, "owner lookup failed: the gateway could not read which upstream owns previous_response_id; retry the request")
		return false
	}
	if res.owner == "" {
		return true
	}
	u := s.pool.Get(res.owner)
	if u == nil {
		s.failClosed(w, req, failOwnerUnavailable, fmt.Sprintf("upstream %q that owns previous_response_id is no longer configured", res.owner))
		return false
	}
	if ok, why := u.Usable(time.Now()); !ok {
		s.failClosed(w, req, failOwnerUnavailable, fmt.Sprintf("upstream %q that owns previous_response_id is unavailable (%s); retry later", res.owner, why))
		return false
	}
	req.pinned = u
	return true
}

// failClosed answers a continuity failure with the retryable
// upstream_unavailable error, without calling any upstream.
func (s *Server) failClosed(w http.ResponseWriter, req *clientRequest, reason, message string) {
	s.metrics.failClosed.WithLabelValues(req.surface(), reason).Inc()
	s.log.Warn("continuity fail closed", "surface", req.surface(), "reason", reason, "previous_response_id", LogID(req.previousResponseID))
	s.failRequest(w, req, apierr.UpstreamUnavailable(http.StatusBadGateway, "%s", message))
}

// failRequest answers a validated request with a gateway error in the form
// its client is reading: one response.failed event on a Responses stream, an
// error chunk and [DONE] on a Chat stream, a JSON error otherwise.
func (s *Server) failRequest(w http.ResponseWriter, req *clientRequest, e *apierr.Error) {
	if !req.stream {
		e.Write(w)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	p := &pump{s: s, req: req, sink: newSSESink(w), surface: req.surface(), lastSeq: -1}
	p.writeTerminal(e)
	s.metrics.streamTerminal.WithLabelValues(req.surface(), "gateway_error").Inc()
}

// rewrite runs the rewrite policy and applies its result to req.
func (s *Server) rewrite(ctx context.Context, req *clientRequest) *apierr.Error {
	out := s.policy.Rewrite(ctx, hostabi.RewriteInput{Surface: req.surface(), Endpoint: "/v1" + req.ep.path, Body: req.body, Headers: policyHeaders(req.header)})
	if rej := out.Reject; rej != nil {
		status := rej.Status
		if status < 400 || status > 599 {
			status = http.StatusBadRequest
		}
		typ := rej.Type
		if typ == "" {
			typ = apierr.TypeInvalidRequest
		}
		return &apierr.Error{Status: status, Type: typ, Code: rej.Code, Param: rej.Param, Message: rej.Message}
	}
	if out.Body != nil && !bytes.Equal(out.Body, req.body) {
		if !gjson.ValidBytes(out.Body) {
			s.log.Error("rewrite policy produced invalid JSON; using the original body")
		} else {
			prev := *req
			req.body = out.Body
			if aerr := req.readFields(gjson.ParseBytes(out.Body)); aerr != nil {
				s.log.Error("rewrite policy produced an invalid request; using the original body", "error", aerr.Message)
				*req = prev
			}
		}
	}
	req.setHeaders, req.removeHeaders, req.upstreamName = out.SetHeaders, out.RemoveHeaders, out.Upstream
	return nil
}

// attemptOutcome is how one upstream attempt ended.
type attemptOutcome struct {
	done      bool          // the client has its answer (or is gone); stop
	why       string        // for the failure summary when not done
	clientErr *apierr.Error // what the client gets if no later attempt succeeds
}

// forward sends req to upstreams until one answers, failing over before the
// first byte reaches the client.
func (s *Server) forward(ctx context.Context, w http.ResponseWriter, req *clientRequest, start time.Time) {
	var tried []*upstream.Upstream
	var failures []string
	var lastErr *apierr.Error
	skip := func(u *upstream.Upstream) bool {
		for _, t := range tried {
			if t == u {
				return true
			}
		}
		if req.pinned != nil {
			return u != req.pinned
		}
		return req.upstreamName != "" && u.Name() != req.upstreamName
	}
	for attempt := 0; attempt < s.opts.MaxAttempts; attempt++ {
		u, err := s.pool.Pick(skip)
		if err != nil {
			break
		}
		out := s.attempt(ctx, w, req, u, start)
		if out.done {
			return
		}
		tried = append(tried, u)
		failures = append(failures, u.Name()+": "+out.why)
		if out.clientErr != nil {
			lastErr = out.clientErr
		}
	}
	if ctx.Err() != nil {
		return
	}
	if req.pinned != nil {
		why := "it is unavailable"
		if len(failures) > 0 {
			why = failures[len(failures)-1]
		}
		s.failClosed(w, req, failOwnerUnavailable, fmt.Sprintf("the upstream that owns previous_response_id failed (%s); retry later", why))
		return
	}
	switch {
	case lastErr != nil && (lastErr.Status == http.StatusTooManyRequests || upstream.IsQuotaCode(lastErr.Code)):
		// Every upstream is out of capacity: tell the client what the last one said.
	case len(failures) == 0 && req.upstreamName != "":
		lastErr = apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "upstream %q chosen by policy is unavailable or unknown", req.upstreamName)
	case len(failures) == 0:
		lastErr = apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "no healthy upstream")
	default:
		lastErr = apierr.UpstreamUnavailable(http.StatusBadGateway, "no upstream could serve the request: %s", strings.Join(failures, "; "))
	}
	lastErr.Write(w)
}

// attempt sends req to u once and, when u answers usefully, streams or
// copies its answer to the client.
func (s *Server) attempt(ctx context.Context, w http.ResponseWriter, req *clientRequest, u *upstream.Upstream, start time.Time) attemptOutcome {
	release := u.Acquire()
	defer release()

	upCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopDrain := context.AfterFunc(s.streamsCtx, func() { cancel(context.Cause(s.streamsCtx)) })
	defer stopDrain()

	upReq, err := http.NewRequestWithContext(upCtx, http.MethodPost, u.URL(req.ep.path), bytes.NewReader(req.body))
	if err != nil {
		return attemptOutcome{why: err.Error()}
	}
	upReq.Header = upstreamHeaders(req.header, u.Config().APIKey, req.stream, req.setHeaders, req.removeHeaders)
	upReq.ContentLength = int64(len(req.body))

	resp, err := s.client.Do(upReq)
	if err != nil {
		return s.transportFailure(ctx, upCtx, w, req, u, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode/100 != 2 {
		return s.statusFailure(ctx, w, req, u, resp)
	}
	ct := resp.Header.Get("Content-Type")
	if !req.stream || !strings.HasPrefix(strings.ToLower(ct), "text/event-stream") {
		return s.copyJSON(ctx, upCtx, w, req, u, resp)
	}
	return s.stream(ctx, upCtx, cancel, w, req, u, resp, start)
}

// transportFailure handles an attempt that got no HTTP answer.
func (s *Server) transportFailure(ctx, upCtx context.Context, w http.ResponseWriter, req *clientRequest, u *upstream.Upstream, err error) attemptOutcome {
	if ctx.Err() != nil { // the client went away
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "client_gone").Inc()
		return attemptOutcome{done: true}
	}
	if errors.Is(context.Cause(upCtx), errDraining) {
		apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the gateway is shutting down").Write(w)
		return attemptOutcome{done: true}
	}
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "transport_error").Inc()
	why := upstream.RedactError(err)
	s.pool.Cooldown(u, connectFailureCooldown, "transport: "+why)
	s.log.Warn("upstream transport failure", "upstream", u.Name(), "error", why)
	return attemptOutcome{why: why}
}

// statusFailure handles a non-2xx upstream answer: fail over on capacity,
// auth and server errors; otherwise let the recover policy decide.
func (s *Server) statusFailure(ctx context.Context, w http.ResponseWriter, req *clientRequest, u *upstream.Upstream, resp *http.Response) attemptOutcome {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamErrorBody))
	perr, _ := apierr.Parse(body)
	perr.Status = resp.StatusCode
	if perr.Message == "" {
		perr.Message = strings.TrimSpace(string(body))
		if len(perr.Message) > 200 {
			perr.Message = perr.Message[:200]
		}
	}
	status := resp.StatusCode
	switch {
	case status == http.StatusTooManyRequests || upstream.IsQuotaCode(perr.Code):
		outcome := "rate_limited"
		d, ok := upstream.RetryAfter(resp.Header, perr.Message, time.Now())
		if !ok {
			d = defaultRateLimitCooldown
			if perr.Code != "" && perr.Code != "rate_limit_exceeded" {
				d, outcome = defaultQuotaCooldown, "quota"
			}
		}
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), outcome).Inc()
		s.pool.Cooldown(u, d, fmt.Sprintf("HTTP %d %s", status, perr.Code))
		ce := perr
		if ce.Type == "" {
			ce.Type = apierr.TypeServer
		}
		return attemptOutcome{why: fmt.Sprintf("HTTP %d %s", status, perr.Code), clientErr: &ce}
	case (status == http.StatusUnauthorized || status == http.StatusForbidden || upstream.IsAuthCode(perr.Code)) && u.Config().APIKey != "":
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "auth_failure").Inc()
		s.pool.MarkFailed(u, fmt.Sprintf("HTTP %d %s", status, perr.Code))
		return attemptOutcome{why: fmt.Sprintf("HTTP %d: the upstream rejected the gateway's credentials", status)}
	case status >= 500:
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "server_error").Inc()
		if d, ok := upstream.RetryAfter(resp.Header, perr.Message, time.Now()); ok {
			s.pool.Cooldown(u, d, fmt.Sprintf("HTTP %d", status))
		}
		return attemptOutcome{why: fmt.Sprintf("HTTP %d %s", status, firstNonEmpty(perr.Code, perr.Message))}
	}
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "client_error").Inc()
	verdict := s.policy.Recover(ctx, hostabi.RecoverInput{Surface: req.surface(), Upstream: u.Name(), HTTPStatus: status,
		Code: perr.Code, Type: perr.Type, Param: perr.Param, Message: perr.Message})
	if e := s.recoveredError(verdict, req.stream); e != nil {
		s.log.Info("upstream error recovered", "upstream", u.Name(), "code", perr.Code, "verdict", verdict.Verdict.String())
		s.onRecovered(ctx, req, verdict)
		s.failRequest(w, req, e)
		return attemptOutcome{done: true}
	}
	copyResponseHeaders(w.Header(), resp.Header)
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return attemptOutcome{done: true}
}

// onRecovered clears the stale anchor of a request whose previous response
// the upstream lost, so the next turn is not pinned to it again.
func (s *Server) onRecovered(ctx context.Context, req *clientRequest, v hostabi.RecoverOutput) {
	if v.Verdict != hostabi.RecoverRecover || req.previousResponseID == "" || s.cont == nil {
		return
	}
	s.metrics.failClosed.WithLabelValues(req.surface(), failPreviousNotFound).Inc()
	s.log.Warn("continuity fail closed", "surface", req.surface(), "reason", failPreviousNotFound, "previous_response_id", LogID(req.previousResponseID))
	s.cont.forget(context.WithoutCancel(ctx), req.previousResponseID)
}

// recoveredError is the client error for a recover verdict, nil for pass.
func (s *Server) recoveredError(v hostabi.RecoverOutput, _ bool) *apierr.Error {
	switch v.Verdict {
	case hostabi.RecoverRecover:
		e := apierr.StreamIncomplete("%s", firstNonEmpty(v.Message, "the upstream lost this conversation's previous response; retry the request"))
		if v.Code != "" {
			e.Code = v.Code
		}
		return e
	case hostabi.RecoverFailClosed:
		e := apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "%s", firstNonEmpty(v.Message, "the upstream that owns this conversation is unavailable"))
		if v.Code != "" {
			e.Code = v.Code
		}
		return e
	}
	return nil
}

// copyJSON relays a complete (non-stream) upstream answer.
func (s *Server) copyJSON(ctx, upCtx context.Context, w http.ResponseWriter, req *clientRequest, u *upstream.Upstream, resp *http.Response) attemptOutcome {
	limit := int64(s.opts.MaxEventBytes) * 4
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return attemptOutcome{done: true}
	case err != nil && errors.Is(context.Cause(upCtx), errDraining):
		apierr.StreamIncomplete("the gateway is shutting down").Write(w)
		return attemptOutcome{done: true}
	case err != nil:
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "cut").Inc()
		apierr.StreamIncomplete("the upstream closed the connection before its answer was complete").Write(w)
		return attemptOutcome{done: true}
	case int64(len(body)) > limit:
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "oversize").Inc()
		apierr.StreamIncomplete("the upstream answer exceeds %d bytes", limit).Write(w)
		return attemptOutcome{done: true}
	}
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "ok").Inc()
	if s.cont != nil && !req.ep.chat {
		// The client must not see a response whose anchor could be lost.
		if id := gjson.GetBytes(body, "id"); id.Type == gjson.String && id.Str != "" {
			if err := s.cont.record(ctx, s.cont.anchorFor(req, id.Str, u.Name())); err != nil {
				s.log.Error("response served without a durable anchor", "response_id", LogID(id.Str), "error", err)
			}
		}
	}
	copyResponseHeaders(w.Header(), resp.Header)
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return attemptOutcome{done: true}
}

// stream reads the first upstream event before committing to the client, so
// a capacity error in the first event still fails over; then it pumps.
func (s *Server) stream(ctx, upCtx context.Context, cancel context.CancelCauseFunc, w http.ResponseWriter, req *clientRequest,
	u *upstream.Upstream, resp *http.Response, start time.Time) attemptOutcome {
	idle := time.AfterFunc(s.opts.IdleTimeout, func() { cancel(errIdleTimeout) })
	defer idle.Stop()
	src := sse.NewReader(&idleReader{r: resp.Body, t: idle, d: s.opts.IdleTimeout}, s.opts.MaxEventBytes)

	p := &pump{s: s, ctx: ctx, upCtx: upCtx, req: req, u: u, surface: req.surface(), lastSeq: -1}
	first, err := src.Next()
	if err != nil {
		if ctx.Err() != nil {
			return attemptOutcome{done: true}
		}
		reason, e := p.readFailure(err)
		if reason == "upstream_cut" {
			// Nothing reached the client: another upstream may serve it.
			s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "cut_before_first_event").Inc()
			return attemptOutcome{why: "the stream ended before its first event"}
		}
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), reason).Inc()
		e.Write(w)
		return attemptOutcome{done: true}
	}
	if code, status, ok := capacityFailure(first, req.ep.chat); ok {
		d, hinted := upstream.RetryAfter(nil, errorMessage(first), time.Now())
		if !hinted {
			d = defaultQuotaCooldown
			if code == "rate_limit_exceeded" || status == http.StatusTooManyRequests {
				d = defaultRateLimitCooldown
			}
		}
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "quota").Inc()
		s.pool.Cooldown(u, d, "stream error "+code)
		ce := &apierr.Error{Status: http.StatusTooManyRequests, Type: apierr.TypeServer, Code: code, Message: errorMessage(first)}
		return attemptOutcome{why: "stream error " + code, clientErr: ce}
	}

	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "ok").Inc()
	copyResponseHeaders(w.Header(), resp.Header)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	p.sink = newSSESink(w)
	s.metrics.activeStreams.Inc()
	defer s.metrics.activeStreams.Dec()

	reason := p.run(src, first, start)
	s.metrics.streamTerminal.WithLabelValues(p.surface, reason).Inc()
	return attemptOutcome{done: true}
}

// capacityFailure recognises a first event that says the upstream is out of
// capacity (an error event, an error: field or a response.failed with a
// capacity code): such a stream is abandoned for another upstream.
func capacityFailure(ev sse.Event, chat bool) (code string, status int, ok bool) {
	var obj gjson.Result
	switch {
	case ev.Error != nil:
		obj = gjson.ParseBytes(ev.Error)
	case ev.Data != nil && !ev.Done:
		obj = gjson.ParseBytes(ev.Data)
	default:
		return "", 0, false
	}
	typ := obj.Get("type").String()
	var e gjson.Result
	switch {
	case typ == "response.failed":
		e = obj.Get("response.error")
	case obj.Get("error").IsObject():
		e = obj.Get("error")
	case typ == "error" || ev.Error != nil:
		e = obj
	default:
		return "", 0, false
	}
	code = e.Get("code").String()
	status = int(obj.Get("status").Int())
	if upstream.IsQuotaCode(code) || hostabi.IsReplayableCode(code) || status == http.StatusTooManyRequests {
		if code == "" {
			code = "rate_limit_exceeded"
		}
		return code, status, true
	}
	_ = chat
	return "", 0, false
}

func errorMessage(ev sse.Event) string {
	b := ev.Data
	if ev.Error != nil {
		b = ev.Error
	}
	obj := gjson.ParseBytes(b)
	for _, p := range []string{"error.message", "response.error.message", "message"} {
		if m := obj.Get(p); m.Exists() {
			return m.String()
		}
	}
	return ""
}

// idleReader re-arms the idle timer on every read, so keepalives count as life.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.t.Reset(ir.d)
	}
	return n, err
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// statusWriter records the status for metrics; Unwrap keeps
// http.ResponseController (flush, deadlines) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func statusLabel(code int) string {
	if code == 0 {
		return "0"
	}
	return fmt.Sprint(code)
}
