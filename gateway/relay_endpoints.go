package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// POST /v1/responses/compact and POST /v1/responses/input_tokens are
// endpoints of OpenAI's Responses API (openai-node responses.compact() and
// responses.inputTokens.count(), openai-go Responses.Compact and
// Responses.InputTokens). Their request is a Responses request (model,
// input, previous_response_id, instructions…), so it takes the pipeline of
// POST /v1/responses: key checks, limits, the rewrite policy, the model's
// route, a previous_response_id's owner, failover. Their answer is one
// JSON object that is no Response (a compaction, whose output may hold an
// encrypted compaction item, or a token count): the passthrough endpoints
// relay it as the upstream sent it (README "Endpoints").

// handleResponsesAction serves POST /v1/responses/{word}: the router takes
// no static segment beside the {response_id} parameter, so compact and
// input_tokens arrive here. Any other word is no endpoint: 404, as every
// unknown path (README "Endpoints"), not the 405 a path of the resource
// API with the wrong method gets.
func (s *Server) handleResponsesAction(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	switch ps.ByName("response_id") {
	case actionCompact:
		s.serveAPI(w, r, responsesCompactEndpoint)
	case actionInputTokens:
		s.serveAPI(w, r, responsesInputTokensEndpoint)
	default:
		s.answerNotFound(w, r, fmt.Sprintf("unknown endpoint %s %s", label(r.Method), label(r.URL.Path)))
	}
}

// The words of POST /v1/responses/{word} that are endpoints
// (handleResponsesAction).
const (
	actionCompact     = "compact"
	actionInputTokens = "input_tokens"
)

// allowResponsesAction corrects the router's Allow for /v1/responses/{x}:
// the router lists every method with a route of that shape, but POST is
// only compact's and input_tokens', which are no response ids (their GET
// and DELETE would look for a response of that id).
func allowResponsesAction(h http.Header, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, responsesResourcePrefix)
	if !ok || rest == "" || strings.Contains(rest, "/") || h.Get("Allow") == "" {
		return
	}
	if rest == actionCompact || rest == actionInputTokens {
		h.Set("Allow", strings.Join([]string{http.MethodOptions, http.MethodPost}, ", "))
		return
	}
	methods := slices.DeleteFunc(strings.Split(h.Get("Allow"), ", "), func(m string) bool { return m == http.MethodPost })
	h.Set("Allow", strings.Join(methods, ", "))
}

// notServedByChat is why a Chat Completions target cannot take a
// passthrough request: Chat has no such endpoint, and no conversion makes
// one. It is the answer when no target of the request speaks Responses
// and the request is not pinned to a Chat owner (notServedByChatOwner):
// a 400 naming model, as the model's upstreams, not the endpoint, are what
// cannot serve it (another model may be routed to a Responses upstream).
func notServedByChat(ep endpoint) *apierr.Error {
	return apierr.Invalid("model", apierr.CodeInvalidValue,
		"/v1%s is not served for this model: its upstreams speak Chat Completions, which has no such endpoint", ep.path)
}

// notServedByChatOwner is why a passthrough request naming
// previous_response_id cannot be served when the response it names was
// answered by owner, a Chat Completions upstream: the request is pinned to
// that owner as a follow-up is, so the model's route (which may hold
// Responses targets) is not what refuses it, and the answer names
// previous_response_id, not model.
func notServedByChatOwner(ep endpoint, owner string) *apierr.Error {
	return apierr.Invalid("previous_response_id", apierr.CodeInvalidValue,
		"/v1%s is not served for this previous_response_id: the response it names was answered by upstream %q, which speaks Chat Completions and has no such endpoint", ep.path, owner)
}

// refuseChatTargets makes every Chat target pass over a passthrough request
// (nextTaker, chatRefusal): its conversion for Chat is the refusal, set
// before any target is chosen.
func refuseChatTargets(req *clientRequest) {
	if req.ep.passthrough && req.chat == nil {
		req.chat = &chatConversion{err: notServedByChat(req.ep)}
	}
}
