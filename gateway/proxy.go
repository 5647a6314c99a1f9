package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/julienschmidt/httprouter"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/translate"
)

// maxUpstreamErrorBody bounds an upstream's error body. (Cooldown rules live
// in the upstream package: CapacityFailure, TargetFailed.)
const maxUpstreamErrorBody = 1 << 20

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	s.serveAPI(w, r, responsesEndpoint)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	s.serveAPI(w, r, chatEndpoint)
}

// serveAPI is the HTTP entry of the request pipeline.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, ep endpoint) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	surface := ep.jsonLabel
	meta := metaOf(r) // the access log line, usage and limits (usage.go)
	meta.header = sw.Header()
	defer func() {
		s.metrics.requests.WithLabelValues(surface, statusLabel(sw.status)).Inc()
		meta.mu.Lock()
		meta.surface, meta.status, meta.counted = surface, sw.status, true
		meta.mu.Unlock()
		s.accessLog(meta)
	}()

	// refuse answers a request the pipeline never takes up, and gives its
	// access-log line the error's code and, once the body names one, the
	// model (README "Access log"): a policy's reject is told from a bad body.
	refuse := func(aerr *apierr.Error, model string) {
		meta.mu.Lock()
		meta.code = aerr.Code
		if meta.model == "" {
			meta.model = model
		}
		meta.mu.Unlock()
		aerr.Write(sw)
		s.traceRefusal(r.Header, keyOf(r), ep, surface, start, aerr, model) // tracing.go: its own span; nothing without tracing
	}
	if s.draining.Load() {
		refuse(errShuttingDown(), "")
		return
	}
	if aerr := scopeOf(r.Header, "").overlong(); aerr != nil {
		refuse(aerr, "")
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	body, aerr := s.readBody(sw, r)
	if aerr != nil {
		refuse(aerr, "")
		return
	}
	req, aerr := parseRequest(ctx, ep, body, s.opts.MaxJSONDepth)
	if aerr != nil {
		// The body may still name its model (a duplicate key elsewhere, a
		// truncated document after "model"): the line shows it when it does.
		refuse(aerr, gjson.GetBytes(body, "model").Str)
		return
	}
	surface = req.surface()
	req.header = r.Header
	req.fwd = forwardingOf(r, s.opts.TrustedProxies)
	req.clientKeyHash = clientkey.Hash(r.Header)
	req.key, req.meta = keyOf(r), meta
	if aerr := s.rewrite(ctx, req); aerr != nil {
		refuse(aerr, req.model)
		return
	}
	surface = req.surface()
	if req.background && !req.stream && !req.ep.chat && !req.ep.passthrough && s.logs != nil {
		s.runBackground(ctx, sw, req, start) // resource.go: answered at once, run to its end
		return
	}
	s.process(ctx, &httpResponder{s: s, w: sw}, req, start)
}

