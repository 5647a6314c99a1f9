package upstreamtest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A tiny ordered JSON writer: the real API emits "type" first and we want the
// same byte order, and the canned templates need a bare {{created_at}} where a
// number goes, which encoding/json would reject.

type kv struct {
	k string
	v any
}

type obj []kv
type arr []any
type rawJSON string

func appendJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case float64:
		return strconv.AppendFloat(b, v, 'f', -1, 64)
	case string:
		b = append(b, '"')
		b = append(b, jsonEscape(v)...)
		return append(b, '"')
	case rawJSON:
		return append(b, v...)
	case json.RawMessage:
		return append(b, v...)
	case obj:
		b = append(b, '{')
		for i, f := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, f.k)
			b = append(b, ':')
			b = appendJSON(b, f.v)
		}
		return append(b, '}')
	case arr:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	}
	panic("upstreamtest: appendJSON: unsupported type")
}

func marshal(v any) []byte { return appendJSON(nil, v) }

// ---- Frames ----

// SSEEvent returns the SSE frame "event: <type>\ndata: <data>\n\n" for a
// Responses event, the event name taken from data's "type" (no event line
// when it has none). Its WebSocket form is data itself.
func SSEEvent(data []byte) Frame {
	var b []byte
	if typ := eventType(data); typ != "" && !strings.ContainsAny(typ, "\r\n") {
		b = append(b, "event: "...)
		b = append(b, typ...)
		b = append(b, '\n')
	}
	b = appendDataLines(b, data)
	return Frame{Raw: append(b, '\n'), WS: data}
}

// SSENamedEvent returns the SSE frame "event: <name>\ndata: <data>\n\n",
// the event name given whatever data's "type" says (or when it has none,
// as an upstream that names its events only in the SSE event field). Its
// WebSocket form is data itself.
func SSENamedEvent(name string, data []byte) Frame {
	b := append([]byte("event: "), name...)
	b = appendDataLines(append(b, '\n'), data)
	return Frame{Raw: append(b, '\n'), WS: data}
}

// SSEData returns the SSE frame "data: <data>\n\n" (the Chat Completions
// form). Its WebSocket form is data, except for "[DONE]", which is not sent on
// a WebSocket.
func SSEData(data []byte) Frame {
	b := appendDataLines(nil, data)
	return Frame{Raw: append(b, '\n')}
}

// RawFrame returns a frame written verbatim on HTTP streams. On a WebSocket it
// is sent as the payload of its data lines, if it has a non-empty one.
func RawFrame(raw []byte) Frame { return Frame{Raw: raw} }

// eventType is data's "type". Templates with a bare {{created_at}} are not
// valid JSON, so a leading {"type":"…" is read directly.
func eventType(data []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &t) == nil {
		return t.Type
	}
	if rest, ok := bytes.CutPrefix(data, []byte(`{"type":"`)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 {
			return string(rest[:i])
		}
	}
	return ""
}

func appendDataLines(b, data []byte) []byte {
	for {
		line, rest, found := bytes.Cut(data, []byte("\n"))
		b = append(b, "data: "...)
		b = append(b, bytes.TrimSuffix(line, []byte("\r"))...)
		b = append(b, '\n')
		if !found {
			return b
		}
		data = rest
	}
}

// ---- Responses ----

// The canned answer, with placeholders, as every constructor and the default
// answer use it: "Hello from <Name>" in three deltas.
func cannedPieces() []string { return []string{"Hello", " from", " " + PlaceholderName} }

const (
	fakeInputTokens = 8
	fingerprint     = "fp_upstreamtest"
)

func responseObject(id, model string, created rawJSON, status string, output arr, usage any) obj {
	return obj{
		{"id", id},
		{"object", "response"},
		{"created_at", created},
		{"status", status},
		{"error", nil},
		{"incomplete_details", nil},
		{"instructions", nil},
		{"max_output_tokens", nil},
		{"model", model},
		{"output", output},
		{"parallel_tool_calls", true},
		{"previous_response_id", nil},
		{"reasoning", obj{{"effort", nil}, {"summary", nil}}},
		{"store", true},
		{"temperature", 1.0},
		{"text", obj{{"format", obj{{"type", "text"}}}}},
		{"tool_choice", "auto"},
		{"tools", arr{}},
		{"top_p", 1.0},
		{"truncation", "disabled"},
		{"usage", usage},
		{"metadata", obj{}},
	}
}

