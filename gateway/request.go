package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/store"
	"github.com/tidwall/gjson"
)

// endpoint is a client-facing API the pipeline serves.
type endpoint struct {
	path        string // upstream path suffix after the base URL, e.g. "/responses"
	chat        bool   // Chat Completions framing ([DONE], error chunks)
	streamLabel string // surface label when streaming
	jsonLabel   string // surface label when not streaming
	// passthrough: an endpoint of OpenAI's Responses API that answers one
	// JSON object which is no Response (POST /v1/responses/compact,
	// /v1/responses/input_tokens; relay_endpoints.go). Its answer is
	// relayed as the upstream sent it: not anchored, not logged for
	// GET /v1/responses/{id}, never streamed, and a Chat target cannot
	// serve it.
	passthrough bool
}

var (
	responsesEndpoint = endpoint{path: "/responses", streamLabel: hostabi.SurfaceResponsesStream, jsonLabel: hostabi.SurfaceResponsesJSON}
	chatEndpoint      = endpoint{path: "/chat/completions", chat: true, streamLabel: hostabi.SurfaceChatStream, jsonLabel: hostabi.SurfaceChatJSON}
	// The passthrough endpoints are JSON only: both labels are the JSON one.
	responsesCompactEndpoint = endpoint{path: "/responses/compact", passthrough: true,
		streamLabel: surfaceResponsesCompact, jsonLabel: surfaceResponsesCompact}
	responsesInputTokensEndpoint = endpoint{path: "/responses/input_tokens", passthrough: true,
		streamLabel: surfaceResponsesInputTokens, jsonLabel: surfaceResponsesInputTokens}
)

// logOpened hears a stream's log as it opens, with the Response its first
// event carried (nil when that event had none).
type logOpened func(l *streamLog, opened []byte)

// clientRequest is a validated client request on its way to an upstream.
type clientRequest struct {
	ep                 endpoint
	body               []byte
	model              string
	stream             bool
	previousResponseID string
	conversationID     string      // the conversation a Responses request names (an id or {"id": …}), pinned as previous_response_id is; "" when none
	noInput            bool        // a Responses request without input (readFields)
	header             http.Header // the client's headers
	fwd                forwarding  // the client's hop, for X-Forwarded-* (set where the request arrived)
	setHeaders         map[string]string
	removeHeaders      []string
	upstreamName       string // chosen by a rewrite policy
	clientKeyHash      string // sha256 of the client's credential, for scoping
	scope              requestScope
	pinned             *upstream.Upstream // the owner of previous_response_id (or of the conversation), when known
	viaWebSocket       bool               // a response.create on a client WebSocket
	storeFalse         bool               // the client sent store:false
	memory             *sessionMemory     // the WebSocket session's store:false turns
	chat               *chatConversion    // the request converted for Chat upstreams
	try                *tryState          // the attempt in flight (forward sets it; see targets.go)
	rescue             *rescueState       // continuation after content, once decided (continuation.go)
	key                *keyEntry          // the client's Sluice key (auth.go); nil: none, its credential passes through
	meta               *reqMeta           // what the request did, for usage, limits and the access log (usage.go)
	trace              *reqTrace          // its spans (tracing.go); nil when tracing is off
	portable           *portableTurn      // continuity.portable: what the turn keeps (portable.go); nil when off
	background         bool               // background: true (resource.go runs it and answers at once)
	onLog              logOpened          // hears the stream's log once it opens (a background request's answer waits for it)
	unread             bool               // a background create without stream, run to its end by runBackground: nobody reads its events
}

// recordable reports whether the response may later be named by
// previous_response_id, so its anchor is worth a durable write. Over HTTP a
// store:false response cannot be (the upstream keeps nothing); on a
// WebSocket it can, from the socket's own state.
func (r *clientRequest) recordable() bool {
	return !r.storeFalse || r.viaWebSocket
}

// pinParam names what pins the request to its owner (req.pinned), for its
// answers: previous_response_id, else the conversation (Server.pin).
func (r *clientRequest) pinParam() string {
	if r.previousResponseID == "" && r.conversationID != "" {
		return "conversation"
	}
	return "previous_response_id"
}

// surface is the surface the request is counted and logged under: the
// label sluice_requests_total and its access line give it (README "Access
// log"), which every other log line, metric and span of the request
// repeats, so that an operator following one surface finds all of it. A
// background create without stream (unread) is responses_json throughout:
// its run is a stream internally, but its client was answered with JSON,
// and its end is that JSON request's.
func (r *clientRequest) surface() string {
	if r.unread || r.ep.passthrough {
		return r.ep.jsonLabel
	}
	return r.policySurface()
}