// process runs a validated, rewritten request: continuity, then upstreams.
func (s *Server) process(ctx context.Context, out responder, req *clientRequest, start time.Time) {
	defer s.traceRequest(req)() // tracing.go: the request's span; nothing without tracing
	refuseChatTargets(req)      // relay_endpoints.go: a Chat target cannot serve a passthrough endpoint

	if req.meta != nil { // keys, limits, usage and the access log (usage.go)
		route := ""
		if rt := s.rtable.match(req.model); rt != nil {
			route = strings.Join(rt.Models, ",")
		}
		req.meta.mu.Lock() // a background create's handler may be logging its answer (runBackground)
		req.meta.model, req.meta.surface, req.meta.background, req.meta.route = req.model, req.surface(), req.background, route
		req.meta.mu.Unlock()
		out = &meterResponder{responder: out, m: req.meta}
		if !s.acct.admit(ctx, out, req) {
			return
		}
		defer s.acct.settle(req)
		s.askChatUsage(req) // chatusage.go
	}
	req.scope = scopeOf(req.header, req.clientKeyHash)
	if !s.pin(ctx, out, req) {
		return
	}
	// One client stream per request: attempts feed it, and forward's
	// failures reach the client through it. A resumable stream's work does
	// not end with its client (resume.go): it detaches, and the client can
	// pick the stream up again; it is cancelled (abandon) when nobody can.
	clientCtx := ctx
	if s.logs != nil && req.stream && !req.ep.chat && req.background {
		// Sluice runs a streamed background response itself (detached,
		// resumable, cancellable): the upstream never sees background, or it
		// would run a job of its own that a cancel here does not stop.
		if body, err := sjson.DeleteBytes(req.body, "background"); err == nil {
			req.body = body
		}
	}
	if s.logs != nil && req.stream && !req.ep.chat {
		// The stream has a log: its client's context ends it only through
		// the watch below, which tells a client that went away from one
		// that cancelled the response.
		ctx = context.WithoutCancel(ctx)
	}
	ctx, abandon := context.WithCancelCause(ctx)
	defer abandon(nil)
	cs := s.newClientStream(ctx, out, req, start)
	cs.abandon = abandon
	stop := context.AfterFunc(clientCtx, func() {
		cause := context.Cause(clientCtx)
		if errors.Is(cause, streaminput.ErrSessionDeleted) {
			// The streaming-input session that sent the request was deleted
			// (gateway/streaminput/README.md): the response is cancelled
			// as DELETE /v1/responses/{id} cancels it, for every reader.
			abandon(errCancelled)
			return
		}
		var inputErr *apierr.Error
		if errors.Is(cause, streaminput.ErrInputFailed) && errors.As(cause, &inputErr) {
			// The session's input failed the request (a bad Mode A line:
			// gateway/streaminput/README.md): its client is still there,
			// so nothing detaches; the request fails now.
			cs.failInput(inputErr, cause)
			return
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.goneLocked()
	})
	defer stop()
	cs.onEnd = req.meta.setReason
	cs.watchClientEOF()
	defer cs.close()
	s.forward(ctx, cs, req, start)
}

// checkedRewriter is a Policy that checks each rewrite module's edits as
// the chain runs (plugins.Runtime): a module whose edited body is not a
// usable request loses all its edits, as if it had returned its error
// result, and the chain goes on from the edits before it (ABI.md §3.3). A
// module failClosed names (Options.FailClosedRewrites) that cannot
// complete its rewrite stops the chain instead: failedPolicy names it and
// why says how.
type checkedRewriter interface {
	RewriteGuarded(ctx context.Context, in hostabi.RewriteInput, check func(body []byte) error,
		knownUpstream, failClosed func(name string) bool) (out hostabi.RewriteOutput, failedPolicy, why string)
}

// rewrite runs the rewrite policy and applies its result to req. A body
// is used only when it is a usable request, checked as a client's is
// (rewrittenRequest), one module's edits at a time when the policy can
// (checkedRewriter).
func (s *Server) rewrite(ctx context.Context, req *clientRequest) *apierr.Error {
	if aerr := s.failClosedRewritesServe(); aerr != nil {
		return aerr
	}
	if p, ok := s.policy.(interface{ RewriteActive() bool }); ok && !p.RewriteActive() {
		return nil // no policy rewrites: skip building its input
	}
	in := hostabi.RewriteInput{Surface: req.policySurface(), Endpoint: "/v1" + req.ep.path, Body: req.body, Headers: policyHeaders(req.header)}
	var out hostabi.RewriteOutput
	var checked *clientRequest // req with the last body the check accepted
	if p, ok := s.policy.(checkedRewriter); ok {
		var failedPolicy, why string
		out, failedPolicy, why = p.RewriteGuarded(ctx, in, func(body []byte) error {
			next, aerr := s.rewrittenRequest(ctx, req, body)
			if aerr != nil {
				return aerr
			}
			checked = next
			return nil
		}, s.upstreamConfigured, s.rewriteFailsClosed)
		if failedPolicy != "" {
			// The operator holds this policy to its edits (a guardrail):
			// the request must not reach an upstream without them. Its
			// failure is the gateway's, and a retry may find an instance
			// free (README "Policies").
			return s.failedClosed(failedPolicy, why)
		}
	} else {
		out = s.policy.Rewrite(ctx, in)
	}
	if out.Body != nil && !bytes.Equal(out.Body, req.body) {
		next := checked
		if next == nil || !bytes.Equal(next.body, out.Body) {
			var aerr *apierr.Error
			if next, aerr = s.rewrittenRequest(ctx, req, out.Body); aerr != nil {
				// Which module broke the body is unknown here (a policy
				// that checks as it goes never gets this far), so the
				// edits go as one unit: body, headers, upstream and reject.
				s.log.Error("rewrite policy produced an invalid request; its edits are discarded", "error", aerr.Message)
				return nil
			}
		}
		*req = *next
	}
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
	if out.Upstream != "" && !s.upstreamConfigured(out.Upstream) {
		// A name no upstream has is a policy bug, not an outage: retrying
		// cannot help, so it is not the 503 of a known upstream that is
		// down (ABI.md §3.3). The policy runtime has logged and counted it
		// against the module that chose it (checkedRewriter).
		return &apierr.Error{Status: http.StatusInternalServerError, Type: apierr.TypeServer, Code: apierr.CodeInternalError,
			Message: fmt.Sprintf("the rewrite policy chose upstream %q, which is not configured", out.Upstream)}
	}
	req.setHeaders, req.removeHeaders, req.upstreamName = out.SetHeaders, out.RemoveHeaders, out.Upstream
	return nil
}

// failedClosed is the answer to a request a rewrite policy held to its
// edits (Options.FailClosedRewrites) could not rewrite: a retryable 503,
// logged with why (at most every 10 s, with the number of requests refused).
func (s *Server) failedClosed(policy, why string) *apierr.Error {
	if n, ok := s.failedClosedLog.Allow(time.Now()); ok {
		s.log.Warn("rewrite policy could not run and fails closed: the request is refused with 503",
			"policy", policy, "why", why, "requests", n)
	}
	return &apierr.Error{Status: http.StatusServiceUnavailable, Type: apierr.TypeServer, Code: apierr.CodePolicyUnavailable,
		RetryAfter: time.Second, Message: fmt.Sprintf("the rewrite policy %q could not run; this gateway does not send requests on without it", policy)}
}

// failClosedRewritesServe refuses a request (failedClosed) while a rewrite
// policy held to its edits has no version serving: its file was refused,
// removed or never loaded, and the request would go on without its edits.
func (s *Server) failClosedRewritesServe() *apierr.Error {
	if name := s.unservedFailClosedRewrite(); name != "" {
		if p, ok := s.policy.(interface{ RewriteRefusedUnserved() }); ok {
			p.RewriteRefusedUnserved() // counted as a chain stopped at it is
		}
		return s.failedClosed(name, "no version of it that rewrites requests is loaded")
	}
	return nil
}

// unservedFailClosedRewrite names the first rewrite policy held to its
// edits (Options.FailClosedRewrites) that has no version serving now, ""
// when each has one. Requests are refused (failClosedRewritesServe) and
// /readyz fails (handleReadyz, trippedFailClosedRewrite) while it names
// one: a gateway that answers every model request 503 is not ready (README
// "Endpoints").
func (s *Server) unservedFailClosedRewrite() string {
	p, ok := s.policy.(interface{ RewriteServes(name string) bool })
	if !ok {
		return ""
	}
	return s.firstFailClosedRewriteNot(p.RewriteServes)
}

// trippedFailClosedRewrite names the first rewrite policy held to its edits
// that has no version serving or whose version tripped (every request it
// sees fails closed until a new file loads), "" when none: /readyz is not
// ready then.
func (s *Server) trippedFailClosedRewrite() string {
	p, ok := s.policy.(interface{ RewriteReady(name string) bool })
	if !ok {
		return s.unservedFailClosedRewrite()
	}
	return s.firstFailClosedRewriteNot(p.RewriteReady)
}

// firstFailClosedRewriteNot names the first of Options.FailClosedRewrites
// for which ok is false, "" when none.
func (s *Server) firstFailClosedRewriteNot(ok func(name string) bool) string {
	for _, name := range s.opts.FailClosedRewrites {
		if !ok(name) {
			return name
		}
	}
	return ""
}

// rewriteFailsClosed reports whether the rewrite policy name is held to its
// edits (Options.FailClosedRewrites).
func (s *Server) rewriteFailsClosed(name string) bool {
	return slices.Contains(s.opts.FailClosedRewrites, name)
}

// upstreamConfigured reports whether name is an upstream of the config, the
// only names a rewrite policy's use_upstream may choose.
func (s *Server) upstreamConfigured(name string) bool { return s.pool.Get(name) != nil }

// rewrittenRequest is req with a rewrite policy's body, checked by
// checkRewritten against this gateway's limits.
func (s *Server) rewrittenRequest(ctx context.Context, req *clientRequest, body []byte) (*clientRequest, *apierr.Error) {
	return checkRewritten(ctx, req, body, s.opts.MaxBodyBytes, s.opts.MaxJSONDepth)
}

// checkRewritten is req with a rewrite policy's body, checked as a
// client's body is (the body limit, validJSON, readFields): the rewrite
// must not smuggle in what the gateway refuses from a client. Nor may it
// change stream: the client chose SSE or JSON, and it would get the other
// (ABI.md §3.3). It is the one statement of what an edited body must be;
// CheckRewrittenBody gives it to `sluice policy test`.
func checkRewritten(ctx context.Context, req *clientRequest, body []byte, maxBodyBytes int64, maxDepth int) (*clientRequest, *apierr.Error) {
	if int64(len(body)) > maxBodyBytes {
		return nil, apierr.Invalid("", apierr.CodePayloadTooLarge,
			"the rewritten body is %d bytes, over the gateway limit of %d bytes (limits.max_body_bytes)", len(body), maxBodyBytes)
	}
	if aerr := validJSON(ctx, body, maxDepth, "the rewritten body"); aerr != nil {
		return nil, aerr
	}
	next := *req
	next.body = body
	if aerr := next.readFields(parseJSON(body)); aerr != nil {
		return nil, aerr
	}
	if next.stream != req.stream {
		return nil, apierr.Invalid("stream", apierr.CodeInvalidValue,
			"stream must stay %t as the client sent it: the client asked for %s", req.stream, responseKind(req.stream))
	}
	return &next, nil
}

// responseKind names the response protocol a stream flag asks for.
func responseKind(stream bool) string {
	if stream {
		return "an SSE stream"
	}
	return "one JSON response"
}

// CheckRewrittenBody reports why the gateway would discard a rewrite
// policy's edited body as invalid (ABI.md §3.3), nil when it would send
// it: body is the edited request to path ("/v1/responses",
// "/v1/chat/completions", or one of the passthrough endpoints
// relay_endpoints.go serves) whose client sent stream clientStream (true on a
// WebSocket); maxBodyBytes is limits.max_body_bytes (0: its default). It
// is the gateway's own check, for `sluice policy test`.
func CheckRewrittenBody(ctx context.Context, path string, body []byte, clientStream bool, maxBodyBytes int64) error {
	req := &clientRequest{stream: clientStream}
	known := []endpoint{responsesEndpoint, chatEndpoint, responsesCompactEndpoint, responsesInputTokensEndpoint}
	if i := slices.IndexFunc(known, func(ep endpoint) bool { return "/v1"+ep.path == path }); i >= 0 {
		req.ep = known[i]
	} else {
		return fmt.Errorf("unknown endpoint %q (want /v1%s, /v1%s, /v1%s or /v1%s)", path, responsesEndpoint.path, chatEndpoint.path,
			responsesCompactEndpoint.path, responsesInputTokensEndpoint.path)
	}
	if maxBodyBytes <= 0 {
		maxBodyBytes = config.Defaults().Limits.MaxBodyBytes
	}
	if _, aerr := checkRewritten(ctx, req, body, maxBodyBytes, jsonx.DefaultMaxDepth); aerr != nil {
		return aerr
	}
	return nil
}

// pin resolves the owner of previous_response_id, or else of the
// conversation the request names (pinConversation). It returns false when
// the request was failed closed: the owner is known but unusable, or the
// lookup failed. A pinned request never silently goes to another upstream.
// A store:false follow-up whose turn its WebSocket session holds needs no
// owner (selfContainedChain) and is not pinned.
func (s *Server) pin(ctx context.Context, out responder, req *clientRequest) bool {
	s.startPortable(req) // portable.go: nothing unless continuity.portable
	// A follow-up to a failed turn of the same socket is refused before
	// any owner lookup (wsmemory.go).
	if s.refuseFailedSessionTurn(out, req) {
		return false
	}
	if s.cont == nil || req.ep.chat {
		return true
	}
	if req.previousResponseID == "" {
		return s.pinConversation(ctx, out, req)
	}
	// With a conversation too, the request is pinned once, by its previous
	// response: the owner answers the pair as OpenAI's API does (a 400).
	// Another key's conversation is still refused first.
	if req.conversationID != "" && req.key != nil {
		if _, ok := s.conversationOwner(ctx, out, req); !ok {
			return false
		}
	}
	if selfContainedChain(req) { // wsmemory.go: any target can be sent it in full
		return true
	}
	res := s.cont.resolve(ctx, req.surface(), req.previousResponseID, req.scope)
	if res.err != nil {
		s.failClosedWith(out, req, failOwnerLookupFailed, ownerLookupFailed("previous_response_id", res.err))
		return false
	}
	if res.unknownTo(req.key != nil, req.clientKeyHash) { // continuity.go: a Sluice key uses only its own anchors
		s.refuseUnknownPrevious(out, req)
		return false
	}
	if res.owner == "" {
		return true
	}
	if !s.pinTo(ctx, out, req, res.owner, true) {
		return false
	}
	if req.pinned != nil { // not rehydrated elsewhere (portable.go)
		s.aliasPrevious(req, res.upstreamID)
	}
	return true
}

// pinConversation pins a request naming a conversation to the upstream that
// holds it: a conversation lives on one upstream, as a response does, and
// another upstream would answer that it does not exist. Its owner is the
// one that served a response in it (continuity.recordServed); a
// conversation Sluice has not seen served (created at the upstream
// directly, or anchored longer than anchor_ttl ago) is routed as any
// request. With Sluice keys, a conversation anchored for another key is
// refused as unknown (refuseUnknownConversation); the session scope does
// not narrow it, as a conversation outlives its sessions.
func (s *Server) pinConversation(ctx context.Context, out responder, req *clientRequest) bool {
	owner, ok := s.conversationOwner(ctx, out, req)
	if !ok || owner == "" {
		return ok
	}
	return s.pinTo(ctx, out, req, owner, false)
}

// conversationOwner is the upstream that holds the conversation req names
// ("" when none is named, or Sluice has not seen it served), or false when
// req was failed: the lookup failed, or, with Sluice keys, the conversation
// is another key's, refused as unknown before any upstream is called
// (SECURITY.md), whether or not req also names a previous response.
func (s *Server) conversationOwner(ctx context.Context, out responder, req *clientRequest) (string, bool) {
	if req.conversationID == "" {
		return "", true
	}
	res := s.cont.resolveConversation(ctx, req.surface(), req.conversationID)
	switch {
	case res.err != nil:
		s.failClosedWith(out, req, failOwnerLookupFailed, ownerLookupFailed("conversation", res.err))
		return "", false
	case res.owner != "" && req.key != nil && res.keyHash != req.clientKeyHash:
		s.refuseUnknownConversation(out, req)
		return "", false
	}
	return res.owner, true
}

// pinTo pins req to owner, the upstream that holds what req names
// (req.pinParam), or fails it closed when owner is gone or out; with
// rehydrate, a portable conversation may be sent elsewhere instead
// (portable.go), and req is left unpinned.
func (s *Server) pinTo(ctx context.Context, out responder, req *clientRequest, owner string, rehydrate bool) bool {
	what := req.pinParam()
	u := s.pool.Get(owner)
	if u == nil {
		if rehydrate && s.rehydrate(ctx, req, owner, nil, "no longer configured") { // portable.go
			return true
		}
		s.failClosedWith(out, req, failOwnerUnavailable, ownerRemoved(what, owner))
		return false
	}
	ok, why := u.Usable(time.Now())
	if !ok && s.pool.ProbeDown(ctx, []*upstream.Upstream{u}) { // down: it may be back since its last probe
		ok, why = u.Usable(time.Now())
	}
	if !ok {
		if rehydrate && s.rehydrate(ctx, req, owner, u, why) { // portable.go
			return true
		}
		un, _ := s.pool.TargetUnavailable(upstream.Target{Upstream: u, Model: req.model}) // the upstream's own wait comes first
		s.failOwnerOut(out, req, fmt.Sprintf("upstream %q that owns %s is unavailable (%s)", owner, what, why), un.RetryIn)
		return false
	}
	req.pinned = u
	return true
}

// failClosed answers a continuity failure with the retryable
// upstream_unavailable error, without calling any (further) upstream.
func (s *Server) failClosed(out responder, req *clientRequest, reason string, status int, message string) {
	s.failClosedWith(out, req, reason, apierr.UpstreamUnavailable(status, "%s", message))
}

// failOwnerOut answers a pinned follow-up whose owner cannot take it now
// (down, cooling down, circuit open) with the 503 upstream_unavailable of
// README "Failover and replay", whatever keeps the owner out; wait, the
// owner's remaining cooldown when known, is its Retry-After and is said in
// its message, as a request that finds no target usable is told. The owner
// was not called, so nothing was sent: a Responses stream too gets the
// status and Retry-After (failNothingSent; README "Continuity").
func (s *Server) failOwnerOut(out responder, req *clientRequest, message string, wait time.Duration) {
	s.failOwnerOutAs(out, req, message, wait, failNothingSent(req))
}

// failOwnerOutAs is failOwnerOut answering as kind: failBeforeStream once
// the owner was called and failed (a Responses stream then gets
// response.failed, as any request with a target tried).
func (s *Server) failOwnerOutAs(out responder, req *clientRequest, message string, wait time.Duration, kind failKind) {
	if wait > 0 {
		message = withRetryIn(message, wait)
	} else {
		message += "; retry later"
	}
	e := apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "%s", message)
	e.RetryAfter = max(wait, 0)
	s.failClosedAs(out, req, failOwnerUnavailable, e, kind)
}

// failClosedWith is failClosed answering e.
func (s *Server) failClosedWith(out responder, req *clientRequest, reason string, e *apierr.Error) {
	kind := failBeforeStream
	if reason == failOwnerLookupFailed {
		// The store is read before any upstream is called: nothing was
		// sent, so a stream too gets the status and Retry-After (README
		// "Scale-out with Redis").
		kind = failNothingSent(req)
	}
	s.failClosedAs(out, req, reason, e, kind)
}

// failClosedAs is failClosedWith answering as kind.
func (s *Server) failClosedAs(out responder, req *clientRequest, reason string, e *apierr.Error, kind failKind) {
	s.metrics.failClosed.WithLabelValues(req.surface(), reason).Inc()
	s.log.Warn("continuity fail closed", "surface", req.surface(), "reason", reason, "previous_response_id", LogID(req.previousResponseID),
		"conversation", LogID(req.conversationID))
	out.fail(req, e, kind)
}

// next says what forward does after an attempt.
type next int

const (
	nextDone         next = iota // the client has its answer, or is gone
	nextFailover                 // the target failed: try the next one
	nextReplayOther              // replay policy: the same request on another target
	nextReplaySame               // replay policy: the same request on the same target
	nextRetrySame                // retry the same target once, after retryIn
	nextOtherModel               // context_length_exceeded: the next target serving another model
	nextStop                     // the replay policy said no: no further target; the client gets the failure
	nextContinue                 // after content: continue the client's stream on the next target (continuation.go)
	nextContinueSame             // after content: the target refused the prefill; restart it
)

// attemptResult is how one upstream attempt ended.
type attemptResult struct {
	next      next
	why       string        // for the failure summary
	clientErr *apierr.Error // what the client gets if nothing later succeeds
	retryIn   time.Duration // nextRetrySame: the wait before the retry
	// clientHeader: the headers of the upstream answer clientErr is, when it
	// is one (statusFailure), relayed with it (forward).
	clientHeader http.Header
	// replayFrom and replayCode: for nextReplayOther and nextReplaySame,
	// the upstream that failed and the failure's code, for the line forward
	// logs when it sends the replay (logReplay).
	replayFrom, replayCode string
}

