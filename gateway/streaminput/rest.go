package streaminput

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/clientkey"
)

// PathPrefix is where the REST API lives.
const PathPrefix = "/v1/streaming_input/sessions"

// Route is one REST endpoint, in httprouter's path syntax.
type Route struct {
	Method  string       // HTTP method
	Path    string       // e.g. "/v1/streaming_input/sessions/:id/chunks"
	Handler http.Handler // serves the route
}

// Routes lists the REST endpoints for mounting on a router (for example
// with the gateway's Server.Handle). Every route's handler is Handler: it
// reads the session id from the URL path itself, so it works under any
// router.
func (m *Manager) Routes() []Route {
	h := m.Handler()
	return []Route{
		{http.MethodPost, PathPrefix, h},
		{http.MethodGet, PathPrefix + "/:id", h},
		{http.MethodDelete, PathPrefix + "/:id", h},
		{http.MethodPost, PathPrefix + "/:id/chunks", h},
		{http.MethodPost, PathPrefix + "/:id/finish", h},
		{http.MethodGet, PathPrefix + "/:id/result", h},
	}
}

// Handler serves the REST API (Mode B) on every path under PathPrefix:
//
//	POST   /v1/streaming_input/sessions               create a session
//	POST   /v1/streaming_input/sessions/{id}/chunks   append a chunk (202 once durable)
//	POST   /v1/streaming_input/sessions/{id}/finish   end the input (idempotent)
//	GET    /v1/streaming_input/sessions/{id}          the session's status
//	DELETE /v1/streaming_input/sessions/{id}          cancel it and delete its data
//	GET    /v1/streaming_input/sessions/{id}/result   the upstream's answer (SSE or JSON)
//
// A session is visible only to requests carrying the credential that
// created it. Every error is an OpenAI-style error.
func (m *Manager) Handler() http.Handler { return http.HandlerFunc(m.serveREST) }

func (m *Manager) serveREST(w http.ResponseWriter, r *http.Request) {
	m.Start()
	w, traced := m.tracedREST(w, r)
	defer traced()
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	if !ok || (rest != "" && rest[0] != '/') {
		notFound(w, r)
		return
	}
	rest = strings.Trim(rest, "/")
	if rest == "" {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r)
			return
		}
		m.handleCreate(w, r)
		return
	}
	id, action, _ := strings.Cut(rest, "/")
	var h func(http.ResponseWriter, *http.Request, *session)
	switch {
	case action == "" && r.Method == http.MethodGet:
		h = m.handleStatus
	case action == "" && r.Method == http.MethodDelete:
		h = m.handleDelete
	case action == "chunks" && r.Method == http.MethodPost:
		h = m.handleChunk
	case action == "finish" && r.Method == http.MethodPost:
		h = m.handleFinish
	case action == "result" && r.Method == http.MethodGet:
		h = m.handleResult
	case action == "" || action == "chunks" || action == "finish" || action == "result":
		methodNotAllowed(w, r)
		return
	default:
		notFound(w, r)
		return
	}
	if m.isClosing() {
		errShutdown().Write(w)
		return
	}
	s, aerr := m.lookup(r.Context(), id, clientkey.Hash(r.Header)) // shared.go: with a shared store, checked against it
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if s == nil {
		errNotFound().Write(w)
		return
	}
	s.adoptCredentials(r.Header)
	h(w, r, s)
}

func notFound(w http.ResponseWriter, r *http.Request) {
	(&apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound,
		Message: fmt.Sprintf("unknown endpoint %s %s", r.Method, r.URL.Path)}).Write(w)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	(&apierr.Error{Status: http.StatusMethodNotAllowed, Type: apierr.TypeInvalidRequest, Code: apierr.CodeMethodNotAllowed,
		Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)}).Write(w)
}

// readJSON reads a JSON object body of at most limit bytes, which must
// arrive within ReadTimeout (408 request_timeout beyond); an empty body
// reads as an empty object when allowEmpty. The body's nesting is checked
// before it is parsed.
func (m *Manager) readJSON(w http.ResponseWriter, r *http.Request, limit int64, allowEmpty bool) (gjson.Result, *apierr.Error) {
	body, aerr := m.readBody(w, r, limit)
	if aerr != nil {
		return gjson.Result{}, aerr
	}
	if allowEmpty && len(bytes.TrimSpace(body)) == 0 {
		return gjson.Parse("{}"), nil
	}
	if aerr := checkJSON(r.Context(), body, m.opts.MaxJSONDepth, "the request body"); aerr != nil {
		return gjson.Result{}, aerr
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return gjson.Result{}, apierr.Invalid("", apierr.CodeInvalidType, "the request body must be a JSON object")
	}
	return root, nil
}