// policySurface is the surface the policies and the stream hook are told:
// for a background run, the stream the run is (its events are a stream's,
// and hostabi/ABI.md §3.5 runs the stream hook on responses_stream and
// websocket only); the rewrite policy, asked before the run is set up,
// sees the create's responses_json. Everything else reports surface.
func (r *clientRequest) policySurface() string {
	if r.ep.passthrough {
		// The policies' surfaces are hostabi's closed set (hostabi/ABI.md):
		// a passthrough request is a JSON request to the Responses API, its
		// RewriteInput.Endpoint says which one.
		return hostabi.SurfaceResponsesJSON
	}
	if r.viaWebSocket {
		return hostabi.SurfaceWebSocket
	}
	if r.stream {
		return r.ep.streamLabel
	}
	return r.ep.jsonLabel
}

// parseRequest validates the fields the gateway relies on and leaves every
// other field untouched, so unknown fields pass through to the upstream.
// maxDepth bounds the body's nesting before any recursive parser runs.
func parseRequest(ctx context.Context, ep endpoint, body []byte, maxDepth int) (*clientRequest, *apierr.Error) {
	if aerr := validJSON(ctx, body, maxDepth, "the request body"); aerr != nil {
		return nil, aerr
	}
	root := parseJSON(body)
	if !root.IsObject() {
		return nil, apierr.Invalid("", apierr.CodeInvalidType, "the request body must be a JSON object")
	}
	req := &clientRequest{ep: ep, body: body}
	if err := req.readFields(root); err != nil {
		return nil, err
	}
	return req, nil
}

// readFields (re)reads model, stream, previous_response_id and
// conversation, and checks
// the endpoint's input field: Chat messages are required, a Responses input
// is optional but typed.
func (r *clientRequest) readFields(root gjson.Result) *apierr.Error {
	// One pass over the top-level keys: the body may be megabytes of history.
	var model, stream, prev, conversation, input, messages, storeField, background gjson.Result
	// The fields the gateway acts on, spelled as it reads them.
	read := [...]struct {
		name string
		v    *gjson.Result
	}{
		{"model", &model}, {"stream", &stream}, {"previous_response_id", &prev}, {"conversation", &conversation}, {"input", &input},
		{"messages", &messages}, {"store", &storeField}, {"background", &background},
	}
	var seen keySet
	var dup, miscased, meant string
	root.ForEach(func(key, value gjson.Result) bool {
		// A repeated key is ambiguous: a policy could edit one copy while the
		// upstream reads the other.
		if !seen.add(key.Str) {
			dup = key.Str
			return false
		}
		for _, f := range read {
			if key.Str == f.name {
				*f.v = value
				break
			}
			// The same ambiguity for an upstream that matches keys ignoring
			// case, as Go's encoding/json does (by Unicode folding, as
			// EqualFold): it may read "Stream" or "Model" where the gateway
			// read "stream" and "model".
			if miscased == "" && strings.EqualFold(key.Str, f.name) {
				miscased, meant = key.Str, f.name
				break
			}
		}
		return true
	})
	if dup != "" {
		return apierr.Invalid(dup, apierr.CodeDuplicateKey, "the request body has the top-level key %q more than once", dup)
	}
	if miscased != "" {
		for _, f := range read {
			if f.name == meant && f.v.Exists() {
				return apierr.Invalid(miscased, apierr.CodeDuplicateKey,
					"the request body has both %q and %q, one key to an upstream that ignores case; send only %q", meant, miscased, meant)
			}
		}
		return apierr.Invalid(miscased, apierr.CodeUnknownParameter, "Unknown parameter: %q; the parameter is spelled %q", miscased, meant)
	}
	switch {
	case !model.Exists() || model.Type == gjson.Null:
		return apierr.Invalid("model", apierr.CodeMissingField, "you must provide a model parameter")
	case model.Type != gjson.String:
		return apierr.Invalid("model", apierr.CodeInvalidType, "model must be a string, got %s", jsonKind(model))
	case strings.TrimSpace(model.Str) == "":
		return apierr.Invalid("model", apierr.CodeMissingField, "model must not be empty")
	}
	r.model = strings.Clone(model.Str)
	switch {
	case !stream.Exists() || stream.Type == gjson.Null:
		r.stream = false
	case stream.Type == gjson.True || stream.Type == gjson.False:
		r.stream = stream.Bool()
	default:
		return apierr.Invalid("stream", apierr.CodeInvalidType, "stream must be a boolean, got %s", jsonKind(stream))
	}
	if r.stream && r.ep.passthrough {
		return apierr.Invalid("stream", apierr.CodeInvalidValue, "/v1%s answers one JSON object: stream must be false or left out", r.ep.path)
	}
	for _, f := range [...]struct {
		name string
		v    gjson.Result
	}{{"store", storeField}, {"background", background}} {
		// "background":"yes" must not quietly run in the foreground.
		if f.v.Exists() && f.v.Type != gjson.Null && f.v.Type != gjson.True && f.v.Type != gjson.False {
			return apierr.Invalid(f.name, apierr.CodeInvalidType, "%s must be a boolean, got %s", f.name, jsonKind(f.v))
		}
	}
	r.storeFalse = storeField.Type == gjson.False
	r.background = background.Type == gjson.True
	r.previousResponseID = ""
	if prev.Exists() && prev.Type != gjson.Null {
		if prev.Type != gjson.String {
			return apierr.Invalid("previous_response_id", apierr.CodeInvalidType, "previous_response_id must be a string, got %s", jsonKind(prev))
		}
		if prev.Str == "" { // not "no previous response": that is null or no key
			return apierr.Invalid("previous_response_id", apierr.CodeInvalidValue, "previous_response_id must not be empty (leave it out or send null for none)")
		}
		if e := overlongID("previous_response_id", prev.Str); e != nil {
			return e
		}
		r.previousResponseID = strings.Clone(prev.Str)
	}
	if aerr := r.readConversation(conversation); aerr != nil {
		return aerr
	}
	if r.ep.chat {
		switch {
		case !messages.Exists() || messages.Type == gjson.Null:
			return apierr.Invalid("messages", apierr.CodeMissingField, "you must provide a messages parameter")
		case !messages.IsArray():
			return apierr.Invalid("messages", apierr.CodeInvalidType, "messages must be an array, got %s", jsonKind(messages))
		case messages.Raw == "[]" || strings.TrimSpace(messages.Raw[1:len(messages.Raw)-1]) == "":
			return apierr.Invalid("messages", apierr.CodeMissingField, "messages must not be empty")
		}
		return nil
	}
	// input is optional in OpenAI's CreateResponse: a Responses upstream
	// takes it from a prompt template, a conversation or
	// previous_response_id. It is not nullable there, so null is refused as
	// a wrong type; a Chat upstream still needs it (convertForChat).
	r.noInput = !input.Exists()
	if input.Exists() && input.Type != gjson.String && !input.IsArray() {
		return apierr.Invalid("input", apierr.CodeInvalidType, "input must be a string or an array of items, got %s", jsonKind(input))
	}
	return nil
}

