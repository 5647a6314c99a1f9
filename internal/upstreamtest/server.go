package upstreamtest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server. The zero value is a usable upstream.
type Options struct {
	// Name identifies the upstream in canned answers ("Hello from <Name>")
	// and ids ("resp_<Name>_<n>"). Default "fake".
	Name string
	// Models are listed by GET /v1/models. Default ["gpt-fake-1"]. A request
	// without a model gets the first one echoed back.
	Models []string
	// StrictModels answers 404 model_not_found to a request whose model is
	// not in Models.
	StrictModels bool
	// APIKey, when set, makes every endpoint answer 401 to a request without
	// "Authorization: Bearer <APIKey>" (WebSocket: before the upgrade).
	APIKey string
	// StrictPrevious answers previous_response_not_found to a Responses
	// request whose previous_response_id this server did not create (see
	// PreviousNotFound), in the shape PreviousShape. Such a request does not
	// consume a script.
	StrictPrevious bool
	// PreviousPerWebSocket answers previous_response_not_found (as
	// StrictPrevious does, in the shape PreviousShape) to a response.create
	// whose previous_response_id was not created (PlaceholderID) on the same
	// WebSocket: OpenAI's WebSocket mode keeps a store:false response on
	// the connection that made it only. Such a message does not consume a
	// script.
	PreviousPerWebSocket bool
	// PreviousShape is the shape of StrictPrevious's error on streams (HTTP
	// and WebSocket). Non-streaming requests always get the 400 status.
	PreviousShape Shape
	// DisableWebSocket answers 426 to WebSocket upgrades on GET /v1/responses.
	DisableWebSocket bool
	// DisableRecording stops keeping requests for Requests (counts are still
	// kept); for benchmarks and the demo.
	DisableRecording bool
	// RefusePrefill answers 400 invalid_request_error ("This model does not
	// support assistant message prefill…") to a request whose input
	// (Responses) or messages (Chat) end with an assistant message, as
	// upstreams that cannot continue a message do. Such a request does not
	// consume a script.
	RefusePrefill bool
	// Conversations, when not empty, are the conversation ids this server
	// holds: an HTTP Responses request naming another one in
	// "conversation" (an id, or {"id": …}) gets OpenAI's 404 "Conversation
	// with id '…' not found." (param conversation, code null), as an
	// upstream that does not hold the conversation answers. Such a request
	// does not consume a script. Empty: every conversation is taken.
	Conversations []string
}

// Request is one recorded model request: a POST to /v1/responses or
// /v1/chat/completions, a request to an unknown path, or one WebSocket
// response.create message. GET /v1/models probes and WebSocket upgrade
// requests are not recorded (see ModelsRequests and WebSocketConnects).
type Request struct {
	Method     string      // "GET" for WebSocket messages
	Path       string      // URL path, e.g. "/v1/responses"
	Header     http.Header // a clone; for WebSocket messages, the upgrade request's headers
	Body       []byte      // the HTTP body, or the WebSocket message
	ReceivedAt time.Time
	WebSocket  bool // a response.create received on a WebSocket
	// WebSocketConn numbers, from 1, the WebSocket a response.create came
	// on, in the order the upgrades were accepted; 0 for HTTP requests.
	WebSocketConn int

	// Decoded from Body for convenience.
	Model              string
	Stream             bool // the body's "stream" (always true for WebSocket messages)
	PreviousResponseID string

	// ResponseID is the id the server assigned when it played a script
	// ("resp_<Name>_<n>" or "chatcmpl-<Name>-<n>"); empty for requests
	// rejected before that (auth, bad JSON, unknown model, StrictPrevious).
	ResponseID string
}

type endpoint int

const (
	epResponses endpoint = iota
	epChat
)

type cannedSet struct {
	resp, chat, chatUsage []cframe
	respBody, chatBody    tmpl
}

