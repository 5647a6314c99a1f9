package gateway

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/sent"
	"github.com/sluice-gw/sluice/internal/translate"
)

// chatCompletionStream makes a whole chat.completion, the answer of an
// upstream that ignored a Chat client's stream:true, the answer's event
// stream (ans.src): per choice a role chunk, a chunk with the message's
// content (a string: text parts joined) and its other members (refusal,
// reasoning, …), one chunk per tool call, a finish chunk; then the usage
// chunk when the completion has usage (the meter hides it from a client
// that did not ask, as it hides an upstream's, chatusage.go) and [DONE]. The pump then reads them as any
// upstream's chunks. It reports false, leaving ans as it was, for a body
// that is not a chat.completion within the checks every complete answer
// passes (answerProblem: SECURITY.md's depth and shape limits).
func (s *Server) chatCompletionStream(ans *upstreamAnswer, body []byte) bool {
	return s.replayWholeAnswer(ans, body, chatCompletionChunks)
}

// replayWholeAnswer makes ans.src the event stream render makes of a whole
// body, once the body passes the checks every complete answer passes
// (answerProblem). It reports false, leaving ans as it was, when either
// refuses the body.
func (s *Server) replayWholeAnswer(ans *upstreamAnswer, body []byte, render func([]byte) ([]sse.Event, bool)) bool {
	ans.body = body
	problem := s.answerProblem(ans)
	ans.body = nil
	if problem != "" {
		return false
	}
	evs, ok := render(body)
	if !ok {
		return false
	}
	ans.src = &replayedAnswer{events: evs}
	return true
}

// chatCompletionChunks is chatCompletionStream's conversion; ok is false
// when body has no choice or a choice without a message object. The
// chunks are written member by member from the completion's raw JSON, so
// no key is read as a path.
func chatCompletionChunks(body []byte) (evs []sse.Event, ok bool) {
	if joined := chatCompletionPartsJoined(body); joined != nil {
		// Content some servers send as parts is a string in a chunk's
		// delta (clients append it as one), joined as a JSON answer's is;
		// a refusal part is the delta's refusal.
		body = joined
	}
	root := gjson.ParseBytes(body)
	choices := root.Get("choices")
	if !choices.IsArray() || len(choices.Array()) == 0 {
		return nil, false
	}
	var head []byte // the members every chunk starts with
	if id := root.Get("id"); id.Exists() {
		head = appendMember(head, `"id"`, id.Raw)
	}
	head = appendMember(head, `"object"`, `"chat.completion.chunk"`)
	for _, key := range []string{"created", "model", "system_fingerprint", "service_tier"} {
		if v := root.Get(key); v.Exists() {
			head = appendMember(head, strconv.Quote(key), v.Raw)
		}
	}
	chunk := func(members []byte) {
		evs = append(evs, sse.Event{Data: object(joinMembers(head, members))})
	}
	ok = true
	position := 0
	choices.ForEach(func(_, ch gjson.Result) bool {
		msg := ch.Get("message")
		if !msg.IsObject() {
			ok = false
			return false
		}
		index := strconv.Itoa(position)
		if i := ch.Get("index"); i.Type == gjson.Number {
			index = i.Raw
		}
		position++
		// choice is the chunk's choices member: this choice with delta,
		// logprobs and finish_reason (raw JSON; "" is null). Every chunk
		// carries both, null until they have a value, as OpenAI's chunks
		// (and so a relayed stream's) do: the schema's choice requires
		// finish_reason.
		choice := func(delta []byte, logprobs, finish string) []byte {
			c := appendMember(appendMember(nil, `"index"`, index), `"delta"`, string(object(delta)))
			c = appendMember(c, `"logprobs"`, orNull(logprobs))
			c = appendMember(c, `"finish_reason"`, orNull(finish))
			return appendMember(nil, `"choices"`, "["+string(object(c))+"]")
		}
		role := msg.Get("role")
		if role.Type != gjson.String {
			role = gjson.Parse(`"assistant"`)
		}
		chunk(choice(appendMember(nil, `"role"`, role.Raw), "", ""))
		var delta []byte // content, refusal, reasoning and the rest of the message
		msg.ForEach(func(k, v gjson.Result) bool {
			if k.Str == "role" || k.Str == "tool_calls" || v.Type == gjson.Null {
				return true
			}
			delta = appendMember(delta, k.Raw, v.Raw)
			return true
		})
		logprobs := ch.Get("logprobs")
		if logprobs.Type == gjson.Null {
			logprobs.Raw = ""
		}
		if delta != nil || logprobs.Raw != "" {
			chunk(choice(delta, logprobs.Raw, ""))
		}
		calls := 0
		msg.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if !tc.IsObject() {
				return true
			}
			// A message's calls are told apart by their position, a
			// stream's by their index.
			call := appendMember(nil, `"index"`, strconv.Itoa(calls))
			tc.ForEach(func(k, v gjson.Result) bool {
				if k.Str != "index" {
					call = appendMember(call, k.Raw, v.Raw)
				}
				return true
			})
			calls++
			chunk(choice(appendMember(nil, `"tool_calls"`, "["+string(object(call))+"]"), "", ""))
			return true
		})
		chunk(choice(nil, "", ch.Get("finish_reason").Raw))
		return true
	})
	if !ok {
		return nil, false
	}
	if usage := root.Get("usage"); usage.IsObject() {
		chunk(appendMember(appendMember(nil, `"choices"`, `[]`), `"usage"`, usage.Raw))
	}
	return append(evs, sse.Event{Data: []byte("[DONE]"), Done: true}), true
}