// logReplay logs the replay the policy asked for with res, number n of the
// request: sent to the upstream named to, or, when to is "", not sent as no
// target or attempt was left for it (the client's error says so). One line
// per replay asked, written when its outcome is known.
func (s *Server) logReplay(res attemptResult, n int, to string) {
	switch {
	case to == "":
		s.log.Info("replay not sent: no target or attempt left for it", "upstream", res.replayFrom, "code", res.replayCode, "replay", n)
	case res.next == nextReplaySame:
		s.log.Info("replaying on the same upstream", "upstream", res.replayFrom, "code", res.replayCode, "replay", n)
	default:
		s.log.Info("replaying on another upstream", "upstream", res.replayFrom, "code", res.replayCode, "replay", n, "to", to)
	}
}

// forward sends req to its targets until one answers: the matching route's
// targets in order, or without a route every usable upstream as the pool
// chooses. Before the client has seen anything, every failure is put to
// the replay policy (askReplay), whose default is the failure table
// (hostabi/ABI.md §3.2, README "Routes and fallbacks"): the same target
// again after Retry-After or a short backoff (nextRetrySame, at most once
// per target and only while the attempt budget still covers every other
// target), the next target (cooling the failed one down), or no more
// targets. Attempts are bounded (candidates.limit); a pinned request never
// leaves its owner.
func (s *Server) forward(ctx context.Context, out responder, req *clientRequest, start time.Time) {
	c := s.candidatesFor(ctx, req)
	limit := c.limit(s.opts.MaxAttempts)
	orig := req.body
	defer func() { req.body, req.try = orig, nil }()
	bodies := map[string][]byte{}
	var failures []string
	var lastErr *apierr.Error
	var lastErrHeader http.Header // the headers of the answer lastErr is (attemptResult.clientHeader)
	// waitHint is the shortest wait the failed attempts' upstreams asked
	// for (Retry-After, retry-after-ms, "try again in"; zero for "retry
	// now"); hintless: one failed without asking, so no upstream tried says
	// when it is back (the targets skipped for a cooldown or open circuit
	// may still say).
	var waitHint time.Duration
	hintless, hinted := false, false
	replays := 0
	replayPending := false
	// asked is the replay the policy asked for that is not sent yet: it is
	// logged once, as it goes out or, when no target or attempt is left for
	// it, as not sent (logReplay), so that the log counts the upstream
	// requests made.
	var asked *attemptResult
	stopped := false                       // the replay policy said no: no further target (noRetryAnswer)
	retried := map[upstream.Target]bool{}  // the host's bound: one same-target retry per target
	sameTries := map[upstream.Target]int{} // same-target retries and replays, for the policy
	var again *upstream.Target             // the target of a same-target retry or replay
	// passedOver names the targets passed over because they cannot take
	// the request for their protocol (nextTaker), each with why: never
	// called, the answer names them after the skipped ones.
	var passedOver []string
attempts:
	for attempt := 0; attempt < limit; attempt++ {
		if ctx.Err() != nil { // the client is gone and its stream let the work go (clientStream.goneLocked)
			if again != nil {
				s.pool.TargetReleased(*again)
			}
			return // no further upstream request
		}
		var t upstream.Target
		if again != nil {
			t, again = *again, nil
		} else {
			var ok bool
			var refusal *apierr.Error
			if t, ok, refusal = s.nextTaker(ctx, c, req, &passedOver); refusal != nil {
				// No target of the request could take it: the conversion's
				// error is the answer (nothing was tried before: every
				// target speaks Chat).
				out.fail(req, refusal, failInvalid)
				return
			}
			if !ok {
				break
			}
		}
		if asked != nil {
			s.logReplay(*asked, replays, t.Upstream.Name())
			asked = nil
		}
		try := &tryState{target: t, route: c.route, retry: !retried[t] && attempt+1+c.remaining(t) < limit,
			cands: c, attempt: attempt, limit: limit, sameTries: sameTries[t]}
		req.try, req.body = try, bodyFor(req, orig, t, bodies)
		if req.rescue != nil { // content reached the client: this attempt continues its stream
			s.prepareContinuation(req, try, t)
			req.rescue.log.touch() // the response runs on, events or not (streamLog.touch)
		}
		s.traceAttempt(req, t)
		res := s.attempt(ctx, out, req, t.Upstream, replays, start)
		if res.next == nextRetrySame && (!try.retry || try.noRetry) {
			// A target is retried once, within the attempt budget, whatever
			// the replay policy asks (ABI.md): the loop moves on, and the
			// attempt's span says so. An answer the upstream marked
			// x-should-retry: false is not retried on it at all: OpenAI's
			// SDKs would not send it again either, and each retry would
			// only charge its circuit once more for one refusal. Another
			// target is another request: the route's failover stands.
			res.next = nextFailover
		}
		s.traceAttemptEnd(req, res)
		if res.next == nextDone {
			s.settle(t, try)
			return
		}
		failures = append(failures, t.String()+": "+res.why)
		if !try.noRetry {
			c.curable = true // a retry may fare better: the answer never says x-should-retry: false
		}
		switch {
		case !try.fail.HasHint():
			hintless = true
		case !hinted || try.fail.Hint < waitHint:
			waitHint, hinted = try.fail.Hint, true
		}
		if res.clientErr != nil {
			lastErr, lastErrHeader = res.clientErr, res.clientHeader
		}
		if res.next == nextRetrySame {
			retried[t] = true
			sameTries[t]++
			if try.fail != nil {
				s.targetM.failed(t, try.fail.Class) // counted; the circuit hears the retry's outcome
			}
			s.log.Info("retrying the same target", "upstream", t.Upstream.Name(), "model", t.Model, "after", res.retryIn.Round(time.Millisecond).String(), "why", res.why)
			if !s.sleepCtx(ctx, res.retryIn) {
				s.pool.TargetReleased(t)
				return
			}
			again = &t
			continue
		}
		if (res.next == nextContinue || res.next == nextContinueSame) && attempt+1 >= limit {
			limit++ // a continuation takes a target of its own; each target is continued at most twice
		}
		switch res.next {
		case nextContinueSame:
			again = &t
			continue
		case nextReplaySame:
			replays++
			sameTries[t]++
			again, asked = &t, &res
			continue // the replay is the same target's probe, if it was one
		case nextReplayOther:
			replays++
			replayPending, asked = true, &res
		case nextOtherModel:
			c.skipModel[t.Model] = true
			replayPending = false
		case nextStop:
			replayPending, stopped = false, true
			c.tried[t] = true
			s.settle(t, try)
			break attempts
		default:
			replayPending = false
		}
		c.tried[t] = true
		s.settle(t, try)
	}
	if ctx.Err() != nil {
		return
	}
	if asked != nil {
		s.logReplay(*asked, replays, "")
	}
	if req.rescue != nil { // no target left to continue on: the failure that started it
		s.giveUp(s.clientStreamOf(ctx, out, req, start), req)
		return
	}
	// Every failure said x-should-retry: false and no target is left that a
	// retry could reach: the client is told not to retry (noRetryAnswer).
	noRetry := c.noRetryAnswer(len(failures) > 0, stopped)
	if req.pinned != nil {
		why := c.why
		if len(failures) > 0 {
			why = failures[len(failures)-1]
		}
		if noRetry {
			// No wait to tell: the owner said no retry changes its answer.
			e := apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the upstream that owns %s failed (%s)", req.pinParam(), why)
			e.NoRetry = true
			s.failClosedAs(out, req, failOwnerUnavailable, e, failBeforeStream)
			return
		}
		wait, _, _, _ := c.anyTarget().soonestBack() // the owner's own failure may just have started its cooldown
		if wait == 0 && !hintless {
			wait = waitHint
		}
		if len(failures) == 0 {
			// Its target was skipped (cooling down, circuit open), never
			// called: the client was sent nothing (failOwnerOut).
			s.failOwnerOut(out, req, fmt.Sprintf("upstream %q that owns %s was skipped, not called (%s)", req.pinned.Name(), req.pinParam(), why), wait)
			return
		}
		s.failOwnerOutAs(out, req, fmt.Sprintf("the upstream that owns %s failed (%s)", req.pinParam(), why), wait, failBeforeStream)
		return
	}
	withPassedOver := func(skipped string) string { // the targets skipped for their state, then those passed over
		return strings.Join(slices.DeleteFunc(append([]string{skipped}, passedOver...), func(why string) bool { return why == "" }), "; ")
	}
	var e *apierr.Error
	switch {
	case lastErr != nil && isCapacityError(lastErr):
		e = lastErr // every target is out of capacity: say what the last one said
		if c.opened || e.RetryAfter <= 0 {
			// The wait the client faces: an opened circuit's, or, when the
			// upstream asked for none, the cooldown its failure just started
			// (README "Failover and replay": the request whose rate limit
			// found no other target is told what the next one would be).
			e = c.capacityWait(lastErr)
		}
		e.NoRetry = noRetry // the upstream's own wait stays: it is its answer
		if lastErrHeader != nil && failsWithStatus(req, failBeforeStream) {
			// The upstream's own answer reaches the client: with its
			// headers, as any relayed error (README "Access log": its
			// x-request-id; its x-ratelimit-*, x-should-retry), and the
			// gateway's wait.
			relayCapacityError(out, req, e, lastErrHeader)
			return
		}
	case len(failures) == 0 && req.upstreamName != "":
		// The policy's upstream is configured (a name none has was the
		// rewrite's 500, Server.rewrite) and was skipped, never called: the
		// answer says why and when it is back, as a route's (noTargetError).
		msg := fmt.Sprintf("upstream %q chosen by policy is unavailable", req.upstreamName)
		if why := withPassedOver(firstNonEmpty(c.unavailable(), c.why)); why != "" {
			msg += " (" + why + ")"
		}
		e = c.noTargetError(msg)
	case len(failures) == 0 && c.route != nil:
		msg := fmt.Sprintf("no target for model %q is available", req.model)
		if why := withPassedOver(firstNonEmpty(c.unavailable(), c.why)); why != "" {
			msg += " (" + why + ")"
		}
		e = c.noTargetError(msg)
	case len(failures) == 0:
		msg := "no healthy upstream"
		if why := withPassedOver(c.unavailable()); why != "" { // each upstream and why: a down one's last probe error
			msg += ": " + why
		}
		e = c.noTargetError(msg)
	default:
		// Some targets failed, the others were skipped: the answer names
		// both, each with why, and carries the soonest wait among them, as
		// when no target was usable at all (README "Failover and replay").
		// A failure the replay policy sent on to another target (a cut, a
		// garbled first event) is told by the same rule as a 5xx that moved
		// on (README "A down upstream…"): skipped targets and wait included.
		msg := "no upstream could serve the request: "
		if replayPending {
			msg = "no upstream left to replay the request on: "
		}
		msg += strings.Join(failures, "; ")
		if skipped := withPassedOver(c.unavailable()); skipped != "" {
			msg += "; not tried: " + skipped
		}
		// Every target's cooldown or open circuit, the tried ones' too
		// (their failures may just have started one); a capacity code is
		// not the answer, as some failed otherwise.
		wait, _, _, _ := c.anyTarget().soonestBack()
		if !hintless && (wait == 0 || waitHint < wait) { // every upstream tried asked for a wait (an overloaded 503's Retry-After)
			wait = waitHint
		}
		if noRetry {
			// Every upstream tried said no retry changes its answer: no wait
			// to tell, as no retry is asked for.
			wait = 0
		}
		if wait > 0 {
			msg = withRetryIn(msg, wait)
		}
		e = apierr.UpstreamUnavailable(http.StatusBadGateway, "%s", msg)
		e.RetryAfter, e.NoRetry = wait, noRetry
	}
	kind := failBeforeStream
	if len(failures) == 0 {
		// No upstream was contacted (every target cooling down, behind an
		// open circuit or down), so the client was sent nothing: a Responses
		// stream, too, gets the status and JSON error with its Retry-After
		// (README "Failover and replay"), which SDKs and Codex wait out,
		// where they retry a response.failed at once.
		kind = failNothingSent(req)
	}
	out.fail(req, e, kind)
}

// relayCapacityError answers req with e, the capacity failure (429) an
// upstream answered, carrying the headers that answer came with (header),
// filtered as any relayed answer's are (copyResponseHeaders), except its wait:
// the client is told e's (Retry-After, Retry-After-Ms), which capacityWait
// may have made longer, and none when e has none; and its x-should-retry:
// false only when e says no retry (noRetryAnswer).
func relayCapacityError(out responder, req *clientRequest, e *apierr.Error, header http.Header) {
	h := header.Clone()
	h.Del("Retry-After")
	h.Del("Retry-After-Ms")
	keepNoRetryOnly(h, e.NoRetry)
	e.SetRetryHeaders(h)
	h.Set("Content-Type", "application/json")
	body, _ := e.MarshalJSON() // cannot fail: e is strings
	out.relay(req, e.Status, h, body)
}

