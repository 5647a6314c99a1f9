package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/store"
)

// Continuation after content (README, "Continuation"): when a stream fails
// after content reached the client (cut, stall, a retryable error event),
// the replay policy is asked (Phase after_content); on a continue verdict
// the request goes to the route's next target and its output is spliced
// into the same client stream:
//
//   - prefill: the original request plus the text already sent as a
//     trailing assistant message (appended to the one the request ends
//     with, if the client sent a prefill of its own); what the target adds
//     is appended to the client's open message (one item per message);
//   - restart: the original request again; its output is compared with what
//     the client has and suppressed until it reproduced it exactly, then
//     streamed; a contradiction ends the stream (stream_incomplete) before
//     any contradicting text goes out.
//
// The client keeps one response id (the first it was shown), one numbering,
// its indices and item ids; usage is summed; the one terminal event is
// rebuilt with the whole output. The request's rescue (req.rescue) holds
// what the decision needs across attempts; the client stream's splicer
// (cs.splice) maps one continuation attempt's events onto the client's.

var (
	errStallTimeout = errors.New("no upstream event within the route's stall timeout")
	errDiverged     = errors.New("the continuation diverged from what the client has")
)

// Reasons a stream ended (sluice_stream_terminal_total), besides pump.go's.
const (
	reasonStall    = "stall_timeout"
	reasonDiverged = "diverged"
)

// Kinds of continuation (sluice_rescues_total{kind}).
const (
	kindPrefill = "prefill"
	kindRestart = "restart"
)

// rescueState is a request's continuation state, from its first after-content
// continuation on (req.rescue).
type rescueState struct {
	clientID   string         // the client-visible response id (Responses clients)
	prevAnchor *pendingAnchor // the anchor write of the client-visible id (its first owner)
	owner      string         // that first owner: the upstream the anchor names until a target finishes it
	cause      *apierr.Error  // the last after-content failure: the client's terminal if nothing rescues it
	reason     string         // its terminal reason
	kind       string         // of the next continuation attempt
	text       string         // the text the client had when it was decided (a prefill's message)
	refused    map[*upstream.Upstream]bool
	usage      []byte     // usage of the failed attempts, summed
	count      int        // continuations decided
	log        *streamLog // the client stream's resume log, if any: touched as each attempt begins
	// stream is the client stream the continuation feeds: whether a cancel
	// or DELETE of the response stopped it (rescueOutcome).
	stream *clientStream
	// earlier are the copies the targets it was cut on keep (noteCopy),
	// which its anchor lists so that a DELETE reaches them: rewritten as
	// each continuation target names its own (anchorContinuationCopy), and
	// by the target that finishes it (confirmRescue).
	earlier []store.UpstreamCopy
}

// noteCopy notes the copy of the response that u keeps under responseID
// (its own id: a Chat upstream keeps nothing): an attempt that failed after
// it began answering, or a continuation target once it named its response
// (anchorContinuationCopy).
func (r *rescueState) noteCopy(u *upstream.Upstream, responseID string) {
	if responseID == "" || u.Config().Protocol == upstream.ProtocolChat || len(r.earlier) >= store.MaxEarlierCopies {
		return
	}
	c := store.UpstreamCopy{Upstream: u.Name(), ID: responseID}
	if responseID == r.clientID {
		c.ID = "" // the anchor's own id
	}
	if !slices.Contains(r.earlier, c) {
		r.earlier = append(r.earlier, c)
	}
}

// contAttempt marks an attempt as a continuation (tryState.cont).
type contAttempt struct {
	kind string
	r    *rescueState
}

// afterFailure is a failure after content that the pump handed back to the
// attempt (pumpEnd.after) instead of ending the stream.
type afterFailure struct {
	class  string // hostabi.Failure*
	code   string
	status int
	reason string        // the terminal reason if it is not rescued
	cause  *apierr.Error // the client's terminal error if it is not rescued
	ev     sse.Event     // the error-shaped event (a copy); zero for a read failure
	err    error         // the read failure
	usage  []byte        // what the failed attempt reported
	// content: the client was sent content, not only the lifecycle events
	// or a Chat role chunk (pump.contentSent; set by continueAfter).
	content bool
}

// continuationArmed reports whether a failure after content may be
// continued: a streamed, routed request whose route does not turn it off,
// not pinned to an owner. Without routes Sluice behaves as before.
func (s *Server) continuationArmed(req *clientRequest) bool { return notContinuable(req) == "" }

// notContinuable is why a failure after content may not be continued, ""
// when it may (continuationArmed); the log says it of a stream that was
// not.
func notContinuable(req *clientRequest) string {
	r := tryOf(req).route
	switch {
	case !req.stream:
		return "not a stream"
	case r == nil:
		return "no route"
	case r.Continuation == ContinuationOff:
		return "continuation: off"
	case req.pinned != nil:
		return "pinned to its owner by " + req.pinParam()
	}
	if req.ep.chat { // one choice only: the splice follows choice 0
		if n := gjson.GetBytes(req.body, "n"); n.Exists() && n.Int() > 1 {
			return "n > 1"
		}
	}
	return ""
}

// stallTimeout is the route's stall bound (0: the idle timeout governs).
func stallTimeout(req *clientRequest) time.Duration {
	if r := tryOf(req).route; r != nil {
		return r.Stall
	}
	return 0
}

// nextFor is the target a continuation after cur goes to: the route's first
// eligible, usable target other than cur (what candidates.next will begin).
// When there is none, the down upstreams among the others are probed at
// once and the selection is made again, as before content (candidates.next;
// README "A down upstream is not an outage until the next probe"): not only
// once per request, since a stream may run long after the first selection,
// but each continuation at most once, and the pool bounds and shares the
// probes.
func (c *candidates) nextFor(cur upstream.Target) (upstream.Target, bool) {
	if c == nil || c.route == nil {
		return upstream.Target{}, false
	}
	if t, ok := c.usableAfter(cur); ok || !c.probeDown(cur) {
		return t, ok
	}
	return c.usableAfter(cur)
}

// usableAfter is nextFor without the on-demand probe.
func (c *candidates) usableAfter(cur upstream.Target) (upstream.Target, bool) {
	for _, t := range c.list {
		if t == cur || !c.eligible(t) {
			continue
		}
		if usable, _ := c.s.pool.TargetUsable(t); usable {
			return t, true
		}
	}
	return upstream.Target{}, false
}

// notContinuedReason says why a failure after content was not continued,
// for the operator's log: no target left (next is zero), naming the
// targets nextFor skipped and why (a down upstream's last probe error, a
// cooldown, an open circuit), a refusal the client was sent, or else the
// replay policy's verdict.
func notContinuedReason(try *tryState, next upstream.Target, facts sentFacts) string {
	if next.Upstream != nil && facts.refusal {
		return "the client was sent a refusal"
	}
	if next.Upstream != nil {
		return "the replay policy's verdict"
	}
	if try.cands == nil {
		return "no target left"
	}
	if skipped := try.cands.unavailableBut(try.target); skipped != "" {
		return "no target left (" + skipped + ")"
	}
	return "no target left"
}

// afterContentClass is the failure class of an error that arrived after
// content. A client error (a 4xx status, sent or stood for by the type
// invalid_request_error: errorShaped) is client_error, as before content
// (eventClass): it is not continued, since another target would fail the
// same way.
func afterContentClass(code string, status int) string {
	switch {
	case code == "context_length_exceeded":
		return hostabi.FailureContextLength
	case upstream.IsOverloadedCode(code) || status == http.StatusServiceUnavailable || status == 529:
		return hostabi.FailureOverloaded
	case code == "rate_limit_exceeded" || status == http.StatusTooManyRequests:
		return hostabi.FailureRateLimit
	case upstream.IsQuotaCode(code) || hostabi.IsReplayableCode(code):
		return hostabi.FailureQuota
	case isClientErrorStatus(status):
		return hostabi.FailureClientError
	}
	return hostabi.FailureErrorEvent
}

// statusClass is the failure class of a continuation target's non-2xx answer.
func statusClass(code string, status int) string {
	switch {
	case status == http.StatusTooManyRequests || upstream.IsQuotaCode(code):
		if code != "" && code != "rate_limit_exceeded" && upstream.IsQuotaCode(code) {
			return hostabi.FailureQuota
		}
		return hostabi.FailureRateLimit
	case status == http.StatusServiceUnavailable || status == 529 || upstream.IsOverloadedCode(code):
		return hostabi.FailureOverloaded
	case status >= 500:
		return hostabi.FailureServerError
	case code == "context_length_exceeded":
		return hostabi.FailureContextLength
	}
	return hostabi.FailureClientError
}

// failureWait is where a failure may say how long to wait: its answer's
// headers (Retry-After, retry-after-ms) and its error message ("try again
// in Ns"). Either may be empty.
type failureWait struct {
	header  http.Header
	message string
}

// afterFailureWait is where a failure after content says how long to wait:
// its message and, from a WebSocket upstream, its error frame's headers
// (wsFrameHeader), honoured as before content (README "Upstream
// WebSockets").
func afterFailureWait(ans *upstreamAnswer, af *afterFailure) failureWait {
	wait := failureWait{message: af.cause.Message}
	if ans.statusFrames && af.err == nil {
		wait.header = wsFrameHeader(af.ev)
	}
	return wait
}

// eventWithWait is the error-shaped event ev with the wait d in its error's
// message (withRetryIn), unless the message already says a wait or there is
// none: the pump passes the event on as the stream's terminal event, whose
// client reads no Retry-After header. The message is the one errorField
// reads: an error event's, a response.failed's, or a bare error object's.
func eventWithWait(ev sse.Event, d time.Duration) sse.Event {
	payload := &ev.Data
	if ev.Error != nil {
		payload = &ev.Error
	}
	for _, path := range []string{"error.message", "response.error.message", "message"} {
		m := gjson.GetBytes(*payload, path)
		if !m.Exists() {
			continue
		}
		if _, told := upstream.RetryAfter(nil, m.String(), time.Now()); m.String() == "" || told {
			return ev
		}
		if b, err := sjson.SetBytes(*payload, path, withRetryIn(m.String(), d)); err == nil {
			*payload = b
		}
		return ev
	}
	return ev
}

// chargeFor is what a failure class costs the target that failed. The
// wait it asked for cools it down as the same failure of a first attempt
// does (statusFailure; README "Routes and fallbacks": the hint, else the
// default backoff).
func chargeFor(class, code string, status int, why string, wait failureWait) *upstream.Failure {
	switch class {
	case hostabi.FailureStall, hostabi.FailureFirstByte, hostabi.FailureFirstToken:
		return &upstream.Failure{Class: "timeout", Reason: why}
	case hostabi.FailureOverloaded:
		f := upstream.Failure{Class: "overloaded", Reason: why}
		f.TakeHint(wait.header, wait.message, time.Now())
		return &f
	case hostabi.FailureRateLimit, hostabi.FailureQuota:
		f := upstream.CapacityFailure(wait.header, wait.message, code, status, time.Now(), why)
		return &f
	case hostabi.FailureCut, hostabi.FailureServerError, hostabi.FailureErrorEvent:
		if class == hostabi.FailureErrorEvent && !hostabi.RetryableEvent(code, status) {
			return nil // a code about the request (invalid_prompt, a content policy's): not the target's fault
		}
		f := upstream.Failure{Class: "server_error", Reason: why}
		f.TakeHint(wait.header, wait.message, time.Now())
		return &f
	}
	return nil
}

