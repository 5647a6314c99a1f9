package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/store"
)

// Portable conversations (continuity.portable; README "Continuity",
// docs/ARCHITECTURE.md §7): the gateway keeps the input and output items of
// every response it relays, not only those of Chat upstreams, so a follow-up
// whose owner upstream is gone for good can be rehydrated: its kept history
// and its own input go to the normal targets as one request without
// previous_response_id. With portable off only a store:false turn on a
// client WebSocket is kept (in the session's memory, for sessionChainBody);
// for every other request req.portable stays nil and every hook below is a
// nil check.

// Rehydration reasons, as counted in sluice_continuity_rehydrations_total.
const (
	rehydrateOwnerRemoved = "owner_removed" // the owner is no longer configured
	rehydrateOwnerDown    = "owner_down"    // down longer than rehydrate_after
	rehydratePolicy       = "policy"        // a recover policy said so where the default would not
)

// portableTurn is what portable mode keeps of one Responses request.
type portableTurn struct {
	body []byte // the client's body after the rewrite policy, before any rehydration or alias
	// parent is set when the request was rehydrated: the previous_response_id
	// the client named, which the new turn chains on (the body sent upstream
	// no longer carries it).
	parent string
}

// startPortable gives a Responses request its portableTurn when portable
// mode is on, or when its turn goes to its WebSocket session's memory
// (keepsSessionTurn).
func (s *Server) startPortable(req *clientRequest) {
	if (s.convs.portable || keepsSessionTurn(req)) && !req.ep.chat && req.portable == nil {
		req.portable = &portableTurn{body: req.body}
	}
}

// keepsSessionTurn reports whether req is a store:false request on a client
// WebSocket: its turn is kept in the session's memory, portable or not, so
// that a follow-up naming it can be sent in full to an upstream that keeps
// no store:false response (sessionChainBody).
func keepsSessionTurn(req *clientRequest) bool {
	return req.viaWebSocket && req.storeFalse && req.memory != nil
}

// parentOf is the response the turn of req follows.
func (pt *portableTurn) parentOf(req *clientRequest) string {
	return firstNonEmpty(pt.parent, req.previousResponseID)
}

// ownInput is the request's own input items as kept: a string input is one
// user message item, and encrypted reasoning is dropped (portableItems).
func (pt *portableTurn) ownInput() []json.RawMessage {
	return portableItems(inputItemsOf(pt.body))
}

// inputItemsOf returns body's input as items, unchanged: a string input
// becomes one user message item (the same shape the Chat bridge keeps).
func inputItemsOf(body []byte) []json.RawMessage {
	in := gjson.GetBytes(body, "input")
	switch {
	case in.Type == gjson.String:
		item := make([]byte, 0, len(in.Raw)+80)
		item = append(item, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
		item = append(item, in.Raw...)
		return []json.RawMessage{append(item, "}]}"...)}
	case in.IsArray():
		var items []json.RawMessage
		in.ForEach(func(_, v gjson.Result) bool {
			items = append(items, json.RawMessage(v.Raw))
			return true
		})
		return items
	}
	return nil
}

// arrayItems copies the elements of a JSON array result.
func arrayItems(arr gjson.Result) []json.RawMessage {
	if !arr.IsArray() {
		return nil
	}
	var items []json.RawMessage
	arr.ForEach(func(_, v gjson.Result) bool {
		items = append(items, json.RawMessage(v.Raw))
		return true
	})
	return items
}

// portableItems returns items without what another upstream cannot read:
// a reasoning item's encrypted_content (only the upstream that wrote it can
// decrypt it) is removed, and a reasoning item left with no summary and no
// content is dropped. Every other item is kept as it is.
func portableItems(items []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		r := gjson.ParseBytes(it)
		if r.Get("type").Str != "reasoning" || !r.Get("encrypted_content").Exists() {
			out = append(out, it)
			continue
		}
		if !nonEmptyArray(r.Get("summary")) && !nonEmptyArray(r.Get("content")) {
			continue // nothing but the encrypted part
		}
		if b, err := sjson.DeleteBytes(it, "encrypted_content"); err == nil {
			out = append(out, b)
		}
	}
	return out
}