// noTargetError is the error for a request none of whose targets was
// usable, saying msg. Like the gateway's own overload 503s it carries
// Retry-After: the shortest wait among the targets' cooldowns and open
// circuits, so a client (the OpenAI SDKs honour it) waits that out instead
// of spending its retries within it. While every target cools down for its
// capacity, the answer is the 429 with the upstream's code that started the
// cooldown (README: a 429 or quota code cools the target down), not a 503.
func (c *candidates) noTargetError(msg string) *apierr.Error {
	retryIn, code, typ, _ := c.soonestBack()
	if retryIn > 0 && !upstream.IsBillingCode(code) { // a billing code's wait is the cooldown's, not a cure
		msg = withRetryIn(msg, retryIn)
	}
	if code != "" {
		return apierr.CapacityExhausted(code, typ, retryIn, "%s", msg)
	}
	e := apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "%s", msg)
	e.RetryAfter = retryIn
	return e
}

// soonestBack is the shortest wait among the eligible targets' cooldowns
// and open circuits (0: none says), and, when every eligible target cools
// down for its capacity, the upstream's code and type of the first target
// back ("" otherwise); usable says a target could take a request now.
func (c *candidates) soonestBack() (retryIn time.Duration, code, typ string, usable bool) {
	var codeIn time.Duration
	targets, capacity := 0, 0
	c.each(func(t upstream.Target) {
		targets++
		un, out := c.s.pool.TargetUnavailable(t)
		if !out {
			usable = true
			return
		}
		if un.RetryIn > 0 && (retryIn == 0 || un.RetryIn < retryIn) {
			retryIn = un.RetryIn
		}
		if un.Code != "" {
			capacity++
			if code == "" || un.RetryIn < codeIn { // the code of the first target back
				code, typ, codeIn = un.Code, un.Type, un.RetryIn
			}
		}
	})
	if targets == 0 || capacity < targets {
		code, typ = "", ""
	}
	return retryIn, code, typ, usable
}

// capacityWait is e, the relayed capacity failure (429) of the last target
// tried, when a failure of the request opened a target's circuit or the
// upstream asked for no wait, with the wait the client will actually face:
// when no target of the request can serve sooner, the longer of the
// upstream's hint and the time until the first of them is back. The circuit
// keeps its target out for its open time (30s), not the upstream's short
// hint; a 429 without a hint cools its target down for the default backoff
// all the same. A retry sooner than that would only get the 429
// noTargetError answers, which names the same wait.
func (c *candidates) capacityWait(e *apierr.Error) *apierr.Error {
	back, _, _, usable := c.anyTarget().soonestBack()
	if usable || back <= e.RetryAfter {
		return e
	}
	waited := *e
	waited.RetryAfter = back
	return &waited
}

// isCapacityError reports whether e, a failure the client gets, is a rate
// limit or quota: the client is told the wait it faces (capacityWait).
func isCapacityError(e *apierr.Error) bool {
	return e.Status == http.StatusTooManyRequests || upstream.IsQuotaCode(e.Code)
}

// capacityWaitNow is capacityWait for cause, a capacity failure the stream
// of req ends with while its attempt is in flight: the terminal event goes
// out before forward would charge the attempt's target, so it is charged
// here (settle), and the cooldown or circuit that charge started is a wait
// the client may face.
func (s *Server) capacityWaitNow(req *clientRequest, cause *apierr.Error) *apierr.Error {
	try := tryOf(req)
	if try.cands == nil {
		return cause
	}
	s.settle(try.target, try)
	return try.cands.capacityWait(cause)
}

// anyTarget is c with every target of the request eligible again, those
// tried included: the client's retry may take any of them, and the cooldown
// or circuit a tried target's failure just started says when it is back.
func (c *candidates) anyTarget() *candidates {
	all := *c
	all.tried = nil
	return &all
}

// withRetryIn is msg saying the wait d too, in the words OpenAI's
// rate-limit errors use: a stream client has no header to read (it got 200
// and response.failed), and clients such as Codex read it from there. A
// message that ends a sentence ("…current quota.") loses its full stop, so
// the hint joins it as one clause, not as ".;".
func withRetryIn(msg string, d time.Duration) string {
	ms := max(d, time.Millisecond).Round(time.Millisecond).Milliseconds()
	return strings.TrimRight(msg, ". ") + "; please try again in " + strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s" // whole ms: "6.972s", never 6.9719999…
}

// waitInMessage is e with its wait (e.RetryAfter) in its message, for a
// client that gets no Retry-After header (a stream's response.failed or
// Chat error chunk), unless the message already says a wait (an upstream's
// "Please try again in 2s.", noTargetError's) or its code is a billing one
// no wait cures (upstream.IsBillingCode). README: a relayed 429 keeps the
// upstream's wait.
func waitInMessage(e *apierr.Error) *apierr.Error {
	if e.RetryAfter <= 0 || upstream.IsBillingCode(e.Code) {
		return e
	}
	if _, told := upstream.RetryAfter(nil, e.Message, time.Now()); told {
		return e
	}
	c := *e
	c.Message = withRetryIn(c.Message, c.RetryAfter)
	return &c
}

// upstreamAnswer is what an upstream said, before anything reached the client.
type upstreamAnswer struct {
	status  int
	header  http.Header
	body    []byte      // a complete non-stream or error body
	bodyCut string      // why body is only the error body's beginning (over maxUpstreamErrorBody, cut short); "" when whole
	readErr error       // reading a 2xx non-stream body failed
	src     eventSource // an event stream (2xx SSE or WebSocket)
	pending int         // other requests pending on the same upstream connection
	done    func(reusable bool)
	// beforeRead, when set, points at the hook the upstream body reader
	// calls before each read that may block: the client sink flushes there.
	beforeRead *func()
	// unusable says why a 2xx answer cannot be used whatever its body: an
	// encoding the gateway does not decode, or no event stream for a stream
	// request (unusableAnswer). "" otherwise.
	unusable string
	// statusFrames: a WebSocket upstream's stream, whose first frame may
	// refuse the request with a status (wsStatusAnswer).
	statusFrames bool
	// sentStatus is the 2xx the upstream sent when its body was an error
	// envelope and status is the one that error stands for
	// (answerAsError); 0 when status is the one it sent.
	sentStatus int
}

// statusReason is a failure reason for ans's error status, with detail (its
// code or message; "" for none) after it: "HTTP 502 server_error". A 2xx
// whose body was an error envelope is judged as the status its error stands
// for, but a reason names what the upstream sent, "HTTP 200 error body:
// server_error", so that an operator does not look for a 502 in the
// upstream's logs. Of detail, what the upstream chose, it quotes at most
// errorExcerptBytes and an ellipsis (bodyExcerpt): the reason is the
// client's error message ("no upstream could serve the request: …"), a
// log field and a span's status, and an upstream's code may be any size.
func (ans *upstreamAnswer) statusReason(detail string) string {
	if excerpt, more := bodyExcerpt([]byte(detail)); more {
		detail = excerpt + " …"
	}
	if ans.sentStatus != 0 {
		if detail == "" {
			return fmt.Sprintf("HTTP %d error body", ans.sentStatus)
		}
		return fmt.Sprintf("HTTP %d error body: %s", ans.sentStatus, detail)
	}
	return strings.TrimSpace(fmt.Sprintf("HTTP %d %s", ans.status, detail)) // no dangling space without a detail
}

// eventSource yields upstream events: an SSE reader, or WebSocket frames.
type eventSource interface {
	Next() (sse.Event, error)
}

// send delivers req to u over u's transport. firstByte starts the
// attempt's first_byte clock (firstByteTimer) as the request goes to the
// upstream: a WebSocket upstream's request may first wait for the
// gateway's own socket, which is not the upstream's silence; waited runs
// when that wait passes timeouts.keepalive (wsUpstreams.acquire).
func (s *Server) send(upCtx context.Context, firstByte func() (context.Context, func()), waited func(), idle *idleTimer, req *clientRequest, u *upstream.Upstream) (*upstreamAnswer, error) {
	chat := req.chat != nil && !req.ep.chat && u.Config().Protocol == upstream.ProtocolChat
	if !chat && req.stream && !req.ep.chat && s.wsUp != nil && s.wsUp.useWebSocket(u) {
		ans, err := s.wsUp.send(upCtx, firstByte, waited, idle, req, u)
		if !errors.Is(err, errWebSocketUnsupported) {
			return ans, err
		}
	}
	sendCtx, stopFirstByte := firstByte()
	defer stopFirstByte()
	if chat {
		return s.sendChat(sendCtx, idle, req, u)
	}
	body, err := s.sessionChainBody(sendCtx, req, req.body) // wsmemory.go: a WebSocket's store:false chain, in full
	if err != nil {
		return nil, err
	}
	return s.sendHTTP(sendCtx, idle, req, u, body)
}

// post sends body to u's path with the request's headers. A non-2xx answer
// comes back with its (bounded) body read. Once the headers are in, the
// attempt's idle timer is armed: it bounds the silence while any body is
// read (idleReader), and between a stream's events (idleEvents).
func (s *Server) post(upCtx context.Context, idle *idleTimer, req *clientRequest, u *upstream.Upstream, path string, body []byte) (*http.Response, *upstreamAnswer, error) {
	upReq, err := http.NewRequestWithContext(upCtx, http.MethodPost, u.URL(path), bytes.NewReader(body))
	if err != nil {
		return nil, nil, &notSentError{err: err}
	}
	upReq.Header = upstreamHeaders(req, u.Config(), req.stream)
	if err := checkPolicyHeaders(req); err != nil {
		return nil, nil, &notSentError{err: err}
	}
	upReq.ContentLength = int64(len(body))
	resp, err := s.client.Do(upReq)
	if err != nil {
		return nil, nil, err
	}
	idle.arm()
	ans := &upstreamAnswer{status: resp.StatusCode, header: resp.Header, done: func(reusable bool) { closeUpstreamBody(resp.Body, reusable) }}
	if coding, ok := decodeAnswer(resp); !ok {
		// A body the gateway cannot decode is not read: neither the checks
		// nor the key scrubber could see what it says.
		coding = fmt.Sprintf("%.40q", s.scrub.String(coding)) // scrubbed before it is cut
		s.log.Warn("upstream answer in an unsupported Content-Encoding", "upstream", u.Name(), "status", resp.StatusCode, "content_encoding", coding)
		if resp.StatusCode/100 == 2 {
			ans.unusable = fmt.Sprintf("HTTP %d in Content-Encoding %s, which the gateway does not decode", resp.StatusCode, coding)
		}
		return resp, ans, nil
	}
	if resp.StatusCode/100 != 2 {
		var err error
		ans.body, err = io.ReadAll(io.LimitReader(&idleReader{r: resp.Body, idle: idle}, maxUpstreamErrorBody+1))
		switch {
		case len(ans.body) > maxUpstreamErrorBody:
			ans.body, ans.bodyCut = ans.body[:maxUpstreamErrorBody], fmt.Sprintf("over %d bytes", maxUpstreamErrorBody)
		case err != nil: // the upstream went silent (timeouts.idle) or the connection broke
			ans.bodyCut = "that was cut short"
		}
	}
	return resp, ans, nil
}

// What is left of an upstream body after the response ended (the chunked
// encoding's last chunk, an SSE comment) is read before the body is closed,
// within these bounds: Go's transport puts a connection back in its pool
// only when the body was read to its end, so closing it at the terminal
// event could cost the next request a new connection (and, to a TLS
// upstream, a handshake; docs/ARCHITECTURE.md §11).
const (
	upstreamDrainBytes = 64 << 10
	upstreamDrainWait  = 250 * time.Millisecond
)

// closeUpstreamBody closes an upstream answer's body. reusable: the upstream
// ended the response itself, so the rest is read first (bounded); an
// upstream that sends more, or not in time, loses its connection.
func closeUpstreamBody(body io.ReadCloser, reusable bool) {
	if reusable {
		t := time.AfterFunc(upstreamDrainWait, func() { body.Close() })
		_, _ = io.CopyN(io.Discard, body, upstreamDrainBytes)
		t.Stop()
	}
	body.Close()
}