// isPrefillRefusal reports whether a continuation target's answer to a
// prefill is a refusal of the trailing assistant message (a 4xx that is not
// about credentials, the model, time or rate).
func isPrefillRefusal(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

func verdictKind(v hostabi.ReplayVerdict) string {
	switch v {
	case hostabi.ReplayContinuePrefill:
		return kindPrefill
	case hostabi.ReplayContinueRestart:
		return kindRestart
	}
	return ""
}

// hasTools reports whether the request carries tools (or Chat functions).
func hasTools(req *clientRequest) bool {
	for _, k := range []string{"tools", "functions"} {
		if v := gjson.GetBytes(req.body, k); v.IsArray() && len(v.Array()) > 0 {
			return true
		}
	}
	return false
}

// askContinuation puts a failure after content to the replay policy
// (askReplay fills in the target list's facts and applies the host's
// rules, hostabi.EffectiveReplay) and returns the continuation kind, ""
// for none, and the target it would go to.
func (s *Server) askContinuation(ctx context.Context, req *clientRequest, u *upstream.Upstream, facts sentFacts, class, code string,
	status, replays, pending int) (kind string, next upstream.Target, v hostabi.ReplayVerdict) {
	try := tryOf(req)
	next, ok := try.cands.nextFor(try.target)
	in := hostabi.ReplayInput{Code: code, HTTPStatus: status, ReplayCount: replays,
		ResponseCreatedSeen: true, ResponseIDAssigned: facts.responseID != "", PendingRequests: pending,
		Phase: hostabi.PhaseAfterContent, FailureClass: class, BytesSent: facts.bytes, ItemsSent: facts.items,
		ToolCallInFlight: facts.toolInFlight, HasTools: hasTools(req)}
	if ok {
		in.PrefillAllowed = next.Upstream.Config().AcceptsPrefill()
		if r := req.rescue; r != nil && r.refused[next.Upstream] {
			in.PrefillAllowed = false
		}
	}
	if in.Code == "" {
		switch class {
		case hostabi.FailureCut, hostabi.FailureTransport:
			in.Code = "transport"
		case hostabi.FailureStall:
			in.Code = "stall"
		}
	}
	v = s.askReplay(ctx, req, u, in)
	if !ok {
		return "", next, v
	}
	kind = verdictKind(v)
	if facts.refusal {
		// The client was sent a refusal, the model's last word on its
		// answer: a prefill would add text after it, a restart would compare
		// nothing a Chat client has of it; the stream ends as it stood
		// (README "Continuation").
		return "", next, v
	}
	// Whatever the policy says: a request with tools, or a tool call in
	// flight, is never continued by a text prefill, and with nothing sent
	// there is nothing to prefill.
	if kind == kindPrefill && (in.HasTools || facts.toolInFlight || facts.text == "") {
		kind = kindRestart
	}
	return kind, next, v
}

// continueAfter charges and counts a failure after the client's answer
// started, asks the replay policy about it when the stream is armed, and,
// on a continue verdict with a target left, prepares the continuation: the
// attempt returns nextContinue and forward sends the request on. ok is
// false when the stream is not continued (the caller ends it as before,
// and counts the attempt: attemptOutcomeAfterAnswer).
func (s *Server) continueAfter(ctx context.Context, cs *clientStream, req *clientRequest, u *upstream.Upstream, ans *upstreamAnswer,
	p *pump, af *afterFailure, replays int) (attemptResult, bool) {
	try := tryOf(req)
	wait := afterFailureWait(ans, af)
	if try.cont != nil && !cs.splicedAny() {
		// The continuation target failed before it added anything: its
		// failure, not the stream's (a refused prefill is restarted). What
		// it reported is the client's usage all the same (a restart's
		// attempt that failed while it reproduced the client's text).
		if r := req.rescue; r != nil {
			req.meta.attemptEnded(r.addAttemptUsage(req, ans, af, cs.facts()), r.usage)
			r.noteCopy(u, p.responseID)
		}
		return s.continuationFailed(ctx, cs, req, u, af.class, af.code, af.status, af.reason+": "+af.cause.Message, wait), true
	}
	facts := cs.facts()
	r := req.rescue
	count := 0
	if r != nil {
		count = r.count
	}
	af.content = p.contentSent()
	var kind string
	var next upstream.Target
	var v hostabi.ReplayVerdict
	if p.armed { // else never continued (notContinuable), yet charged and counted as if not
		kind, next, v = s.askContinuation(ctx, req, u, facts, af.class, af.code, af.status, replays+count, ans.pending)
	}
	// Continued or not, the target that failed is charged (README
	// "Continuation"): a single-target route's next request must not go
	// straight back to a target that asked to be left alone.
	try.fail = chargeFor(af.class, af.code, af.status, af.reason, wait)
	if try.fail != nil && try.fail.Hint > 0 {
		af.cause.RetryAfter = try.fail.Hint
	}
	if kind == "" && isCapacityError(af.cause) {
		// Not continued: the pump passes the failure on now, with the wait
		// the client faces, as a capacity failure before content is.
		af.cause = s.capacityWaitNow(req, af.cause)
	}
	if af.cause.RetryAfter > 0 && !upstream.IsBillingCode(af.code) {
		// The stream's terminal event has no header: its message says the
		// wait (README "Failover and replay"), whether the failure that
		// started a rescue ends it (giveUp) or the pump passes it on.
		af.ev = eventWithWait(af.ev, af.cause.RetryAfter)
	}
	// What the log says failed: a first_token timeout ends a stream whose
	// client saw only the lifecycle events (or a Chat role chunk), no
	// content (README "Routes and fallbacks", the first_token row).
	failed := "stream failed after content"
	switch {
	case af.reason == reasonFirstToken:
		failed = "stream failed after its lifecycle events (no content within first_token)"
	case !af.content:
		failed = "stream failed after its lifecycle events (no content yet)"
	}
	if kind == "" {
		why, verdict := notContinuable(req), "none"
		if why == "" {
			why, verdict = notContinuedReason(try, next, facts), v.String()
		}
		s.log.Info(failed+"; not continued", "surface", req.surface(), "upstream", u.Name(), "class", af.class,
			"code", af.code, "verdict", verdict, "reason", why, "response_id", LogID(facts.responseID))
		return attemptResult{}, false
	}
	if r == nil {
		r = &rescueState{clientID: facts.responseID, refused: map[*upstream.Upstream]bool{}, log: cs.resumeLog(), stream: cs}
		if p.anchor != nil && p.responseID == facts.responseID {
			r.prevAnchor, r.owner = p.anchor, u.Name()
		}
		req.rescue = r
	}
	r.noteCopy(u, p.responseID)
	r.cause, r.reason, r.kind, r.text = af.cause, af.reason, kind, facts.text
	// An attempt that reported nothing is charged an estimate in its key's
	// limits and the usage totals (README "Keys, limits and usage"), as a
	// stream that was not continued would be; the client's usage keeps what
	// the upstreams reported.
	req.meta.attemptEnded(r.addAttemptUsage(req, ans, af, facts), r.usage)
	r.count++
	if try.cont != nil {
		s.rescueOutcome(req, try.cont.kind, "continued")
	}
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), attemptOutcomeAfterAnswer(af)).Inc()
	s.log.Info(failed+"; continuing on the next target", "surface", req.surface(), "upstream", u.Name(),
		"class", af.class, "code", af.code, "kind", kind, "next", next.String(), "bytes_sent", facts.bytes, "items_sent", facts.items,
		"response_id", LogID(r.clientID))
	why := "failed after content (" + af.class + ")"
	if af.reason == reasonFirstToken {
		// No content came within first_token (README "Routes and
		// fallbacks": a failure of its own); the client saw only the
		// lifecycle events or a role chunk. The attempt's span says so
		// (sluice.failure), as the log's code does.
		why = "no content within first_token (" + reasonFirstToken + ")"
	}
	return attemptResult{next: nextContinue, why: why + ": continuing"}, true
}

// attemptOutcomeAfterAnswer is the sluice_upstream_attempts_total outcome
// of an attempt that failed after the client's answer started, continued
// or not (README "Observability"): a first_token timeout sent no content
// (the client saw only the lifecycle events or a role chunk), so it is
// counted as first_token_timeout, as when the client saw nothing
// (timeoutFailure), not as after_content_stall; another failure before
// any content is after_lifecycle_CLASS, one after content
// after_content_CLASS.
func attemptOutcomeAfterAnswer(af *afterFailure) string {
	switch {
	case af.reason == reasonFirstToken:
		return reasonFirstToken
	case !af.content:
		return "after_lifecycle_" + af.class
	}
	return "after_content_" + af.class
}

// continuationFailed handles a continuation target that failed before it
// added anything to the stream: a refused prefill (a 4xx) restarts the same
// target once; otherwise the policy is asked again for the next target, and
// without one the client gets the failure that started the rescue, never
// the continuation's own (a prefill's 400 must not hide the real failure).
// wait is where the failure said how long to wait (chargeFor).
func (s *Server) continuationFailed(ctx context.Context, cs *clientStream, req *clientRequest, u *upstream.Upstream, class, code string, status int,
	why string, wait failureWait) attemptResult {
	try := tryOf(req)
	r := try.cont.r
	if ctx.Err() != nil {
		return s.stoppedWhileContinued(cs, req)
	}
	if try.cont.kind == kindPrefill && isPrefillRefusal(status) && !r.refused[u] {
		r.refused[u] = true
		s.rescueOutcome(req, kindPrefill, "prefill_refused")
		s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "prefill_refused").Inc()
		s.log.Info("the target refused the prefill; restarting it instead", "surface", req.surface(), "upstream", u.Name(),
			"status", status, "code", code, "response_id", LogID(r.clientID))
		return attemptResult{next: nextContinueSame, why: "refused the prefill: " + why}
	}
	s.rescueOutcome(req, try.cont.kind, "target_failed")
	try.fail = chargeFor(class, code, status, why, wait)
	s.metrics.upstreamAttempts.WithLabelValues(u.Name(), "continuation_failed").Inc()
	facts := cs.facts()
	kind, next, v := s.askContinuation(ctx, req, u, facts, class, code, status, r.count, 0)
	if kind != "" {
		r.kind, r.text = kind, facts.text
		r.count++
		s.log.Info("continuation target failed; continuing on the next target", "surface", req.surface(), "upstream", u.Name(),
			"class", class, "why", why, "kind", kind, "next", next.String(), "response_id", LogID(r.clientID))
		return attemptResult{next: nextContinue, why: "continuation failed: " + why}
	}
	s.log.Info("continuation target failed; ending the stream with the original failure", "surface", req.surface(),
		"upstream", u.Name(), "class", class, "why", why, "verdict", v.String(), "reason", notContinuedReason(try, next, facts),
		"response_id", LogID(r.clientID))
	s.giveUp(cs, req)
	return attemptResult{next: nextDone}
}

// addAttemptUsage adds what the failed attempt reported to the usage of
// the attempts the rescue replaced (README "Continuation": the usage of
// every attempt summed), and reports whether it reported any.
func (r *rescueState) addAttemptUsage(req *clientRequest, ans *upstreamAnswer, af *afterFailure, facts sentFacts) (reported bool) {
	switch src, translated := chatSourceOf(ans.src); {
	case len(af.usage) > 0:
		r.usage = sumUsage(r.usage, af.usage) // the failure's own report is the attempt's final count
	case req.ep.chat && len(facts.usage) > 0 && !bytes.Equal(facts.usage, r.usage):
		// The last usage the attempt reported before it broke (a running
		// usage on each Chat chunk, as vLLM's continuous_usage_stats),
		// already summed with the earlier attempts'. Equal to that sum, it
		// is the earlier attempts' alone: this one reported nothing.
		r.usage = facts.usage
	case translated && len(src.reportedUsage()) > 0:
		// A Responses client of a Chat upstream: the running usage stays
		// in the translation until the terminal event.
		r.usage = sumUsage(r.usage, src.reportedUsage())
	default:
		return false
	}
	return true
}

// giveUp ends a rescued stream that nothing could continue with the
// failure that started the rescue, reporting (and charging) the usage of
// every attempt it replaced: the last one that began to splice its own
// reported only what it added to them (beginSplice), and a target that
// failed before it added anything none.
func (s *Server) giveUp(cs *clientStream, req *clientRequest) {
	r := req.rescue
	if r == nil || r.cause == nil {
		return
	}
	if len(r.usage) > 0 {
		cs.reportUsage(r.usage)
	}
	req.meta.everyAttemptEnded()
	if isCapacityError(r.cause) { // the wait the client faces, as for one not continued (continueAfter)
		r.cause = s.capacityWaitNow(req, r.cause)
	}
	cs.abort(r.cause)
	cs.finish(r.reason)
}

// rescueOutcome counts how one continuation attempt ended: one whose work
// a cancel or DELETE of the response stopped as cancelled, not client_gone
// (stoppedReason).
func (s *Server) rescueOutcome(req *clientRequest, kind, outcome string) {
	if r := req.rescue; r != nil && r.stream != nil {
		outcome = r.stream.stoppedReason(outcome)
	}
	s.metrics.rescues.WithLabelValues(req.surface(), kind, outcome).Inc()
}

// stoppedWhileContinued ends a continued stream whose work stopped while
// its continuation target connected or answered (its client left, or a
// cancel or DELETE stopped it): nothing is written to it, but its end is
// counted as the pump counts it when that happens mid-stream, so that a
// cancelled run ends cancelled (README "Access log") wherever the cancel
// landed.
func (s *Server) stoppedWhileContinued(cs *clientStream, req *clientRequest) attemptResult {
	s.rescueOutcome(req, tryOf(req).cont.kind, reasonClientGone)
	cs.finish(reasonClientGone)
	return attemptResult{next: nextDone}
}

// rescueOutcomeOf maps a stream's end reason to a rescue outcome.
func rescueOutcomeOf(reason string) string {
	switch reason {
	case reasonCompleted, reasonDone:
		return "completed"
	case reasonIncomplete, reasonDiverged, reasonClientGone:
		return reason
	}
	return "failed"
}