func nonEmptyArray(v gjson.Result) bool {
	return v.IsArray() && len(v.Array()) > 0
}

// keepTurn records the turn of a response a Responses upstream served
// (HTTP SSE, JSON or an upstream WebSocket) under the client-visible
// response id: its own input items and its output, encrypted reasoning
// dropped, chained on previous_response_id. store:false keeps it, whole,
// in the client WebSocket session's memory only (nothing over HTTP), as
// the Chat bridge does. Chat upstreams' turns are kept by chatbridge.go.
// The write is synchronous and bounded: callers run it before the terminal
// event goes out, so a follow-up sent right after the completion finds it.
// heldBy names the upstream whose WebSocket served it, "" otherwise: only
// that upstream's socket holds the response for an incremental follow-up
// (sessionChainBodyOverSocket).
func (s *Server) keepTurn(ctx context.Context, req *clientRequest, u *upstream.Upstream, responseID string, output []json.RawMessage, heldBy string) {
	pt := req.portable
	if pt == nil || req.ep.chat || responseID == "" || u.Config().Protocol == upstream.ProtocolChat {
		return
	}
	if req.storeFalse {
		if req.memory != nil {
			// Kept whole, encrypted reasoning included: the session's own
			// upstream is sent these items again in place of
			// previous_response_id (sessionChainBody), and it resolves a
			// store:false reasoning item only from its encrypted_content.
			// They never leave the process; rehydrate strips them.
			req.memory.put(store.Turn{ResponseID: responseID, ParentID: pt.parentOf(req), Input: inputItemsOf(pt.body), Output: output}, heldBy)
		}
		return
	}
	t := store.Turn{ResponseID: responseID, ParentID: pt.parentOf(req), Input: pt.ownInput(), Output: portableItems(output)}
	if s.convs.durable == nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), anchorWriteTimeout)
	defer cancel()
	if err := s.convs.durable.PutConversation(wctx, t); err != nil {
		s.log.Error("recording conversation items failed", "response_id", LogID(responseID), "error", err)
	}
}

// keepTurn records the turn of the response that just completed (or ended
// incomplete) on this attempt: resp is its terminal Response object. A
// continued response is kept under the client-visible id with what the
// client was sent; a stream the stream_event hook may have edited keeps
// what the client got too.
func (p *pump) keepTurn(resp gjson.Result) {
	id := firstNonEmpty(p.responseID, resp.Get("id").Str)
	var output []json.RawMessage
	if r := p.req.rescue; r != nil && tryOf(p.req).cont != nil {
		id, output = r.clientID, p.cs.outputItems()
		if keepsSessionTurn(p.req) {
			p.req.memory.markContinued(r.clientID)
		}
	} else if out := resp.Get("output"); p.cs.hook == nil && nonEmptyArray(out) {
		output = arrayItems(out)
	} else {
		output = p.cs.outputItems()
	}
	heldBy := ""
	if servedOverWebSocket(p.src) {
		heldBy = p.u.Name()
	}
	p.s.keepTurn(p.ctx, p.req, p.u, strings.Clone(id), output, heldBy)
}

// keepTurnJSON records the turn of a complete (non-stream) Response body.
func (s *Server) keepTurnJSON(ctx context.Context, req *clientRequest, u *upstream.Upstream, body []byte) {
	r := gjson.ParseBytes(body)
	if id := r.Get("id"); id.Type == gjson.String {
		s.keepTurn(ctx, req, u, strings.Clone(id.Str), arrayItems(r.Get("output")), "") // a JSON answer came over HTTP
	}
}

