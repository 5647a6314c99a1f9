package gateway

import (
	"strings"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// accessLog writes the request's one INFO line (logger "access"): request id, method,
// endpoint, surface, key name, route, targets tried, status, time to first
// event, duration, how it ended and its tokens. No secret and no raw id is
// in it: keys by name, credentials never. The logger's format is the
// gateway's (logfmt-like text, or JSON lines with --log-json).
func (s *Server) accessLog(m *reqMeta) {
	if m == nil || (s.acct != nil && s.acct.opts.DisableAccessLog) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logged = true
	status := m.status
	targets := make([]string, len(m.targets))
	for i, t := range m.targets { // upstream/model: the model may be the client's
		targets[i] = label(t)
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
	if m.code != "" {
		args = append(args, "code", m.code)
	}
	ttfe := ""
	if m.sawEvent {
		ttfe = m.ttfe.Round(time.Millisecond).String()
	}
	reason := m.reason
	if reason == "" && m.terminal != "" {
		reason = m.terminal
	}
	args = append(args, "ttfe", ttfe, "duration", time.Since(m.start).Round(time.Millisecond).String(), "reason", reason)
	if m.continuity != "" {
		args = append(args, "continuity", m.continuity)
	}
	if m.usage.known {
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