// isSSE reports whether a streaming request got an event stream back.
func isSSE(req *clientRequest, resp *http.Response) bool {
	return req.stream && strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream")
}

// readAnswer reads a complete 2xx answer, bounded. The caller bounds the
// silence (an idleReader on its attempt's timer).
func (s *Server) readAnswer(r io.Reader) ([]byte, error) {
	limit := int64(s.opts.MaxEventBytes) * 4
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err == nil && int64(len(body)) > limit {
		err = &answerTooLargeError{limit: limit}
	}
	return body, err
}

// answerTooLargeError is a complete answer over readAnswer's bound: the
// upstream's answer, not a transport fault, and not relayed cut short.
type answerTooLargeError struct{ limit int64 }

func (e *answerTooLargeError) Error() string {
	return fmt.Sprintf("the upstream answer exceeds %d bytes", e.limit)
}

func (s *Server) sendHTTP(upCtx context.Context, idle *idleTimer, req *clientRequest, u *upstream.Upstream, reqBody []byte) (*upstreamAnswer, error) {
	resp, ans, err := s.post(upCtx, idle, req, u, req.ep.path, reqBody)
	if err != nil || ans.status/100 != 2 || ans.unusable != "" {
		return ans, err
	}
	if isSSE(req, resp) {
		ir := &idleReader{r: resp.Body} // timeouts.idle counts events, not bytes (idleEvents)
		ans.src, ans.beforeRead = idleEvents{src: sse.NewReader(ir, s.opts.MaxEventBytes), idle: idle}, &ir.before
		return ans, nil
	}
	body, err := s.readAnswer(&idleReader{r: resp.Body, idle: idle})
	if e := errorEnvelopeAnswer(body, err); e != nil {
		// An upstream's 200 whose body is an error envelope is its error,
		// judged as its status, streamed or not, from a Responses upstream
		// as from a Chat one (sendChat; README, "Chat-Completions-only
		// upstreams"): an SDK would take it for an answer with no output,
		// and a stream request would charge the target a client's error.
		answerAsError(ans, e)
		return ans, nil
	}
	if req.stream {
		// An upstream that ignored stream:true: a Chat upstream's
		// chat.completion becomes the chunks a stream of it would have
		// carried, as it becomes Responses events for a Responses client
		// (sendChat); a Responses upstream's whole Response becomes its
		// events. A continuation target's is not (continuationAnswer: its
		// events would be spliced into a stream already sent). Anything
		// else is not relayed.
		if req.ep.chat && err == nil && s.chatCompletionStream(ans, body) {
			return ans, nil
		}
		if !req.ep.chat && err == nil && tryOf(req).cont == nil && s.responseStream(ans, body) {
			return ans, nil
		}
		ans.unusable = fmt.Sprintf("HTTP %d with %s instead of an event stream", ans.status, s.contentTypeOf(resp.Header))
		return ans, nil
	}
	ans.body, ans.readErr = body, err
	return ans, nil
}

// errorEnvelopeAnswer is the error a complete 2xx answer body stands for
// (translate.ErrorEnvelope), nil when it is none or was not read whole
// (readErr). A Response carries an error member of its own, null or a
// failed response's: it is an answer, not an envelope.
func errorEnvelopeAnswer(body []byte, readErr error) *apierr.Error {
	if readErr != nil || gjson.GetBytes(body, "object").Str == "response" {
		return nil
	}
	return translate.ErrorEnvelope(body)
}

// contentTypeOf names an upstream answer's Content-Type for an error
// message, scrubbed before it is cut.
func (s *Server) contentTypeOf(h http.Header) string {
	if v := h.Get("Content-Type"); v != "" {
		return fmt.Sprintf("Content-Type %.60q", s.scrub.String(v))
	}
	return "no Content-Type"
}

// attempt sends req to u once and, when u answers usefully, streams or
// relays its answer to the client.
func (s *Server) attempt(ctx context.Context, out responder, req *clientRequest, u *upstream.Upstream, replays int, start time.Time) attemptResult {
	if !req.ep.chat && u.Config().Protocol == upstream.ProtocolChat {
		if conv := s.convertForChat(ctx, req); conv.err != nil {
			if tryOf(req).cont != nil { // a continuation target that cannot take the request
				return s.continuationFailed(ctx, s.clientStreamOf(ctx, out, req, start), req, u, hostabi.FailureClientError, conv.err.Code, 0, conv.err.Message, failureWait{})
			}
			// Before content forward passes such a target over (nextTaker)
			// unless no target could take the request: this is its answer.
			out.fail(req, conv.err, failInvalid)
			return attemptResult{next: nextDone}
		}
	}
	release := u.Acquire()
	defer release()
	s.startEvents(req) // recording hook calls: this attempt keeps its last events (recordevents.go)

	upCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopDrain := context.AfterFunc(s.streamsCtx, func() { cancel(context.Cause(s.streamsCtx)) })
	defer stopDrain()
	idle := newIdleTimer(s.opts.IdleTimeout, func() { cancel(errIdleTimeout) })
	defer idle.stop()

	firstByte := func() (context.Context, func()) { return s.firstByteTimer(upCtx, cancel, req) }
	waited := func() {
		if cs, ok := out.(*clientStream); ok {
			cs.keepWaiting()
		}
	}
	ans, err := s.send(upCtx, firstByte, waited, idle, req, u)
	s.traceAnswer(req, ans)
	if res, ok := s.sessionChainFailure(out, req, err); ok { // wsmemory.go
		return res
	}
	var notSent *notSentError
	if errors.As(err, &notSent) {
		return s.notSentFailure(out, req, u, notSent)
	}
	if res, ok := s.continuationAnswer(ctx, upCtx, out, req, u, ans, err, start); ok {
		return res // a continuation target that failed before its stream
	}
	if err != nil {
		if res, silent := s.silentTarget(ctx, upCtx, req, u, err); silent {
			return res
		}
		return s.transportFailure(ctx, upCtx, out, req, u, err)
	}
	s.scrub.answer(ans) // before anything below reads, logs or relays it
	recordEvents(req, ans)
	reusable := false
	defer func() { ans.done(reusable) }()

	switch {
	case ans.status/100 != 2:
		return s.statusFailure(ctx, out, req, u, ans)
	case ans.unusable != "":
		return s.unusableAnswer(ctx, req, u, ans.status, ans.unusable)
	case ans.src == nil:
		return s.relayJSON(ctx, upCtx, out, req, u, replays, ans)
	}

	// The client stream outlives this attempt: the pump feeds it, and a
	// failure the client has not seen yet comes back here (unseen) for the
	// replay policy.
	cs := s.clientStreamOf(ctx, out, req, start)
	p := &pump{s: s, cs: cs, ctx: ctx, upCtx: upCtx, req: req, u: u, src: ans.src, surface: req.surface(), replayable: true}
	stopStall := s.armContinuation(cs, p, cancel) // after content: stall bound, splicing
	defer stopStall()
	detach := cs.attach(ans)
	defer detach()
	s.metrics.activeStreams.Inc()
	defer s.metrics.activeStreams.Dec()
	// first_token runs until the first content event (the pump stops it),
	// not merely the first event: lifecycle events alone do not count.
	stopFirstToken := s.firstTokenTimer(cancel, req)
	defer stopFirstToken()
	p.firstToken = stopFirstToken
	first, err := p.firstEvent()
	if res, silent := s.silentTarget(ctx, upCtx, req, u, err); silent {
		if tryOf(req).cont != nil {
			return s.continuationFailed(ctx, cs, req, u, hostabi.FailureFirstToken, "", 0, res.why, failureWait{})
		}
		return res
	}
	if refusal := wsStatusAnswer(first, err); refusal != nil && ans.statusFrames && tryOf(req).cont == nil {
		// The upstream finished the request with its error frame, as an
		// HTTP upstream with a status: handled alike, and the socket (with
		// the previous_response_id state it holds) stays.
		cs.discard()
		s.scrub.Header(refusal.header)
		ans.status, ans.header, ans.body = refusal.status, refusal.header, refusal.body
		reusable = true
		return s.statusFailure(ctx, out, req, u, ans)
	}
	end := p.run(first, err)
	for end.unseen {
		if end.err != nil {
			if ctx.Err() != nil {
				return attemptResult{next: nextDone}
			}
			// No content within first_token after the held lifecycle
			// events: the silent target is left, invisibly.
			if res, silent := s.silentTarget(ctx, upCtx, req, u, end.err); silent {
				cs.discard()
				return res
			}
			if decodeErr := (*answerDecodeError)(nil); errors.As(end.err, &decodeErr) {
				// A stream whose body cannot be decoded, before its first
				// event: an unusable answer, as a non-streaming one is
				// (relayJSON).
				cs.discard()
				return s.unusableAnswer(ctx, req, u, ans.status, fmt.Sprintf("HTTP %d: %s", ans.status, s.scrub.String(decodeErr.Error())))
			}
			reason, e := p.readFailure(end.err)
			switch reason {
			case reasonIdle:
				cs.discard()
				return s.timeoutFailure(ctx, req, u, "idle", s.opts.IdleTimeout)
			case reasonCut:
				s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "cut_before_first_event").Inc()
				if !errors.As(end.err, new(foreignTerminalError)) { // that one says what ended it
					e = apierr.StreamIncomplete("the upstream closed the stream before its first event")
					if p.responseID != "" { // it named its response (response.created, held back): not before its first event
						e = apierr.StreamIncomplete("the upstream closed the stream before its first content event")
					}
				}
			case reasonGarbage, reasonOversize:
				// Events that cannot be read, or one past
				// limits.max_event_bytes, are a transport fault like a cut
				// (README "Failover and replay"): replayed alike, and with
				// no target left the client, who has seen nothing, gets the
				// HTTP status.
				s.metrics.upstreamAttempts.WithLabelValues(u.Name(), reason).Inc()
			default:
				s.metrics.upstreamAttempts.WithLabelValues(u.Name(), reason).Inc()
				cs.fail(req, e, failAsTerminal)
				return attemptResult{next: nextDone}
			}
			res := s.transportBeforeContent(ctx, cs, req, u, replays, ans, e)
			if res.next != nextDone { // replayed: what this attempt held back is not the client's
				cs.discard()
			}
			return res
		}
		// An error event before the client saw anything (first, or right
		// after the held response.created/in_progress).
		code, status, _ := errorShaped(end.ev, req.ep.chat)
		reusable = true // the upstream finished this response with its error
		msg := errorMessage(end.ev)
		var capacityErr *apierr.Error // a rate limit or quota: the 429 the client gets if no target is left
		var waitHeader http.Header    // a WebSocket error frame's headers carry its wait, as an HTTP answer's do
		if ans.statusFrames {
			waitHeader = wsFrameHeader(end.ev)
		}
		if class := eventClass(code, status); class == hostabi.FailureRateLimit || class == hostabi.FailureQuota {
			hint, _ := upstream.RetryAfter(waitHeader, msg, time.Now())
			capacityErr = apierr.CapacityExhausted(code, errorField(end.ev, "type"), hint, "%s", msg)
		}
		res, replay := s.replay(ctx, cs, req, u, replays, ans, code, status, msg, waitHeader, false)
		if f := tryOf(req).fail; capacityErr != nil && f != nil {
			f.Type = capacityErr.Type // the upstream's type, with its code, while the target cools down
		}
		if replay {
			cs.discard()
			if capacityErr != nil {
				res.clientErr = capacityErr // with the upstream's code and type (README "Failover and replay")
			}
			return res
		}
		if req.pinned != nil && isCapacity(code, status) {
			s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "quota").Inc()
			s.failClosed(cs, req, failOwnerUnavailable, http.StatusServiceUnavailable,
				fmt.Sprintf("the upstream that owns previous_response_id is out of capacity (%s); retry later", code))
			return attemptResult{next: nextDone}
		}
		if capacityErr != nil {
			// Not replayed (the replay was spent): the client, who has seen
			// nothing, gets the 429 as any no-upstream-left answer: a Chat
			// stream the status and JSON body, as from OpenAI's API, so that
			// the SDKs' retries see it (failsWithStatus), a Responses stream
			// the gateway's complete response.failed, a WebSocket the error
			// frame with the wait. Without a hint of the upstream's, or when
			// a circuit opened, the wait is the one the client faces
			// (capacityWait), as for a 429 status: a stream's client reads
			// it from the message (waitInMessage).
			if c := tryOf(req).cands; capacityErr.RetryAfter <= 0 || c != nil && c.opened {
				capacityErr = s.capacityWaitNow(req, capacityErr)
			}
			cs.fail(req, capacityErr, failBeforeStream)
			return attemptResult{next: nextDone}
		}
		p.replayable = false // not replayed: the event is the stream's
		end = p.run(end.ev, nil)
	}
	outcome := "ok"
	if af := end.after; af != nil { // a failure after the answer started: charged; continue the stream elsewhere?
		if res, ok := s.continueAfter(ctx, cs, req, u, ans, p, af, replays); ok {
			return res
		}
		p.settled = true // not continued: it ends the stream as it always did
		end = p.run(af.ev, af.err)
		outcome = attemptOutcomeAfterAnswer(af) // counted by how it ended (README "Observability")
	}
	if c := tryOf(req).cont; c != nil {
		s.rescueOutcome(req, c.kind, rescueOutcomeOf(end.reason))
	}
	switch reason := cs.stoppedReason(end.reason); reason {
	case reasonDiverged:
		// A restart that contradicted what the client has: not a failure
		// of the target (not charged), but not an answer that went out.
		outcome = "continuation_diverged"
	case reasonClientGone, reasonDrain, reasonCancelled:
		// Stopped by the client, a drain or a cancel before the upstream
		// finished: not the target's failure, nor an answer that went out
		// whole (README "Observability").
		if outcome == "ok" {
			outcome = reason
		}
	}
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), outcome).Inc()
	cs.finish(end.reason)
	if reusable = p.cleanEnd; reusable {
		cs.flush() // the client has its terminal event before the rest of the upstream body is read
	}
	return attemptResult{next: nextDone}
}