// memberValueStarts reports whether data may hold a member key (quoted,
// as `"content"`) whose value starts with the byte first: key followed,
// past blanks and its colon, by first. It is a pre-check that spares a
// parse of the chunks that cannot need one; a match inside a string value
// only costs that parse.
func memberValueStarts(data, key []byte, first byte) bool {
	for rest := data; ; {
		i := bytes.Index(rest, key)
		if i < 0 {
			return false
		}
		rest = rest[i+len(key):]
		j := jsonx.SkipSpace(rest, 0)
		if j < len(rest) && rest[j] == ':' {
			if j = jsonx.SkipSpace(rest, j+1); j < len(rest) && rest[j] == first {
				return true
			}
		}
	}
}

// contentKey is the member a Chat chunk's text is in.
var contentKey = []byte(`"content"`)

// mayCarryTextParts reports whether a Chat chunk may have a member
// "content" whose value is an array: withTextPartsJoined's pre-check, so a
// chunk whose content is a string, as nearly every upstream sends it, is
// not parsed a second time.
func mayCarryTextParts(chunk []byte) bool { return memberValueStarts(chunk, contentKey, '[') }

// withTextPartsJoined is a Chat chunk, whose choices member (aliasing
// chunk, as scannedValue reads it) is choices, with every choice's
// delta.content sent as an array of text parts (as some OpenAI-compatible
// servers send it) made the string those parts' text joins into, by the
// rule a whole completion's content is joined with (chatCompletionChunks,
// translate.JoinParts; a refusal part becomes delta.refusal): OpenAI's ChatCompletionChunk has
// delta.content a string or null, and the SDKs' typed accessors read
// nothing else. It returns nil when no choice has such content.
func withTextPartsJoined(chunk []byte, choices gjson.Result) []byte {
	return withChoicesPartsJoined(chunk, choices, "delta")
}

// chatCompletionPartsJoined is a whole chat.completion, the JSON answer a
// Chat client gets, with every choice's message.content sent as an array
// of parts made its text, joined, and its refusal parts message.refusal,
// by the rule its chunks follow (withTextPartsJoined; README
// "Chat-Completions-only upstreams"): OpenAI's ChatCompletionMessage has
// content and refusal strings, which is all the SDKs' typed messages read.
// It returns nil when no choice has such content, so an answer whose
// content is a string is relayed byte for byte as it came.
func chatCompletionPartsJoined(body []byte) []byte {
	if !bytes.Contains(body, contentKey) {
		return nil
	}
	return withChoicesPartsJoined(body, gjson.GetBytes(body, "choices"), "message")
}