func outputText(text string) obj {
	return obj{{"type", "output_text"}, {"annotations", arr{}}, {"logprobs", arr{}}, {"text", text}}
}

func messageItem(itemID, status string, content arr) obj {
	return obj{{"id", itemID}, {"type", "message"}, {"status", status}, {"content", content}, {"role", "assistant"}}
}

func responsesUsage(outputTokens int) obj {
	return obj{
		{"input_tokens", fakeInputTokens},
		{"input_tokens_details", obj{{"cached_tokens", 0}}},
		{"output_tokens", outputTokens},
		{"output_tokens_details", obj{{"reasoning_tokens", 0}}},
		{"total_tokens", fakeInputTokens + outputTokens},
	}
}

func completedResponse(id, itemID, model string, created rawJSON, pieces []string) obj {
	text := strings.Join(pieces, "")
	item := messageItem(itemID, "completed", arr{outputText(text)})
	return responseObject(id, model, created, "completed", arr{item}, responsesUsage(len(pieces)))
}

// responsesEvents builds the event JSON of a successful one-message answer.
func responsesEvents(id, itemID, model string, created rawJSON, pieces []string) [][]byte {
	var evs [][]byte
	seq := 0
	add := func(typ string, fields ...kv) {
		o := append(obj{{"type", typ}, {"sequence_number", seq}}, fields...)
		evs = append(evs, marshal(o))
		seq++
	}
	text := strings.Join(pieces, "")
	loc := []kv{{"item_id", itemID}, {"output_index", 0}, {"content_index", 0}}
	add("response.created", kv{"response", responseObject(id, model, created, "in_progress", arr{}, nil)})
	add("response.in_progress", kv{"response", responseObject(id, model, created, "in_progress", arr{}, nil)})
	add("response.output_item.added", kv{"output_index", 0}, kv{"item", messageItem(itemID, "in_progress", arr{})})
	add("response.content_part.added", append(loc[:3:3], kv{"part", outputText("")})...)
	for _, p := range pieces {
		add("response.output_text.delta", append(loc[:3:3], kv{"delta", p}, kv{"logprobs", arr{}})...)
	}
	add("response.output_text.done", append(loc[:3:3], kv{"text", text}, kv{"logprobs", arr{}})...)
	add("response.content_part.done", append(loc[:3:3], kv{"part", outputText(text)})...)
	add("response.output_item.done", kv{"output_index", 0}, kv{"item", messageItem(itemID, "completed", arr{outputText(text)})})
	add("response.completed", kv{"response", completedResponse(id, itemID, model, created, pieces)})
	return evs
}

func eventFrames(evs [][]byte) []Frame {
	fs := make([]Frame, len(evs))
	for i, e := range evs {
		fs[i] = SSEEvent(e)
	}
	return fs
}

func dataFrames(chunks [][]byte) []Frame {
	fs := make([]Frame, len(chunks))
	for i, c := range chunks {
		fs[i] = SSEData(c)
	}
	return fs
}

func itemIDFor(id string) string {
	if id == PlaceholderID {
		return PlaceholderItemID
	}
	return "msg_" + strings.TrimPrefix(id, "resp_")
}

// FixedCreatedAt is the created_at / created time (2026-01-01T00:00:00Z)
// of everything the exported builders return, so that their bytes are
// reproducible. Canned answers and constructor scripts played by a Server use
// the request time instead (PlaceholderCreatedAt).
const FixedCreatedAt = 1767225600

func fixedJSON() rawJSON { return rawJSON(strconv.FormatInt(FixedCreatedAt, 10)) }

// ResponsesEvents returns the event JSON objects of a successful Responses
// stream answering text in deltas pieces: response.created,
// response.in_progress, response.output_item.added,
// response.content_part.added, deltas × response.output_text.delta,
// response.output_text.done, response.content_part.done,
// response.output_item.done, response.completed. Every event carries type and
// a 0-based increasing sequence_number, and output_index, content_index and
// item_id where the API has them. The message item id is "msg_" + id without
// its "resp_" prefix (PlaceholderItemID when id is PlaceholderID); created_at
// is FixedCreatedAt, so the bytes are reproducible. Placeholders may be used
// for id and model, to be filled in when a Server plays them.
func ResponsesEvents(id, model, text string, deltas int) [][]byte {
	return responsesEvents(id, itemIDFor(id), model, fixedJSON(), splitText(text, deltas))
}