// readConversation reads the conversation a Responses request names, as
// OpenAI's CreateResponse has it: an id, or an object with one. Any other
// shape names none the gateway can pin: the upstream (or the Chat bridge,
// which refuses conversation) answers it as sent.
func (r *clientRequest) readConversation(v gjson.Result) *apierr.Error {
	r.conversationID = ""
	if r.ep.chat {
		return nil
	}
	id := v
	if v.IsObject() {
		id = v.Get("id")
	}
	if id.Type != gjson.String || id.Str == "" {
		return nil
	}
	// The id keys an anchor (store.MaxIDLen), as previous_response_id does.
	if e := overlongID("conversation", id.Str); e != nil {
		return e
	}
	r.conversationID = strings.Clone(id.Str)
	return nil
}

// keySet detects a repeated key in linear time: a short list is scanned,
// a long one (a hostile body can have 100,000 keys) moves to a map.
type keySet struct {
	few  []string
	many map[string]struct{}
}

const keySetScanMax = 16

// add records k and reports false when it was already there.
func (ks *keySet) add(k string) bool {
	if ks.many != nil {
		if _, dup := ks.many[k]; dup {
			return false
		}
		ks.many[k] = struct{}{}
		return true
	}
	for _, f := range ks.few {
		if f == k {
			return false
		}
	}
	ks.few = append(ks.few, k)
	if len(ks.few) > keySetScanMax {
		ks.many = make(map[string]struct{}, 2*len(ks.few))
		for _, f := range ks.few {
			ks.many[f] = struct{}{}
		}
		ks.few = nil
	}
	return true
}

// validJSON checks a client or upstream document before any recursive
// parser sees it: nesting depth first (iteratively; see internal/jsonx),
// then syntax. It stops early when ctx ends.
func validJSON(ctx context.Context, b []byte, maxDepth int, what string) *apierr.Error {
	if err := jsonx.CheckDepthContext(ctx, b, maxDepth); err != nil {
		var de *jsonx.DepthError
		if errors.As(err, &de) {
			return apierr.TooDeep(de.Limit, what)
		}
		return apierr.Invalid("", apierr.CodeInvalidBody, "the request was canceled while %s was read", what)
	}
	if !gjson.ValidBytes(b) {
		return apierr.Invalid("", apierr.CodeInvalidJSON, "%s is not valid JSON", what)
	}
	return nil
}

func jsonKind(v gjson.Result) string {
	switch {
	case v.IsObject():
		return "an object"
	case v.IsArray():
		return "an array"
	case v.Type == gjson.String:
		return "a string"
	case v.Type == gjson.Number:
		return "a number"
	case v.Type == gjson.True || v.Type == gjson.False:
		return "a boolean"
	}
	return "null"
}

// LogID renders an identifier for logs as sha256:<12 hex>, never raw.
func LogID(id string) string {
	if id == "" {
		return ""
	}
	return store.RedactID(id)
}

// policyHeaders is the subset of client headers a rewrite policy may read:
// never credentials (hostabi.HiddenHeader, the one list the policy host
// and the SDK harness use too).
func policyHeaders(h http.Header) map[string]string {
	out := make(map[string]string, 8)
	for k, v := range h {
		lk := strings.ToLower(k)
		if hostabi.HiddenHeader(lk) {
			continue
		}
		if len(v) > 0 {
			out[lk] = v[0]
		}
	}
	return out
}
