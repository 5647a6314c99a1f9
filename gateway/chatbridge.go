package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/translate"
	"github.com/sluice-gw/sluice/store"
)

// History bounds for previous_response_id expansion: a conversation beyond
// them is refused rather than silently truncated.
const (
	maxHistoryItems = 10000
	maxHistoryBytes = 64 << 20
)

// chatConversion is a Responses request converted for a Chat Completions
// upstream, computed once per request.
type chatConversion struct {
	body []byte
	info translate.RequestInfo
	err  *apierr.Error
}

// conversations keeps the items of responses served by Chat upstreams, so
// previous_response_id works in front of upstreams that never had it, and
// with portable on those of every response relayed (portable.go). Items of
// store:false requests stay in the WebSocket session's memory only.
type conversations struct {
	durable  store.ConversationStore // nil: only session memory
	portable bool                    // continuity.portable: keep every response's items
	// scrub is the server's: a Chat upstream's output items come from the
	// translator, which reads its events before the scrubber does
	// (scrubbedSource wraps the converted stream), so they are scrubbed
	// here before they are kept (SECURITY.md: a key is never written to
	// data_dir, nor sent to another upstream in a rehydrated history).
	scrub *scrubber
	log   interface {
		Error(string, ...any)
	}
}

// sessionMemory holds a WebSocket session's store:false turns; it is dropped
// with the socket. What it holds is bounded (limits.ws_session_memory_bytes
// per socket, limits.ws_session_memory_total_bytes for all sockets together;
// SECURITY.md "WebSocket"): the oldest turns are evicted first, and a
// follow-up whose chain reaches an evicted turn fails closed as one naming a
// chain the socket never held does (sessionChainBody).
type sessionMemory struct {
	mu    sync.Mutex
	limit int64 // bytes of kept items; 0: no bound
	held  int64 // bytes of the items of the turns kept
	// total is what all sockets' memories hold together (nil: no bound);
	// released: the socket closed, its bytes went back to total and
	// nothing more is kept.
	total    *sessionMemoryTotal
	released bool
	turns    map[string]*sessionTurn
	// order is the ids of the turns kept, oldest first: eviction's order.
	order []string
	// continued names the turns whose response was continued after a
	// failure (continuation.go): what the client was shown is not what
	// the upstream that finished it holds (sessionChainBodyOverSocket).
	continued map[string]bool
}

// sessionMemoryTotal bounds the bytes every client WebSocket's session
// memory holds together (limits.ws_session_memory_total_bytes): the
// per-socket bound alone lets max_connections sockets hold that much each.
// A socket whose turn would take the total past it evicts its own oldest
// turns, and keeps the new one only if it then fits: one busy socket
// cannot take what another already holds.
type sessionMemoryTotal struct {
	limit int64
	held  atomic.Int64
}

// over reports whether the memories hold more than the bound together.
func (t *sessionMemoryTotal) over() bool {
	return t != nil && t.limit > 0 && t.held.Load() > t.limit
}

func (t *sessionMemoryTotal) add(n int64) {
	if t != nil {
		t.held.Add(n)
	}
}

// sessionTurn is one kept turn: its items, their size, and the upstream
// whose WebSocket served it ("" when it came over HTTP or a free socket),
// the only one that may be sent an incremental follow-up naming it.
type sessionTurn struct {
	turn   store.Turn
	size   int64
	heldBy string
	// failed: the response ended response.failed, so no follow-up can
	// continue it; only its id is kept (size: the id's length), so that a
	// follow-up naming it is told so rather than that the socket does not
	// hold it (refuseFailedSessionTurn).
	failed bool
}

func newSessionMemory(limit int64, total *sessionMemoryTotal) *sessionMemory {
	return &sessionMemory{limit: limit, total: total, turns: map[string]*sessionTurn{}, continued: map[string]bool{}}
}

// release gives what the session holds back to the total when its socket
// closes; a turn put later (a response still finishing) is not kept.
func (m *sessionMemory) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.charge(-m.held)
	m.released = true
	m.turns, m.order, m.continued = map[string]*sessionTurn{}, nil, map[string]bool{}
}

func (m *sessionMemory) markContinued(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.continued[id] = true
}

func (m *sessionMemory) wasContinued(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.continued[id]
}