// readBody reads a REST request body of at most limit bytes within
// ReadTimeout. The read deadline is lifted once the body is read, so that
// it cannot cut a long answer (GET …/result is never read this way, but a
// keep-alive connection's next request must not inherit it).
func (m *Manager) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apierr.Error) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // the body is not read
		return nil, apierr.TooLarge(limit)
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(m.opts.ReadTimeout)); err == nil {
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &tooLarge):
			return nil, apierr.TooLarge(limit)
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			return nil, errRequestTimeout("the request body", m.opts.ReadTimeout)
		case r.Context().Err() != nil:
			return nil, errClientGone()
		}
		return nil, apierr.Invalid("", apierr.CodeInvalidBody, "could not read the request body: %v", err)
	}
	return body, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// handleCreate serves POST /v1/streaming_input/sessions:
//
//	{"endpoint":"/v1/responses","template":{…},"start_policy":"on_first_chunk","chunk":{…}}
func (m *Manager) handleCreate(w http.ResponseWriter, r *http.Request) {
	if m.full() { // refused before its body is read
		w.Header().Set("Connection", "close")
		writeError(w, m.errTooManySessions())
		return
	}
	root, aerr := m.readJSON(w, r, m.opts.MaxTemplateBytes+m.opts.maxChunkRequest(), false)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var endpointField, raw, sp, fc gjson.Result
	if aerr := forEachMember(r.Context(), root, "", func(key string, v gjson.Result) {
		switch key {
		case "endpoint":
			endpointField = v
		case "template":
			raw = v
		case "start_policy":
			sp = v
		case "chunk":
			fc = v
		}
	}); aerr != nil {
		writeError(w, aerr)
		return
	}
	endpoint := EndpointResponses
	if e := endpointField; e.Exists() && e.Type != gjson.Null {
		if e.Type != gjson.String {
			writeError(w, apierr.Invalid("endpoint", apierr.CodeInvalidType, "endpoint must be a string"))
			return
		}
		endpoint = e.Str
	}
	if !raw.Exists() {
		writeError(w, apierr.Invalid("template", apierr.CodeMissingField, "you must provide a template (the request body without the streamed input)"))
		return
	}
	if int64(len(raw.Raw)) > m.opts.MaxTemplateBytes {
		writeError(w, m.errTemplateTooLarge(false))
		return
	}
	tpl, aerr := parseTemplate(r.Context(), endpoint, []byte(raw.Raw), m.opts.MaxJSONDepth)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if m.opts.ModelAllowed != nil {
		if aerr := m.opts.ModelAllowed(r, tpl.model); aerr != nil {
			refused := *aerr
			refused.Param = "template.model"
			writeError(w, &refused)
			return
		}
	}
	if sp.Exists() && sp.Type != gjson.String && sp.Type != gjson.Null {
		writeError(w, apierr.Invalid("start_policy", apierr.CodeInvalidType, "start_policy must be a string"))
		return
	}
	policy, aerr := parsePolicy(sp.Str)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var first *chunk
	if fc.Exists() && fc.Type != gjson.Null {
		zero := uint64(0)
		c, aerr := parseChunk(r.Context(), fc, &zero)
		if aerr != nil {
			if aerr.Param == "" { // the chunk itself, e.g. not an object
				aerr.Param = "chunk"
			} else {
				aerr.Param = "chunk." + aerr.Param
			}
			writeError(w, aerr)
			return
		}
		first = &c
	}
	s, aerr := m.create(r.Context(), sessionParams{tpl: tpl, policy: policy, header: r.Header, peer: r.RemoteAddr})
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	m.log.Debug("streaming-input session created", "policy", policy.String(), "endpoint", endpoint)
	if first != nil {
		m.makeRoomForChunk(int64(len(first.payload)))
		if _, aerr := s.acceptNamingConflict(r.Context(), *first); aerr != nil {
			s.close(aerr, reasonRejected)
			writeError(w, aerr)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.status())
}

func (m *Manager) handleChunk(w http.ResponseWriter, r *http.Request, s *session) {
	root, aerr := m.readJSON(w, r, m.opts.maxChunkRequest(), false)
	if aerr != nil {
		if aerr.Status == http.StatusRequestEntityTooLarge {
			aerr = errTooLarge(m.opts.MaxSessionBytes)
			s.close(aerr, reasonTooLarge)
		}
		writeError(w, aerr)
		return
	}
	c, aerr := parseChunk(r.Context(), root, nil)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	m.makeRoomForChunk(int64(len(c.payload)))
	a, aerr := s.acceptNamingConflict(r.Context(), c)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st := s.status()
	writeJSON(w, http.StatusAccepted, ChunkAck{
		Object: "streaming_input.chunk", SessionID: s.id, SequenceID: c.seq, Received: true, Duplicate: a.duplicate,
		Started: st.Started, State: st.State, NextSequenceID: st.NextSequenceID, ReceivedBytes: st.ReceivedBytes,
	})
}

func (m *Manager) handleFinish(w http.ResponseWriter, r *http.Request, s *session) {
	if _, aerr := m.readJSON(w, r, 64<<10, true); aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := s.finish(r.Context()); aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, s.status())
}