// Server is a fake OpenAI-compatible upstream. Its methods are safe for
// concurrent use.
type Server struct {
	// URL is the base URL including /v1, e.g. "http://127.0.0.1:41234/v1";
	// empty for a Server made by NewHandler.
	URL string

	opts     Options
	nameJSON []byte // Name, JSON-escaped
	idName   string // Name, id-safe
	canned   cannedSet
	prev     *plan // StrictPrevious, stream form
	prev400  *plan // StrictPrevious, status form
	models   []byte
	bufs     sync.Pool

	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	srv       *http.Server
	serveDone chan struct{}

	counter    atomic.Int64
	conns      atomic.Int64 // TCP connections accepted (NewServer only)
	wsConnects atomic.Int64
	wsRefused  atomic.Int64

	mu           sync.Mutex
	closed       bool
	handlers     sync.WaitGroup
	queue        []*plan
	def          *plan
	reqs         []Request
	base         int // index in the total count of reqs[0]
	nreqs        int
	changed      chan struct{}
	known        map[string]struct{}
	modelsStatus int
	modelsCount  int
}

// NewServer starts a Server on 127.0.0.1 with a random port. Close it when done.
func NewServer(opts Options) *Server {
	s := NewHandler(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("upstreamtest: listen: " + err.Error())
	}
	s.URL = "http://" + ln.Addr().String() + "/v1"
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}}
	s.serveDone = make(chan struct{})
	go func() {
		defer close(s.serveDone)
		_ = s.srv.Serve(ln)
	}()
	return s
}

// NewHandler makes a Server that does not listen: serve it (it is an
// http.Handler, see Handler) on a listener of your own. The handler expects
// the full request path (/v1/…). Close still unblocks its hanging handlers.
func NewHandler(opts Options) *Server {
	if opts.Name == "" {
		opts.Name = "fake"
	}
	if len(opts.Models) == 0 {
		opts.Models = []string{"gpt-fake-1"}
	}
	opts.Models = slices.Clone(opts.Models)
	s := &Server{
		opts:     opts,
		nameJSON: jsonEscape(opts.Name),
		idName:   idSafe(opts.Name),
		changed:  make(chan struct{}),
		known:    map[string]struct{}{},
		def:      compileScript(Script{}),
		prev:     compileScript(PreviousNotFound(opts.PreviousShape)),
		prev400:  compileScript(PreviousNotFound(ShapeStatus)),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.canned = cannedSet{
		resp:      compileFrames(cannedRespFrames()),
		chat:      compileFrames(cannedChatFrames()),
		chatUsage: compileFrames(cannedChatUsageFrames()),
		respBody:  compile(cannedRespBody()),
		chatBody:  compile(cannedChatBody()),
	}
	var data arr
	for _, m := range opts.Models {
		data = append(data, obj{{"id", m}, {"object", "model"}, {"created", 1686935002}, {"owned_by", "upstreamtest"}})
	}
	s.models = marshal(obj{{"object", "list"}, {"data", data}})
	return s
}

// Handler returns the Server as an http.Handler.
func (s *Server) Handler() http.Handler { return s }

// WebSocketURL is the URL of the Responses WebSocket endpoint,
// "ws://127.0.0.1:<port>/v1/responses" (empty for NewHandler servers).
func (s *Server) WebSocketURL() string {
	if s.URL == "" {
		return ""
	}
	return "ws" + strings.TrimPrefix(s.URL, "http") + "/responses"
}

// Close stops the server: it unblocks hanging and sleeping handlers, closes
// every connection (WebSockets included) and waits for the handlers to return.
// Requests arriving afterwards get 503. Close is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	if s.srv != nil {
		_ = s.srv.Close()
		<-s.serveDone
	}
	s.handlers.Wait()
}

// Enqueue appends scripts to the queue. Each POST /v1/responses, POST
// /v1/chat/completions and WebSocket response.create that reaches the scripted
// stage takes the next script, in one FIFO shared by all endpoints; with an
// empty queue the default script plays (see SetDefault). Requests rejected
// before that stage (401, invalid JSON, unknown model with StrictModels,
// StrictPrevious) do not consume a script.
func (s *Server) Enqueue(scripts ...Script) {
	ps := make([]*plan, len(scripts))
	for i, sc := range scripts {
		ps[i] = compileScript(sc)
	}
	s.mu.Lock()
	s.queue = append(s.queue, ps...)
	s.mu.Unlock()
}