// turnBytes is what a turn costs the session's bound: the bytes of its
// kept items.
func turnBytes(t store.Turn) int64 {
	var n int64
	for _, it := range t.Input {
		n += int64(len(it))
	}
	for _, it := range t.Output {
		n += int64(len(it))
	}
	return n
}

// put keeps t, served over heldBy's WebSocket ("" otherwise), then evicts
// the oldest turns while the session holds more than its bound, or all
// sessions together more than theirs; a turn larger than what is left to it
// is not kept either.
func (m *sessionMemory) put(t store.Turn, heldBy string) {
	m.keep(&sessionTurn{turn: t, size: turnBytes(t), heldBy: heldBy})
}

// putFailed remembers that the response id ended response.failed: its id
// only, counted and evicted like a kept turn, so the memory stays bounded.
func (m *sessionMemory) putFailed(id string) {
	m.keep(&sessionTurn{turn: store.Turn{ResponseID: id}, size: int64(len(id)), failed: true})
}

func (m *sessionMemory) keep(nt *sessionTurn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released {
		return
	}
	id := nt.turn.ResponseID
	if old, ok := m.turns[id]; ok { // the same response again: replaced where it stands
		m.charge(nt.size - old.size)
		*old = *nt
	} else {
		m.turns[id] = nt
		m.order = append(m.order, id)
		m.charge(nt.size)
	}
	for (m.limit > 0 && m.held > m.limit || m.total.over()) && len(m.order) > 0 {
		id := m.order[0]
		m.order[0] = ""
		m.order = m.order[1:]
		m.charge(-m.turns[id].size)
		delete(m.turns, id)
		delete(m.continued, id)
	}
}

// charge adds n bytes to what the session holds, and to what all sessions
// hold together. Called with mu held.
func (m *sessionMemory) charge(n int64) {
	m.held += n
	m.total.add(n)
}

func (m *sessionMemory) get(id string) (store.Turn, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.turns[id]
	if !ok || t.failed {
		return store.Turn{}, false
	}
	return t.turn, true
}

// failedTurn reports whether response id was a turn of the session that
// ended response.failed (putFailed), and is still remembered.
func (m *sessionMemory) failedTurn(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.turns[id]
	return ok && t.failed
}

// holds reports whether the session keeps the turn of response id.
func (m *sessionMemory) holds(id string) bool {
	_, ok := m.get(id)
	return ok
}

// heldBy is the upstream whose WebSocket served response id, "" when none
// did or the session does not keep it.
func (m *sessionMemory) heldBy(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.turns[id]; ok {
		return t.heldBy
	}
	return ""
}

// history expands previous_response_id into the conversation's items,
// walking session memory first and then the durable store.
func (c *conversations) history(ctx context.Context, req *clientRequest) ([]json.RawMessage, *apierr.Error) {
	id := req.previousResponseID
	if id == "" {
		return nil, nil
	}
	var recent []store.Turn // newest first, from session memory
	for req.memory != nil && id != "" {
		t, ok := req.memory.get(id)
		if !ok {
			break
		}
		recent = append(recent, t)
		id = t.ParentID
	}
	var items []json.RawMessage
	if id != "" {
		if c.durable == nil {
			return nil, notFound(req.previousResponseID)
		}
		h, err := c.durable.History(ctx, id, maxHistoryItems, maxHistoryBytes)
		var broken *store.BrokenChainError
		switch {
		case errors.As(err, &broken) && broken.MissingID != req.previousResponseID:
			// The response exists; an ancestor was deleted or expired, and
			// its text is never resent (README "Privacy").
			return nil, apierr.Invalid("previous_response_id", apierr.CodePreviousResponseNotFound,
				"Previous response with id '%s' cannot be continued: an earlier response of its conversation ('%s') was deleted or expired.",
				req.previousResponseID, broken.MissingID)
		case errors.Is(err, store.ErrNotFound):
			return nil, notFound(req.previousResponseID)
		case errors.Is(err, store.ErrTooLarge):
			return nil, apierr.Invalid("previous_response_id", apierr.CodeContextLengthExceeded, "the conversation of previous_response_id is longer than the gateway keeps (%d items, %d bytes)", maxHistoryItems, maxHistoryBytes)
		case err != nil:
			return nil, storeUnavailable(err, "reading the conversation of previous_response_id failed")
		}
		items = h
	}
	for i := len(recent) - 1; i >= 0; i-- {
		items = append(items, recent[i].Input...)
		items = append(items, recent[i].Output...)
	}
	return items, nil
}