// ResponsesStream is ResponsesEvents as frames ("event: <type>\ndata:
// <json>\n\n" on HTTP, the JSON on a WebSocket), ready for Script.Frames.
func ResponsesStream(id, model, text string, deltas int) []Frame {
	return eventFrames(ResponsesEvents(id, model, text, deltas))
}

// ResponseJSON returns a completed Response object answering text, the body of
// a non-streaming POST /v1/responses.
func ResponseJSON(id, model, text string) []byte {
	return marshal(completedResponse(id, itemIDFor(id), model, fixedJSON(), splitText(text, 1)))
}

// ---- Chat Completions ----

// ChatSpec describes a Chat Completions stream for ChatSpec.Chunks and
// ChatSpec.Frames. Placeholders may be used in the string fields.
type ChatSpec struct {
	ID      string // chat completion id, e.g. "chatcmpl-1" or PlaceholderID
	Model   string // e.g. "gpt-fake-1" or PlaceholderModel
	Created int64  // Unix seconds; 0 means FixedCreatedAt

	Reasoning       string // sent first as delta.reasoning_content
	ReasoningDeltas int    // pieces of Reasoning (at least 1)
	Text            string // sent as delta.content
	Deltas          int    // pieces of Text (at least 1)

	ToolCalls []ToolCallSpec // sent after the text as delta.tool_calls
	// InterleaveTools sends the tool calls' chunks round-robin (call 0's
	// header, call 1's header, call 0's first argument piece, …) instead of
	// one call after the other.
	InterleaveTools bool

	// FinishReason of the finish chunk: "" means "tool_calls" when ToolCalls
	// is set and "stop" otherwise; "length" and "content_filter" are others
	// the API uses.
	FinishReason string
	// Usage adds the usage chunk (empty choices) before [DONE], as the API
	// does for stream_options.include_usage.
	Usage bool
}

// ToolCallSpec is one streamed function call of a ChatSpec.
type ToolCallSpec struct {
	ID        string // e.g. "call_1"
	Name      string // function name
	Arguments string // JSON arguments, split into Pieces fragments
	Pieces    int
}

// Chunks returns the chunk JSON objects of the stream followed by the literal
// [DONE]: a role chunk, the reasoning and content deltas, the tool call chunks,
// the finish chunk, and the usage chunk if asked for.
func (c ChatSpec) Chunks() [][]byte {
	created := rawJSON(strconv.FormatInt(c.Created, 10))
	if c.Created == 0 {
		created = fixedJSON()
	}
	return chatChunks(c, created)
}