// withChoicesPartsJoined is withTextPartsJoined for the member of each
// choice that holds content and refusal: "delta" in a chunk, "message" in
// a whole completion. choices is doc's choices member, read from doc (its
// Index is its offset there). A refusal part becomes the member's refusal,
// after any refusal it has. nil when no choice's content is an array.
func withChoicesPartsJoined(doc []byte, choices gjson.Result, member string) []byte {
	if !choices.IsArray() || choices.Index <= 0 || choices.Index+len(choices.Raw) > len(doc) ||
		!mayCarryTextParts(doc[choices.Index:choices.Index+len(choices.Raw)]) {
		return nil
	}
	contentPath, refusalPath := member+".content", member+".refusal"
	var joined []byte // the new choices array
	changed := false
	choices.ForEach(func(_, ch gjson.Result) bool {
		raw := []byte(ch.Raw)
		if text, refusal, parts := translate.JoinParts(ch.Get(contentPath)); parts {
			if b, err := sjson.SetBytes(raw, contentPath, text); err == nil {
				raw, changed = b, true
			}
			if refusal != "" {
				refusal = ch.Get(refusalPath).Str + refusal
				if b, err := sjson.SetBytes(raw, refusalPath, refusal); err == nil {
					raw = b
				}
			}
		}
		if len(joined) > 0 {
			joined = append(joined, ',')
		}
		joined = append(joined, raw...)
		return true
	})
	if !changed {
		return nil
	}
	out := make([]byte, 0, len(doc)+len(joined)-len(choices.Raw)+2)
	out = append(out, doc[:choices.Index]...)
	out = append(append(append(out, '['), joined...), ']')
	return append(out, doc[choices.Index+len(choices.Raw):]...)
}

// appendMember appends the member rawKey: rawValue (both raw JSON) to the
// members in b ("a":1,"b":2, without braces).
func appendMember(b []byte, rawKey, rawValue string) []byte {
	if len(b) > 0 {
		b = append(b, ',')
	}
	b = append(b, rawKey...)
	b = append(b, ':')
	return append(b, rawValue...)
}

// joinMembers is the members of a followed by those of b, in a new slice.
func joinMembers(a, b []byte) []byte {
	out := make([]byte, 0, len(a)+1+len(b))
	out = append(out, a...)
	if len(a) > 0 && len(b) > 0 {
		out = append(out, ',')
	}
	return append(out, b...)
}

// orNull is raw, a JSON value, or null when it is empty.
func orNull(raw string) string {
	if raw == "" {
		return "null"
	}
	return raw
}

// object is the JSON object of members (appendMember's).
func object(members []byte) []byte {
	return append(append([]byte{'{'}, members...), '}')
}

// responseStream makes a whole Response, the answer of a Responses upstream
// that ignored a Responses client's stream:true, the answer's event stream
// (ans.src), as chatCompletionStream does for a chat.completion (README,
// "Chat-Completions-only upstreams"): the pump then reads the events as any
// upstream's, so numbering, usage, continuity (the Response's id is the
// one a streamed answer would have named) and the resume log follow it as
// they follow a stream. It reports false, leaving ans as it was, for a body
// that is not a Response responseEvents can render, or that fails the
// checks every complete answer passes (answerProblem).
func (s *Server) responseStream(ans *upstreamAnswer, body []byte) bool {
	return s.replayWholeAnswer(ans, body, responseEvents)
}

// responseTerminal is the terminal event type a whole Response's status
// ends its stream with; "" for any other status (queued, in_progress,
// cancelled): no stream of such a Response ends.
func responseTerminal(status string) string {
	switch status {
	case "completed", "incomplete", "failed":
		return "response." + status
	}
	return ""
}

// responseEvents renders a whole Response (object "response", an id, an
// output array of typed items, a status responseTerminal knows) as the
// event stream OpenAI's API sends for it: response.created and
// response.in_progress (the Response in_progress, with no output yet), per
// output item its added event, the events of its content and its done
// event (renderResponseItem), then the terminal event with the Response.
// ok is false for any other body, and for an item whose text is not a
// string: nothing is rendered from it.
func responseEvents(body []byte) (evs []sse.Event, ok bool) {
	root := gjson.ParseBytes(body)
	output := root.Get("output")
	terminal := responseTerminal(root.Get("status").Str)
	if !root.IsObject() || root.Get("object").Str != "response" || !nonEmptyJSONString(root.Get("id")) ||
		!output.IsArray() || terminal == "" {
		return nil, false
	}
	seq := 0
	emit := func(typ string, members []byte) {
		head := appendMember(appendMember(nil, `"type"`, strconv.Quote(typ)), `"sequence_number"`, strconv.Itoa(seq))
		evs = append(evs, sse.Event{Name: typ, Data: object(joinMembers(head, members))})
		seq++
	}
	opening := body
	for _, m := range []struct{ key, raw string }{{"status", `"in_progress"`}, {"output", `[]`}, {"usage", `null`},
		{"error", `null`}, {"incomplete_details", `null`}} {
		if b, err := sjson.SetRawBytes(opening, m.key, []byte(m.raw)); err == nil {
			opening = b
		}
	}
	if root.Get("completed_at").Exists() {
		if b, err := sjson.SetRawBytes(opening, "completed_at", []byte(`null`)); err == nil {
			opening = b
		}
	}
	emit("response.created", appendMember(nil, `"response"`, string(opening)))
	emit("response.in_progress", appendMember(nil, `"response"`, string(opening)))
	var items []string // the output as the done events showed it
	ok = true
	output.ForEach(func(_, it gjson.Result) bool {
		var done string
		if done, ok = renderResponseItem(it, len(items), emit); ok {
			items = append(items, done)
		}
		return ok
	})
	if !ok {
		return nil, false
	}
	final := body
	if b, err := sjson.SetRawBytes(final, "output", []byte("["+strings.Join(items, ",")+"]")); err == nil {
		final = b
	}
	emit(terminal, appendMember(nil, `"response"`, string(final)))
	return evs, true
}