func notFound(id string) *apierr.Error {
	return apierr.Invalid("previous_response_id", apierr.CodePreviousResponseNotFound, "Previous response with id '%s' not found.", id)
}

// remember records a turn: durably, or in session memory for store:false.
func (c *conversations) remember(ctx context.Context, req *clientRequest, responseID string, output []json.RawMessage) {
	conv := req.chat
	if c.scrub != nil {
		scrubbed := make([]json.RawMessage, len(output))
		for i, item := range output {
			scrubbed[i] = c.scrub.Bytes(item)
		}
		output = scrubbed
	}
	t := store.Turn{ResponseID: responseID, ParentID: req.previousResponseID, Input: conv.info.InputItems, Output: output}
	if pt := req.portable; pt != nil && pt.parent != "" {
		// Rehydrated: the converted input holds the whole history; the turn
		// keeps the request's own items and chains on the parent.
		t.ParentID, t.Input = pt.parent, pt.ownInput()
	}
	if conv.info.Store != nil && !*conv.info.Store {
		if req.memory != nil {
			req.memory.put(t, "") // a Chat upstream has no socket holding it
		}
		return // store:false over HTTP: nothing is kept
	}
	if c.durable == nil {
		return
	}
	if err := c.durable.PutConversation(ctx, t); err != nil {
		c.log.Error("recording conversation items failed", "response_id", LogID(responseID), "error", err)
	}
}

// convertForChat converts req for a Chat upstream (once per request).
func (s *Server) convertForChat(ctx context.Context, req *clientRequest) *chatConversion {
	if req.chat != nil {
		return req.chat
	}
	conv := &chatConversion{}
	req.chat = conv
	history, aerr := s.convs.history(ctx, req)
	if aerr != nil {
		conv.err = aerr
		return conv
	}
	conv.body, conv.info, conv.err = translate.ToChat(req.body, history, translate.RequestOptions{})
	if conv.err == nil && req.noInput {
		// A Responses upstream may take a turn's input from elsewhere
		// (readFields); a Chat turn is its input, and without one the
		// upstream would answer the instructions or history alone.
		conv.err = translate.MissingInput()
	}
	if conv.err == nil && len(conv.info.DroppedTools) > 0 {
		s.log.Warn("tools the Chat upstream cannot run were dropped", "tools", strings.Join(conv.info.DroppedTools, ","))
	}
	return conv
}

// chatRefusal is why u cannot take req for its protocol: the error of
// req's conversion when u speaks Chat and req is a Responses request its
// conversion refuses (no input, a prompt template, a conversation…); nil
// when u can take it.
func (s *Server) chatRefusal(ctx context.Context, req *clientRequest, u *upstream.Upstream) *apierr.Error {
	if req.ep.chat || u.Config().Protocol != upstream.ProtocolChat {
		return nil
	}
	if req.ep.passthrough && req.pinned == u {
		return notServedByChatOwner(req.ep, u.Name()) // relay_endpoints.go
	}
	return s.convertForChat(ctx, req).err
}

// nextTaker is c.next() passing over the targets that cannot take req for
// their protocol (chatRefusal). Such a target is no failure of the request
// while another target could take it (a request OpenAI's CreateResponse
// accepts, which a Responses target serves): it is dropped from c, so the
// skipped targets' wait (candidates.soonestBack) and the replay policy's
// facts leave it out, and named in passedOver with why, for the answer
// should nothing serve (README "Failover and replay": after "not tried:").
// refusal is the conversion's error when no target of the request could
// take it (every one speaks Chat): that is then the answer. A continuation
// after content is left to attempt, where a target that cannot take the
// request is a failed continuation (continuation.go).
func (s *Server) nextTaker(ctx context.Context, c *candidates, req *clientRequest, passedOver *[]string) (t upstream.Target, ok bool, refusal *apierr.Error) {
	for {
		if t, ok = c.next(); !ok || req.rescue != nil {
			return t, ok, nil
		}
		why := s.chatRefusal(ctx, req, t.Upstream)
		if why == nil {
			return t, true, nil
		}
		s.pool.TargetReleased(t) // begun by next but never called: a half-open probe goes back
		name := c.passOver(t)
		if !c.anyTakes() {
			return upstream.Target{}, false, why
		}
		s.log.Debug("target passed over: it cannot take this request", "upstream", t.Upstream.Name(), "model", t.Model, "why", why.Message)
		// The reason joins the answer's list mid-sentence: without its full stop.
		*passedOver = append(*passedOver, name+": cannot take this request: "+strings.TrimRight(why.Message, ". "))
	}
}