// replay asks the replay policy about a failure that arrived before the
// client saw anything (Phase before_content): an error event or
// response.failed as the stream's first events (after the held-back
// lifecycle), or a stream that broke or garbled before its first event
// (code "transport"). header holds the failure's wait (Retry-After,
// retry-after-ms) when it came with one: a WebSocket error frame's
// headers. replay is false when the request is not replayed:
// the caller then passes the failure on. counted says the caller already
// counted the attempt in sluice_upstream_attempts_total (a transport fault,
// by its cause): one request sent is one count, so a replay then adds no
// "replayed" of its own.
func (s *Server) replay(ctx context.Context, out responder, req *clientRequest, u *upstream.Upstream, replays int,
	ans *upstreamAnswer, code string, status int, msg string, header http.Header, counted bool) (attemptResult, bool) {
	try := tryOf(req)
	// response_created_seen and response_id_assigned stay false: they say
	// what the client was sent (ABI.md §3.2), and the upstream's
	// response.created and its id are held back before content, so a
	// version-1 policy's "never once a response.created went out" still
	// replays this failure invisibly (README "Failover and replay").
	in := hostabi.ReplayInput{Phase: hostabi.PhaseBeforeContent, FailureClass: eventClass(code, status), Code: code, HTTPStatus: status,
		ReplayCount: replays, PendingRequests: ans.pending}
	var wait upstream.Failure // the upstream's wait, "retry now" included
	wait.TakeHint(header, msg, time.Now())
	in.RetryAfterMillis = wait.HintMillis()
	// The target is charged whatever the verdict, as the same failure is
	// as an HTTP status or after content (chargeFor; README "Routes and
	// fallbacks": failures arriving as the stream's first event cool the
	// target down too): a cut or garbled stream and a server error count
	// towards its circuit, a capacity code starts its cooldown. A client
	// error (the request's own) and context_length_exceeded are not the
	// target's fault and cost it nothing.
	try.fail = chargeFor(in.FailureClass, code, status, "stream error "+code, failureWait{header: header, message: msg})
	// What the client learns if no target is left: the code and the
	// failure's own message when it has one (OpenAI's own stream errors
	// carry code null; a Chat answer the translator found unusable says why
	// in its message), cut and on one line as any upstream text in an
	// answer of the gateway's. The upstream may have sent response.created
	// (held back).
	why := "an error before any content"
	if code != "" {
		why += ": " + code
	}
	switch text, more := oneLineExcerpt([]byte(msg)); {
	case text == "" && code == "":
		why += ", without a code or a message"
	case text == "":
	case !isText(text) && code == "":
		why += ", without a code and with a message that is not text"
	case !isText(text):
		why += ", with a message that is not text"
	case more:
		why += ": " + text + " …"
	default:
		why += ": " + text
	}
	switch s.askReplay(ctx, req, u, in) {
	case hostabi.ReplayOtherUpstream:
		if in.FailureClass == hostabi.FailureContextLength {
			s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "context_length").Inc()
			return attemptResult{next: nextOtherModel, why: "context_length_exceeded before any content: trying another model"}, true
		}
		if req.pinned != nil {
			s.failClosed(out, req, failOwnerUnavailable, http.StatusServiceUnavailable,
				fmt.Sprintf("the upstream that owns %s failed (%s) and a pinned request is not replayed elsewhere; retry later", req.pinParam(), code))
			return attemptResult{next: nextDone}, true
		}
		if !counted {
			s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "replayed").Inc()
		}
		return attemptResult{next: nextReplayOther, why: why, replayFrom: u.Name(), replayCode: code}, true
	case hostabi.ReplaySameUpstream:
		if !counted {
			s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "replayed").Inc()
		}
		return attemptResult{next: nextReplaySame, why: why, replayFrom: u.Name(), replayCode: code}, true
	}
	return attemptResult{}, false
}

// transportBeforeContent handles a transport fault that arrived before the
// client saw anything: a stream that broke or garbled before its first
// event, or a complete (non-stream) answer whose body was cut after its
// headers. The replay policy decides (by default one replay, on another
// target); when it declines, e is the answer of a client that has seen
// nothing (failBeforeStream): the HTTP status and JSON error, Chat streams
// included, response.failed on a Responses stream, an error frame on a
// WebSocket (README "Failover and replay"). The caller counted the attempt
// by its cause (README "Observability"), replayed or not.
func (s *Server) transportBeforeContent(ctx context.Context, out responder, req *clientRequest, u *upstream.Upstream, replays int,
	ans *upstreamAnswer, e *apierr.Error) attemptResult {
	if res, replay := s.replay(ctx, out, req, u, replays, ans, "transport", 0, "", nil, true); replay {
		res.why = e.Message // what happened, for the answer if no target is left (the upstream may have sent response.created)
		return res
	}
	out.fail(req, e, failBeforeStream)
	return attemptResult{next: nextDone}
}

// eventClass is the failure class (hostabi.Failure*) of an error-shaped
// event before content; code "transport" is a stream that broke or garbled
// before its first event.
func eventClass(code string, status int) string {
	switch {
	case code == "transport":
		return hostabi.FailureCut
	case code == "context_length_exceeded":
		return hostabi.FailureContextLength
	case upstream.IsOverloadedCode(code) || status == http.StatusServiceUnavailable || status == 529:
		return hostabi.FailureOverloaded
	case isCapacity(code, status):
		if code != "" && code != "rate_limit_exceeded" && upstream.IsQuotaCode(code) {
			return hostabi.FailureQuota
		}
		return hostabi.FailureRateLimit
	case status >= 500 || code == "server_error":
		return hostabi.FailureServerError
	case status >= 400:
		return hostabi.FailureClientError
	}
	return hostabi.FailureErrorEvent
}

// notSentError is an attempt that failed before anything reached the
// network: the gateway could not build the request (a header value
// net/http refuses to send, a URL it cannot parse).
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "the upstream request was not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// notSentFailure ends a request the gateway could not send. That is the
// gateway's fault (or a rewrite policy's, for a header it set), never the
// upstream's: nothing is charged to the target, and no other target is
// tried, since each would be refused the same way and cooled down for it.
// The client gets a 500 server_error naming the problem, never a header's
// value.
func (s *Server) notSentFailure(out responder, req *clientRequest, u *upstream.Upstream, err *notSentError) attemptResult {
	why := s.scrub.String(upstream.RedactError(err.err))
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "not_sent").Inc()
	s.log.Error("the gateway could not build the upstream request; no upstream is charged", "upstream", u.Name(), "error", why)
	e := &apierr.Error{Status: http.StatusInternalServerError, Type: apierr.TypeServer, Code: apierr.CodeInternalError,
		Message: "the gateway could not build the upstream request: " + why}
	out.fail(req, e, failBeforeStream) // on a continuation: the stream's terminal event (clientStream.fail)
	return attemptResult{next: nextDone}
}

// drained ends a request whose attempt on u the drain stopped before its
// answer reached the client (no headers yet, or a JSON body still coming):
// its access line says reason=drain and the attempt counts as drain, as for
// a stream the drain cuts (pump.go), not as the gateway's own error (README
// "Observability", "Access log").
func (s *Server) drained(out responder, req *clientRequest, u *upstream.Upstream, e *apierr.Error, kind failKind) attemptResult {
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), reasonDrain).Inc()
	req.meta.setReason(reasonDrain)
	out.fail(req, e, kind)
	return attemptResult{next: nextDone}
}

// transportFailure handles an attempt that got no answer at all: a
// connection that failed (refused, reset) before the headers (class
// transport: by default retried once on the same target after a short
// jittered backoff, then the upstream cools down, as connect failures are
// per upstream), or a header timeout (class first_byte: the target's, by
// default never retried).
func (s *Server) transportFailure(ctx, upCtx context.Context, out responder, req *clientRequest, u *upstream.Upstream, err error) attemptResult {
	if ctx.Err() != nil { // the client went away
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "client_gone").Inc()
		return attemptResult{next: nextDone}
	}
	if errors.Is(context.Cause(upCtx), errDraining) {
		return s.drained(out, req, u, apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the gateway is shutting down; retry the request"), failBeforeStream)
	}
	if errors.Is(err, errDraining) {
		// Queued for its session's upstream WebSocket when the drain began,
		// it started nothing: refused as a request arriving then is, with a
		// status over HTTP, an error frame over a WebSocket (README "Running
		// it").
		out.fail(req, errShuttingDown(), failInvalid)
		return attemptResult{next: nextDone}
	}
	if errors.Is(err, errUpstreamSocketsFull) { // the gateway's limit: nothing reached the upstream
		return s.upstreamSocketsFull(out, req, u, err)
	}
	if refused := (*wsUpgradeRefusedError)(nil); errors.As(err, &refused) {
		return s.webSocketRefused(out, req, u, refused)
	}
	why := s.scrub.String(upstream.RedactError(err))
	try := tryOf(req)
	in := hostabi.ReplayInput{Phase: hostabi.PhaseBeforeHeaders, FailureClass: hostabi.FailureTransport, Code: "transport"}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &ne) && ne.Timeout() && !(errors.As(err, &oe) && oe.Op == "dial") {
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "header_timeout").Inc()
		try.fail = &upstream.Failure{Class: "timeout", Reason: why}
		s.log.Warn("upstream timed out before its headers", "upstream", u.Name(), "error", why)
		in.FailureClass, in.Code = hostabi.FailureFirstByte, "first_byte_timeout"
	} else {
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "transport_error").Inc()
		s.log.Warn("upstream transport failure", "upstream", u.Name(), "error", why)
		try.connect = true
	}
	return s.rescue(ctx, req, u, in, why, nil)
}