// prepareContinuation readies the attempt on t of a rescued request: the
// kind it gets (never a prefill to a target that refuses one) and its body.
func (s *Server) prepareContinuation(req *clientRequest, try *tryState, t upstream.Target) {
	r := req.rescue
	kind := r.kind
	if kind == kindPrefill && (!t.Upstream.Config().AcceptsPrefill() || r.refused[t.Upstream]) {
		kind = kindRestart
	}
	try.cont = &contAttempt{kind: kind, r: r}
	if kind != kindPrefill {
		return
	}
	switch {
	case req.ep.chat:
		req.body = withChatPrefill(req.body, r.text)
	case t.Upstream.Config().Protocol == upstream.ProtocolChat:
		// sendChat adds it to the converted Chat body.
	default:
		req.body = withResponsesPrefill(req.body, r.text)
	}
}

// chatPrefill is the prefill a Chat upstream's converted body gets, if any.
func chatPrefill(req *clientRequest) (string, bool) {
	if c := tryOf(req).cont; c != nil && c.kind == kindPrefill {
		return c.r.text, true
	}
	return "", false
}

// withResponsesPrefill appends the text sent as an assistant message to a
// Responses body's input (a string input becomes a user message first), or
// to the assistant message the input already ends with
// (extendTrailingAssistant).
func withResponsesPrefill(body []byte, text string) []byte {
	if out, ok := extendTrailingAssistant(body, "input", text, "output_text", "input_text", "text"); ok {
		return out
	}
	item := append([]byte(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":`), jsonx.AppendQuote(nil, text)...)
	item = append(item, "}]}"...)
	in := gjson.GetBytes(body, "input")
	var out []byte
	var err error
	if in.Type == gjson.String {
		list := append([]byte(`[{"role":"user","content":`), in.Raw...)
		list = append(append(append(list, "},"...), item...), ']')
		out, err = sjson.SetRawBytes(body, "input", list)
	} else {
		out, err = sjson.SetRawBytes(body, "input.-1", item)
	}
	if err != nil {
		return body
	}
	return out
}

// withChatPrefill appends the text sent as a trailing assistant message to
// a Chat body's messages, or to the assistant message they already end with
// (extendTrailingAssistant).
func withChatPrefill(body []byte, text string) []byte {
	if out, ok := extendTrailingAssistant(body, "messages", text, "text"); ok {
		return out
	}
	msg := append([]byte(`{"role":"assistant","content":`), jsonx.AppendQuote(nil, text)...)
	out, err := sjson.SetRawBytes(body, "messages.-1", append(msg, '}'))
	if err != nil {
		return body
	}
	return out
}

// extendTrailingAssistant appends text to the assistant message the list
// at path (Chat "messages", Responses "input") ends with, when the client
// sent one (its own prefill): what the client was streamed continues that
// message, since the upstream answered it with the continuation only. A
// second assistant message instead would be a finished turn in the chat
// template (the continuation would lose the prefill's context), and
// templates that require alternating roles refuse it (README,
// "Continuation"). Its text is its string content or its last part's, when
// every part's type is one of textTypes (a part of its own would be joined
// to the one before with a separator by some servers). ok is false, body
// unchanged, when the list ends with anything else: another role or item
// type, a message carrying tool calls or a refusal, other parts.
func extendTrailingAssistant(body []byte, path, text string, textTypes ...string) ([]byte, bool) {
	list := gjson.GetBytes(body, path)
	if !list.IsArray() {
		return body, false
	}
	items := list.Array()
	if len(items) == 0 {
		return body, false
	}
	last := items[len(items)-1]
	if last.Get("role").Str != "assistant" {
		return body, false
	}
	if typ := last.Get("type"); typ.Exists() && typ.Str != "message" {
		return body, false
	}
	for _, k := range []string{"tool_calls", "function_call", "refusal"} {
		if v := last.Get(k); v.Exists() && v.Type != gjson.Null && v.Raw != `""` && v.Raw != "[]" {
			return body, false
		}
	}
	at := path + "." + strconv.Itoa(len(items)-1) + ".content"
	content := last.Get("content")
	prior := content
	switch {
	case content.Type == gjson.String:
	case !content.Exists() || content.Type == gjson.Null || (content.IsArray() && len(content.Array()) == 0):
		// An empty assistant turn is the same open prefill as "" (either
		// protocol takes a string content): it becomes the text.
		prior = gjson.Result{}
	case content.IsArray():
		parts := content.Array()
		for _, p := range parts {
			if !slices.Contains(textTypes, p.Get("type").Str) || p.Get("text").Type != gjson.String {
				return body, false
			}
		}
		at += "." + strconv.Itoa(len(parts)-1) + ".text"
		prior = parts[len(parts)-1].Get("text")
	default:
		return body, false
	}
	out, err := sjson.SetRawBytes(body, at, jsonx.AppendQuote(nil, prior.Str+text))
	if err != nil {
		return body, false
	}
	return out, true
}

// aliasPrevious makes a follow-up naming a continued response's
// client-visible id name the id its owner knows it by.
func (s *Server) aliasPrevious(req *clientRequest, upstreamID string) {
	if upstreamID == "" || upstreamID == req.previousResponseID {
		return
	}
	b, err := sjson.SetBytes(req.body, "previous_response_id", upstreamID)
	if err != nil {
		return
	}
	req.body = b
	s.log.Debug("previous_response_id names a continued response; sending the id its owner knows", "previous_response_id",
		LogID(req.previousResponseID), "owner_id", LogID(upstreamID))
}

// confirmRescue anchors a continued response before the client sees its
// completion: the client-visible id is owned by the upstream that finished
// it, aliased to the id that upstream knows (a Chat upstream has no ids of
// its own: the conversation is remembered under the client-visible id).
func (p *pump) confirmRescue() {
	r, c := p.req.rescue, p.s.cont
	if r == nil || tryOf(p.req).cont == nil || r.clientID == "" || p.req.ep.chat {
		return
	}
	chatUp := p.u.Config().Protocol == upstream.ProtocolChat
	if chatUp && p.req.chat != nil {
		p.s.convs.remember(context.WithoutCancel(p.ctx), p.req, r.clientID, p.cs.outputItems())
	}
	if c == nil || !p.req.recordable() {
		return
	}
	upstreamID := ""
	if !chatUp && p.responseID != "" && p.responseID != r.clientID {
		upstreamID = p.responseID
	}
	a := r.anchorOf(c, p.req, p.u.Name(), upstreamID)
	if err := r.writeAnchor(p.ctx, c, a); err != nil {
		c.logNotDurable("continued response completed without a durable anchor", r.clientID, err)
		return
	}
	p.s.log.Info("continued response anchored", "response_id", LogID(r.clientID), "owner", p.u.Name(), "owner_id", LogID(a.UpstreamID))
}

// anchorContinuationCopy lists the copy a continuation target keeps, as
// soon as it names its response (response.created), in the anchor of the
// client-visible id, which still names its first owner: however the rescue
// then ends without a target that finishes it (the target fails after
// adding text, its restart diverges, a cancel or DELETE stops it, a
// background run's included), a DELETE of the response reaches that copy
// too (README "The resource API"); one that arrives while the target still
// answers finds it in the anchor, and stops the run. A target stopped or
// cut before it named its response is not listed: the gateway never
// learned the id it would keep it under. A target that finishes the
// response anchors it again as its owner (confirmRescue).
func (p *pump) anchorContinuationCopy() {
	r, c := p.req.rescue, p.s.cont
	if r == nil || tryOf(p.req).cont == nil || r.owner == "" || r.clientID == "" || p.req.ep.chat || c == nil || !p.req.recordable() {
		return
	}
	noted := len(r.earlier)
	if r.noteCopy(p.u, p.responseID); len(r.earlier) == noted {
		return // nothing kept (a Chat upstream) or already listed
	}
	// Written to the end even when a cancel or DELETE stops the run
	// meanwhile (the write is bounded by anchorWriteTimeout): a DELETE
	// reads the anchor only once the run ended, and must find this copy.
	if err := r.writeAnchor(context.WithoutCancel(p.ctx), c, r.anchorOf(c, p.req, r.owner, "")); err != nil {
		c.logNotDurable("a continued response's anchor does not list a continuation target's copy durably", r.clientID, err)
		return
	}
	p.s.log.Debug("continued response's anchor lists the continuation target's copy", "response_id", LogID(r.clientID),
		"owner", r.owner, "upstream", p.u.Name(), "copy_id", LogID(p.responseID))
}

// anchorOf is the anchor of the client-visible id owned by owner, under
// upstreamID ("": the client's), listing the copies the targets it was
// cut on keep, which keep the request and the answer up to the cut: a
// DELETE of the response must reach them too (deleteAtOwners).
func (r *rescueState) anchorOf(c *continuity, req *clientRequest, owner, upstreamID string) store.Anchor {
	a := c.anchorFor(req, r.clientID, owner)
	a.UpstreamID = upstreamID
	a.Earlier = slices.DeleteFunc(slices.Clone(r.earlier), func(c store.UpstreamCopy) bool {
		return c.Upstream == a.Upstream && c.ID == a.UpstreamID // the owner's own copy, if it was noted
	})
	return a
}

// writeAnchor writes a, an anchor of the client-visible id, and waits
// until it is durable (or ctx ends). The first owner's write must not land
// after it. Once that is durable, a, if retried after an outage, only
// replaces it: a DELETE meanwhile (on any replica) removed it, and the
// retry must not bring the response back.
func (r *rescueState) writeAnchor(ctx context.Context, c *continuity, a store.Anchor) error {
	if r.prevAnchor != nil && r.prevAnchor.wait(ctx) == nil {
		return c.replace(ctx, a)
	}
	return c.record(ctx, a)
}

// ---- the pump's side ----

// rescuable reports whether a failure now goes back to the attempt
// (end.after): the client saw the answer start, and the attempt has not
// settled one already. Armed or not, the attempt charges and counts it
// (continueAfter: README "Continuation", "Observability"); only an armed
// one may be continued. A client that left ended the stream itself: that
// is not the target's failure.
func (p *pump) rescuable() bool {
	if p.req.ep.chat && p.cs.finished() {
		return false // the answer was complete (a finish_reason went out): nothing to continue
	}
	return !p.settled && p.ctx.Err() == nil && p.cs.visible()
}

// contentSent reports whether the client was sent content: this attempt
// sent a content event, or it continues a stream, which it does only after
// adding to it (a continuation target that failed before is
// continuationFailed's).
func (p *pump) contentSent() bool { return p.sentContent || p.cont }

// afterEvent hands an error-shaped event after content back to the attempt.
func (p *pump) afterEvent(ev sse.Event, payload []byte, usage gjson.Result) (pumpEnd, bool) {
	cause := p.errorCause(payload)
	_, status, _ := errorShaped(ev, p.req.ep.chat) // judged as before content: a status sent as the code, or the type server_error, counts
	af := &afterFailure{class: afterContentClass(cause.Code, status), code: cause.Code, status: status,
		reason: reasonUpstreamError, cause: cause, ev: ev.Clone()}
	if cause.Code == "upstream_error" {
		af.code = ""
		af.class = afterContentClass("", status)
	}
	if usage.IsObject() {
		af.usage = []byte(usage.Raw)
	}
	return pumpEnd{after: af}, true
}

// errorCause is the client's error for an upstream error payload (an error
// event, a Chat error chunk, or a response.failed's response.error).
func (p *pump) errorCause(payload []byte) *apierr.Error {
	perr, _ := apierr.Parse(payload)
	obj := gjson.ParseBytes(payload)
	if perr.Code == "" && perr.Message == "" {
		e := obj
		if r := obj.Get("response.error"); r.IsObject() {
			e = r
		}
		perr.Code, perr.Message, perr.Param = e.Get("code").String(), e.Get("message").String(), e.Get("param").String()
	}
	if perr.Message == "" && perr.Code == "" {
		perr.Message = strings.TrimSpace(string(payload))
	}
	if perr.Type == "" {
		perr.Type = apierr.TypeServer
	}
	if perr.Code == "" {
		perr.Code = "upstream_error"
	}
	return &perr
}

// afterRead hands a read failure after content back to the attempt; ok is
// false for failures a continuation does not rescue (drain, oversize).
func (p *pump) afterRead(err error, reason string, e *apierr.Error) (pumpEnd, bool) {
	var class, code string
	switch reason {
	case reasonCut:
		class = hostabi.FailureCut
	case reasonIdle, reasonStall:
		class = hostabi.FailureStall
	case reasonFirstToken:
		// No content within first_token, but the client saw the lifecycle
		// events (the hold deadline passed) or a Chat role chunk: a silence
		// after the answer started, continued like a stall (a restart with
		// nothing to reproduce: the next target's answer, under the id and
		// numbering the client has).
		class, code = hostabi.FailureStall, "first_token_timeout"
	default:
		return pumpEnd{}, false
	}
	return pumpEnd{after: &afterFailure{class: class, code: code, reason: reason, cause: e, err: err}}, true
}

// ---- the client stream's side ----

// sentFacts are what the client has, for the replay policy and a prefill.
type sentFacts struct {
	responseID   string
	text         string // the visible answer text (message output_text; Chat content)
	bytes        int64
	items        int
	toolInFlight bool
	refusal      bool // a refusal was sent (a message's refusal part; Chat: delta.refusal)
	// usage is the usage the client stream last sent (cs.sent.Usage): the
	// earlier attempts' summed plus this attempt's last report, if any.
	usage []byte
}

func (cs *clientStream) facts() sentFacts {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	f := sentFacts{responseID: cs.responseID, usage: append([]byte(nil), cs.sent.Usage...)}
	if cs.chat {
		f.text = string(cs.chatText)
		f.bytes = int64(len(cs.chatText))
		for _, t := range cs.chatTools {
			f.bytes += int64(len(t.args))
		}
		if len(cs.chatText) > 0 || len(cs.chatTools) > 0 {
			f.items = 1
		}
		f.toolInFlight = len(cs.chatTools) > 0 && !cs.sawFinish
		f.refusal = cs.chatRefused
		return f
	}
	var text []byte
	for _, it := range cs.sent.Items {
		for _, p := range it.Parts {
			f.bytes += int64(len(p.Text))
			if it.Type == "message" {
				switch gjson.GetBytes(p.Added, "type").Str {
				case "output_text":
					text = append(text, p.Text...)
				case "refusal":
					f.refusal = true
				}
			}
		}
		f.bytes += int64(len(it.Args))
		switch it.Type {
		case "message", "reasoning":
		default:
			if it.Done == nil {
				f.toolInFlight = true
			}
		}
	}
	f.items = len(cs.sent.Items)
	f.text = sent.Unescape(text)
	return f
}

// outputItems renders the items the client has, for a conversation record.
func (cs *clientStream) outputItems() []json.RawMessage {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]json.RawMessage, 0, len(cs.sent.Items))
	for _, it := range cs.sent.Items {
		out = append(out, it.AppendJSON(nil))
	}
	return out
}