// rehydrate is asked when the owner of previous_response_id is gone: no
// longer configured (u nil) or unusable (why). With portable on and the
// conversation kept, the recover policy decides (ABI 3, an owner_unavailable
// question; the default rehydrates when the owner was removed or has been
// down longer than rehydrate_after). On rehydrate, req's body becomes the
// kept history followed by its own input, without previous_response_id, for
// the normal targets; the new response's anchor names whoever serves it and
// its turn chains on the old id. It reports whether req was rehydrated;
// false leaves the caller to fail closed as before.
func (s *Server) rehydrate(ctx context.Context, req *clientRequest, owner string, u *upstream.Upstream, why string) bool {
	pt := req.portable
	if pt == nil || !s.convs.portable { // a session-memory turn only (keepsSessionTurn) is no portable one
		return false
	}
	in := hostabi.RecoverInput{Surface: req.policySurface(), Upstream: owner, Code: hostabi.CodeOwnerUnavailable, Message: why,
		OwnerRemoved: u == nil, RehydrateAfterMillis: s.opts.RehydrateAfter.Milliseconds()}
	if u != nil {
		if since, down := u.DownSince(); down {
			in.OwnerDownMillis = max(time.Since(since).Milliseconds(), 1)
		}
	}
	history, aerr := s.convs.history(ctx, req)
	if aerr != nil {
		s.log.Warn("conversation not rehydratable: its items are not kept", "surface", req.surface(), "owner", owner,
			"previous_response_id", LogID(req.previousResponseID), "why", aerr.Message)
		return false
	}
	in.Portable = true
	out := s.policy.Recover(hookCtx(ctx, req), in)
	if hostabi.EffectiveRecover(in, out.Verdict) != hostabi.RecoverRehydrate {
		s.log.Info("conversation not rehydrated", "surface", req.surface(), "owner", owner, "verdict", out.Verdict.String(),
			"owner_removed", in.OwnerRemoved, "owner_down_ms", in.OwnerDownMillis, "previous_response_id", LogID(req.previousResponseID))
		return false
	}
	body, err := rehydratedBody(pt.body, portableItems(history)) // session memory keeps encrypted reasoning
	if err != nil {
		s.log.Error("building the rehydrated request failed", "previous_response_id", LogID(req.previousResponseID), "error", err)
		return false
	}
	reason := rehydratePolicy
	if hostabi.DefaultRecover(in).Verdict == hostabi.RecoverRehydrate {
		reason = rehydrateOwnerDown
		if in.OwnerRemoved {
			reason = rehydrateOwnerRemoved
		}
	}
	s.metrics.rehydrations.WithLabelValues(req.surface(), reason).Inc()
	s.log.Info("conversation rehydrated", "surface", req.surface(), "owner", owner, "reason", reason, "items", len(history),
		"previous_response_id", LogID(req.previousResponseID))
	pt.parent = req.previousResponseID
	req.body, req.previousResponseID, req.pinned = body, "", nil
	if m := req.meta; m != nil {
		m.mu.Lock()
		m.continuity = "rehydrated"
		m.mu.Unlock()
	}
	return true
}

// rehydratedBody is body with input = history followed by body's own input
// items, and without previous_response_id.
func rehydratedBody(body []byte, history []json.RawMessage) ([]byte, error) {
	own := inputItemsOf(body)
	size := 2 + len(history) + len(own)
	for _, it := range history {
		size += len(it)
	}
	for _, it := range own {
		size += len(it)
	}
	input := make([]byte, 0, size)
	input = append(input, '[')
	for i, it := range append(history[:len(history):len(history)], own...) {
		if i > 0 {
			input = append(input, ',')
		}
		input = append(input, it...)
	}
	input = append(input, ']')
	b, err := sjson.SetRawBytes(body, "input", input)
	if err != nil {
		return nil, err
	}
	return sjson.DeleteBytes(b, "previous_response_id")
}