// passOver drops t from the request's targets and returns its name as the
// answer names targets (candidates.unavailable): a route's target leaves
// the list; without a route the upstream counts as tried.
func (c *candidates) passOver(t upstream.Target) string {
	if c.list == nil {
		c.tried[t] = true
		return t.Upstream.Name()
	}
	kept := make([]upstream.Target, 0, len(c.list)) // never nil: nil means no route
	for _, x := range c.list {
		if x != t {
			kept = append(kept, x)
		}
	}
	c.list = kept
	return t.String()
}

// anyTakes reports whether a target of the request speaks Responses, tried,
// cooling down or not: one that could take a request a Chat target cannot.
func (c *candidates) anyTakes() bool {
	all := *c
	all.tried, all.skipModel = nil, nil
	takes := false
	all.each(func(t upstream.Target) {
		takes = takes || t.Upstream.Config().Protocol != upstream.ProtocolChat
	})
	return takes
}

// sendChat runs a Responses request against a Chat Completions upstream.
func (s *Server) sendChat(upCtx context.Context, idle *idleTimer, req *clientRequest, u *upstream.Upstream) (*upstreamAnswer, error) {
	conv := req.chat
	chatBody, model := conv.body, conv.info.Model
	if text, ok := chatPrefill(req); ok { // a continuation: the text sent as a trailing assistant message
		chatBody = withChatPrefill(chatBody, text)
	}
	if m := tryOf(req).target.Model; m != "" && m != model { // the conversion is shared by a route's targets
		if b, err := setModel(chatBody, m); err == nil {
			chatBody, model = b, m
		}
	}
	// The upstream's own model name, when its chunks carry one, wins over
	// model in what the client sees (translate.StreamOptions.Model).
	opts := translate.StreamOptions{ResponseID: "resp_" + strings.ReplaceAll(uuid.NewString(), "-", ""), Model: model,
		CreatedAt: time.Now().Unix(), Request: conv.info.Echo, Background: req.background,
		UnknownFinish: func(reason string) {
			// Completed as it came (README "Chat-only upstreams"), but the
			// operator learns of a reason that may have meant a cut.
			s.log.Warn("a Chat upstream ended an answer with a finish_reason the gateway does not know; the response is completed",
				"upstream", u.Name(), "finish_reason", s.scrub.spanText(reason, labelLen)) // bounded as the access log bounds a label
		}}
	if gjson.GetBytes(req.body, "generate").Type == gjson.False {
		return s.warmUp(upCtx, req, opts), nil
	}
	resp, ans, err := s.post(upCtx, idle, req, u, "/chat/completions", chatBody)
	if err != nil || ans.status/100 != 2 || ans.unusable != "" {
		return ans, err
	}
	if isSSE(req, resp) {
		// timeouts.idle counts the upstream's Chat events, not its bytes
		// (idleEvents), as for a Responses upstream's stream.
		ir := &idleReader{r: resp.Body}
		in := idleEvents{src: sse.NewReader(ir, s.opts.MaxEventBytes), idle: idle}
		ans.src = &chatSource{s: s, ctx: upCtx, req: req, in: in, tr: translate.NewStream(opts)}
		ans.beforeRead = &ir.before
		return ans, nil
	}
	body, err := s.readAnswer(&idleReader{r: resp.Body, idle: idle})
	if err != nil {
		ans.readErr = err
		return ans, nil
	}
	if req.stream {
		if e := errorEnvelopeAnswer(body, nil); e != nil {
			// An error envelope is its error, judged as its status, as from
			// a Responses upstream (sendHTTP), not a stream that fails.
			answerAsError(ans, e)
			return ans, nil
		}
		// The upstream ignored stream:true: its answer becomes the events a
		// stream of it would have carried, remembered as a stream's are.
		tr := translate.NewStream(opts)
		evs, cerr := tr.Completion(body)
		if cerr != nil {
			// Not a chat.completion: the answer is unusable (unusableAnswer:
			// the next target), not cut, so not a transport fault.
			ans.unusable = "the Chat upstream's answer could not be converted: " + s.scrub.String(cerr.Error())
			return ans, nil
		}
		ans.src = &chatSource{s: s, ctx: upCtx, req: req, tr: tr, queue: evs}
		return ans, nil
	}
	out, items, aerr, upstreamErr := translate.FromChatResponse(body, opts)
	switch {
	case upstreamErr:
		answerAsError(ans, aerr)
		return ans, nil
	case aerr != nil:
		ans.unusable = "the Chat upstream's answer could not be converted: " + s.scrub.String(aerr.Message)
		return ans, nil
	}
	s.convs.remember(context.WithoutCancel(upCtx), req, opts.ResponseID, items)
	ans.body = out
	return ans, nil
}