// Pending is the number of queued scripts not yet consumed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// SetDefault sets the script played when the queue is empty (initially the
// canned answer, Script{}). Use it to make every request slow, or to serve a
// longer canned stream in a benchmark.
func (s *Server) SetDefault(sc Script) {
	p := compileScript(sc)
	s.mu.Lock()
	s.def = p
	s.mu.Unlock()
}

// SetModelsStatus makes GET /v1/models answer status with an OpenAI error
// body; 0 or 200 restores the model list.
func (s *Server) SetModelsStatus(status int) {
	s.mu.Lock()
	s.modelsStatus = status
	s.mu.Unlock()
}

// ModelsRequests is the number of GET /v1/models requests received.
func (s *Server) ModelsRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modelsCount
}

// WebSocketConnects is the number of WebSocket upgrades accepted.
func (s *Server) WebSocketConnects() int { return int(s.wsConnects.Load()) }

// Connections is how many TCP connections the Server has accepted (one
// started by NewServer; 0 for a Handler served elsewhere): a client that
// reuses its connections keeps it from growing.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// WebSocketRefused is the number of WebSocket upgrades answered 426 because
// of Options.DisableWebSocket.
func (s *Server) WebSocketRefused() int { return int(s.wsRefused.Load()) }

// ForgetResponses makes StrictPrevious treat the given response ids (all ids
// when none are given) as unknown, as an upstream that lost its state would.
func (s *Server) ForgetResponses(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ids) == 0 {
		clear(s.known)
	}
	for _, id := range ids {
		delete(s.known, id)
	}
}

// Requests returns the recorded requests, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// RequestCount is the number of requests recorded (counted even with
// DisableRecording).
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nreqs
}

// ClearRequests forgets the recorded requests and resets RequestCount.
func (s *Server) ClearRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.base += len(s.reqs)
	s.reqs = nil
	s.nreqs = 0
}

// WaitRequests waits until RequestCount is at least n or ctx is done.
func (s *Server) WaitRequests(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		count, ch := s.nreqs, s.changed
		s.mu.Unlock()
		if count >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// record stores r and returns a handle for setResponseID.
func (s *Server) record(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nreqs++
	close(s.changed)
	s.changed = make(chan struct{})
	if s.opts.DisableRecording {
		return -1
	}
	s.reqs = append(s.reqs, r)
	return s.base + len(s.reqs) - 1
}

func (s *Server) setResponseID(handle int, id string) {
	if handle < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := handle - s.base; i >= 0 && i < len(s.reqs) {
		s.reqs[i].ResponseID = id
	}
}

func (s *Server) next() *plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		p := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		return p
	}
	return s.def
}

func (s *Server) isKnown(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.known[id]
	return ok
}

func (s *Server) markKnown(t *turn) {
	if !s.opts.StrictPrevious || t.forget || t.ep != epResponses {
		return
	}
	s.mu.Lock()
	s.known[t.id] = struct{}{}
	s.mu.Unlock()
}

// enter registers a running handler; false once the server is closed.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

// wait sleeps d; false if the client or the server went away first.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil && s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	return false
}

// hang blocks until the client or the server goes away.
func (s *Server) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
}