// statusFailure handles a non-2xx upstream answer. It classifies the
// failure, charges the target (cooldowns and circuits stay in the upstream
// package) and asks the replay policy (Phase before_headers). When the
// policy says no, a 4xx of the request's own (a content filter, another
// client error, context_length_exceeded) goes to the recover policy and
// passes through unchanged unless it recovers; any other failure ends the
// request with what forward reports. A status below 400 (a redirect) is no
// answer at all (unusableAnswer).
func (s *Server) statusFailure(ctx context.Context, out responder, req *clientRequest, u *upstream.Upstream, ans *upstreamAnswer) attemptResult {
	if ans.status < 400 {
		// A redirect is never relayed: the client would follow the
		// upstream's Location, away from the gateway (whose own client
		// follows none).
		why := fmt.Sprintf("HTTP %d %s instead of an answer", ans.status, http.StatusText(ans.status))
		if ans.status/100 == 3 {
			why += " " + upstream.NoRedirectsHint
		}
		return s.unusableAnswer(ctx, req, u, ans.status, why)
	}
	perr := upstreamErrorOf(ans.status, ans.body)
	status := ans.status
	try := tryOf(req)
	try.noRetry = upstreamSaysNoRetry(ans.header) // never retried on this target (forward)
	code := apierr.CodeBesideStatus(perr.Code, status)
	why := ans.statusReason(firstNonEmpty(code, perr.Message))
	coded := ans.statusReason(code)
	in := hostabi.ReplayInput{Phase: hostabi.PhaseBeforeHeaders, Code: perr.Code, HTTPStatus: status}
	var clientErr *apierr.Error
	switch {
	case status == http.StatusTooManyRequests || upstream.IsQuotaCode(perr.Code):
		f := upstream.CapacityFailure(ans.header, perr.Message, perr.Code, status, time.Now(), coded)
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), f.Class).Inc()
		try.fail = &f
		ce := apierr.FromUpstream(perr, status) // llama.cpp's "429" is rate_limit_exceeded to a client
		if _, readable := apierr.Parse(ans.body); !readable || ans.bodyCut != "" {
			// No error the gateway can read (an HTML page, a body over the
			// read bound): described as openAIShapedBody describes it, never
			// quoted raw or cut mid-string.
			ce.Code, ce.Message = apierr.ClientCode("", status), errorBodyExcerpt(status, ans.body, ans.bodyCut)
		}
		if ce.Type == "" {
			ce.Type = apierr.TypeServer
		}
		if ce.Status != http.StatusTooManyRequests {
			ce.Status = http.StatusTooManyRequests
		}
		ce.RetryAfter = f.Hint // the upstream's own wait reaches the client too, so its retry waits it out
		f.Type = perr.Type     // and its error type, with the code, while the target cools down
		clientErr, why = &ce, coded
		in.FailureClass, in.RetryAfterMillis = hostabi.FailureRateLimit, f.HintMillis()
		if f.Class == "quota" {
			in.FailureClass = hostabi.FailureQuota
		}
	case (status == http.StatusUnauthorized || status == http.StatusForbidden || upstream.IsAuthCode(perr.Code)) && u.Config().APIKey != "":
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "auth_failure").Inc()
		s.pool.MarkFailed(u, coded)
		why, in.FailureClass = ans.statusReason("")+": the upstream rejected the gateway's credentials", hostabi.FailureAuth
	case status == http.StatusServiceUnavailable || status == 529 || upstream.IsOverloadedCode(perr.Code):
		// Overloaded: by default the next target at once; a hint cools this one down.
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "overloaded").Inc()
		f := upstream.Failure{Class: "overloaded", Reason: why}
		f.TakeHint(ans.header, perr.Message, time.Now())
		try.fail = &f
		in.FailureClass, in.RetryAfterMillis = hostabi.FailureOverloaded, f.HintMillis()
	case status >= 500:
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "server_error").Inc()
		f := upstream.Failure{Class: "server_error", Reason: why}
		f.TakeHint(ans.header, perr.Message, time.Now())
		if status == http.StatusGatewayTimeout {
			f.Class = "timeout"
		}
		try.fail = &f
		in.FailureClass, in.RetryAfterMillis = hostabi.FailureServerError, f.HintMillis()
	case apierr.FromUpstream(perr, status).Code == apierr.CodeContextLengthExceeded:
		// llama.cpp's exceed_context_size_error included: the client gets
		// it as context_length_exceeded (openAIShapedBody), and a larger
		// context may serve it as for any upstream that says so.
		in.FailureClass = hostabi.FailureContextLength
	default:
		in.FailureClass = hostabi.FailureClientError
	}
	res := s.rescue(ctx, req, u, in, why, clientErr)
	if clientErr != nil {
		res.clientHeader = ans.header
	}
	own := in.FailureClass == hostabi.FailureClientError || in.FailureClass == hostabi.FailureContextLength
	switch {
	case res.next == nextOtherModel:
		// A larger context may serve it: the next target of another model
		// (never this model again).
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "context_length").Inc()
		return res
	case res.next != nextStop || !own:
		return res
	}
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "client_error").Inc()
	recoverIn := hostabi.RecoverInput{Surface: req.policySurface(), Upstream: u.Name(), HTTPStatus: status,
		Code: perr.Code, Type: perr.Type, Param: perr.Param, Message: perr.Message}
	verdict := s.policy.Recover(ctx, recoverIn)
	if e := s.recoveredError(req, recoverIn, verdict); e != nil {
		s.log.Info("upstream error recovered", "upstream", u.Name(), "code", perr.Code, "verdict", verdict.Verdict.String())
		s.onRecovered(ctx, req, verdict)
		out.fail(req, e, failAsTerminal)
		return attemptResult{next: nextDone}
	}
	// Whatever the upstream said its body was, the client gets it as JSON.
	header := ans.header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", "application/json")
	if try.cands != nil { // an earlier target's failure a retry may cure: no x-should-retry: false
		keepNoRetryOnly(header, try.cands.noRetryAnswer(true, true))
	}
	out.relay(req, status, header, openAIShapedBody(status, ans.body, ans.bodyCut))
	return attemptResult{next: nextDone}
}

// openAIShapedBody is an upstream's error body as the client gets it
// (README "Endpoints": errors are OpenAI-shaped everywhere), with the status
// it came with. One in OpenAI's shape (message and type strings, code and
// param each a string or null) is relayed unchanged, byte for byte (but for
// bytes that are not UTF-8: U+FFFD, validText), unless
// apierr.FromUpstream says otherwise of its code or type. An error in
// another shape is re-rendered in OpenAI's, as an in-stream error chunk is
// (pump.chatError): llama.cpp's integer code without a param, vLLM's bare
// error object, Ollama's {"error":"…"}, its message and param kept and its
// code and type as apierr.FromUpstream gives them (a status sent as the
// code is none, llama.cpp's context overflow is context_length_exceeded).
// Anything else (an HTML page, a proxy's
// text, JSON with no error in it, a body cut at maxUpstreamErrorBody or
// short of its end) is
// never relayed as it came: the client would get no error it can parse, or a
// cut one (SECURITY.md, Upstreams). It becomes an upstream_error whose message
// quotes the body's beginning (errorBodyExcerpt). body is scrubbed already.
func openAIShapedBody(status int, body []byte, cut string) []byte {
	var e apierr.Error
	switch inner := gjson.GetBytes(body, "error"); {
	case cut != "" || !gjson.ValidBytes(body):
		e = relayedError(status, nil)
		e.Code, e.Message = apierr.CodeUpstreamError, errorBodyExcerpt(status, body, cut)
	case relayableError(status, body):
		return validText(body) // JSON is UTF-8 (RFC 8259), as every relayed answer
	case inner.IsObject() && isOpenAIError(inner):
		e = relayedError(status, body)
	case inner.Type == gjson.String && strings.TrimSpace(inner.Str) != "":
		e = relayedError(status, nil)
		e.Message = inner.Str
	default:
		if _, ok := apierr.Parse(body); !ok {
			e = relayedError(status, nil)
			e.Code, e.Message = apierr.CodeUpstreamError, errorBodyExcerpt(status, body, "")
			break
		}
		e = relayedError(status, body)
	}
	b, err := json.Marshal(&e)
	if err != nil { // cannot happen: e is strings
		return body
	}
	return b
}

// relayableError reports whether an upstream's error body, which came with
// status, reaches a client as it came, byte for byte: its error is in
// OpenAI's shape (isOpenAIError) and apierr.FromUpstream keeps its code and
// type. Any other error body is re-rendered (openAIShapedBody) or replaced
// by the gateway's own error (ownerError).
func relayableError(status int, body []byte) bool {
	inner := gjson.GetBytes(body, "error")
	if !inner.IsObject() || !isOpenAIError(inner) {
		return false
	}
	up, _ := apierr.Parse(body)
	client := apierr.FromUpstream(up, status)
	return client.Code == up.Code && client.Type == up.Type
}

// isOpenAIError reports whether an error object has OpenAI's shape: message
// and type strings, code and param each a string or null.
func isOpenAIError(inner gjson.Result) bool {
	stringOrNull := func(r gjson.Result) bool { return r.Type == gjson.String || (r.Type == gjson.Null && r.Exists()) }
	return inner.Get("message").Type == gjson.String && inner.Get("type").Type == gjson.String &&
		stringOrNull(inner.Get("code")) && stringOrNull(inner.Get("param"))
}

// errorExcerptBytes bounds the part of an upstream's error body that an
// error message quotes.
const errorExcerptBytes = 200

// errorBodyExcerpt is the message for an upstream error body that holds no
// error the gateway can read: its beginning, or what it is when that is not
// text; cut says why body is only the beginning ("" when it is whole).
func errorBodyExcerpt(status int, body []byte, cut string) string {
	what := fmt.Sprintf("the upstream answered HTTP %d %s", status, http.StatusText(status))
	size := fmt.Sprintf("%d bytes", len(body))
	if cut != "" {
		size = cut
	}
	text, more := oneLineExcerpt(body)
	switch {
	case len(bytes.TrimSpace(body)) == 0 && cut == "":
		return what + " without an error message"
	case !isText(text):
		return fmt.Sprintf("%s with an error body that is not text (%s)", what, size)
	case cut != "":
		return fmt.Sprintf("%s with an error body %s, not relayed: %s …", what, size, text)
	case more:
		return what + ": " + text + " …"
	}
	return what + ": " + text
}

// oneLineExcerpt is bodyExcerpt with its whitespace runs made single
// spaces: upstream text as an error message of the gateway's quotes it.
func oneLineExcerpt(body []byte) (excerpt string, more bool) {
	text, more := bodyExcerpt(body)
	return strings.Join(strings.Fields(text), " "), more
}

// bodyExcerpt is body's beginning, at most errorExcerptBytes, and whether
// there is more. The excerpt never ends inside a UTF-8 character, nor inside
// a run of the characters keys are made of: the key scrubber saw whole keys
// only, and a key the bound cut would otherwise show its beginning.
func bodyExcerpt(body []byte) (excerpt string, more bool) {
	body = bytes.TrimSpace(body)
	if len(body) <= errorExcerptBytes {
		return string(body), false
	}
	i := errorExcerptBytes
	for i > 0 && (!utf8.RuneStart(body[i]) || keyByte(body[i-1]) && keyByte(body[i])) {
		i--
	}
	return string(bytes.TrimSpace(body[:i])), true
}

// keyByte reports whether b is a byte keys and tokens are commonly made of
// (letters, digits, and - _ . ~ + / =).
func keyByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("-_.~+/=", b) >= 0
}

// isText reports whether s is UTF-8 text without control characters other
// than whitespace.
func isText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}

// onRecovered clears the stale anchor of a request whose previous response
// the upstream lost, so the next turn is not pinned to it again. Only the
// owner the anchor pinned the request to can say so: an unpinned request
// (an id without an anchor, or one its scope does not see) reached an
// upstream that may never have had the response, and another scope's
// anchor must survive that.
func (s *Server) onRecovered(ctx context.Context, req *clientRequest, v hostabi.RecoverOutput) {
	if v.Verdict != hostabi.RecoverRecover || req.previousResponseID == "" || s.cont == nil {
		return
	}
	s.metrics.failClosed.WithLabelValues(req.surface(), failPreviousNotFound).Inc()
	s.log.Warn("continuity fail closed", "surface", req.surface(), "reason", failPreviousNotFound, "previous_response_id", LogID(req.previousResponseID))
	if req.pinned != nil {
		s.cont.forget(context.WithoutCancel(ctx), req.previousResponseID)
	}
}

// recoveredError is the client error for a recover verdict about the
// upstream error in, which req's attempt got, nil for pass.
func (s *Server) recoveredError(req *clientRequest, in hostabi.RecoverInput, v hostabi.RecoverOutput) *apierr.Error {
	switch v.Verdict {
	case hostabi.RecoverRecover:
		e := apierr.StreamIncomplete("%s", firstNonEmpty(v.Message, recoveredMessage(in)))
		if v.Code != "" {
			e.Code = v.Code
		}
		return e
	case hostabi.RecoverFailClosed, hostabi.RecoverRehydrate: // rehydrate answers only an owner question (hostabi.EffectiveRecover)
		e := apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "%s", firstNonEmpty(v.Message, failedClosedMessage(req, in)))
		if v.Code != "" {
			e.Code = v.Code
		}
		return e
	}
	return nil
}