// arm makes a Chat stream keep what its client was sent (a continuation
// needs it; Responses streams keep it anyway).
func (cs *clientStream) arm() {
	cs.mu.Lock()
	cs.trackChat = cs.chat
	cs.mu.Unlock()
}

// splicer maps one continuation attempt's events onto the client's stream.
type splicer struct {
	kind      string
	prevUsage []byte // the failed attempts' usage, summed: added to this one's
	// wrote: the client was sent an event of this attempt (eventLocked).
	// What a restart suppresses while it reproduces, or a new message item
	// held until it carries text, was not sent: an attempt that fails
	// before anything was has added nothing (README "Continuation").
	wrote bool

	// Responses.
	n          int                    // the client's items when the attempt began
	snap       []itemSnap             // restart: what the client has of each
	items      map[int64]*splicedItem // the attempt's output_index → where it goes
	added      int                    // items the attempt added so far
	reproduced int                    // restart: client items the attempt reproduced
	merge      *sent.Item             // prefill: the open message the attempt continues
	merged     bool                   // prefill: its first message was merged (or can no longer be)
	next       int64                  // the client output_index of the attempt's next new item

	// Chat.
	chatWant  reproducer // restart: the content the client has
	chatTools []toolSnap
	// chatCalls numbers a restart's tool calls as the client numbers its
	// own (0, 1, 2…), whatever indexes the target gives them: the k-th
	// call reproduces the client's k-th, or, past those, is sent as
	// call k.
	chatCalls restartCalls
	// chatAnnotations counts the attempt's delta.annotations for choice 0
	// (the one a continuation follows: notContinuable); the first
	// chatReannotated of them, on a restart, redo those the client has.
	chatAnnotations, chatReannotated int
	// chatOffset is where the attempt's text begins in the client's
	// message, in characters: a prefill goes on after the client's text.
	chatOffset int64
}

// itemSnap is a client item as a restart must reproduce it.
type itemSnap struct {
	typ, name string
	done      bool
	parts     []partSnap
	args      string
}

type partSnap struct {
	text        string
	done        bool
	annotations int // the annotations the client got for it
}

// splicedItem is where one of the attempt's items goes.
type splicedItem struct {
	client  *sent.Item // the client item it continues or reproduces; nil for a new or dropped item
	index   int64      // the client's output_index
	newItem bool       // the attempt's own item, passed on at index
	drop    bool       // swallowed: reasoning before a continued message, or reasoning a restart redoes or adds ahead of what the client has
	snap    *itemSnap  // restart: what it must reproduce
	parts   map[int64]*splicedPart
	// added: the attempt's content indices in the order it added the
	// parts, the order its done item lists them (doneIndex).
	added   []int64
	args    reproducer
	counted bool // restart: counted in splice.reproduced
	// held: a new message item's events while it has shown no text
	// (holdNewLocked); its index is given once they go out.
	held []heldEvent
	// encrypted: the encrypted_content (a JSON string) of a restart's
	// reasoning item that redoes the client's, from its added or done
	// form; nil when it showed none (carriedReasoning).
	encrypted []byte
}

// countUnclosed counts as reproduced the restart's items that reproduced
// everything the client has of them without an output_item.done: an
// upstream need not send every done event before the next item or its
// terminal event, which close them.
func (sp *splicer) countUnclosed() {
	for _, m := range sp.items {
		if m.closedWhole() {
			m.counted = true
			sp.reproduced++
		}
	}
}

// closedWhole reports whether m is a restart's item not yet counted that
// has everything the client has of it, were it closed now.
func (m *splicedItem) closedWhole() bool {
	return !m.counted && !m.newItem && m.client != nil && (m.drop || m.unreproduced() == "")
}

// shortAtEnd reports whether a restart that ended now would not have
// reproduced every item the client has: reasoning it did not redo stays as
// shown, and an item reproduced whole but never closed counts
// (splicedTerminalLocked, which then fails the stream).
func (sp *splicer) shortAtEnd() bool {
	if sp.kind != kindRestart {
		return false
	}
	n := sp.reproduced
	for i := sp.added; i < sp.n && sp.snap[i].typ == "reasoning"; i++ {
		n++
	}
	for _, m := range sp.items {
		if m.closedWhole() {
			n++
		}
	}
	return n < sp.n
}

// restartShort reports whether the stream is being continued by a restart
// that, ending now, would fail for not reproducing what the client has:
// the attempt's answer is then not the client's response, and the pump
// records nothing of it (confirmRescue, the portable turn).
func (cs *clientStream) restartShort() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.splice != nil && cs.splice.shortAtEnd()
}

// unreproduced says what a restart's item still lacks of what the client
// has ("" when it reproduced all of it: its arguments and every part).
func (m *splicedItem) unreproduced() string {
	if !m.args.complete() {
		return "ended a tool call before reproducing the arguments already sent"
	}
	for j, ps := range m.snap.parts {
		p := m.parts[int64(j)]
		if (p == nil && ps.text != "") || (p != nil && !p.want.complete()) {
			return "ended an item before reproducing what was already sent"
		}
	}
	return ""
}

// splicedPart is where one content part of a mapped item goes.
type splicedPart struct {
	index int64  // the client's content_index
	kind  string // the part's type (output_text, refusal, reasoning_text)
	want  reproducer
	done  bool // the client saw this part complete (sent.Part.Complete): it may not grow
	// opening is a prefill's content_part.added for the part that follows
	// one the client saw complete: written, as a new client part, only
	// once the target adds text to it.
	opening *heldEvent
	// annotations counts the attempt's annotations for the part; the first
	// reannotated of them, on a restart, redo those the client has
	// (spliceAnnotationLocked).
	annotations, reannotated int
	// offset is where the attempt's text begins in the client's part, in
	// characters: a prefill's target goes on after the client's text, and
	// its annotations' indexes count from its own first character.
	offset int64
}

// reproducer checks that a restart reproduces text the client has.
type reproducer struct {
	want string
	pos  int
	fed  int // bytes fed, the client's and beyond
}

// feed consumes delta: the part beyond what the client has comes back;
// ok is false on a contradiction.
func (r *reproducer) feed(delta string) (surplus string, ok bool) {
	r.fed += len(delta)
	if r.pos < len(r.want) {
		n := min(len(delta), len(r.want)-r.pos)
		if delta[:n] != r.want[r.pos:r.pos+n] {
			return "", false
		}
		r.pos += n
		delta = delta[n:]
	}
	return delta, true
}

func (r *reproducer) complete() bool { return r.pos >= len(r.want) }

// unstreamed is what of full, the whole text whose deltas were fed, those
// deltas did not carry: all of it when none came.
func (r *reproducer) unstreamed(full string) string {
	if len(full) <= r.fed {
		return ""
	}
	return full[r.fed:]
}

// unsentLogprobs is list, the logprobs entries ({token, logprob, bytes,
// top_logprobs}, as OpenAI's Chat choices[].logprobs.content and Responses
// output_text.delta logprobs hold them) of a delta whose first cut bytes
// the client already has and which goes out as surplus, the rest: entries
// wholly within those bytes are dropped, since the client has the text and
// its logprobs; the entry straddling the boundary is kept with its token
// (and bytes) trimmed to the part the client lacks, so the tokens still
// join to the text sent, its logprob and top_logprobs being the model's for
// the whole token (README "Continuation"). An entry covers its bytes, or
// its token's when it has no bytes array.
func unsentLogprobs(list gjson.Result, cut int, surplus string) []byte {
	out := []byte{'['}
	pos := 0
	list.ForEach(func(_, e gjson.Result) bool {
		n := len(e.Get("token").Str)
		if b := e.Get("bytes"); b.IsArray() {
			n = len(b.Array())
		}
		start := pos
		pos += n
		if pos <= cut {
			return true
		}
		raw := []byte(e.Raw)
		if start < cut {
			kept := surplus[:min(pos-cut, len(surplus))]
			raw, _ = sjson.SetRawBytes(raw, "token", jsonx.AppendQuote(nil, kept))
			if e.Get("bytes").IsArray() {
				bs := []byte{'['}
				for i := 0; i < len(kept); i++ {
					if i > 0 {
						bs = append(bs, ',')
					}
					bs = strconv.AppendInt(bs, int64(kept[i]), 10)
				}
				raw, _ = sjson.SetRawBytes(raw, "bytes", append(bs, ']'))
			}
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, raw...)
		return true
	})
	return append(out, ']')
}

// restartCalls maps a restart's Chat tool call deltas to the client's call
// numbering, as the relay tells calls apart (README "What it promises"): a
// delta under an index the attempt already used starts a call of its own
// when it carries a new id and a name (Ollama and some vLLM tool parsers
// send every parallel call as index 0); a delta with the id of a call
// already seen continues that call, which takes its index back.
type restartCalls struct {
	n       int              // calls the attempt started
	atIndex map[int64]callAt // the target's index → the call last under it
	byID    map[string]int   // a call's id from the target → its number
}

type callAt struct {
	call int
	id   string
}

// number is the client's index for the call a delta (the target's index,
// id and name) belongs to.
func (rc *restartCalls) number(index int64, id, name string) int {
	if rc.atIndex == nil {
		rc.atIndex, rc.byID = map[int64]callAt{}, map[string]int{}
	}
	if k, ok := rc.byID[id]; ok && id != "" {
		rc.atIndex[index] = callAt{call: k, id: id}
		return k
	}
	at, used := rc.atIndex[index]
	if used && (id == "" || name == "" || at.id == "") {
		return at.call
	}
	k := rc.n
	rc.n++
	rc.atIndex[index] = callAt{call: k, id: id}
	if id != "" {
		rc.byID[id] = k
	}
	return k
}

// quotedExcerpt quotes upstream text s in a message of the gateway's own,
// at most errorExcerptBytes of it (bodyExcerpt): a tool's name is whatever
// the upstream sent.
func quotedExcerpt(s string) string {
	if e, more := bodyExcerpt([]byte(s)); more {
		return strconv.Quote(e) + " …"
	}
	return strconv.Quote(s)
}

// toolSnap is a Chat tool call the client has.
type toolSnap struct {
	name reproducer
	args reproducer
}

// chatTool is a Chat tool call as the client saw it: its name and
// arguments, each joined from the pieces that carried it.
type chatTool struct {
	name []byte
	args []byte
}

