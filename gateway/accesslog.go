package gateway

import (
	"strings"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// accessPhase is which access line of a request is written: most requests
// have one line; a background create answered before its run ended has two,
// its answer's and its run's end (README "Access log").
type accessPhase int

const (
	accessWhole    accessPhase = iota // the request's one line
	accessAnswered                    // a background create's answer: queued or in progress, no outcome yet
	accessRunEnded                    // that create's run ended: its outcome and what it was charged
)

// accessLog writes the request's INFO line (logger "access") when its
// handler is done: one line, or, for a background create answered before
// its run ended (runBackground), the answer's line, and the run's end line
// too when the run has ended already (backgroundEnded writes it otherwise).
func (s *Server) accessLog(m *reqMeta) {
	if m == nil || s.accessLogOff() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logged = true
	if !m.bgDetached {
		s.writeAccessLine(m, accessWhole)
		return
	}
	if m.bgAnswerLogged {
		return
	}
	m.bgAnswerLogged = true
	s.writeAccessLine(m, accessAnswered)
	if !m.bgEnded.IsZero() {
		s.writeAccessLine(m, accessRunEnded)
	}
}

// backgroundEnded records that a background create's run ended, charged
// (its usage settled): its end line is written now if its answer's line
// was, or by accessLog right after that one, so the two come in order.
func (s *Server) backgroundEnded(m *reqMeta) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bgEnded = time.Now()
	if m.bgAnswerLogged && !s.accessLogOff() {
		s.writeAccessLine(m, accessRunEnded)
	}
}

func (s *Server) accessLogOff() bool { return s.acct != nil && s.acct.opts.DisableAccessLog }

// writeAccessLine writes one access line of m (under m.mu): request id,
// method, endpoint, surface, key name, route, targets tried, status, time
// to first event, duration, how it ended and its tokens. No secret and no
// raw id is in it: keys by name, credentials never. The logger's format is
// the gateway's (logfmt-like text, or JSON lines with --log-json). A
// background create's answer line has no outcome (code, reason, tokens):
// its run has not ended, and its end line has them, so summing the lines'
// tokens counts each run once.
func (s *Server) writeAccessLine(m *reqMeta, phase accessPhase) {
	status := m.status
	targets := make([]string, len(m.targets))
	for i, t := range m.targets { // upstream/model: the model may be the client's
		targets[i] = label(t.String())
	}
	args := []any{
		"request_id", m.requestID, // the x-request-id the gateway minted, never an upstream's (it may embed a raw response id)
		"method", label(m.method),
		"endpoint", label(m.endpoint), // the client's path: bounded, one line
		"surface", m.surface,
		"key", m.keyName(),
		"route", m.route,
		"targets", strings.Join(targets, ","),
		"model", label(m.model), // the client's: bounded, valid UTF-8
		"status", status,
	}
	outcome := phase != accessAnswered
	if m.code != "" && outcome {
		args = append(args, "code", label(m.code)) // an upstream may have chosen it: one line, bounded, as the model
	}
	ttfe := ""
	if m.sawEvent {
		ttfe = m.ttfe.Round(time.Millisecond).String()
	}
	reason := ""
	if outcome {
		reason = m.reason
		if reason == "" && m.terminal != "" {
			reason = m.terminal
		}
	}
	end := time.Now()
	if phase == accessRunEnded {
		end = m.bgEnded
	}
	args = append(args, "ttfe", ttfe, "duration", end.Sub(m.start).Round(time.Millisecond).String(), "reason", reason)
	switch {
	case phase == accessAnswered:
		args = append(args, "background", "answered")
	case m.background:
		args = append(args, "background", "ended") // the line with the run's outcome, whether or not its answer had a line before
	}
	if m.continuity != "" {
		args = append(args, "continuity", m.continuity)
	}
	if m.usage.known && outcome {
		args = append(args, "input_tokens", m.usage.input, "output_tokens", m.usage.output,
			"cached_tokens", m.usage.cached, "reasoning_tokens", m.usage.reasoning)
	}
	s.log.Named("access").Info("request", args...)
}

// logEndpoint is a request path as the access log shows it: the id segment
// of a stored-response or streaming-input session path in its LogID form
// (/v1/responses/sha256:…/input_items), as every log line shows ids
// (SECURITY.md "Secrets": never raw), so the line still matches the others
// that name the same response or session.
func logEndpoint(path string) string {
	for _, prefix := range [...]string{responsesResourcePrefix, streaminput.PathPrefix + "/"} {
		rest, ok := strings.CutPrefix(path, prefix)
		if !ok || rest == "" {
			continue
		}
		id, tail, more := strings.Cut(rest, "/")
		if more {
			return prefix + LogID(id) + "/" + tail
		}
		return prefix + LogID(id)
	}
	return path
}