func (m *Manager) handleStatus(w http.ResponseWriter, r *http.Request, s *session) {
	s.awaitFollowedHead(r.Context())
	writeJSON(w, http.StatusOK, s.status())
}

func (m *Manager) handleDelete(w http.ResponseWriter, _ *http.Request, s *session) {
	s.close(errCancelled(), reasonDeleted)
	writeJSON(w, http.StatusOK, map[string]any{"id": s.id, "object": "streaming_input.session.deleted", "deleted": true})
}

// handleResult serves GET …/{id}/result: it waits for the upstream request
// to start, then replays the answer from its first byte (or, for a
// Responses stream, after ?starting_after=N) and follows it live.
func (m *Manager) handleResult(w http.ResponseWriter, r *http.Request, s *session) {
	after, aerr := parseStartingAfter(r.URL.Query().Get("starting_after"))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	if after >= 0 && (s.tpl.chat || !s.tpl.stream) {
		// Known from the template: refused before waiting for the answer.
		errStartingAfterNotApplicable().Write(w)
		return
	}
	res, aerr := s.waitResult(r.Context())
	switch {
	case aerr != nil:
		aerr.Write(w)
		return
	case res == nil:
		return // the client left
	}
	if aerr := s.resentRefusal(after); aerr != nil {
		aerr.Write(w)
		return
	}
	if aerr := res.serve(r.Context(), w, serveOptions{startingAfter: after, extra: s.sawHeaders(), keepAlive: m.opts.KeepAlive, lost: func() *apierr.Error {
		return apierr.StreamIncomplete("this reader fell more than %d bytes behind the answer; attach again with starting_after", m.opts.ResultBuffer)
	}}); aerr != nil {
		aerr.Write(w)
	}
}

// acceptNamingConflict is accept, whose sequence_conflict names what
// differs from the chunk already received with that sequence id: a client
// that resends a chunk with only end_of_input or new_part changed is told
// so, not that its payload differs (conflictDetail).
func (s *session) acceptNamingConflict(ctx context.Context, c chunk) (ack, *apierr.Error) {
	a, aerr := s.accept(ctx, c)
	if aerr == nil || aerr.Code != CodeSequenceConflict {
		return a, aerr
	}
	s.mu.Lock()
	prev, ok := s.infos[c.seq]
	s.mu.Unlock()
	if !ok {
		return a, aerr
	}
	named := *aerr // a copy: the error may be shared
	named.Message = fmt.Sprintf("sequence_id %d was already received with %s", c.seq, conflictDetail(prev, c))
	return a, &named
}

// conflictDetail says how chunk c differs from prev, the chunk already
// received with its sequence id: the payload (compared through prev's
// digest, with prev's own meta), then each chunk field that differs.
func conflictDetail(prev chunkInfo, c chunk) string {
	var diffs []string
	if samePayload := (chunk{meta: prev.meta, payload: c.payload}); samePayload.digest() != prev.d {
		diffs = append(diffs, "a different payload")
	}
	field := func(name string, was, now any) {
		if was != now {
			diffs = append(diffs, fmt.Sprintf("%s %v (this chunk has %v)", name, was, now))
		}
	}
	field("modality", prev.meta.modality, c.meta.modality)
	field("format", fmt.Sprintf("%q", prev.meta.format), fmt.Sprintf("%q", c.meta.format))
	field("end_of_input", prev.meta.end, c.meta.end)
	field("new_part", prev.meta.newPart, c.meta.newPart)
	if len(diffs) == 0 {
		return "a different payload"
	}
	return strings.Join(diffs, ", ")
}
