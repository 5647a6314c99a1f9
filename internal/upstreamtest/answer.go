package upstreamtest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Answers that know how to continue: a Text script (Script.Text) reads
// the request it answers. A prefill (the request's input or messages end
// with an assistant message whose text begins the answer) gets only the rest
// of the answer, as a model continuing its own message does; any other
// request gets the whole answer. With StopAfterDeltas the stream stops part
// way: cut, stalled, or failed, for the gateway's continuation tests.

// Answer is a stream answering text in deltas text deltas (0: 3) that
// continues a prefill: see Script.Text.
func Answer(text string, deltas int) Script { return Script{Text: text, Deltas: deltas} }

// CutAfterDeltas is s stopped after n text deltas, then the connection
// closed abruptly (no terminal event).
func (s Script) CutAfterDeltas(n int) Script {
	s.StopAfterDeltas, s.End = n, EndCut
	return s
}

// StallAfterDeltas is s stopped after n text deltas, then silent, the
// connection held open until the client leaves or the Server is closed.
func (s Script) StallAfterDeltas(n int) Script {
	s.StopAfterDeltas, s.End = n, EndHang
	return s
}

// FailAfterDeltas is s stopped after n text deltas, then failed with code
// (e.g. "server_error"), and the stream ends cleanly: on /v1/responses the
// event {"type":"response.failed","response":{…,"status":"failed","error":{"code":code,…},"usage":{…}}}
// whose usage counts the n deltas as output tokens; on chat the chunk
// {"error":{"message":…,"type":"server_error","code":code}} then [DONE].
func (s Script) FailAfterDeltas(n int, code string) Script {
	s.StopAfterDeltas, s.End = n, EndNormal
	msg := "The server had an error while processing your request."
	resp := responseObject(PlaceholderID, PlaceholderModel, rawJSON(PlaceholderCreatedAt), "failed", arr{}, responsesUsage(n))
	for i := range resp {
		if resp[i].k == "error" {
			resp[i].v = obj{{"code", code}, {"message", msg}}
		}
	}
	s.Tail = []Frame{SSEEvent(marshal(obj{{"type", "response.failed"}, {"sequence_number", 4 + n}, {"response", resp}}))}
	s.ChatTail = []Frame{SSEData(marshal(obj{{"error", errorObject(msg, "server_error", code, "")}})), SSEData([]byte("[DONE]"))}
	return s
}

// textPlan is a compiled Text script.
type textPlan struct {
	text           string
	deltas         int
	stop           int
	tail, chatTail []cframe
}

// rest is what t is answered with: the text after its prefill, or all.
func (tp *textPlan) rest(t *turn) string {
	if t.hasPrefill && strings.HasPrefix(tp.text, t.prefill) {
		return tp.text[len(t.prefill):]
	}
	return tp.text
}

func (tp *textPlan) pieces(t *turn) []string {
	d := tp.deltas
	if d <= 0 {
		d = 3
	}
	return splitText(tp.rest(t), d)
}

// frames builds the stream of t.
func (tp *textPlan) frames(t *turn) []cframe {
	pieces := tp.pieces(t)
	created := rawJSON(PlaceholderCreatedAt)
	if t.ep == epChat {
		chunks := chatChunks(ChatSpec{ID: PlaceholderID, Model: PlaceholderModel, Text: strings.Join(pieces, ""), Deltas: len(pieces), Usage: t.usage}, created)
		fs := compileFrames(dataFrames(chunks))
		if tp.stop > 0 {
			return append(fs[:min(len(fs), 1+tp.stop):min(len(fs), 1+tp.stop)], tp.chatTail...)
		}
		return fs
	}
	fs := compileFrames(eventFrames(responsesEvents(PlaceholderID, PlaceholderItemID, PlaceholderModel, created, pieces)))
	if tp.stop > 0 {
		// created, in_progress, output_item.added, content_part.added, deltas.
		return append(fs[:min(len(fs), 4+tp.stop):min(len(fs), 4+tp.stop)], tp.tail...)
	}
	return fs
}

// body is the non-streaming answer of t.
func (tp *textPlan) body(t *turn) tmpl {
	pieces := tp.pieces(t)
	created := rawJSON(PlaceholderCreatedAt)
	if t.ep == epChat {
		return compile(chatCompletion(PlaceholderID, PlaceholderModel, created, strings.Join(pieces, ""), len(pieces)))
	}
	return compile(marshal(completedResponse(PlaceholderID, PlaceholderItemID, PlaceholderModel, created, pieces)))
}

// prefillRefusal is the answer of an upstream that refuses a trailing
// assistant message (Options.RefusePrefill).
func prefillRefusal(ep endpoint) []byte {
	param := "input"
	if ep == epChat {
		param = "messages"
	}
	return ErrorBody("This model does not support assistant message prefill. The conversation must end with a user message.",
		"invalid_request_error", "", param)
}

// trailingAssistant returns the text of the assistant message a request's
// input (Responses) or messages (Chat) ends with; ok is false when it does
// not end with one.
func trailingAssistant(body []byte, ep endpoint) (text string, ok bool) {
	type message struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var b struct {
		Input    json.RawMessage `json:"input"`
		Messages []message       `json:"messages"`
	}
	if json.Unmarshal(body, &b) != nil {
		return "", false
	}
	msgs := b.Messages
	if ep == epResponses {
		if len(b.Input) == 0 || b.Input[0] != '[' || json.Unmarshal(b.Input, &msgs) != nil {
			return "", false
		}
	}
	if len(msgs) == 0 {
		return "", false
	}
	last := msgs[len(msgs)-1]
	if last.Role != "assistant" || (last.Type != "" && last.Type != "message") {
		return "", false
	}
	var s string
	if json.Unmarshal(last.Content, &s) == nil {
		return s, true
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(last.Content, &parts)
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String(), true
}

// refusesPrefill reports whether the server answers body with the prefill
// refusal (Options.RefusePrefill and a trailing assistant message).
func (s *Server) refusesPrefill(body []byte, ep endpoint) bool {
	if !s.opts.RefusePrefill {
		return false
	}
	_, ok := trailingAssistant(body, ep)
	return ok
}

// refusePrefillHTTP answers the prefill refusal over HTTP.
func refusePrefillHTTP(w http.ResponseWriter, ep endpoint) {
	writeError(w, http.StatusBadRequest, prefillRefusal(ep))
}