// beginSplice makes the stream take the next attempt's events as a
// continuation of the given kind.
func (cs *clientStream) beginSplice(kind string, prevUsage []byte) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	// New items go after the highest output_index the client has (its
	// own numbering, 0, 1, 2…: clientNumberedLocked).
	next := int64(0)
	for _, it := range cs.sent.Items {
		next = max(next, it.Index+1)
	}
	sp := &splicer{kind: kind, prevUsage: prevUsage, items: map[int64]*splicedItem{}, n: len(cs.sent.Items), next: next}
	cs.sent.Usage = append(cs.sent.Usage[:0], prevUsage...) // what a failure now reports
	if cs.chat {
		switch kind {
		case kindRestart:
			sp.chatReannotated = cs.chatAnnotations
			sp.chatWant = reproducer{want: string(cs.chatText)}
			for _, t := range cs.chatTools {
				sp.chatTools = append(sp.chatTools, toolSnap{name: reproducer{want: string(t.name)}, args: reproducer{want: string(t.args)}})
			}
		case kindPrefill:
			sp.chatOffset = int64(utf8.RuneCount(cs.chatText))
		}
		cs.splice = sp
		return
	}
	switch kind {
	case kindRestart:
		for _, it := range cs.sent.Items {
			s := itemSnap{typ: it.Type, done: it.Done != nil, args: sent.Unescape(it.Args)}
			if it.Type != "message" && it.Type != "reasoning" {
				s.name = gjson.GetBytes(it.Added, "name").Str
			}
			for _, p := range it.Parts {
				s.parts = append(s.parts, partSnap{text: sent.Unescape(p.Text), done: p.Complete(), annotations: p.AnnotationCount()})
			}
			sp.snap = append(sp.snap, s)
		}
	case kindPrefill:
		if n := len(cs.sent.Items); n > 0 && cs.sent.Items[n-1].Type == "message" && cs.sent.Items[n-1].Done == nil {
			sp.merge = cs.sent.Items[n-1]
		}
	}
	cs.splice = sp
}

// reportRunningUsage makes u, the last usage the attempt in hand reported
// before its own terminal event, what a terminal event the gateway writes
// now reports: on a continued stream summed with the failed attempts'
// (prevUsage), as the attempt's terminal event would have been.
func (cs *clientStream) reportRunningUsage(u []byte) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var prev []byte
	if cs.splice != nil {
		prev = cs.splice.prevUsage
	}
	cs.sent.Usage = sumUsage(prev, u)
}

// stoppedReason is reason as the stream's end is counted: client_gone is
// cancelled when a cancel or DELETE of the response stopped its work, not
// a client that left (a background run has no client to leave).
func (cs *clientStream) stoppedReason(reason string) string {
	if reason == reasonClientGone && errors.Is(context.Cause(cs.ctx), errCancelled) {
		return reasonCancelled
	}
	return reason
}

// resumeLog is the stream's resume log, nil when it has none.
func (cs *clientStream) resumeLog() *streamLog {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.rlog
}

// reportUsage makes u the usage a terminal event the gateway writes now
// reports: every attempt's, summed (giveUp).
func (cs *clientStream) reportUsage(u []byte) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.sent.Usage = bytes.Clone(u)
}

// splicedAny reports whether the client was sent anything of the
// continuation attempt.
func (cs *clientStream) splicedAny() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.splice != nil && cs.splice.wrote
}

// divergeLocked ends the stream: the restart contradicted what was sent.
func (cs *clientStream) divergeLocked(why string) error {
	cs.abortLocked(apierr.StreamIncomplete("the stream was continued on another upstream, which %s; retry the request", why))
	return errDiverged
}

// field is one top-level JSON field an event is rewritten with.
type field struct {
	path string
	raw  []byte
}

func intField(path string, v int64) field { return field{path, strconv.AppendInt(nil, v, 10)} }
func strField(path, v string) field       { return field{path, jsonx.AppendQuote(nil, v)} }

// rewriteLocked writes an event with fields replaced.
func (cs *clientStream) rewriteLocked(name string, data []byte, fields ...field) error {
	for _, f := range fields {
		if out, err := sjson.SetRawBytes(data, f.path, f.raw); err == nil {
			data = out
		}
	}
	f, _ := scanEvent(data)
	return cs.writeLocked(name, data, &f)
}

// spliceLocked writes one Responses event of a continuation attempt.
func (cs *clientStream) spliceLocked(name string, data []byte, f *eventFields) error {
	sp := cs.splice
	typ := f.Type.Str
	if isTerminalType(typ) {
		return cs.splicedTerminalLocked(typ, f.Response)
	}
	if f.OutputIndex.Type != gjson.Number {
		return cs.writeLocked(name, data, f) // not about an item
	}
	k := f.OutputIndex.Int()
	if typ == "response.output_item.added" {
		return cs.spliceAddedLocked(name, data, f, k)
	}
	m := sp.items[k]
	switch {
	case m == nil:
		return nil // an item the attempt never added
	case m.newItem:
		if m.held != nil {
			return cs.holdNewLocked(name, data, f, m)
		}
		if m.index == k {
			return cs.writeLocked(name, data, f)
		}
		return cs.rewriteLocked(name, data, intField("output_index", m.index))
	case m.drop:
		if typ == "response.output_item.done" {
			m.keepEncrypted(f.Item)
			if sp.kind == kindRestart && m.client != nil && !m.counted {
				m.counted = true
				sp.reproduced++ // reasoning the client has, redone
			}
			if m.client != nil && m.client.Done == nil {
				return cs.closeItemLocked(m.client)
			}
		}
		return nil
	}
	at := []field{intField("output_index", m.index), strField("item_id", m.client.ID)}
	switch typ {
	case "response.content_part.added":
		return cs.splicePartLocked(name, data, f, m, at)
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
		p := m.parts[f.ContentIndex.Int()]
		if p == nil {
			return nil
		}
		d := f.Delta.Str
		if sp.kind == kindRestart {
			surplus, ok := p.want.feed(d)
			switch {
			case !ok:
				return cs.divergeLocked("wrote text that contradicts what was already sent")
			case surplus == "":
				return nil
			}
			if surplus != d {
				at = append(at, strField("delta", surplus))
				// The logprobs go with the text they come with, as on Chat
				// (spliceChatLocked).
				if lp := gjson.GetBytes(data, "logprobs"); lp.IsArray() {
					at = append(at, field{"logprobs", unsentLogprobs(lp, len(d)-len(surplus), surplus)})
				}
			}
		}
		if h := p.opening; h != nil {
			if d == "" {
				return nil
			}
			p.opening = nil
			if err := cs.openPartLocked(h.name, h.data, m, p); err != nil {
				return err
			}
		}
		// New text for a part the client saw complete: its text's done or its
		// part's, or its item's (an upstream may close an item without
		// closing its part, and the splice closes items itself).
		if p.done || m.client.Done != nil {
			return cs.divergeLocked("wrote more text into a part the client saw complete")
		}
		return cs.rewriteLocked(name, data, append(at, intField("content_index", p.index))...)
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		d := f.Delta.Str
		if sp.kind == kindRestart {
			surplus, ok := m.args.feed(d)
			switch {
			case !ok:
				return cs.divergeLocked("called the tool with arguments that contradict those already sent")
			case surplus == "":
				return nil
			case m.client.Done != nil:
				return cs.divergeLocked("added arguments to a tool call the client saw complete")
			}
			if surplus != d {
				at = append(at, strField("delta", surplus))
			}
		}
		return cs.rewriteLocked(name, data, at...)
	case "response.content_part.done", "response.output_text.done", "response.refusal.done", "response.reasoning_text.done":
		j := f.ContentIndex.Int()
		if sp.kind == kindRestart {
			if err := cs.catchUpPartLocked(m, k, j, doneText(typ, data, f)); err != nil {
				return err
			}
		}
		if p := m.parts[j]; p != nil && sp.kind == kindRestart && !p.want.complete() {
			return cs.divergeLocked("ended a part before reproducing the text already sent")
		}
		return nil // the client's form goes out with the item's done
	case "response.function_call_arguments.done", "response.custom_tool_call_input.done":
		if sp.kind == kindRestart {
			if err := cs.catchUpArgsLocked(m, k, typ, doneText(typ, data, f)); err != nil {
				return err
			}
			if !m.args.complete() {
				return cs.divergeLocked("ended a tool call before reproducing the arguments already sent")
			}
		}
		return nil
	case "response.output_text.annotation.added":
		return cs.spliceAnnotationLocked(name, data, f, m, at)
	case "response.output_item.done":
		if sp.kind == kindRestart && !m.counted {
			if err := cs.catchUpItemLocked(m, k, f.Item); err != nil {
				return err
			}
		}
		if sp.kind == kindRestart && !m.counted {
			if why := m.unreproduced(); why != "" {
				return cs.divergeLocked(why)
			}
			m.counted = true
			sp.reproduced++
		}
		if m.client.Done == nil {
			return cs.closeItemLocked(m.client)
		}
		return nil
	}
	// Any other event about a mapped item (annotations, …): dropped while
	// a restart is still reproducing its part, else moved to the client's
	// indices.
	if f.ContentIndex.Type == gjson.Number {
		p := m.parts[f.ContentIndex.Int()]
		if p == nil || p.opening != nil || (sp.kind == kindRestart && !p.want.complete()) {
			return nil
		}
		at = append(at, intField("content_index", p.index))
	}
	return cs.rewriteLocked(name, data, at...)
}

// spliceAnnotationLocked maps an annotation the attempt adds to a part of a
// client item it continues or reproduces. The client's part keeps the
// annotations it was sent (its done forms list them: closePartLocked), so
// the attempt's go after them: numbered on from the client's count, and
// with indexes (start_index, end_index) moved by the characters of the
// client's text that precede the attempt's (splicedPart.offset; a restart
// reproduces that text, so its indexes already count it). The indexes are
// characters, as OpenAI's are and as the gateway passes an upstream's on
// (internal/translate); README "Continuation". A restart's first
// annotations of a part the client has annotations for redo those, as its
// text redoes the client's: they are not sent again.
func (cs *clientStream) spliceAnnotationLocked(name string, data []byte, f *eventFields, m *splicedItem, at []field) error {
	p := m.parts[f.ContentIndex.Int()]
	if p == nil || p.opening != nil {
		return nil
	}
	if redoneAnnotation(&p.annotations, p.reannotated) {
		return nil
	}
	var cp *sent.Part
	for _, c := range m.client.Parts {
		if c.Index == p.index {
			cp = c
		}
	}
	if cp == nil {
		return nil // not a part the client has: nothing to annotate
	}
	at = append(at, intField("content_index", p.index), intField("annotation_index", int64(cp.AnnotationCount())))
	at = movedAnnotationIndexes(at, "annotation.", f.Annotation, p.offset)
	return cs.rewriteLocked(name, data, at...)
}

// redoneAnnotation counts one more annotation of an attempt's part (or Chat
// choice) in *seen and reports whether it is one of the first redo, which
// on a restart redo those the client has: they are not sent again (README
// "Continuation"). Shared by Responses and Chat clients.
func redoneAnnotation(seen *int, redo int) bool {
	*seen++
	return *seen <= redo
}

// movedAnnotationIndexes appends to fields those that move the indexes
// (start_index, end_index) of holder, the object at path (a prefix ending
// in "." or ""), by offset: the characters of the client's text before the
// attempt's, which a prefill's indexes, counted from its own first
// character, do not include. The indexes are characters, as OpenAI's are
// and as the gateway passes an upstream's on (internal/translate); README
// "Continuation". Shared by Responses and Chat clients.
func movedAnnotationIndexes(fields []field, path string, holder gjson.Result, offset int64) []field {
	if offset == 0 {
		return fields
	}
	for _, k := range [...]string{"start_index", "end_index"} {
		if v := holder.Get(k); v.Type == gjson.Number {
			fields = append(fields, intField(path+k, v.Int()+offset))
		}
	}
	return fields
}

// A restart's text or arguments may come whole in their done forms only
// (the text's or arguments' done event, the part's, the item's) with no
// delta, or with fewer deltas than the done form holds: an upstream other
// than OpenAI need not stream them. What the deltas did not carry is taken
// as one more delta, compared and, beyond what the client has, streamed.

// doneText is the whole text or arguments a done event of typ carries.
func doneText(typ string, data []byte, f *eventFields) gjson.Result {
	switch typ {
	case "response.content_part.done":
		if t := f.Part.Get("text"); t.Exists() {
			return t
		}
		return f.Part.Get("refusal")
	case "response.refusal.done":
		return gjson.GetBytes(data, "refusal")
	case "response.function_call_arguments.done":
		return gjson.GetBytes(data, "arguments")
	case "response.custom_tool_call_input.done":
		return gjson.GetBytes(data, "input")
	}
	return gjson.GetBytes(data, "text")
}

// catchUpPartLocked splices what of full, the whole text of the attempt's
// part j of its item k, no delta carried, as that part's delta.
func (cs *clientStream) catchUpPartLocked(m *splicedItem, k, j int64, full gjson.Result) error {
	p := m.parts[j]
	if p == nil || full.Type != gjson.String {
		return nil
	}
	rest := p.want.unstreamed(full.Str)
	if rest == "" {
		return nil
	}
	typ := "response.output_text.delta"
	switch p.kind {
	case "refusal":
		typ = "response.refusal.delta"
	case "reasoning_text":
		typ = "response.reasoning_text.delta"
	}
	b := append([]byte(`{"type":`), jsonx.AppendQuote(nil, typ)...)
	b = append(b, `,"sequence_number":0,"item_id":"","output_index":`...)
	b = strconv.AppendInt(b, k, 10)
	b = append(b, `,"content_index":`...)
	b = strconv.AppendInt(b, j, 10)
	b = append(append(b, `,"delta":`...), jsonx.AppendQuote(nil, rest)...)
	if typ == "response.output_text.delta" {
		b = append(b, `,"logprobs":[]`...)
	}
	return cs.spliceCaughtUpLocked(typ, append(b, '}'))
}