// fields are the parts of a request body the server looks at.
type fields struct {
	Type               string          `json:"type"`
	Model              string          `json:"model"`
	Stream             bool            `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	StreamOptions      struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// turn is one model request being answered.
type turn struct {
	ep     endpoint
	stream bool
	usage  bool // chat stream_options.include_usage
	id     string
	forget bool // do not remember id for StrictPrevious
	v      vars

	prefill    string // the text of the trailing assistant message (Text scripts)
	hasPrefill bool
}

func (s *Server) newTurn(ep endpoint, f *fields) *turn {
	n := strconv.FormatInt(s.counter.Add(1), 10)
	t := &turn{ep: ep, stream: f.Stream, usage: f.StreamOptions.IncludeUsage}
	if ep == epChat {
		t.id = "chatcmpl-" + s.idName + "-" + n
	} else {
		t.id = "resp_" + s.idName + "_" + n
	}
	model := f.Model
	if model == "" {
		model = s.opts.Models[0]
	}
	t.v[holeID] = []byte(t.id)
	t.v[holeItemID] = []byte("msg_" + s.idName + "_" + n)
	t.v[holeModel] = jsonEscape(model)
	t.v[holeCreatedAt] = strconv.AppendInt(nil, time.Now().Unix(), 10)
	t.v[holeName] = s.nameJSON
	t.v[holePrevious] = jsonEscape(f.PreviousResponseID)
	return t
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.APIKey == "" {
		return true
	}
	return r.Header.Get("Authorization") == "Bearer "+s.opts.APIKey
}

func (s *Server) writeUnauthorized(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" {
		writeError(w, http.StatusUnauthorized, ErrorBody("You didn't provide an API key. You need to provide your API key in an "+
			"Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "invalid_request_error", "", ""))
		return
	}
	writeError(w, http.StatusUnauthorized, ErrorBody("Incorrect API key provided.", "invalid_request_error", "invalid_api_key", ""))
}

func writeError(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeError(w, http.StatusServiceUnavailable, ErrorBody("The server is shutting down.", "server_error", "", ""))
		return
	}
	defer s.handlers.Done()
	switch {
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		s.serveModels(w, r)
	case r.URL.Path == "/v1/responses" && r.Method == http.MethodPost:
		s.serveModel(w, r, epResponses)
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		s.serveModel(w, r, epChat)
	case r.URL.Path == "/v1/responses" && r.Method == http.MethodGet:
		s.serveWebSocket(w, r)
	case (r.URL.Path == "/v1/responses/compact" || r.URL.Path == "/v1/responses/input_tokens") && r.Method == http.MethodPost:
		s.serveResponsesUtility(w, r)
	default:
		body, _ := io.ReadAll(r.Body)
		s.record(Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, ReceivedAt: time.Now()})
		writeError(w, http.StatusNotFound, ErrorBody("Invalid URL ("+r.Method+" "+r.URL.Path+")", "invalid_request_error", "", ""))
	}
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.modelsCount++
	status := s.modelsStatus
	s.mu.Unlock()
	if !s.authorized(r) {
		s.writeUnauthorized(w, r)
		return
	}
	if status != 0 && status != http.StatusOK {
		writeError(w, status, statusErrorBody(status))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.models)
}

// admitModelRequest reads and records a model request, then makes the checks
// every model endpoint makes before it answers: auth, a JSON body, and
// StrictModels. It answers the request itself and reports false when one
// fails (or the body cannot be read); handle is for setResponseID.
func (s *Server) admitModelRequest(w http.ResponseWriter, r *http.Request) ([]byte, fields, int, bool) {
	var f fields
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, f, -1, false
	}
	jsonErr := json.Unmarshal(body, &f)
	var hdr http.Header
	if !s.opts.DisableRecording {
		hdr = r.Header.Clone()
	}
	handle := s.record(Request{
		Method: r.Method, Path: r.URL.Path, Header: hdr, Body: body, ReceivedAt: time.Now(),
		Model: f.Model, Stream: f.Stream, PreviousResponseID: f.PreviousResponseID,
	})
	if !s.authorized(r) {
		s.writeUnauthorized(w, r)
		return nil, f, -1, false
	}
	if jsonErr != nil {
		writeError(w, http.StatusBadRequest, ErrorBody("We could not parse the JSON body of your request.", "invalid_request_error", "", ""))
		return nil, f, -1, false
	}
	if msg, ok := s.checkModel(f.Model); !ok {
		writeError(w, http.StatusNotFound, ErrorBody(msg, "invalid_request_error", "model_not_found", "model"))
		return nil, f, -1, false
	}
	return body, f, handle, true
}

func (s *Server) serveModel(w http.ResponseWriter, r *http.Request, ep endpoint) {
	body, f, handle, ok := s.admitModelRequest(w, r)
	if !ok {
		return
	}
	if ep == epResponses && s.opts.StrictPrevious && f.PreviousResponseID != "" && !s.isKnown(f.PreviousResponseID) {
		t := s.newTurn(ep, &f)
		t.forget = true
		p := s.prev
		if !f.Stream {
			p = s.prev400
		}
		s.playHTTP(w, r, p, t)
		return
	}
	if id, ok := s.unknownConversation(ep, &f); ok {
		writeError(w, http.StatusNotFound, ErrorBody("Conversation with id '"+id+"' not found.", "invalid_request_error", "", "conversation"))
		return
	}
	if s.refusesPrefill(body, ep) {
		refusePrefillHTTP(w, ep)
		return
	}
	p := s.next()
	t := s.newTurn(ep, &f)
	if p.text != nil {
		t.prefill, t.hasPrefill = trailingAssistant(body, ep)
	}
	s.setResponseID(handle, t.id)
	s.playHTTP(w, r, p, t)
}

// unknownConversation is the id of the conversation a Responses request
// names when Options.Conversations does not hold it (ok true).
func (s *Server) unknownConversation(ep endpoint, f *fields) (id string, ok bool) {
	if ep != epResponses || len(s.opts.Conversations) == 0 || len(f.Conversation) == 0 {
		return "", false
	}
	var byID struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(f.Conversation, &id) != nil {
		if json.Unmarshal(f.Conversation, &byID) != nil {
			return "", false
		}
		id = byID.ID
	}
	if id == "" {
		return "", false // null or no id: nothing named
	}
	return id, !slices.Contains(s.opts.Conversations, id)
}

func (s *Server) checkModel(model string) (string, bool) {
	if !s.opts.StrictModels || model == "" || slices.Contains(s.opts.Models, model) {
		return "", true
	}
	return "The model `" + model + "` does not exist or you do not have access to it.", false
}

func (s *Server) getBuf() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (s *Server) putBuf(b *[]byte) {
	if cap(*b) <= 1<<20 {
		*b = (*b)[:0]
		s.bufs.Put(b)
	}
}

// playHTTP plays p for an HTTP request. An abrupt end panics with
// http.ErrAbortHandler, which makes net/http drop the connection.
func (s *Server) playHTTP(w http.ResponseWriter, r *http.Request, p *plan, t *turn) {
	ctx := r.Context()
	if !s.wait(ctx, p.latency) {
		panic(http.ErrAbortHandler)
	}
	h := w.Header()
	if p.failed() {
		h.Set("Content-Type", "application/json")
		copyHeader(h, p.header)
		w.WriteHeader(p.status)
		buf := s.getBuf()
		*buf = p.body.render((*buf)[:0], &t.v)
		s.writeBody(ctx, w, p, *buf)
		s.putBuf(buf)
		return
	}
	status := p.status
	if status == 0 {
		status = http.StatusOK
	}
	h.Set("X-Request-Id", "req_"+t.id)
	if !t.stream {
		switch {
		case p.bodyPrefix > 0:
		case p.end == EndCut:
			panic(http.ErrAbortHandler)
		case p.end == EndHang:
			s.hang(ctx)
			panic(http.ErrAbortHandler)
		}
		body := p.body
		if p.text != nil {
			body = p.text.body(t)
		}
		if body == nil {
			body = s.canned.respBody
			if t.ep == epChat {
				body = s.canned.chatBody
			}
		}
		s.markKnown(t)
		h.Set("Content-Type", "application/json")
		copyHeader(h, p.header)
		w.WriteHeader(status)
		buf := s.getBuf()
		*buf = body.render((*buf)[:0], &t.v)
		s.writeBody(ctx, w, p, *buf)
		s.putBuf(buf)
		return
	}
	frames := s.frames(p, t)
	s.markKnown(t)
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	copyHeader(h, p.header)
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	buf := s.getBuf()
	defer s.putBuf(buf)
	for i := range frames {
		if i > 0 && p.gap > 0 && !s.wait(ctx, p.gap) {
			panic(http.ErrAbortHandler)
		}
		if frames[i].stamped {
			t.v.stamp()
		}
		*buf = frames[i].sse.render((*buf)[:0], &t.v)
		if _, err := w.Write(*buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	switch p.end {
	case EndCut:
		panic(http.ErrAbortHandler)
	case EndHang:
		s.hang(ctx)
		panic(http.ErrAbortHandler)
	}
}

// writeBody writes an answer sent as one body, or with Script.BodyPrefix
// (and EndCut or EndHang) only its first bytes, flushed, before that end.
func (s *Server) writeBody(ctx context.Context, w http.ResponseWriter, p *plan, body []byte) {
	if p.bodyPrefix <= 0 || p.end == EndNormal {
		_, _ = w.Write(body)
		return
	}
	_, _ = w.Write(body[:min(p.bodyPrefix, len(body))])
	_ = http.NewResponseController(w).Flush()
	if p.end == EndHang {
		s.hang(ctx)
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) frames(p *plan, t *turn) []cframe {
	if p.text != nil {
		return p.text.frames(t)
	}
	if t.ep == epChat {
		if !p.chatCanned {
			return p.chat
		}
		if t.usage {
			return s.canned.chatUsage
		}
		return s.canned.chat
	}
	if !p.respCanned {
		return p.resp
	}
	return s.canned.resp
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = slices.Clone(v)
	}
}

// serveResponsesUtility answers POST /v1/responses/compact and
// /v1/responses/input_tokens in the shape of OpenAI's API (CompactResource,
// TokenCountsResource), after the checks serveModel makes (auth, JSON,
// StrictModels, StrictPrevious: 400 previous_response_not_found). A queued
// failure script (a status or error answer) is played instead, and consumed;
// any other queued script is left for the next model request. The compaction
// names the server (encrypted_content "enc_<Name>_<n>") and the token count
// is the body's length in bytes / 4, so a test can tell who answered.
func (s *Server) serveResponsesUtility(w http.ResponseWriter, r *http.Request) {
	body, f, handle, ok := s.admitModelRequest(w, r)
	if !ok {
		return
	}
	if s.opts.StrictPrevious && f.PreviousResponseID != "" && !s.isKnown(f.PreviousResponseID) {
		writeError(w, http.StatusBadRequest, ErrorBody("Previous response with id '"+f.PreviousResponseID+"' not found.",
			"invalid_request_error", "previous_response_not_found", "previous_response_id"))
		return
	}
	f.Stream = false
	if p := s.nextFailure(); p != nil {
		t := s.newTurn(epResponses, &f)
		t.forget = true
		s.playHTTP(w, r, p, t)
		return
	}
	n := strconv.FormatInt(s.counter.Add(1), 10)
	var answer []byte
	if r.URL.Path == "/v1/responses/input_tokens" {
		answer = marshal(obj{{"object", "response.input_tokens"}, {"input_tokens", len(body) / 4}})
	} else {
		id := "cmp_" + s.idName + "_" + n
		s.setResponseID(handle, id)
		output := arr{
			obj{{"id", "msg_" + s.idName + "_" + n}, {"type", "message"}, {"status", "completed"}, {"role", "user"},
				{"content", arr{obj{{"type", "input_text"}, {"text", "compacted"}}}}},
			obj{{"id", "cmpi_" + s.idName + "_" + n}, {"type", "compaction"}, {"encrypted_content", "enc_" + s.idName + "_" + n}},
		}
		answer = marshal(obj{{"id", id}, {"object", "response.compaction"}, {"created_at", FixedCreatedAt}, {"output", output},
			{"usage", obj{{"input_tokens", 12}, {"input_tokens_details", obj{{"cached_tokens", 0}}}, {"output_tokens", 4},
				{"output_tokens_details", obj{{"reasoning_tokens", 0}}}, {"total_tokens", 16}}}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", "req_"+s.idName+"_"+n)
	_, _ = w.Write(answer)
}

// nextFailure takes the next queued script when it is a failure (a non-2xx
// status), nil otherwise (the script stays queued).
func (s *Server) nextFailure() *plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 || !s.queue[0].failed() {
		return nil
	}
	p := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return p
}