// warmUp answers a generate:false request (Codex sends one to open each turn
// on its WebSocket) without calling the Chat upstream, which has no such
// mode: the response exists, with no output, so later requests can chain
// on its id, and no completion is generated or billed.
func (s *Server) warmUp(ctx context.Context, req *clientRequest, opts translate.StreamOptions) *upstreamAnswer {
	tr := translate.NewStream(opts)
	evs := append(tr.Start(), tr.Finish()...)
	s.convs.remember(context.WithoutCancel(ctx), req, opts.ResponseID, tr.OutputItems())
	ans := &upstreamAnswer{status: http.StatusOK, header: http.Header{"Content-Type": {"application/json"}}, done: func(bool) {}}
	if req.stream {
		ans.src = replayedEvents(evs)
	} else {
		ans.body = []byte(gjson.GetBytes(evs[len(evs)-1].Data, "response").Raw)
	}
	return ans
}

// replayedAnswer yields pre-rendered events.
type replayedAnswer struct{ events []sse.Event }

// replayedEvents is a replayedAnswer of translated Responses events.
func replayedEvents(evs []translate.Event) *replayedAnswer {
	r := &replayedAnswer{events: make([]sse.Event, 0, len(evs))}
	for _, ev := range evs {
		r.events = append(r.events, sse.Event{Name: ev.Type, Data: ev.Data})
	}
	return r
}

func (r *replayedAnswer) Next() (sse.Event, error) {
	if len(r.events) == 0 {
		return sse.Event{}, io.EOF
	}
	ev := r.events[0]
	r.events = r.events[1:]
	return ev, nil
}

// chatSource turns a Chat Completions stream into Responses events, and
// records the conversation's items before the terminal event goes out.
type chatSource struct {
	s     *Server
	ctx   context.Context
	req   *clientRequest
	in    eventSource // the upstream's Chat events; nil: the events are all in queue (a chat.completion)
	tr    *translate.Stream
	queue []translate.Event
	ended bool
}

// chatSourceOf is the Chat translation under src, through the wrappers an
// answer's events may pass (scrubbedSource when an upstream has an api_key,
// recordedSource for the recover policy), and whether there is one.
func chatSourceOf(src eventSource) (*chatSource, bool) {
	for {
		switch s := src.(type) {
		case *chatSource:
			return s, true
		case interface{ wrapped() eventSource }:
			src = s.wrapped()
		default:
			return nil, false
		}
	}
}

// reportedUsage is the last usage the Chat upstream reported on this
// attempt, as a Responses usage object (continueAfter sums it when a cut
// left the attempt without a final count).
func (c *chatSource) reportedUsage() []byte { return c.tr.Usage() }