// failedClosedMessage is the client's message for a recover policy's
// fail_closed without one of its own: only a request that names a previous
// response or a conversation has a conversation whose owner it speaks of;
// any other is told
// that the policy refused it after the upstream's error, with its code (or
// status).
func failedClosedMessage(req *clientRequest, in hostabi.RecoverInput) string {
	switch {
	case req.previousResponseID != "" || req.conversationID != "":
		return "the upstream that owns this conversation is unavailable"
	case in.Code != "":
		return fmt.Sprintf("the recover policy failed the request closed after the upstream's error (code %s); retry later", in.Code)
	case in.HTTPStatus != 0:
		return fmt.Sprintf("the recover policy failed the request closed after the upstream's error (HTTP %d); retry later", in.HTTPStatus)
	}
	return "the recover policy failed the request closed after the upstream's error; retry later"
}

// recoveredMessage is the client's message for a recover verdict without
// one of its own: a policy may recover any error (ABI.md §3.1), and only a
// lost previous response (the built-in default's predicate) may be called
// so; any other names the upstream's code.
func recoveredMessage(in hostabi.RecoverInput) string {
	switch {
	case hostabi.IsPreviousResponseNotFound(in.Code, in.Type, in.Param, in.Message):
		return "the upstream lost this conversation's previous response; retry the request"
	case in.Code != "":
		return fmt.Sprintf("the upstream failed this request (code %s); retry the request", in.Code)
	}
	return "the upstream failed this request; retry the request"
}

// relayJSON relays a complete (non-stream) 2xx upstream answer.
func (s *Server) relayJSON(ctx, upCtx context.Context, out responder, req *clientRequest, u *upstream.Upstream, replays int, ans *upstreamAnswer) attemptResult {
	var decodeErr *answerDecodeError
	switch err := ans.readErr; {
	case err != nil && ctx.Err() != nil:
		return attemptResult{next: nextDone}
	case err != nil && errors.Is(context.Cause(upCtx), errDraining):
		return s.drained(out, req, u, apierr.StreamIncomplete("the gateway is shutting down; retry the request"), failAsTerminal)
	case err != nil && errors.Is(context.Cause(upCtx), errIdleTimeout):
		// Nothing reached the client yet: a body that stalls after its
		// headers is a silent target, as a stream that sends no event
		// within timeouts.idle is.
		return s.timeoutFailure(ctx, req, u, "idle", s.opts.IdleTimeout)
	case errors.As(err, new(*answerTooLargeError)):
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), reasonOversize).Inc()
		out.fail(req, apierr.StreamIncomplete("%s", err), failAsTerminal)
		return attemptResult{next: nextDone}
	case errors.As(err, &decodeErr):
		// The whole body came, garbled: the upstream's unusable answer, not
		// a cut in transit to replay.
		return s.unusableAnswer(ctx, req, u, ans.status, fmt.Sprintf("HTTP %d: %s", ans.status, s.scrub.String(decodeErr.Error())))
	case err != nil:
		// A body cut after its headers is a transport fault before
		// content, judged as a stream cut before its first event is.
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "cut_before_first_event").Inc()
		return s.transportBeforeContent(ctx, out, req, u, replays, ans,
			apierr.StreamIncomplete("the upstream answer was incomplete: %s", s.scrub.String(upstream.RedactError(err))))
	}
	if why := s.answerProblem(ans); why != "" {
		return s.unusableAnswer(ctx, req, u, ans.status, why)
	}
	// JSON is UTF-8 (RFC 8259): bytes that are not, inside the answer's
	// strings, become U+FFFD as they do in a stream's events (validText),
	// before the answer is anchored, kept, logged for GET or relayed, so
	// every copy of it is the one the client got.
	ans.body = validText(ans.body)
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "ok").Inc()
	tryOf(req).answered = true
	if req.ep.passthrough {
		// No Response: nothing to anchor or keep, relayed as it came
		// (relay_endpoints.go).
		out.relay(req, ans.status, ans.header, ans.body)
		return attemptResult{next: nextDone}
	}
	if s.cont != nil && !req.ep.chat && req.recordable() {
		// The client must not see a response whose anchor could be lost.
		if id := gjson.GetBytes(ans.body, "id"); id.Type == gjson.String && id.Str != "" {
			if err := s.cont.recordServed(req, id.Str, u.Name()).wait(ctx); err != nil {
				s.cont.logNotDurable("response served without a durable anchor", id.Str, err)
			}
		}
	}
	if req.portable != nil { // portable.go: the turn is kept before the client sees it
		s.keepTurnJSON(ctx, req, u, ans.body)
	}
	out.relay(req, ans.status, ans.header, ans.body)
	return attemptResult{next: nextDone}
}

// answerProblem says why a complete 2xx answer cannot be relayed: it is
// not a JSON object nested within limits.max_json_depth (SECURITY.md:
// upstream bodies are size-, depth- and shape-checked). "" when it can.
func (s *Server) answerProblem(ans *upstreamAnswer) string {
	body := ans.body
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Sprintf("HTTP %d with an empty body", ans.status)
	}
	valid, object := jsonx.ScanTop(body, s.opts.MaxJSONDepth, func([]byte, int, int) {})
	switch {
	case valid && object:
		return ""
	case valid:
		return fmt.Sprintf("HTTP %d: the answer is %s, not a JSON object", ans.status, jsonKind(parseJSON(body)))
	case jsonx.CheckDepth(body, s.opts.MaxJSONDepth) != nil:
		return fmt.Sprintf("HTTP %d: the answer nests deeper than %d levels (limits.max_json_depth)", ans.status, s.opts.MaxJSONDepth)
	}
	return fmt.Sprintf("HTTP %d: the answer is not valid JSON (%s)", ans.status, s.contentTypeOf(ans.header))
}

// unusableAnswer handles an answer that is neither usable nor an error: a
// 2xx that fails answerProblem or unusable, or a redirect. Nothing reached
// the client and nothing is relayed: it is the target's server error
// (phase before_headers): charged to the target, and by default the next
// target is tried; with none left the client gets 502
// upstream_unavailable saying why (a pinned request fails closed).
func (s *Server) unusableAnswer(ctx context.Context, req *clientRequest, u *upstream.Upstream, status int, why string) attemptResult {
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "unusable_answer").Inc()
	s.log.Warn("upstream answer unusable", "upstream", u.Name(), "why", why)
	tryOf(req).fail = &upstream.Failure{Class: "server_error", Reason: why}
	in := hostabi.ReplayInput{Phase: hostabi.PhaseBeforeHeaders, FailureClass: hostabi.FailureServerError, HTTPStatus: status}
	return s.rescue(ctx, req, u, in, why, nil)
}

// errorShaped recognises an event that carries an upstream error: an
// `error:` field, an error event or chunk, an unwrapped error object
// (bareErrorObject), or a response.failed. status is
// the one the event names, else the one its error stands for
// (errorStatusOf), so that an error is judged alike from a Responses and a
// Chat upstream.
func errorShaped(ev sse.Event, chat bool) (code string, status int, ok bool) {
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
	case typ == "response.failed" && !chat:
		e = obj.Get("response.error")
	case obj.Get("error").IsObject():
		e = obj.Get("error")
	case typ == "error" || ev.Error != nil || bareErrorObject(obj.Get("object"), obj.Get("message")):
		e = obj
	default:
		return "", 0, false
	}
	code = e.Get("code").String()
	if code == "" {
		code = obj.Get("code").String()
	}
	status = int(obj.Get("status").Int())
	if status == 0 {
		status = errorStatusOf(e)
	}
	// Judged by the code the client gets (apierr.FromUpstream): a 429's
	// code is the one a capacity answer carries (capacityErr), and
	// llama.cpp's context overflow is context_length_exceeded for routing
	// as for the client. Any other code that only repeats the status stays
	// as it came: the status judges it.
	if n := apierr.FromUpstream(apierr.Error{Code: code, Type: e.Get("type").String()}, status); n.Code != "" {
		code = n.Code
	}
	return code, status, true
}

// isCapacity reports whether an error means the upstream is out of capacity.
func isCapacity(code string, status int) bool {
	return upstream.IsQuotaCode(code) || hostabi.IsReplayableCode(code) || status == http.StatusTooManyRequests
}

func errorMessage(ev sse.Event) string { return errorField(ev, "message") }

// errorField is the member name of an error-shaped event's error: an error
// event's, a response.failed's, or a bare error object's. A bare "type" is
// the event's own (error, response.failed), never the error's. The message
// of {"error":"…"} is that string.
func errorField(ev sse.Event, name string) string {
	b := ev.Data
	if ev.Error != nil {
		b = ev.Error
	}
	obj := gjson.ParseBytes(b)
	paths := []string{"error." + name, "response.error." + name, name}
	if name == "type" {
		paths = paths[:2]
	}
	for _, p := range paths {
		if m := obj.Get(p); m.Exists() {
			return m.String()
		}
	}
	if e := obj.Get("error"); name == "message" && e.Type == gjson.String {
		return e.Str // {"error":"…"}: the string is all it says
	}
	return ""
}

// idleReader runs before (the client flush) ahead of each read that may
// block. With idle set, it counts the idle timeout only while a read waits
// for the upstream: any bytes end the wait, which is what bounds a
// non-streaming answer or an error body (SECURITY.md), and time spent
// between reads is not the upstream's silence. An event stream's body is
// read with idle nil: its silence is counted per complete event
// (idleEvents), so that keepalive comments and a trickled partial event do
// not keep a silent upstream alive (README "Failover and replay").
type idleReader struct {
	r      io.Reader
	idle   *idleTimer
	before func()
}

func (ir *idleReader) Read(p []byte) (int, error) {
	if ir.before != nil {
		ir.before()
	}
	if ir.idle == nil {
		return ir.r.Read(p)
	}
	ir.idle.resume()
	n, err := ir.r.Read(p)
	ir.idle.pause()
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
	// errorCodeOf, when set (the gate's writer, serveGated), is the request
	// whose access line gets the code of an OpenAI error it was answered
	// with, whichever handler wrote it (the router's 404 and 405,
	// /v1/models/{model}, stored responses, streaming input, the 426: README
	// "Access log"): read from the first body write after a 4xx or 5xx
	// status, as apierr.Error.Write writes its whole body at once. A code
	// the request noted itself stays (noteAnswerError).
	errorCodeOf *reqMeta
	codeRead    bool
	// body, when set (the outermost writer of a request whose client
	// declared a body: trackBody), learns when the answer begins, so that
	// a body the handler left unread closes the connection rather than
	// being drained by net/http with no deadline. Checked only while status
	// is 0: nothing is added to the writes of a stream once it began.
	body *declaredBody
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.body.answerBegins(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
		w.body.answerBegins(w.Header())
	}
	if w.errorCodeOf != nil && !w.codeRead {
		w.codeRead = true
		if w.status >= http.StatusBadRequest {
			w.errorCodeOf.noteAnswerError(b)
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls first: without it
// the controller stops at Flush above and every flush error (a client that
// left, a write deadline) is lost until a later write fails.
func (w *statusWriter) FlushError() error {
	if w.status == 0 { // a flush before any write sends the header
		w.body.answerBegins(w.Header())
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// EnableFullDuplex is what http.ResponseController.EnableFullDuplex calls
// first: a handler that answers while the body still arrives (streaming
// input's Mode A) reads the body on its own terms, so the answer beginning
// before its end does not close the connection (declaredBody).
func (w *statusWriter) EnableFullDuplex() error {
	w.body.answeredInFullDuplex()
	return http.NewResponseController(w.ResponseWriter).EnableFullDuplex()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func statusLabel(code int) string {
	if code == 0 {
		return "0"
	}
	return fmt.Sprint(code)
}

// upstreamErrorOf reads an upstream's error body: its OpenAI error, or for a
// body that is none, its beginning as the message (bodyExcerpt). The body must be
// scrubbed already.
func upstreamErrorOf(status int, body []byte) apierr.Error {
	perr, _ := apierr.Parse(body)
	perr.Status = status
	if perr.Message == "" {
		perr.Message, _ = bodyExcerpt(body)
	}
	return perr
}