// catchUpArgsLocked splices what of full, the whole arguments (or input)
// of the attempt's tool call k, no delta carried, as its delta; doneType is
// the type of the done event or item that carried full.
func (cs *clientStream) catchUpArgsLocked(m *splicedItem, k int64, doneType string, full gjson.Result) error {
	if full.Type != gjson.String {
		return nil
	}
	rest := m.args.unstreamed(full.Str)
	if rest == "" {
		return nil
	}
	typ := "response.function_call_arguments.delta"
	if doneType == "response.custom_tool_call_input.done" || doneType == "custom_tool_call" {
		typ = "response.custom_tool_call_input.delta"
	}
	b := append([]byte(`{"type":`), jsonx.AppendQuote(nil, typ)...)
	b = append(b, `,"sequence_number":0,"item_id":"","output_index":`...)
	b = strconv.AppendInt(b, k, 10)
	b = append(append(b, `,"delta":`...), jsonx.AppendQuote(nil, rest)...)
	return cs.spliceCaughtUpLocked(typ, append(b, '}'))
}

// catchUpItemLocked splices what the attempt's item k, ending whole in
// item, holds that no delta carried: a tool call's arguments, a message's
// text parts, each compared with the part its events named (doneIndex; a
// part with no content_part.added is taken as the client's part at its
// index, as splicePartLocked takes one).
func (cs *clientStream) catchUpItemLocked(m *splicedItem, k int64, item gjson.Result) error {
	switch typ := item.Get("type").Str; typ {
	case "function_call":
		return cs.catchUpArgsLocked(m, k, typ, item.Get("arguments"))
	case "custom_tool_call":
		return cs.catchUpArgsLocked(m, k, typ, item.Get("input"))
	}
	var err error
	item.Get("content").ForEach(func(key, part gjson.Result) bool {
		// The part its deltas named, not its position: an upstream's
		// content_index need not be its part's position.
		j := m.doneIndex(int(key.Int()))
		if m.parts[j] == nil && m.snap != nil && int(j) < len(m.snap.parts) {
			m.parts[j] = m.reproducedPart(j, gjson.GetBytes(m.client.Parts[j].Added, "type").Str)
		}
		full := part.Get("text")
		if !full.Exists() {
			full = part.Get("refusal")
		}
		err = cs.catchUpPartLocked(m, k, j, full)
		return err == nil && !cs.ended
	})
	return err
}

// doneIndex is the attempt's content_index of the part at position i of
// its done item's content, which lists the parts in the order the attempt
// added them, whatever their indices; a part it never added follows them,
// at its position when it added none.
func (m *splicedItem) doneIndex(i int) int64 {
	if i < len(m.added) {
		return m.added[i]
	}
	highest := int64(-1)
	for _, j := range m.added {
		highest = max(highest, j)
	}
	return highest + 1 + int64(i-len(m.added))
}

// reproducedPart is a restart's part j of m, kind, where the client's part
// at position j goes: the text the client has of it is to be reproduced.
func (m *splicedItem) reproducedPart(j int64, kind string) *splicedPart {
	ps := m.snap.parts[j]
	return &splicedPart{index: m.client.Parts[j].Index, want: reproducer{want: ps.text}, done: ps.done, kind: kind, reannotated: ps.annotations}
}

// spliceCaughtUpLocked splices a delta built by a catch-up as the
// attempt's own.
func (cs *clientStream) spliceCaughtUpLocked(typ string, b []byte) error {
	f, _ := scanEvent(b)
	return cs.spliceLocked(typ, b, &f)
}

// spliceAddedLocked maps a continuation attempt's new output item.
func (cs *clientStream) spliceAddedLocked(name string, data []byte, f *eventFields, k int64) error {
	sp := cs.splice
	typ := f.Item.Get("type").Str
	if sp.kind == kindRestart {
		// Reasoning the client has that the restart does not redo (another
		// model, or one that thinks differently) stays as it was shown.
		for sp.added < sp.n && sp.snap[sp.added].typ == "reasoning" && typ != "reasoning" {
			if it := cs.sent.Items[sp.added]; it.Done == nil {
				if err := cs.closeItemLocked(it); err != nil {
					return err
				}
			}
			sp.added++
			sp.reproduced++
		}
	}
	pos := sp.added
	if sp.kind == kindRestart && typ == "reasoning" && ((pos < sp.n && sp.snap[pos].typ != "reasoning") ||
		(pos == sp.n && pos > 0 && sp.snap[pos-1].typ == "reasoning")) {
		// Reasoning the restart adds ahead of what the client has (a
		// reasoning model backing one that is not), or more reasoning
		// after the client's last item, reasoning the restart redid: neither
		// compared nor shown twice (README, "Continuation").
		sp.items[k] = &splicedItem{drop: true}
		return nil
	}
	sp.added++
	if sp.kind == kindRestart && pos < sp.n {
		snap := &sp.snap[pos]
		if typ != snap.typ || (snap.name != "" && f.Item.Get("name").Str != snap.name) {
			return cs.divergeLocked("answered with another item than the one already sent")
		}
		m := &splicedItem{client: cs.sent.Items[pos], index: cs.sent.Items[pos].Index, snap: snap, parts: map[int64]*splicedPart{},
			args: reproducer{want: snap.args}, drop: typ == "reasoning"}
		if m.drop {
			m.keepEncrypted(f.Item)
		}
		sp.items[k] = m
		return nil
	}
	if sp.kind == kindPrefill && !sp.merged && sp.merge != nil {
		switch typ {
		case "message":
			sp.merged = true
			sp.items[k] = &splicedItem{client: sp.merge, index: sp.merge.Index, parts: map[int64]*splicedPart{}}
			return nil
		case "reasoning":
			sp.items[k] = &splicedItem{drop: true}
			return nil
		}
		// Something else comes first: the continued message ends as it is.
		sp.merged = true
		if err := cs.closeItemLocked(sp.merge); err != nil {
			return err
		}
	}
	if sp.kind == kindRestart && sp.reproduced < sp.n {
		if sp.countUnclosed(); sp.reproduced < sp.n {
			return cs.divergeLocked("started a new item before reproducing those already sent")
		}
	}
	m := &splicedItem{newItem: true}
	sp.items[k] = m
	if typ == "message" && !carriesText(data, f) {
		m.held = []heldEvent{{name: logName(name), data: bytes.Clone(data)}}
		return nil
	}
	return cs.openNewLocked(name, data, f, m)
}

// openNewLocked gives the attempt's new item m the client's next
// output_index and writes data, its first event to go out.
func (cs *clientStream) openNewLocked(name string, data []byte, f *eventFields, m *splicedItem) error {
	sp := cs.splice
	m.index = sp.next
	sp.next++
	if m.index == f.OutputIndex.Int() {
		return cs.writeLocked(name, data, f)
	}
	return cs.rewriteLocked(name, data, intField("output_index", m.index))
}

// holdNewLocked takes an event of a continuation's new message item that
// has shown no text yet: its events wait, as a stream's lifecycle events
// wait for content, and go out in order with the first that carries text;
// an item that ends without any is dropped, so that a target with nothing
// to add (a prefill of a whole answer) leaves no empty message: the client's
// output holds only what it was sent (docs/ARCHITECTURE.md §3).
func (cs *clientStream) holdNewLocked(name string, data []byte, f *eventFields, m *splicedItem) error {
	if !carriesText(data, f) {
		if f.Type.Str == "response.output_item.done" {
			m.held, m.newItem, m.drop = nil, false, true
			return nil
		}
		m.held = append(m.held, heldEvent{name: logName(name), data: bytes.Clone(data)})
		return nil
	}
	held := m.held
	m.held = nil
	for i, h := range held {
		hf, _ := scanEvent(h.data)
		var err error
		if i == 0 {
			err = cs.openNewLocked(h.name, h.data, &hf, m)
		} else {
			err = cs.rewriteLocked(h.name, h.data, intField("output_index", m.index))
		}
		if err != nil {
			return err
		}
	}
	return cs.rewriteLocked(name, data, intField("output_index", m.index))
}

// carriesText reports whether an event of a message item shows text: a
// delta, or a part or item (added or done) or a done event with text (an
// upstream need not stream a text before its done forms).
func carriesText(data []byte, f *eventFields) bool {
	hasText := func(part gjson.Result) bool { return part.Get("text").Str != "" || part.Get("refusal").Str != "" }
	switch {
	case f.Delta.Type == gjson.String:
		return f.Delta.Str != ""
	case f.Part.IsObject():
		return hasText(f.Part)
	case f.Item.IsObject():
		found := false
		f.Item.Get("content").ForEach(func(_, p gjson.Result) bool {
			found = hasText(p)
			return !found
		})
		return found
	}
	return hasText(gjson.ParseBytes(data))
}

// splicePartLocked maps a content part of an item the attempt continues
// or reproduces.
func (cs *clientStream) splicePartLocked(name string, data []byte, f *eventFields, m *splicedItem, at []field) error {
	j := f.ContentIndex.Int()
	if m.parts[j] == nil {
		m.added = append(m.added, j)
	}
	if m.snap != nil { // restart
		if int(j) < len(m.snap.parts) {
			m.parts[j] = m.reproducedPart(j, f.Part.Get("type").Str)
			return nil
		}
		if m.snap.done {
			return cs.divergeLocked("added a part to an item the client saw complete")
		}
	} else if j == 0 && len(m.client.Parts) > 0 { // prefill: its first part continues the client's last one
		last := m.client.Parts[len(m.client.Parts)-1]
		if gjson.GetBytes(last.Added, "type").Str == f.Part.Get("type").Str {
			if !last.Complete() {
				m.parts[j] = &splicedPart{index: last.Index, offset: int64(utf8.RuneCountInString(sent.Unescape(last.Text)))}
				return nil
			}
			// The client was told that part's text is final: what the
			// target adds goes into a new part, opened at its first text,
			// so a target that adds nothing leaves the message as it is.
			m.parts[j] = &splicedPart{index: last.Index, done: true, opening: &heldEvent{name: logName(name), data: bytes.Clone(data)}}
			return nil
		}
	}
	p := &splicedPart{}
	m.parts[j] = p
	return cs.openPartLocked(name, data, m, p)
}

// openPartLocked writes a continuation's content_part.added as a new part
// of the client's item m, after the highest content_index the client has
// in it. A part whose text the client saw done, and on a prefill any part
// still open (the client's text, when the target goes on with a refusal),
// is ended first (its content_part.done): one part of an item is open at a
// time, as an upstream streams them, and a part never ends after the new
// one began; what a prefill's target then writes into it ends the stream
// as diverged. A part a restart reproduced without its done events still
// ends with its item.
func (cs *clientStream) openPartLocked(name string, data []byte, m *splicedItem, p *splicedPart) error {
	idx := int64(0)
	for _, cp := range m.client.Parts {
		idx = max(idx, cp.Index+1)
		if cp.Done == nil && (cp.TextDone || m.snap == nil) {
			if err := cs.closePartLocked(m.client, cp, false); err != nil {
				return err
			}
			for _, sp := range m.parts {
				if sp != p && sp.index == cp.Index {
					sp.done = true
				}
			}
		}
	}
	p.index, p.done = idx, false
	return cs.rewriteLocked(name, data, intField("output_index", m.index), strField("item_id", m.client.ID), intField("content_index", idx))
}

// closeItemLocked writes the done events of an open client item from what
// the client has: each open part's text done (unless the client has it) and
// part done, the arguments done of a tool call, then the item done.
func (cs *clientStream) closeItemLocked(it *sent.Item) error {
	for _, p := range it.Parts {
		if err := cs.closePartLocked(it, p, false); err != nil {
			return err
		}
	}
	for _, p := range it.Summary {
		if err := cs.closePartLocked(it, p, true); err != nil {
			return err
		}
	}
	switch it.Type {
	case "function_call":
		// name is required in this event (OpenAI's spec): the call's, as
		// its output_item.added showed it.
		b := append(cs.itemEventHead("response.function_call_arguments.done", it), `,"name":`...)
		b = jsonx.AppendQuote(b, gjson.GetBytes(it.Added, "name").Str)
		b = append(b, `,"arguments":`...)
		if err := cs.writeBuiltLocked("response.function_call_arguments.done", append(b, sent.Quoted(it.Args)...)); err != nil {
			return err
		}
	case "custom_tool_call":
		b := append(cs.itemEventHead("response.custom_tool_call_input.done", it), `,"input":`...)
		if err := cs.writeBuiltLocked("response.custom_tool_call_input.done", append(b, sent.Quoted(it.Args)...)); err != nil {
			return err
		}
	}
	b := append([]byte(`{"type":"response.output_item.done","sequence_number":`), strconv.AppendInt(nil, cs.seq, 10)...)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, it.Index, 10)
	b = append(b, `,"item":`...)
	b = appendClosed(b, it, cs.splice.carriedReasoning(it))
	return cs.writeBuiltLocked("response.output_item.done", b)
}