func (c *chatSource) Next() (sse.Event, error) {
	for len(c.queue) == 0 {
		if c.tr.Done() || c.in == nil {
			return sse.Event{}, io.EOF
		}
		ev, err := c.in.Next()
		switch {
		case err != nil && c.tr.FinishReason() != "":
			c.queue = c.tr.Finish() // complete answer (a finish_reason came): the upstream just did not say [DONE]
		case err != nil:
			return sse.Event{}, err
		case ev.Done:
			if c.tr.FinishReason() == "" {
				c.queue = c.tr.Fail(apierr.StreamIncomplete("the Chat upstream ended the stream before a finish reason"))
			} else {
				c.queue = c.tr.Finish()
			}
		case ev.Error != nil:
			wrapped, _ := json.Marshal(map[string]json.RawMessage{"error": ev.Error})
			if !json.Valid(ev.Error) {
				wrapped, _ = json.Marshal(map[string]any{"error": map[string]any{"message": string(ev.Error), "type": "server_error"}})
			}
			c.queue, _ = c.tr.Chunk(wrapped)
		default:
			late := c.tr.LateNameFragments()
			evs, cerr := c.tr.Chunk(ev.Data)
			if n := c.tr.LateNameFragments() - late; n > 0 {
				c.s.metrics.skippedEvents.WithLabelValues(c.req.surface(), "late_tool_name").Add(float64(n))
				c.s.log.Warn("a Chat upstream sent more of a tool call's name after its arguments began; the call keeps the name it was shown with",
					"surface", c.req.surface())
			}
			if cerr != nil {
				// The pump reports it as an unparseable event.
				return sse.Event{Data: []byte("not json: " + cerr.Error())}, nil
			}
			c.queue = evs
		}
	}
	ev := c.queue[0]
	c.queue = c.queue[1:]
	if ev.Type == "response.failed" {
		if e := c.tr.UpstreamError(); e != nil && (c.tr.ErrorBeforeOutput() != nil || isClientErrorStatus(e.Status)) {
			return sse.Event{Name: "error", Data: upstreamErrorEvent(e)}, nil
		}
	}
	if (ev.Type == "response.completed" || ev.Type == "response.incomplete") && !c.ended {
		c.ended = true
		if c.req.rescue != nil {
			// A continuation: the pump remembers the whole answer under the
			// client-visible id (confirmRescue).
			return sse.Event{Name: ev.Type, Data: ev.Data}, nil
		}
		c.s.convs.remember(context.WithoutCancel(c.ctx), c.req, c.tr.ResponseID(), c.tr.OutputItems())
	}
	return sse.Event{Name: ev.Type, Data: ev.Data}, nil
}

// errorStatusOf is the HTTP status an upstream error object stands for (0:
// it names none) by the rule a Chat upstream's error is read with
// (translate.ErrorStatus): a 4xx or 5xx sent as the code, as llama.cpp
// does, else the type invalid_request_error (400) or server_error (502).
// One rule, so an error means the same from a Responses and from a Chat
// upstream.
func errorStatusOf(e gjson.Result) int {
	if !e.IsObject() {
		return 0
	}
	pe, ok := apierr.Parse([]byte(e.Raw))
	if !ok {
		return 0 // no error fields at all
	}
	return translate.ErrorStatus(pe)
}

// upstreamErrorEvent renders a Chat upstream's error as a Responses upstream
// sends one ({"type":"error","status":…,"error":{…}}, the status left out
// when the upstream named none), in place of the translated response.failed,
// whose code the spec's enum may have turned into server_error. The attempt
// then judges it exactly as it judges a Responses upstream's error event
// (errorShaped, eventClass, afterContentClass): a client error is neither
// replayed nor continued and ends the request as the upstream's error, its
// message and code kept; a server error is replayed as before. It stands in
// for any error before output, and after output for a client error (whose
// translated server_error would be continued); a server error after output
// ends the stream with the translated response.failed, judged alike.
func upstreamErrorEvent(e *apierr.Error) []byte {
	if e.Status != 0 {
		return errorFrame(e)
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": e.Object()})
	return b
}

// isClientErrorStatus reports whether status, the one an upstream error
// stands for (translate.ErrorStatus), is a client error.
func isClientErrorStatus(status int) bool { return status >= 400 && status < 500 }

// answerAsError makes ans, a 2xx answer whose body is an error envelope
// (translate.ErrorEnvelope), the upstream's error answer: the status the
// error stands for (translate.ErrorStatus; a server error when it names
// none) and an OpenAI-shaped body with its message and code, which the
// attempt judges as it judges that status (statusFailure); the status the
// upstream sent stays known for the failure's reason (statusReason).
func answerAsError(ans *upstreamAnswer, e *apierr.Error) {
	ans.sentStatus = ans.status
	if ans.status = e.Status; ans.status == 0 {
		ans.status = http.StatusBadGateway
	}
	ans.body, _ = json.Marshal(map[string]any{"error": e.Object()})
}
