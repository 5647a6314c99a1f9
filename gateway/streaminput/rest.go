package streaminput

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/apierr"
	"github.com/sluice-gw/sluice/gateway/clientkey"
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
	s := m.get(id, clientkey.Hash(r.Header))
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
	(&apierr.Error{Status: http.StatusMethodNotAllowed, Type: apierr.TypeInvalidRequest, Code: "method_not_allowed",
		Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)}).Write(w)
}

// readJSON reads a JSON object body of at most limit bytes; an empty body
// reads as an empty object when allowEmpty.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, allowEmpty bool) (gjson.Result, *apierr.Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return gjson.Result{}, apierr.TooLarge(limit)
		}
		return gjson.Result{}, apierr.Invalid("", "invalid_body", "could not read the request body: %v", err)
	}
	if allowEmpty && len(strings.TrimSpace(string(body))) == 0 {
		return gjson.Parse("{}"), nil
	}
	if !gjson.ValidBytes(body) {
		return gjson.Result{}, apierr.Invalid("", apierr.CodeInvalidJSON, "the request body is not valid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return gjson.Result{}, apierr.Invalid("", apierr.CodeInvalidType, "the request body must be a JSON object")
	}
	return root, nil
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
	root, aerr := readJSON(w, r, m.opts.MaxTemplateBytes+m.opts.maxChunkRequest(), false)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	endpoint := EndpointResponses
	if e := root.Get("endpoint"); e.Exists() && e.Type != gjson.Null {
		if e.Type != gjson.String {
			apierr.Invalid("endpoint", apierr.CodeInvalidType, "endpoint must be a string").Write(w)
			return
		}
		endpoint = e.Str
	}
	raw := root.Get("template")
	if !raw.Exists() {
		apierr.Invalid("template", apierr.CodeMissingField, "you must provide a template (the request body without the streamed input)").Write(w)
		return
	}
	if int64(len(raw.Raw)) > m.opts.MaxTemplateBytes {
		apierr.TooLarge(m.opts.MaxTemplateBytes).Write(w)
		return
	}
	tpl, aerr := parseTemplate(endpoint, []byte(raw.Raw))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	sp := root.Get("start_policy")
	if sp.Exists() && sp.Type != gjson.String && sp.Type != gjson.Null {
		apierr.Invalid("start_policy", apierr.CodeInvalidType, "start_policy must be a string").Write(w)
		return
	}
	policy, aerr := parsePolicy(sp.Str)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	var first *chunk
	if fc := root.Get("chunk"); fc.Exists() && fc.Type != gjson.Null {
		zero := uint64(0)
		c, aerr := parseChunk(fc, &zero)
		if aerr != nil {
			aerr.Param = "chunk." + aerr.Param
			aerr.Write(w)
			return
		}
		first = &c
	}
	s, aerr := m.create(r.Context(), sessionParams{tpl: tpl, policy: policy, header: r.Header})
	if aerr != nil {
		aerr.Write(w)
		return
	}
	m.log.Debug("streaming-input session created", "policy", policy.String(), "endpoint", endpoint)
	if first != nil {
		if _, aerr := s.accept(r.Context(), *first); aerr != nil {
			s.close(aerr, "rejected")
			aerr.Write(w)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.status())
}

func (m *Manager) handleChunk(w http.ResponseWriter, r *http.Request, s *session) {
	root, aerr := readJSON(w, r, m.opts.maxChunkRequest(), false)
	if aerr != nil {
		if aerr.Status == http.StatusRequestEntityTooLarge {
			aerr = errTooLarge(m.opts.MaxSessionBytes)
			s.close(aerr, "too_large")
		}
		aerr.Write(w)
		return
	}
	c, aerr := parseChunk(root, nil)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	a, aerr := s.accept(r.Context(), c)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	st := s.status()
	writeJSON(w, http.StatusAccepted, ChunkAck{
		Object: "streaming_input.chunk", SessionID: s.id, SequenceID: c.seq, Received: true, Duplicate: a.duplicate,
		Started: st.Started, State: st.State, NextSequenceID: st.NextSequenceID, ReceivedBytes: st.ReceivedBytes,
	})
}

func (m *Manager) handleFinish(w http.ResponseWriter, r *http.Request, s *session) {
	if _, aerr := readJSON(w, r, 64<<10, true); aerr != nil {
		aerr.Write(w)
		return
	}
	if aerr := s.finish(r.Context()); aerr != nil {
		aerr.Write(w)
		return
	}
	writeJSON(w, http.StatusOK, s.status())
}

func (m *Manager) handleStatus(w http.ResponseWriter, _ *http.Request, s *session) {
	writeJSON(w, http.StatusOK, s.status())
}

func (m *Manager) handleDelete(w http.ResponseWriter, _ *http.Request, s *session) {
	s.close(errCancelled(), "deleted")
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
	res, aerr := s.waitResult(r.Context())
	switch {
	case aerr != nil:
		aerr.Write(w)
		return
	case res == nil:
		return // the client left
	}
	ok := res.serve(r.Context(), w, serveOptions{startingAfter: after, extra: s.sawHeaders(), lost: func() *apierr.Error {
		return apierr.StreamIncomplete("this reader fell more than %d bytes behind the answer; attach again with starting_after", m.opts.ResultBuffer)
	}})
	if !ok {
		(&apierr.Error{Status: http.StatusGone, Type: apierr.TypeInvalidRequest, Code: CodeResultGone,
			Message: fmt.Sprintf("the answer is longer than the %d bytes kept for replay; its beginning is gone", m.opts.ResultBuffer)}).Write(w)
	}
}