// keepEncrypted keeps the encrypted_content item, a restart's reasoning
// item that redoes the client's (its added or done form), carries: the
// done form's, which comes last, wins.
func (m *splicedItem) keepEncrypted(item gjson.Result) {
	if e := item.Get("encrypted_content"); e.Type == gjson.String && e.Str != "" {
		m.encrypted = []byte(e.Raw)
	}
}

// carriedReasoning is the encrypted_content (a JSON string) the client's
// open reasoning item it is closed with: that of the restart's reasoning
// item at its position, nil when there is none or it showed none. A
// client with store: false sends its reasoning items back, and an upstream
// that keeps nothing reads one only from its encrypted_content (README
// "Continuation"): the cut attempt never sent one, the restart's, whose
// item is swallowed, is the reasoning behind the answer that follows.
func (sp *splicer) carriedReasoning(it *sent.Item) []byte {
	if sp == nil || sp.kind != kindRestart || it.Type != "reasoning" {
		return nil
	}
	for _, m := range sp.items {
		if m.drop && m.client == it && m.encrypted != nil {
			return m.encrypted
		}
	}
	return nil
}

// closedStatus is the status of an item the splice closes. A reasoning
// item, which no continuation adds to, was cut before it ended: with no
// encrypted_content to carry it is incomplete, as when the stream fails
// (sent.Item.AppendJSON); given the restart's (carriedReasoning) it is
// completed, its summary what the client was shown (a summary describes
// the reasoning, it is not the reasoning) and the reasoning it carries
// back whole. Any other item was continued or reproduced to its end.
func closedStatus(it *sent.Item, carried bool) []byte {
	if it.Type == "reasoning" && !carried {
		return []byte(`"incomplete"`)
	}
	return []byte(`"completed"`)
}

// closePartLocked writes the done events of one content (or summary) part
// of it that the client has not seen done, from what the client has: its
// text's done, unless the client got it (an upstream cut between the two),
// then the part's done.
func (cs *clientStream) closePartLocked(it *sent.Item, p *sent.Part, summary bool) error {
	if p.Done != nil {
		return nil
	}
	ptype := gjson.GetBytes(p.Added, "type").Str
	textType, partType, idxKey, field := "response.output_text.done", "response.content_part.done", "content_index", "text"
	switch {
	case summary:
		textType, partType, idxKey = "response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "summary_index"
	case ptype == "refusal":
		textType, field = "response.refusal.done", "refusal"
	case ptype == "reasoning_text":
		textType = "response.reasoning_text.done"
	}
	if !p.TextDone {
		b := cs.itemEventHead(textType, it)
		b = append(append(append(b, ',', '"'), idxKey...), `":`...)
		b = strconv.AppendInt(b, p.Index, 10)
		b = append(append(append(b, ',', '"'), field...), `":`...)
		b = append(b, sent.Quoted(p.Text)...)
		if textType == "response.output_text.done" {
			b = append(b, `,"logprobs":[]`...)
		}
		if err := cs.writeBuiltLocked(textType, b); err != nil {
			return err
		}
	}
	// The annotations the client got for the part, the cut attempt's and
	// the continuation's (spliceAnnotationLocked): its done form is what
	// the terminal Response and GET list.
	part := p.WithAnnotations(p.Added)
	if out, err := sjson.SetRawBytes(part, field, sent.Quoted(p.Text)); err == nil {
		part = out
	}
	b := cs.itemEventHead(partType, it)
	b = append(append(append(b, ',', '"'), idxKey...), `":`...)
	b = strconv.AppendInt(b, p.Index, 10)
	b = append(append(b, `,"part":`...), part...)
	return cs.writeBuiltLocked(partType, b)
}

// itemEventHead begins an event of type typ about the client item it,
// numbered next, without its closing brace.
func (cs *clientStream) itemEventHead(typ string, it *sent.Item) []byte {
	b := append([]byte(`{"type":`), jsonx.AppendQuote(nil, typ)...)
	b = append(b, `,"sequence_number":`...)
	b = strconv.AppendInt(b, cs.seq, 10)
	b = append(b, `,"item_id":`...)
	b = jsonx.AppendQuote(b, it.ID)
	b = append(b, `,"output_index":`...)
	return strconv.AppendInt(b, it.Index, 10)
}

// writeBuiltLocked closes an event the gateway built and writes it.
func (cs *clientStream) writeBuiltLocked(typ string, b []byte) error {
	b = append(b, '}')
	f, _ := scanEvent(b)
	return cs.writeLocked(typ, b, &f)
}

// appendClosed renders an item closed by the splice (closedStatus) with
// what was streamed into it (its parts' done forms) and, for a reasoning
// item, the encrypted_content it carries (carriedReasoning), if any.
func appendClosed(b []byte, it *sent.Item, encrypted []byte) []byte {
	raw := append([]byte(nil), it.AppendJSON(nil)...)
	if out, err := sjson.SetRawBytes(raw, "status", closedStatus(it, encrypted != nil)); err == nil {
		raw = out
	}
	if encrypted != nil {
		if out, err := sjson.SetRawBytes(raw, "encrypted_content", encrypted); err == nil {
			raw = out
		}
	}
	return append(b, raw...)
}

// splicedTerminalLocked writes the terminal event of a continued stream:
// the client-visible id, the whole output as the client saw it, the usage
// of every attempt summed, the rest of the finishing upstream's Response.
func (cs *clientStream) splicedTerminalLocked(typ string, resp gjson.Result) error {
	sp := cs.splice
	if typ != "response.failed" {
		if sp.shortAtEnd() {
			return cs.divergeLocked("ended before reproducing what was already sent")
		}
		if typ == "response.completed" {
			for _, it := range cs.sent.Items {
				if it.Done == nil {
					if err := cs.closeItemLocked(it); err != nil {
						return err
					}
				}
			}
		}
	}
	cs.sent.Usage = sumUsage(sp.prevUsage, []byte(resp.Get("usage").Raw))
	r := cs.response("")
	r.FromUpstream(typ, resp)
	b := cs.sent.AppendEvent(make([]byte, 0, 1024), typ, cs.seq, &r)
	if cs.resumable {
		b = cs.logLocked(typ, b, true)
	}
	err := cs.eventLocked(typ, b, false)
	cs.noteServedLocked(resp.Get("model")) // the client's gone or not, the meter read it (observeUnsent)
	if err != nil {
		return err
	}
	cs.seq++
	cs.ended = true
	cs.stopHoldLocked()
	return nil
}

// noteServedLocked tells the request's meter the model a continuation's
// upstream named in an event just written, whose client copy names the
// model the client was first shown instead: the meter read that copy
// (observe), but the answer is priced by the model that served it.
func (cs *clientStream) noteServedLocked(model gjson.Result) {
	if cs.req != nil && model.Type == gjson.String {
		cs.req.meta.noteServedModel(strings.Clone(model.Str))
	}
}

// spliceChatLocked writes one Chat chunk of a continuation attempt: the
// client's completion id, no second role, no reasoning (the continuation's
// thinking before it continues visible text), a restart's content and tool
// arguments suppressed until they reproduce what the client has, usage
// summed.
func (cs *clientStream) spliceChatLocked(data []byte, finish bool, usage gjson.Result) error {
	sp := cs.splice
	root := parseJSON(data)
	choice := root.Get("choices.0")
	delta := choice.Get("delta")
	var out []byte
	changed := false
	keep := false
	var logprobsCut int // bytes of the content the client has (restart)
	var surplus string
	if delta.IsObject() {
		nd := []byte{'{'}
		add := func(k gjson.Result, raw []byte) {
			if len(nd) > 1 {
				nd = append(nd, ',')
			}
			nd = append(append(append(nd, k.Raw...), ':'), raw...)
		}
		var derr error
		delta.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "role", "reasoning_content", "reasoning":
				changed = true
			case "content":
				s := v.Str
				if v.Type == gjson.String && sp.kind == kindRestart {
					more, ok := sp.chatWant.feed(s)
					if !ok {
						derr = cs.divergeLocked("wrote text that contradicts what was already sent")
						return false
					}
					s, surplus, logprobsCut = more, more, len(s)-len(more)
				}
				if v.Type != gjson.String || s == "" {
					changed = true
					return true
				}
				if s != v.Str {
					changed = true
					add(k, jsonx.AppendQuote(nil, s))
				} else {
					add(k, []byte(v.Raw))
				}
				cs.chatText = append(cs.chatText, s...)
			case "annotations":
				list, ch := cs.spliceChatAnnotationsLocked(v)
				changed = changed || ch
				if list != nil {
					add(k, list)
				}
			case "tool_calls":
				calls, ch, err := cs.spliceToolCallsLocked(v)
				if err != nil {
					derr = err
					return false
				}
				changed = changed || ch
				if calls != nil {
					add(k, calls)
				}
			default:
				if v.Type != gjson.Null {
					add(k, []byte(v.Raw))
				}
			}
			return true
		})
		if derr != nil {
			return derr
		}
		keep = len(nd) > 1
		if changed {
			out, _ = sjson.SetRawBytes(data, "choices.0.delta", append(nd, '}'))
		}
	}
	// The logprobs go with the content they come with: those of text the
	// client has are not sent again.
	if lp := choice.Get("logprobs.content"); logprobsCut > 0 && lp.IsArray() {
		if out == nil {
			out = data
		}
		out, _ = sjson.SetRawBytes(out, "choices.0.logprobs.content", unsentLogprobs(lp, logprobsCut, surplus))
	}
	if finish {
		if sp.kind == kindRestart {
			if !sp.chatWant.complete() {
				return cs.divergeLocked("finished before reproducing the text already sent")
			}
			for _, t := range sp.chatTools {
				if !t.name.complete() || !t.args.complete() {
					return cs.divergeLocked("finished before reproducing the tool call already sent")
				}
			}
		}
		keep = true
	}
	if usage.IsObject() {
		keep = true
		cs.sent.Usage = sumUsage(sp.prevUsage, []byte(usage.Raw))
		if len(sp.prevUsage) > 0 {
			if out == nil {
				out = data
			}
			out, _ = sjson.SetRawBytes(out, "usage", cs.sent.Usage)
		}
	}
	if !keep {
		return nil // the role chunk, or nothing the client lacks
	}
	if out == nil {
		out = data
	}
	if cs.chatHead.id == "" {
		cs.chatHead.note(root) // the client was shown no completion id: this chunk names it
	}
	out = cs.chatHead.impose(out, root)
	err := cs.eventLocked("", out, false)
	if usage.IsObject() {
		cs.noteServedLocked(root.Get("model"))
	}
	if err != nil {
		return err
	}
	if finish {
		cs.sawFinish = true
	}
	return nil
}

// spliceChatAnnotationsLocked rewrites a continuation chunk's
// delta.annotations as the Responses path does a part's
// (spliceAnnotationLocked): a restart's first annotations, which redo those
// the client has, are dropped; a prefill's indexes are moved past the
// client's text. An annotation nests its indexes in url_citation, as
// OpenAI's Chat does, or has them at its top, as internal/translate also
// reads. list is nil when none is left for the client.
func (cs *clientStream) spliceChatAnnotationsLocked(v gjson.Result) (list []byte, changed bool) {
	sp := cs.splice
	if !v.IsArray() {
		if v.Type == gjson.Null {
			return nil, false // dropped, as any null member of a delta is
		}
		return []byte(v.Raw), false
	}
	out := []byte{'['}
	v.ForEach(func(_, a gjson.Result) bool {
		if redoneAnnotation(&sp.chatAnnotations, sp.chatReannotated) {
			changed = true
			return true
		}
		raw := []byte(a.Raw)
		path, holder := "", a
		if c := a.Get("url_citation"); c.IsObject() {
			path, holder = "url_citation.", c
		}
		for _, f := range movedAnnotationIndexes(nil, path, holder, sp.chatOffset) {
			if b, err := sjson.SetRawBytes(raw, f.path, f.raw); err == nil {
				raw, changed = b, true
			}
		}
		cs.chatAnnotations++
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, raw...)
		return true
	})
	if len(out) == 1 {
		return nil, true
	}
	return append(out, ']'), changed
}