// nonEmptyJSONString reports whether r is a string with some text.
func nonEmptyJSONString(r gjson.Result) bool { return r.Type == gjson.String && r.Str != "" }

// renderResponseItem emits the events of output item it at index: its
// output_item.added (the item in_progress, its text empty), the events of
// its text, and its output_item.done, and returns the item as done showed
// it (with an id made for it when it had none: every item event names
// one). ok is false, nothing emitted, for an item that is not an object
// with a type or whose text is not a string.
//
//   - message: per content part content_part.added, its text's delta and
//     done (output_text.delta/done, with the part's logprobs, and an
//     output_text.annotation.added per annotation; refusal.delta/done for a
//     refusal), content_part.done;
//   - function_call: function_call_arguments.delta and .done;
//   - custom_tool_call: custom_tool_call_input.delta and .done;
//   - reasoning: per summary part reasoning_summary_part.added,
//     reasoning_summary_text.delta/done, reasoning_summary_part.done; per
//     content part content_part.added, reasoning_text.delta/done,
//     content_part.done;
//   - any other item (a hosted tool's call): added and done only.
func renderResponseItem(it gjson.Result, index int, emit func(string, []byte)) (done string, ok bool) {
	typ := it.Get("type")
	if !it.IsObject() || !nonEmptyJSONString(typ) || !responseItemTextsAreStrings(it) {
		return "", false
	}
	raw := it.Raw
	if !nonEmptyJSONString(it.Get("id")) {
		prefix := map[string]string{"message": "msg_", "function_call": "fc_", "reasoning": "rs_", "custom_tool_call": "ctc_"}[typ.Str]
		if prefix == "" {
			prefix = "item_"
		}
		if b, err := sjson.Set(raw, "id", prefix+strings.ReplaceAll(uuid.NewString(), "-", "")); err == nil {
			raw = b
		}
	}
	raw = string(sent.CompleteContent([]byte(raw))) // its parts as complete as any the gateway writes (README "What it promises")
	item := gjson.Parse(raw)
	ref := appendMember(appendMember(nil, `"item_id"`, item.Get("id").Raw), `"output_index"`, strconv.Itoa(index))
	member := func(members []byte, key, rawValue string) []byte {
		return appendMember(members, strconv.Quote(key), rawValue)
	}
	at := func(key string, i int) []byte { return member(ref, key, strconv.Itoa(i)) }

	added := raw
	empty := map[string]string{"message": "content", "reasoning": "summary", "function_call": "arguments", "custom_tool_call": "input"}
	if key := empty[typ.Str]; key != "" {
		value := `[]`
		if key == "arguments" || key == "input" {
			value = `""`
		}
		added, _ = sjson.SetRaw(added, key, value)
	}
	if typ.Str == "reasoning" && item.Get("content").IsArray() {
		added, _ = sjson.SetRaw(added, "content", `[]`)
	}
	if item.Get("status").Exists() {
		added, _ = sjson.SetRaw(added, "status", `"in_progress"`)
	}
	emit("response.output_item.added", member(member(nil, "output_index", strconv.Itoa(index)), "item", added))

	switch typ.Str {
	case "message":
		j := 0
		item.Get("content").ForEach(func(_, part gjson.Result) bool {
			pos := at("content_index", j)
			j++
			switch part.Get("type").Str {
			case "output_text":
				logprobs := part.Get("logprobs").Raw
				if !part.Get("logprobs").IsArray() {
					logprobs = `[]`
				}
				emit("response.content_part.added", member(pos, "part", `{"type":"output_text","annotations":[],"logprobs":[],"text":""}`))
				if text := part.Get("text"); text.Str != "" {
					emit("response.output_text.delta", member(member(pos, "delta", text.Raw), "logprobs", logprobs))
				}
				k := 0
				part.Get("annotations").ForEach(func(_, a gjson.Result) bool {
					emit("response.output_text.annotation.added", member(member(pos, "annotation_index", strconv.Itoa(k)), "annotation", a.Raw))
					k++
					return true
				})
				emit("response.output_text.done", member(member(pos, "text", part.Get("text").Raw), "logprobs", logprobs))
			case "refusal":
				emit("response.content_part.added", member(pos, "part", `{"type":"refusal","refusal":""}`))
				if refusal := part.Get("refusal"); refusal.Str != "" {
					emit("response.refusal.delta", member(pos, "delta", refusal.Raw))
				}
				emit("response.refusal.done", member(pos, "refusal", part.Get("refusal").Raw))
			default:
				emit("response.content_part.added", member(pos, "part", part.Raw))
			}
			emit("response.content_part.done", member(pos, "part", part.Raw))
			return true
		})
	case "function_call", "custom_tool_call":
		key, event := "arguments", "response.function_call_arguments"
		if typ.Str == "custom_tool_call" {
			key, event = "input", "response.custom_tool_call_input"
		}
		value := item.Get(key)
		if value.Str != "" {
			emit(event+".delta", member(ref, "delta", value.Raw))
		}
		if !value.Exists() {
			value.Raw = `""`
		}
		doneEv := member(ref, key, value.Raw)
		if name := item.Get("name"); typ.Str == "function_call" && name.Exists() {
			doneEv = member(doneEv, "name", name.Raw)
		}
		emit(event+".done", doneEv)
	case "reasoning":
		// Each part of the summary, then of the content, is streamed the
		// same way: the part added empty, its text's delta (when it has
		// text) and done events, the part done.
		parts := func(list, indexKey, partEvent, textEvent, emptyPart string) {
			i := 0
			item.Get(list).ForEach(func(_, part gjson.Result) bool {
				pos := at(indexKey, i)
				i++
				emit(partEvent+".added", member(pos, "part", emptyPart))
				if text := part.Get("text"); text.Str != "" {
					emit(textEvent+".delta", member(pos, "delta", text.Raw))
				}
				emit(textEvent+".done", member(pos, "text", part.Get("text").Raw))
				emit(partEvent+".done", member(pos, "part", part.Raw))
				return true
			})
		}
		parts("summary", "summary_index", "response.reasoning_summary_part", "response.reasoning_summary_text", `{"type":"summary_text","text":""}`)
		parts("content", "content_index", "response.content_part", "response.reasoning_text", `{"type":"reasoning_text","text":""}`)
	}
	emit("response.output_item.done", member(member(nil, "output_index", strconv.Itoa(index)), "item", raw))
	return raw, true
}

// responseItemTextsAreStrings reports whether the texts renderResponseItem
// streams of item are strings (or, for arguments and input, absent): a
// delta of anything else would not be text.
func responseItemTextsAreStrings(item gjson.Result) bool {
	isString := func(r gjson.Result) bool { return r.Type == gjson.String }
	parts := func(key, field string) bool {
		all := true
		v := item.Get(key)
		if v.Exists() && !v.IsArray() {
			return false
		}
		v.ForEach(func(_, p gjson.Result) bool {
			f := field
			if key == "content" && p.Get("type").Str == "refusal" {
				f = "refusal"
			} else if key == "content" && item.Get("type").Str == "message" && p.Get("type").Str != "output_text" {
				return true
			}
			all = p.IsObject() && isString(p.Get(f))
			return all
		})
		return all
	}
	switch item.Get("type").Str {
	case "message":
		return parts("content", "text")
	case "reasoning":
		return parts("summary", "text") && parts("content", "text")
	case "function_call":
		return !item.Get("arguments").Exists() || isString(item.Get("arguments"))
	case "custom_tool_call":
		return !item.Get("input").Exists() || isString(item.Get("input"))
	}
	return true
}