func chatChunks(c ChatSpec, created rawJSON) [][]byte {
	chunk := func(delta obj, finish any) []byte {
		return marshal(obj{
			{"id", c.ID}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", c.Model},
			{"system_fingerprint", fingerprint},
			{"choices", arr{obj{{"index", 0}, {"delta", delta}, {"logprobs", nil}, {"finish_reason", finish}}}},
		})
	}
	var out [][]byte
	var content any = ""
	if c.Text == "" && len(c.ToolCalls) > 0 {
		content = nil
	}
	out = append(out, chunk(obj{{"role", "assistant"}, {"content", content}, {"refusal", nil}}, nil))
	completion := 0
	if c.Reasoning != "" {
		for _, p := range splitText(c.Reasoning, c.ReasoningDeltas) {
			out = append(out, chunk(obj{{"reasoning_content", p}}, nil))
			completion++
		}
	}
	if c.Text != "" {
		for _, p := range splitText(c.Text, c.Deltas) {
			out = append(out, chunk(obj{{"content", p}}, nil))
			completion++
		}
	}
	// Tool calls: step 0 of a call is its header, then its argument pieces.
	steps := make([][]obj, len(c.ToolCalls))
	for i, tc := range c.ToolCalls {
		steps[i] = append(steps[i], obj{
			{"index", i}, {"id", tc.ID}, {"type", "function"},
			{"function", obj{{"name", tc.Name}, {"arguments", ""}}},
		})
		for _, p := range splitText(tc.Arguments, tc.Pieces) {
			if p == "" {
				continue
			}
			steps[i] = append(steps[i], obj{{"index", i}, {"function", obj{{"arguments", p}}}})
		}
	}
	emit := func(tc obj) {
		out = append(out, chunk(obj{{"tool_calls", arr{tc}}}, nil))
		completion++
	}
	if c.InterleaveTools {
		for k := 0; ; k++ {
			more := false
			for i := range steps {
				if k < len(steps[i]) {
					emit(steps[i][k])
					more = true
				}
			}
			if !more {
				break
			}
		}
	} else {
		for i := range steps {
			for _, tc := range steps[i] {
				emit(tc)
			}
		}
	}
	finish := c.FinishReason
	if finish == "" {
		finish = "stop"
		if len(c.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	out = append(out, chunk(obj{}, finish))
	if c.Usage {
		out = append(out, marshal(obj{
			{"id", c.ID}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", c.Model},
			{"system_fingerprint", fingerprint}, {"choices", arr{}},
			{"usage", chatUsage(completion)},
		}))
	}
	return append(out, []byte("[DONE]"))
}

func chatUsage(completion int) obj {
	return obj{
		{"prompt_tokens", fakeInputTokens},
		{"completion_tokens", completion},
		{"total_tokens", fakeInputTokens + completion},
	}
}

// Frames returns Chunks as "data: <json>\n\n" frames ending with
// "data: [DONE]\n\n", ready for Script.ChatFrames.
func (c ChatSpec) Frames() []Frame { return dataFrames(c.Chunks()) }

// ChatChunks returns the chunk JSON objects of a Chat Completions stream
// answering text in deltas pieces (role chunk, content deltas, finish chunk
// with finish_reason "stop"), followed by the literal [DONE]. Use ChatSpec for
// reasoning, tool calls, other finish reasons and the usage chunk.
func ChatChunks(id, model, text string, deltas int) [][]byte {
	return ChatSpec{ID: id, Model: model, Text: text, Deltas: deltas}.Chunks()
}

// ChatStream is ChatChunks as "data: …\n\n" frames, ready for
// Script.ChatFrames.
func ChatStream(id, model, text string, deltas int) []Frame {
	return dataFrames(ChatChunks(id, model, text, deltas))
}

// ChatCompletionJSON returns a chat.completion object answering text, the body
// of a non-streaming POST /v1/chat/completions.
func ChatCompletionJSON(id, model, text string) []byte {
	return chatCompletion(id, model, fixedJSON(), text, 1)
}

func chatCompletion(id, model string, created rawJSON, text string, tokens int) []byte {
	return marshal(obj{
		{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
		{"system_fingerprint", fingerprint},
		{"choices", arr{obj{
			{"index", 0},
			{"message", obj{{"role", "assistant"}, {"content", text}, {"refusal", nil}}},
			{"logprobs", nil}, {"finish_reason", "stop"},
		}}},
		{"usage", chatUsage(tokens)},
	})
}

// ---- Errors ----

// ErrorBody returns the OpenAI error envelope
// {"error":{"message":…,"type":…,"param":…,"code":…}}; an empty param or code
// is a JSON null.
func ErrorBody(message, typ, code, param string) []byte {
	return marshal(obj{{"error", errorObject(message, typ, code, param)}})
}

func errorObject(message, typ, code, param string) obj {
	var p, c any
	if param != "" {
		p = param
	}
	if code != "" {
		c = code
	}
	return obj{{"message", message}, {"type", typ}, {"param", p}, {"code", c}}
}

// ---- Text splitting ----

// splitText cuts text into n pieces at word boundaries when it has enough
// words, else at rune boundaries; placeholders are never cut.
func splitText(text string, n int) []string {
	if n < 1 {
		n = 1
	}
	// Atoms: runes, or whole placeholders.
	var atoms []string
	for i := 0; i < len(text); {
		if strings.HasPrefix(text[i:], "{{") {
			if k := strings.Index(text[i:], "}}"); k >= 0 && holeIndex(text[i:i+k+2]) >= 0 {
				atoms = append(atoms, text[i:i+k+2])
				i += k + 2
				continue
			}
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		atoms = append(atoms, text[i:i+size])
		i += size
	}
	// Words: a word starts at an atom that is a space following a non-space.
	var words []string
	start := 0
	for i := 1; i < len(atoms); i++ {
		if atoms[i] == " " && atoms[i-1] != " " {
			words = append(words, strings.Join(atoms[start:i], ""))
			start = i
		}
	}
	if len(atoms) > 0 {
		words = append(words, strings.Join(atoms[start:], ""))
	}
	units := words
	if len(units) < n {
		units = atoms
	}
	if len(units) == 0 {
		return []string{""}
	}
	if n > len(units) {
		n = len(units)
	}
	out := make([]string, n)
	for i := range n {
		out[i] = strings.Join(units[i*len(units)/n:(i+1)*len(units)/n], "")
	}
	return out
}