// spliceToolCallsLocked rewrites a continuation chunk's tool_calls: a
// restart's calls the client has lose their header and keep only new
// arguments; new calls pass.
func (cs *clientStream) spliceToolCallsLocked(v gjson.Result) (calls []byte, changed bool, err error) {
	sp := cs.splice
	out := []byte{'['}
	v.ForEach(func(_, tc gjson.Result) bool {
		i := int(tc.Get("index").Int())
		fn := tc.Get("function")
		name, args := fn.Get("name").Str, fn.Get("arguments").Str
		raw := []byte(tc.Raw)
		if sp.kind == kindRestart {
			k := sp.chatCalls.number(tc.Get("index").Int(), tc.Get("id").Str, name)
			if k != i {
				raw, _ = sjson.SetRawBytes(raw, "index", strconv.AppendInt(nil, int64(k), 10))
				i, changed = k, true
			}
		}
		if sp.kind == kindRestart && i < len(sp.chatTools) {
			t := &sp.chatTools[i]
			// A name may come in pieces, as arguments do (appended, as the
			// client joins them): the restart's pieces must spell the name
			// the client has, which is whole once the client had arguments;
			// arguments end the name.
			called := t.name.want[:t.name.pos] + name
			moreName, ok := t.name.feed(name)
			if !ok || (moreName != "" && t.args.want != "") || (args != "" && !t.name.complete()) {
				err = cs.divergeLocked(fmt.Sprintf("called %s as tool call %d, where the call already sent calls %s",
					quotedExcerpt(called), i, quotedExcerpt(t.name.want)))
				return false
			}
			surplus, ok := t.args.feed(args)
			if !ok {
				err = cs.divergeLocked("called the tool with arguments that contradict those already sent")
				return false
			}
			changed = true
			if surplus == "" && moreName == "" {
				return true
			}
			raw = append([]byte(`{"index":`), strconv.AppendInt(nil, int64(i), 10)...)
			raw = append(raw, `,"function":{`...)
			if moreName != "" {
				raw = append(append(raw, `"name":`...), jsonx.AppendQuote(nil, moreName)...)
				if surplus != "" {
					raw = append(raw, ',')
				}
			}
			if surplus != "" {
				raw = append(append(raw, `"arguments":`...), jsonx.AppendQuote(nil, surplus)...)
			}
			raw = append(raw, "}}"...)
			name, args = moreName, surplus
		}
		cs.trackToolLocked(i, name, args)
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, raw...)
		return true
	})
	if err != nil || len(out) == 1 {
		return nil, true, err
	}
	return append(out, ']'), changed, nil
}

// chatHead is what the first chunk naming a completion (by a non-empty id)
// showed of it: the raw JSON of the members every chunk of one completion
// carries alike in OpenAI's streams, "" for a member it had none of. A
// continued stream's chunks carry these, whatever the continuing target's
// say (README "Continuation": one completion).
type chatHead struct {
	id, created, model, fingerprint string
}

// note makes chunk's members the head, when chunk names a completion.
func (h *chatHead) note(chunk gjson.Result) {
	if id := chunk.Get("id"); id.Type == gjson.String && id.Str != "" {
		*h = chatHead{id: strings.Clone(id.Raw), created: strings.Clone(chunk.Get("created").Raw),
			model: strings.Clone(chunk.Get("model").Raw), fingerprint: strings.Clone(chunk.Get("system_fingerprint").Raw)}
	}
}

// impose returns out, chunk's bytes as they go to the client, with the
// head's members; a member is rewritten only where chunk's differs, so a
// chunk that already agrees is returned as it is. A head that names no
// completion imposes nothing.
func (h *chatHead) impose(out []byte, chunk gjson.Result) []byte {
	if h.id == "" {
		return out
	}
	out = withMember(out, chunk, "id", h.id)
	out = withMember(out, chunk, "created", h.created)
	out = withMember(out, chunk, "model", h.model)
	return withMember(out, chunk, "system_fingerprint", h.fingerprint)
}

// withMember returns out with its top-level member key set to raw (removed
// when raw is ""), unless chunk, which out was made of, already has it so.
func withMember(out []byte, chunk gjson.Result, key, raw string) []byte {
	if chunk.Get(key).Raw == raw {
		return out
	}
	var err error
	var b []byte
	if raw == "" {
		b, err = sjson.DeleteBytes(out, key)
	} else {
		b, err = sjson.SetRawBytes(out, key, []byte(raw))
	}
	if err != nil {
		return out
	}
	return b
}

// trackChatLocked records what a Chat chunk the client got carried: the
// completion's head, content, a refusal, tool calls.
func (cs *clientStream) trackChatLocked(data []byte) {
	root := parseJSON(data)
	if cs.chatHead.id == "" {
		cs.chatHead.note(root)
	}
	delta := root.Get("choices.0.delta")
	if c := delta.Get("content"); c.Type == gjson.String {
		cs.chatText = append(cs.chatText, c.Str...)
	}
	if delta.Get("refusal").Str != "" {
		cs.chatRefused = true
	}
	if a := delta.Get("annotations"); a.IsArray() {
		cs.chatAnnotations += len(a.Array())
	}
	delta.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		fn := tc.Get("function")
		cs.trackToolLocked(int(tc.Get("index").Int()), fn.Get("name").Str, fn.Get("arguments").Str)
		return true
	})
}

func (cs *clientStream) trackToolLocked(i int, name, args string) {
	if i < 0 || i > len(cs.chatTools) {
		return
	}
	if i == len(cs.chatTools) {
		cs.chatTools = append(cs.chatTools, chatTool{})
	}
	t := &cs.chatTools[i]
	// A name in pieces is joined, as the client joins it (and arguments).
	t.name = append(t.name, name...) // copied: name aliases the event's buffer (parseJSON), which the reader reuses
	t.args = append(t.args, args...)
}

// ---- usage ----

// sumUsage adds two usage objects (either API's) field by field: numbers
// are summed, nested objects recursively, a field only one has is kept.
func sumUsage(a, b []byte) []byte {
	switch {
	case len(a) == 0:
		return append([]byte(nil), b...)
	case len(b) == 0:
		return append([]byte(nil), a...)
	}
	return appendSum(nil, gjson.ParseBytes(a), gjson.ParseBytes(b))
}

func appendSum(dst []byte, a, b gjson.Result) []byte {
	if !a.IsObject() || !b.IsObject() {
		if b.Exists() && b.Type != gjson.Null {
			return append(dst, b.Raw...)
		}
		return append(dst, a.Raw...)
	}
	am := a.Map()
	dst = append(dst, '{')
	n := 0
	entry := func(k gjson.Result) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(append(dst, k.Raw...), ':')
	}
	b.ForEach(func(k, v gjson.Result) bool {
		entry(k)
		av, ok := am[k.Str]
		delete(am, k.Str)
		switch {
		case ok && av.Type == gjson.Number && v.Type == gjson.Number:
			if isInteger(av.Raw) && isInteger(v.Raw) {
				dst = appendCountSum(dst, av, v)
			} else {
				dst = strconv.AppendFloat(dst, av.Num+v.Num, 'f', -1, 64)
			}
		case ok && av.IsObject() && v.IsObject():
			dst = appendSum(dst, av, v)
		default:
			dst = append(dst, v.Raw...)
		}
		return true
	})
	a.ForEach(func(k, v gjson.Result) bool {
		if _, left := am[k.Str]; left {
			entry(k)
			dst = append(dst, v.Raw...)
		}
		return true
	})
	return append(dst, '}')
}

func isInteger(raw string) bool { return !strings.ContainsAny(raw, ".eE") }

// appendCountSum appends the sum of two integer usage fields. A count that
// is not a token count (negative, or beyond what any model reports,
// usageCount) is no count: the other one stands alone, so a continued
// stream's usage never turns negative or wraps.
func appendCountSum(dst []byte, a, b gjson.Result) []byte {
	x, aValid := usageCount(a)
	y, bValid := usageCount(b)
	switch {
	case aValid && bValid:
		return strconv.AppendInt(dst, x+y, 10)
	case aValid:
		return append(dst, a.Raw...)
	}
	return append(dst, b.Raw...)
}

// ---- keepalive ----

// startKeepAliveLocked starts the stream's keepalive once it is committed:
// an SSE stream that is not could still be answered with an HTTP status (a
// 429 with Retry-After, a 400), which clients handle better than a
// response.failed, so before its first event it gets none (README
// "Continuation"; the wait is bounded by timeouts.header or a route's
// first_byte). A WebSocket client has no status to keep: its session pings
// it from the frame's start (wsSession.keepAliveWhileAnswering), so its
// stream starts no timer of its own.
func (cs *clientStream) startKeepAliveLocked() {
	d := cs.s.opts.KeepAlive
	if d <= 0 || cs.ka != nil || cs.req == nil || !cs.req.stream || cs.req.viaWebSocket {
		return
	}
	cs.ka = time.AfterFunc(d, cs.keepAlive)
}

// keepAlive runs every KeepAlive: when nothing was written since the last
// run (the upstream is silent, or a continuation is connecting), an SSE
// client gets a comment line, so it and the proxies between do not time
// the stream out (a WebSocket client gets its session's pings instead). It
// writes under the stream's lock, and only to a committed stream that has
// not ended.
func (cs *clientStream) keepAlive() {
	d := cs.s.opts.KeepAlive
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended || cs.gone || cs.sink == nil {
		return
	}
	if cs.active {
		cs.active = false
		cs.ka.Reset(d)
		return
	}
	if cs.probeLocked() {
		cs.ka.Reset(d)
	}
}

// ---- the attempt's side ----

// armContinuation readies an attempt's pump for failures after content:
// armed when the request may be continued, the route's stall bound, and,
// for an attempt that continues a stream, the client stream's splicer.
func (s *Server) armContinuation(cs *clientStream, p *pump, cancel context.CancelCauseFunc) (stop func()) {
	req := p.req
	if p.armed = s.continuationArmed(req); p.armed {
		cs.arm()
	}
	if c := tryOf(req).cont; c != nil {
		p.cont = true
		cs.beginSplice(c.kind, c.r.usage)
	}
	if d := stallTimeout(req); d > 0 && req.stream {
		p.stall = newIdleTimer(d, func() { cancel(errStallTimeout) })
		return p.stall.stop
	}
	return func() {}
}

// continuationAnswer handles what a continuation target answered when it is
// not a stream: no answer, a non-2xx status, a complete body. ok is false
// for an attempt that is not a continuation, or got its stream.
func (s *Server) continuationAnswer(ctx, upCtx context.Context, out responder, req *clientRequest, u *upstream.Upstream,
	ans *upstreamAnswer, err error, start time.Time) (attemptResult, bool) {
	if tryOf(req).cont == nil || (err == nil && ans.status/100 == 2 && ans.src != nil) {
		return attemptResult{}, false
	}
	cs := s.clientStreamOf(ctx, out, req, start)
	if err != nil {
		if ctx.Err() != nil {
			return s.stoppedWhileContinued(cs, req), true
		}
		cause := context.Cause(upCtx)
		if errors.Is(cause, errDraining) {
			cs.abort(apierr.StreamIncomplete("the gateway is shutting down; retry the request"))
			cs.finish(reasonDrain)
			return attemptResult{next: nextDone}, true
		}
		if errors.Is(err, errUpstreamSocketsFull) {
			// The gateway's own limit: nothing reached the target, which is
			// not charged (SECURITY.md, limits.upstream_sockets); the
			// stream ends with the failure that started the rescue.
			s.rescueOutcome(req, tryOf(req).cont.kind, "target_failed")
			s.log.Warn("continuation target not tried: upstream WebSockets are all in use", "surface", req.surface(),
				"upstream", u.Name(), "response_id", LogID(tryOf(req).cont.r.clientID))
			s.giveUp(cs, req)
			return attemptResult{next: nextDone}, true
		}
		class := hostabi.FailureTransport
		var ne interface{ Timeout() bool }
		if errors.Is(cause, errFirstByteTimeout) || (errors.As(err, &ne) && ne.Timeout()) {
			class = hostabi.FailureFirstByte
		}
		return s.continuationFailed(ctx, cs, req, u, class, "", 0, s.scrub.String(upstream.RedactError(err)), failureWait{}), true
	}
	s.scrub.answer(ans)
	if ans.done != nil {
		defer ans.done(false)
	}
	if ans.status/100 != 2 {
		perr, _ := apierr.Parse(ans.body)
		// A 200 whose body was an error envelope is named as what the
		// upstream sent (statusReason), as on a first attempt.
		why := ans.statusReason(firstNonEmpty(perr.Code, perr.Message, strings.TrimSpace(string(ans.body))))
		return s.continuationFailed(ctx, cs, req, u, statusClass(perr.Code, ans.status), perr.Code, ans.status, why,
			failureWait{header: ans.header, message: perr.Message}), true
	}
	return s.continuationFailed(ctx, cs, req, u, hostabi.FailureOther, "", 0, "a complete answer instead of a stream", failureWait{}), true
}
