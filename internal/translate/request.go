package translate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/tidwall/gjson"
)

// Error codes used for 400s beyond the ones apierr defines.
const (
	codeInvalidValue         = "invalid_value"
	codeUnsupportedValue     = "unsupported_value"
	codeUnsupportedParameter = "unsupported_parameter"
)

// RequestOptions tune [ToChat].
type RequestOptions struct {
	// DeveloperRole is the Chat role that developer messages become. Empty
	// means "system" (llama.cpp and vLLM templates often reject "developer");
	// "developer" keeps the role for upstreams that know it; any other value is
	// used as given.
	DeveloperRole string
	// DefaultModel is the model sent when the request names none. With
	// neither, ToChat answers 400 missing_required_parameter (param model).
	DefaultModel string
	// OmitReasoning leaves reasoning items out of the Chat body instead of
	// sending their text back as assistant reasoning_content (some upstreams
	// reject reasoning_content in requests).
	OmitReasoning bool
}

// RequestInfo is what ToChat learned about the request that the gateway needs
// beyond the Chat body: continuity fields, the items to store, and what was
// left out.
type RequestInfo struct {
	// Model is the model sent upstream.
	Model string
	// Stream reports whether the client asked for a stream.
	Stream bool
	// PreviousResponseID is the request's previous_response_id, if any.
	PreviousResponseID string
	// Store is the request's store flag; nil when absent (the API default is true).
	Store *bool
	// InputItems is this turn's input normalised to Responses item shape
	// (type "message" made explicit, string content turned into one text
	// part), ready to be stored as history. The slices do not alias body.
	InputItems []json.RawMessage
	// DroppedTools names the tools Chat cannot express and that were left out:
	// the tool type, followed by ":name" when the tool has a name.
	DroppedTools []string
	// DroppedFields names the top-level request fields that were not forwarded
	// (including previous_response_id and store, which the gateway handles), in
	// request order.
	DroppedFields []string
	// Echo holds the request fields a Response object repeats; pass it as
	// StreamOptions.Request.
	Echo RequestEcho
}

// RequestEcho holds the request fields that a Response object echoes back,
// each as raw JSON. A nil or invalid field is rendered with the API's default
// (null, [], "auto", true, 1, {} as appropriate).
type RequestEcho struct {
	// Instructions is the request's instructions (a string) or nil.
	Instructions json.RawMessage
	// Tools is the array of tools that were forwarded, in Responses shape.
	Tools json.RawMessage
	// ToolChoice is the request's tool_choice.
	ToolChoice json.RawMessage
	// ParallelToolCalls is the request's parallel_tool_calls.
	ParallelToolCalls json.RawMessage
	// Temperature is the request's temperature.
	Temperature json.RawMessage
	// TopP is the request's top_p.
	TopP json.RawMessage
	// MaxOutputTokens is the request's max_output_tokens.
	MaxOutputTokens json.RawMessage
	// PreviousResponseID is the request's previous_response_id.
	PreviousResponseID json.RawMessage
	// Reasoning is the request's reasoning object.
	Reasoning json.RawMessage
	// Text is the request's text object.
	Text json.RawMessage
	// Metadata is the request's metadata object.
	Metadata json.RawMessage
	// Store is the request's store flag.
	Store json.RawMessage
	// Truncation is the request's truncation strategy ("auto" or
	// "disabled"); any other value is left out.
	Truncation json.RawMessage
	// User, SafetyIdentifier and PromptCacheKey are the request's
	// identifiers (a string each; user is left out when absent, as the
	// spec does not let it be null).
	User, SafetyIdentifier, PromptCacheKey json.RawMessage
	// ServiceTier is the request's service_tier; the Response reports the
	// tier used (echoServiceTier).
	ServiceTier json.RawMessage
	// MaxToolCalls and TopLogprobs are the request's max_tool_calls and
	// top_logprobs.
	MaxToolCalls, TopLogprobs json.RawMessage
}

// EchoOf reads the fields a Response object echoes from a Responses request
// body (or a request template), each as its raw JSON, copied. An
// instructions value that is not a string, null or an array is left out.
func EchoOf(body []byte) RequestEcho {
	var r RequestEcho
	raw := func(v gjson.Result) json.RawMessage { return json.RawMessage(v.Raw) }
	// Read in place: every value kept is copied by raw, so the body may be
	// large without being copied whole.
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "instructions":
			if v.Type == gjson.String || v.Type == gjson.Null || v.IsArray() {
				r.Instructions = raw(v)
			}
		case "tools":
			r.Tools = raw(v)
		case "tool_choice":
			r.ToolChoice = raw(v)
		case "parallel_tool_calls":
			r.ParallelToolCalls = raw(v)
		case "temperature":
			r.Temperature = raw(v)
		case "top_p":
			r.TopP = raw(v)
		case "max_output_tokens":
			r.MaxOutputTokens = raw(v)
		case "previous_response_id":
			r.PreviousResponseID = raw(v)
		case "reasoning":
			r.Reasoning = raw(v)
		case "text":
			r.Text = raw(v)
		case "metadata":
			r.Metadata = raw(v)
		case "store":
			r.Store = raw(v)
		case "truncation":
			if v.Str == "auto" || v.Str == "disabled" {
				r.Truncation = raw(v)
			}
		case "user":
			r.User = raw(v)
		case "safety_identifier":
			r.SafetyIdentifier = raw(v)
		case "prompt_cache_key":
			r.PromptCacheKey = raw(v)
		case "service_tier":
			r.ServiceTier = raw(v)
		case "max_tool_calls":
			r.MaxToolCalls = raw(v)
		case "top_logprobs":
			r.TopLogprobs = raw(v)
		}
		return true
	})
	return r
}

// reqFields holds the top-level fields ToChat reads.
type reqFields struct {
	model, input, instructions, tools, toolChoice, parallelToolCalls gjson.Result
	maxOutputTokens, temperature, topP, reasoning, text, stream      gjson.Result
	user, promptCacheKey, safetyIdentifier, serviceTier              gjson.Result
	previousResponseID, store, metadata, truncation, maxToolCalls    gjson.Result
	background, conversation, prompt                                 gjson.Result
	include, topLogprobs                                             gjson.Result
	// passthrough holds the members named in passthroughFields, in request
	// order.
	passthrough []passthroughMember
}

// passthroughMember is a top-level member forwarded unchanged: its key and
// its value's raw JSON.
type passthroughMember struct{ key, raw string }

// forwardedFields lists every top-level Responses field that is translated
// into the Chat body, with the Chat field it becomes; passthroughFields lists
// those forwarded unchanged. Every other field is dropped and reported in
// RequestInfo.DroppedFields; of those, previous_response_id, store, metadata
// and truncation are read for the gateway (RequestInfo, RequestEcho) and
// background, conversation and prompt are rejected when set (see set). README "Chat-Completions-only upstreams" lists all three kinds.
var forwardedFields = map[string]string{
	"model":               "model",
	"input":               "messages",
	"instructions":        "messages[0] (role system)",
	"tools":               "tools (function tools only)",
	"tool_choice":         "tool_choice",
	"parallel_tool_calls": "parallel_tool_calls",
	"max_output_tokens":   "max_tokens",
	"temperature":         "temperature",
	"top_p":               "top_p",
	"reasoning":           "reasoning_effort (from reasoning.effort)",
	"text":                "response_format (from text.format), verbosity (from text.verbosity)",
	"stream":              "stream, stream_options.include_usage",
	"user":                "user",
	"prompt_cache_key":    "prompt_cache_key",
	"safety_identifier":   "safety_identifier",
	"service_tier":        "service_tier",
}

// passthroughFields are the top-level fields forwarded to a Chat upstream
// as they were sent: Chat Completions request fields that the Responses API
// lacks but a client may still send, and the sampling extensions of
// llama.cpp's server and vLLM (their OpenAI-compatible servers read them
// from the Chat body). They only shape sampling, not the answer's form, so
// the stream translation reads the answer the same with or without them;
// the upstream validates their values. Fields that would change the answer's
// form (n, logprobs, response_format, …) are not here: they are dropped or
// translated from their Responses counterparts.
var passthroughFields = map[string]bool{
	// Chat Completions.
	"seed": true, "stop": true, "frequency_penalty": true, "presence_penalty": true, "logit_bias": true,
	// llama.cpp and vLLM sampling.
	"top_k": true, "min_p": true, "typical_p": true, "top_n_sigma": true,
	"repetition_penalty": true, "repeat_penalty": true, "repeat_last_n": true,
	"min_tokens": true, "stop_token_ids": true, "ignore_eos": true,
	"mirostat": true, "mirostat_tau": true, "mirostat_eta": true,
	"dynatemp_range": true, "dynatemp_exponent": true,
	"xtc_probability": true, "xtc_threshold": true,
	"dry_multiplier": true, "dry_base": true, "dry_allowed_length": true, "dry_penalty_last_n": true,
	"dry_sequence_breakers": true, "samplers": true,
}

// set records a top-level field. It reports whether the field is forwarded
// to the upstream in some form.
func (f *reqFields) set(key string, v gjson.Result) bool {
	switch key {
	case "model":
		f.model = v
	case "input":
		f.input = v
	case "instructions":
		f.instructions = v
	case "tools":
		f.tools = v
	case "tool_choice":
		f.toolChoice = v
	case "parallel_tool_calls":
		f.parallelToolCalls = v
	case "max_output_tokens":
		f.maxOutputTokens = v
	case "temperature":
		f.temperature = v
	case "top_p":
		f.topP = v
	case "reasoning":
		f.reasoning = v
	case "text":
		f.text = v
	case "stream":
		f.stream = v
	case "user":
		f.user = v
	case "prompt_cache_key":
		f.promptCacheKey = v
	case "safety_identifier":
		f.safetyIdentifier = v
	case "service_tier":
		f.serviceTier = v
	// Read for the gateway, not forwarded.
	case "previous_response_id":
		f.previousResponseID = v
		return false
	case "store":
		f.store = v
		return false
	case "metadata":
		f.metadata = v
		return false
	case "truncation": // echoed; a Chat upstream has no such choice
		f.truncation = v
		return false
	case "max_tool_calls": // echoed; it bounds built-in tool calls, which a Chat upstream never makes
		f.maxToolCalls = v
		return false
	// Rejected when set.
	case "background":
		f.background = v
		return false
	case "conversation":
		f.conversation = v
		return false
	case "prompt":
		f.prompt = v
		return false
	case "include": // the logprobs one is rejected; the others ask for what a Chat upstream never has
		f.include = v
		return false
	case "top_logprobs":
		f.topLogprobs = v
		return false
	default:
		if !passthroughFields[key] {
			return false
		}
		if present(v) { // a null means the upstream's default, as leaving it out does
			f.passthrough = append(f.passthrough, passthroughMember{key, v.Raw})
		}
	}
	return true
}

// MissingInput is the error for a Responses request without an input that
// is to go to a Chat Completions upstream: a Chat turn is its messages, and
// OpenAI's CreateResponse, which requires no input, takes it from a prompt
// template, a conversation or previous_response_id, which a Chat upstream
// has none of. One message whichever way the input is missing (ToChat, the
// gateway's Chat bridge).
func MissingInput() *apierr.Error {
	return apierr.Invalid("input", apierr.CodeMissingField,
		"Missing required parameter: 'input' (a Chat Completions upstream takes a turn only from its input, not from instructions, a prompt, a conversation or previous_response_id alone).")
}

// ToChat converts a Responses request body to a Chat Completions body. history
// holds earlier conversation items (the already-expanded previous_response_id
// chain: input and output items in Responses item shape) that go before this
// request's input. Every error is a 400 invalid_request_error whose param
// names the offending field (input[3], input[3].content[1], tools[0].name, …);
// errors in history items name previous_response_id.
func ToChat(body []byte, history []json.RawMessage, opts RequestOptions) (chat []byte, info RequestInfo, err *apierr.Error) {
	if tooDeep(body) {
		return nil, info, apierr.Invalid("", apierr.CodeInvalidJSON, "The request body nests objects or arrays deeper than %d levels.", maxDepth)
	}
	if !gjson.ValidBytes(body) {
		return nil, info, apierr.Invalid("", apierr.CodeInvalidJSON, "The request body is not valid JSON.")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, info, apierr.Invalid("", apierr.CodeInvalidType, "The request body must be a JSON object.")
	}
	var f reqFields
	eachMember(root.Raw, func(k, v string) bool {
		if !f.set(k, resultOf(v)) {
			info.DroppedFields = append(info.DroppedFields, k)
		}
		return true
	})

	// Fields Chat cannot honour and that change the answer if ignored.
	if present(f.background) {
		if !f.background.IsBool() {
			return nil, info, typeErr("background", "a boolean")
		}
		if f.background.Type == gjson.True {
			return nil, info, apierr.Invalid("background", codeUnsupportedParameter, "Background responses are not supported by this upstream.")
		}
	}
	if present(f.conversation) {
		return nil, info, apierr.Invalid("conversation", codeUnsupportedParameter, "Conversations are not supported by this upstream; use previous_response_id.")
	}
	if present(f.prompt) {
		return nil, info, apierr.Invalid("prompt", codeUnsupportedParameter, "Prompt templates are not supported by this upstream.")
	}
	// Logprobs asked for and dropped would come back as empty arrays, read
	// as "none" rather than "not supported".
	if i := includedLogprobs(f.include); i >= 0 {
		return nil, info, apierr.Invalid(fmt.Sprintf("include[%d]", i), codeUnsupportedParameter, "Logprobs (message.output_text.logprobs) are not supported by this upstream.")
	}
	if f.topLogprobs.Type == gjson.Number && f.topLogprobs.Num != 0 {
		return nil, info, apierr.Invalid("top_logprobs", codeUnsupportedParameter, "top_logprobs is not supported by this upstream.")
	}

	// Scalars first: they are cheap and their errors are the easiest to read.
	model := opts.DefaultModel
	if present(f.model) {
		if f.model.Type != gjson.String {
			return nil, info, typeErr("model", "a string")
		}
		if f.model.Str != "" {
			model = f.model.Str
		}
	}
	if model == "" {
		return nil, info, apierr.Invalid("model", apierr.CodeMissingField, "Missing required parameter: 'model'.")
	}
	info.Model = model
	if present(f.stream) {
		if !f.stream.IsBool() {
			return nil, info, typeErr("stream", "a boolean")
		}
		info.Stream = f.stream.Type == gjson.True
	}
	if present(f.previousResponseID) {
		if f.previousResponseID.Type != gjson.String {
			return nil, info, typeErr("previous_response_id", "a string")
		}
		info.PreviousResponseID = f.previousResponseID.Str
	}
	if present(f.store) {
		if !f.store.IsBool() {
			return nil, info, typeErr("store", "a boolean")
		}
		b := f.store.Type == gjson.True
		info.Store = &b
	}
	if aerr := checkMetadata(f.metadata); aerr != nil {
		return nil, info, aerr
	}
	for _, chk := range []struct {
		name string
		v    gjson.Result
		kind gjson.Type
	}{
		{"instructions", f.instructions, gjson.String},
		{"user", f.user, gjson.String},
		{"prompt_cache_key", f.promptCacheKey, gjson.String},
		{"safety_identifier", f.safetyIdentifier, gjson.String},
		{"service_tier", f.serviceTier, gjson.String},
		{"temperature", f.temperature, gjson.Number},
		{"top_p", f.topP, gjson.Number},
	} {
		if present(chk.v) && chk.v.Type != chk.kind {
			want := "a string"
			if chk.kind == gjson.Number {
				want = "a number"
			}
			return nil, info, typeErr(chk.name, want)
		}
	}
	if present(f.parallelToolCalls) && !f.parallelToolCalls.IsBool() {
		return nil, info, typeErr("parallel_tool_calls", "a boolean")
	}
	if present(f.maxOutputTokens) {
		if f.maxOutputTokens.Type != gjson.Number {
			return nil, info, typeErr("max_output_tokens", "an integer")
		}
		if _, perr := strconv.ParseInt(f.maxOutputTokens.Raw, 10, 64); perr != nil {
			return nil, info, typeErr("max_output_tokens", "an integer")
		}
	}
	effort, aerr := reasoningEffort(f.reasoning)
	if aerr != nil {
		return nil, info, aerr
	}
	responseFormat, verbosity, aerr := textFormat(f.text)
	if aerr != nil {
		return nil, info, aerr
	}

	// Tools and tool_choice.
	tools, aerr := convertTools(f.tools)
	if aerr != nil {
		return nil, info, aerr
	}
	info.DroppedTools = tools.dropped
	toolChoice, aerr := convertToolChoice(f.toolChoice, &tools)
	if aerr != nil {
		return nil, info, aerr
	}

	// Messages: instructions, then history, then this turn's input.
	c := converter{opts: opts}
	if present(f.instructions) {
		c.msgs = append(c.msgs, chatMsg{role: "system", content: f.instructions.Raw})
	}
	c.hist = true
	for i, h := range history {
		if tooDeep(h) || !gjson.ValidBytes(h) {
			return nil, info, apierr.Invalid("previous_response_id", apierr.CodeInvalidJSON, "Stored conversation item %d is not valid JSON.", i)
		}
		if _, aerr := c.item(i, gjson.ParseBytes(h)); aerr != nil {
			return nil, info, aerr
		}
	}
	c.hist = false
	if present(f.input) {
		switch {
		case f.input.Type == gjson.String:
			c.msgs = append(c.msgs, chatMsg{role: "user", content: f.input.Raw})
			item := make([]byte, 0, len(f.input.Raw)+80)
			item = append(item, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
			item = append(item, f.input.Raw...)
			item = append(item, "}]}"...)
			info.InputItems = []json.RawMessage{item}
		case f.input.IsArray():
			var aerr *apierr.Error
			i := 0
			// The stored items share one buffer (each capped, so appending
			// to one cannot overwrite the next).
			store := make([]byte, 0, len(f.input.Raw)+len(f.input.Raw)/8+256)
			eachElement(f.input.Raw, func(raw string) bool {
				it := resultOf(raw)
				var fields itemFields
				if fields, aerr = c.item(i, it); aerr != nil {
					return false
				}
				start := len(store)
				store = appendNormalised(store, it, fields)
				info.InputItems = append(info.InputItems, json.RawMessage(store[start:len(store):len(store)]))
				i++
				return true
			})
			if aerr != nil {
				return nil, info, aerr
			}
		default:
			return nil, info, typeErr("input", "a string or an array of items")
		}
	}
	c.flushReasoning()
	if len(c.msgs) == 0 {
		return nil, info, MissingInput()
	}

	// Render the Chat body.
	size := len(body) + 256
	for _, h := range history {
		size += len(h)
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	out = appendKey(out, "model")
	out = jsonx.AppendQuote(out, model)
	out = appendKey(out, "messages")
	out = c.appendMessages(out)
	if len(tools.chat) > 0 {
		out = appendKey(out, "tools")
		out = append(out, tools.chat...)
		if toolChoice != "" {
			out = appendKey(out, "tool_choice")
			out = append(out, toolChoice...)
		}
		if present(f.parallelToolCalls) {
			out = appendKey(out, "parallel_tool_calls")
			out = append(out, f.parallelToolCalls.Raw...)
		}
	}
	for _, kv := range [...]struct {
		key string
		v   gjson.Result
	}{
		{"max_tokens", f.maxOutputTokens},
		{"temperature", f.temperature},
		{"top_p", f.topP},
		{"user", f.user},
		{"prompt_cache_key", f.promptCacheKey},
		{"safety_identifier", f.safetyIdentifier},
		{"service_tier", f.serviceTier},
	} {
		if present(kv.v) {
			out = appendKey(out, kv.key)
			out = append(out, kv.v.Raw...)
		}
	}
	if effort != "" {
		out = appendKey(out, "reasoning_effort")
		out = append(out, effort...)
	}
	if responseFormat != nil {
		out = appendKey(out, "response_format")
		out = append(out, responseFormat...)
	}
	if verbosity != "" {
		out = appendKey(out, "verbosity")
		out = append(out, verbosity...)
	}
	for _, m := range f.passthrough {
		out = appendKey(out, m.key)
		out = append(out, m.raw...)
	}
	if info.Stream {
		out = append(out, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	out = append(out, '}')

	info.Echo = RequestEcho{
		Instructions:       rawMsg(f.instructions),
		Tools:              tools.echo,
		ToolChoice:         rawMsg(f.toolChoice),
		ParallelToolCalls:  rawMsg(f.parallelToolCalls),
		Temperature:        rawMsg(f.temperature),
		TopP:               rawMsg(f.topP),
		MaxOutputTokens:    rawMsg(f.maxOutputTokens),
		PreviousResponseID: rawMsg(f.previousResponseID),
		Reasoning:          rawMsg(f.reasoning),
		Text:               rawMsg(f.text),
		Metadata:           rawMsg(f.metadata),
		Store:              rawMsg(f.store),
		User:               rawMsg(f.user),
		SafetyIdentifier:   rawMsg(f.safetyIdentifier),
		PromptCacheKey:     rawMsg(f.promptCacheKey),
		ServiceTier:        rawMsg(f.serviceTier),
		MaxToolCalls:       rawMsg(f.maxToolCalls),
		TopLogprobs:        rawMsg(f.topLogprobs),
	}
	if f.truncation.Str == "auto" || f.truncation.Str == "disabled" {
		info.Echo.Truncation = rawMsg(f.truncation)
	}
	return out, info, nil
}

// rawMsg copies a present value's raw JSON; nil when absent or null.
func rawMsg(r gjson.Result) json.RawMessage {
	if !present(r) {
		return nil
	}
	return json.RawMessage(strings.Clone(r.Raw))
}

func typeErr(param, want string) *apierr.Error {
	return apierr.Invalid(param, apierr.CodeInvalidType, "Invalid type for '%s': expected %s.", param, want)
}

// reasoningEffort returns reasoning.effort as a raw JSON string, or "".
func reasoningEffort(r gjson.Result) (string, *apierr.Error) {
	if !present(r) {
		return "", nil
	}
	if !r.IsObject() {
		return "", typeErr("reasoning", "an object")
	}
	e := r.Get("effort")
	if !present(e) {
		return "", nil
	}
	if e.Type != gjson.String {
		return "", typeErr("reasoning.effort", "a string")
	}
	return e.Raw, nil
}

// textFormat converts text.format to a Chat response_format (nil for plain
// text) and returns text.verbosity as a raw string ("" when absent).
func textFormat(t gjson.Result) (format []byte, verbosity string, err *apierr.Error) {
	if !present(t) {
		return nil, "", nil
	}
	if !t.IsObject() {
		return nil, "", typeErr("text", "an object")
	}
	if v := t.Get("verbosity"); present(v) {
		if v.Type != gjson.String {
			return nil, "", typeErr("text.verbosity", "a string")
		}
		verbosity = v.Raw
	}
	fm := t.Get("format")
	if !present(fm) {
		return nil, verbosity, nil
	}
	if !fm.IsObject() {
		return nil, "", typeErr("text.format", "an object")
	}
	typ := fm.Get("type")
	if typ.Type != gjson.String {
		return nil, "", typeErr("text.format.type", "a string")
	}
	switch typ.Str {
	case "text":
		return nil, verbosity, nil
	case "json_object":
		return []byte(`{"type":"json_object"}`), verbosity, nil
	case "json_schema":
		name, schema := fm.Get("name"), fm.Get("schema")
		if name.Type != gjson.String {
			return nil, "", apierr.Invalid("text.format.name", apierr.CodeMissingField, "Missing required parameter: 'text.format.name'.")
		}
		if !schema.IsObject() {
			return nil, "", apierr.Invalid("text.format.schema", apierr.CodeMissingField, "Missing required parameter: 'text.format.schema' (an object).")
		}
		out := append([]byte(nil), `{"type":"json_schema","json_schema":{"name":`...)
		out = append(out, name.Raw...)
		if d := fm.Get("description"); present(d) {
			if d.Type != gjson.String {
				return nil, "", typeErr("text.format.description", "a string")
			}
			out = append(out, `,"description":`...)
			out = append(out, d.Raw...)
		}
		out = append(out, `,"schema":`...)
		out = append(out, schema.Raw...)
		if s := fm.Get("strict"); present(s) {
			if !s.IsBool() {
				return nil, "", typeErr("text.format.strict", "a boolean")
			}
			out = append(out, `,"strict":`...)
			out = append(out, s.Raw...)
		}
		return append(out, "}}"...), verbosity, nil
	default:
		return nil, "", apierr.Invalid("text.format.type", codeInvalidValue, "Invalid value for 'text.format.type': %q is not one of text, json_object, json_schema.", typ.Str)
	}
}

// toolSet is the outcome of converting the tools array.
type toolSet struct {
	chat    []byte          // the Chat tools array; nil when no tool is kept
	echo    json.RawMessage // the kept tools in Responses shape
	names   map[string]bool // kept function names
	dropped []string
}

func convertTools(t gjson.Result) (ts toolSet, err *apierr.Error) {
	if !present(t) {
		return ts, nil
	}
	if !t.IsArray() {
		return ts, typeErr("tools", "an array")
	}
	var chat, echo []byte
	i := 0
	t.ForEach(func(_, tool gjson.Result) bool {
		p := "tools[" + strconv.Itoa(i) + "]"
		i++
		if !tool.IsObject() {
			err = typeErr(p, "an object")
			return false
		}
		var typ, name, desc, params, strict gjson.Result
		tool.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "type":
				typ = v
			case "name":
				name = v
			case "description":
				desc = v
			case "parameters":
				params = v
			case "strict":
				strict = v
			}
			return true
		})
		switch {
		case present(typ) && typ.Type != gjson.String:
			err = typeErr(p+".type", "a string")
			return false
		case typ.Type != gjson.String:
			err = apierr.Invalid(p+".type", apierr.CodeMissingField, "Missing required parameter: '%s.type'.", p)
			return false
		}
		if typ.Str != "function" {
			label := typ.Str
			if name.Type == gjson.String && name.Str != "" {
				label += ":" + name.Str
			}
			ts.dropped = append(ts.dropped, label)
			return true
		}
		switch {
		case present(name) && name.Type != gjson.String:
			err = typeErr(p+".name", "a string")
			return false
		case name.Type != gjson.String || name.Str == "":
			err = apierr.Invalid(p+".name", apierr.CodeMissingField, "Missing required parameter: '%s.name'.", p)
			return false
		}
		if present(desc) && desc.Type != gjson.String {
			err = typeErr(p+".description", "a string")
			return false
		}
		if present(params) && !params.IsObject() {
			err = typeErr(p+".parameters", "an object")
			return false
		}
		if present(strict) && !strict.IsBool() {
			err = typeErr(p+".strict", "a boolean")
			return false
		}
		if ts.names == nil {
			ts.names = make(map[string]bool)
		}
		ts.names[name.Str] = true
		if len(chat) == 0 {
			chat = append(chat, '[')
			echo = append(echo, '[')
		} else {
			chat = append(chat, ',')
			echo = append(echo, ',')
		}
		chat = append(chat, `{"type":"function","function":{"name":`...)
		chat = append(chat, name.Raw...)
		if present(desc) {
			chat = append(chat, `,"description":`...)
			chat = append(chat, desc.Raw...)
		}
		if present(params) {
			chat = append(chat, `,"parameters":`...)
			chat = append(chat, params.Raw...)
		}
		if present(strict) {
			chat = append(chat, `,"strict":`...)
			chat = append(chat, strict.Raw...)
		}
		chat = append(chat, "}}"...)
		echo = append(echo, tool.Raw...)
		return true
	})
	if err != nil {
		return ts, err
	}
	if len(chat) > 0 {
		ts.chat = append(chat, ']')
		ts.echo = append(echo, ']')
	}
	return ts, nil
}

// convertToolChoice returns the Chat tool_choice as raw JSON ("" to omit it).
// An allowed_tools choice narrows ts.chat to the allowed functions.
func convertToolChoice(tc gjson.Result, ts *toolSet) (string, *apierr.Error) {
	if !present(tc) {
		return "", nil
	}
	switch {
	case tc.Type == gjson.String:
		switch tc.Str {
		case "none", "auto":
			return tc.Raw, nil
		case "required":
			if len(ts.names) == 0 {
				return "", apierr.Invalid("tool_choice", codeInvalidValue, "tool_choice 'required' needs at least one function tool; this upstream supports no other kind of tool.")
			}
			return tc.Raw, nil
		}
		return "", apierr.Invalid("tool_choice", codeInvalidValue, "Invalid value for 'tool_choice': %q is not one of none, auto, required.", tc.Str)
	case tc.IsObject():
		typ := tc.Get("type")
		if typ.Type != gjson.String {
			return "", apierr.Invalid("tool_choice.type", apierr.CodeMissingField, "Missing required parameter: 'tool_choice.type'.")
		}
		switch typ.Str {
		case "function":
			name := tc.Get("name")
			if name.Type != gjson.String {
				return "", apierr.Invalid("tool_choice.name", apierr.CodeMissingField, "Missing required parameter: 'tool_choice.name'.")
			}
			if !ts.names[name.Str] {
				return "", apierr.Invalid("tool_choice", codeInvalidValue, "tool_choice names function %q, which is not among the function tools.", name.Str)
			}
			return `{"type":"function","function":{"name":` + name.Raw + `}}`, nil
		case "allowed_tools":
			return allowedTools(tc, ts)
		}
		return "", apierr.Invalid("tool_choice", codeUnsupportedValue, "tool_choice requires a %q tool, which this upstream (Chat Completions) does not support.", typ.Str)
	default:
		return "", typeErr("tool_choice", "a string or an object")
	}
}

// allowedTools maps an allowed_tools choice onto Chat by keeping only the
// allowed functions in the tools array and using the choice's mode.
func allowedTools(tc gjson.Result, ts *toolSet) (string, *apierr.Error) {
	mode := tc.Get("mode")
	if mode.Type != gjson.String || (mode.Str != "auto" && mode.Str != "required") {
		return "", apierr.Invalid("tool_choice.mode", codeInvalidValue, "tool_choice.mode must be 'auto' or 'required'.")
	}
	list := tc.Get("tools")
	if !list.IsArray() {
		return "", typeErr("tool_choice.tools", "an array")
	}
	allowed := map[string]bool{}
	var err *apierr.Error
	i := 0
	list.ForEach(func(_, t gjson.Result) bool {
		p := "tool_choice.tools[" + strconv.Itoa(i) + "]"
		i++
		typ, name := t.Get("type"), t.Get("name")
		switch {
		case present(typ) && typ.Type != gjson.String:
			err = typeErr(p+".type", "a string")
			return false
		case typ.Type != gjson.String:
			err = apierr.Invalid(p+".type", apierr.CodeMissingField, "Missing required parameter: '%s.type'.", p)
			return false
		}
		if typ.Str != "function" {
			return true // a dropped tool kind: it cannot be called anyway
		}
		if name.Type != gjson.String || !ts.names[name.Str] {
			err = apierr.Invalid(p, codeInvalidValue, "tool_choice allows function %q, which is not among the function tools.", name.Str)
			return false
		}
		allowed[name.Str] = true
		return true
	})
	if err != nil {
		return "", err
	}
	if len(allowed) == 0 {
		return "", apierr.Invalid("tool_choice", codeUnsupportedValue, "tool_choice allows no function tool; this upstream supports no other kind of tool.")
	}
	// Rebuild the Chat tools array with the allowed functions only.
	var chat []byte
	gjson.ParseBytes(ts.chat).ForEach(func(_, t gjson.Result) bool {
		if allowed[t.Get("function.name").Str] {
			if len(chat) == 0 {
				chat = append(chat, '[')
			} else {
				chat = append(chat, ',')
			}
			chat = append(chat, t.Raw...)
		}
		return true
	})
	ts.chat = append(chat, ']')
	return mode.Raw, nil
}

// chatMsg is one Chat message under construction. Raw fields hold JSON text.
type chatMsg struct {
	role       string
	content    string // raw JSON (string or array); "" means none
	refusal    string // raw JSON string; "" means none
	toolCallID string // raw JSON string (tool messages)
	toolCalls  []byte // comma-separated raw tool call objects
	reasoning  string // plain text
}

// converter turns Responses items into Chat messages.
type converter struct {
	opts      RequestOptions
	msgs      []chatMsg
	reasoning string // text of reasoning items waiting for their assistant message
	hist      bool   // converting history items (errors name previous_response_id)
}

// itemFields are the item keys the converter reads, gathered in one pass.
// Only typ and role carry Str; the other fields are used through Type and Raw
// (or iterated), so their possibly huge strings are never unescaped.
type itemFields struct {
	typ, role, content, callID, name, arguments, output, summary gjson.Result
}

func readItem(it gjson.Result) (f itemFields) {
	eachMember(it.Raw, func(k, v string) bool {
		switch k {
		case "type":
			f.typ = resultOf(v)
		case "role":
			f.role = resultOf(v)
		case "content":
			f.content = rawResult(v)
		case "call_id":
			f.callID = rawResult(v)
		case "name":
			f.name = rawResult(v)
		case "arguments":
			f.arguments = rawResult(v)
		case "output":
			f.output = rawResult(v)
		case "summary":
			f.summary = rawResult(v)
		}
		return true
	})
	return f
}

// param names item i (plus a suffix such as ".content[1]") for an error.
func (c *converter) param(i int, suffix string) string {
	if c.hist {
		return "previous_response_id"
	}
	return "input[" + strconv.Itoa(i) + "]" + suffix
}

// where describes item i in an error message.
func (c *converter) where(i int, suffix string) string {
	if c.hist {
		return "stored conversation item " + strconv.Itoa(i) + suffix
	}
	return "input[" + strconv.Itoa(i) + "]" + suffix
}

func (c *converter) missing(i int, field string) *apierr.Error {
	return apierr.Invalid(c.param(i, "."+field), apierr.CodeMissingField, "Missing required parameter: '%s'.", c.where(i, "."+field))
}

func (c *converter) wrongType(i int, suffix, want string) *apierr.Error {
	return apierr.Invalid(c.param(i, suffix), apierr.CodeInvalidType, "Invalid type for '%s': expected %s.", c.where(i, suffix), want)
}

func (c *converter) unsupported(i int, suffix, format string, args ...any) *apierr.Error {
	return apierr.Invalid(c.param(i, suffix), codeUnsupportedValue, "%s: %s", c.where(i, suffix), fmt.Sprintf(format, args...))
}

// item converts one Responses item and returns the fields it read.
func (c *converter) item(i int, it gjson.Result) (itemFields, *apierr.Error) {
	if !it.IsObject() {
		return itemFields{}, c.wrongType(i, "", "an object")
	}
	f := readItem(it)
	typ := ""
	if present(f.typ) {
		if f.typ.Type != gjson.String {
			return f, c.wrongType(i, ".type", "a string")
		}
		typ = f.typ.Str
	} else if present(f.role) {
		typ = "message"
	}
	switch typ {
	case "message":
		return f, c.message(i, f)
	case "function_call":
		return f, c.functionCall(i, f)
	case "function_call_output":
		return f, c.functionCallOutput(i, f)
	case "reasoning":
		return f, c.reasoningItem(i, f)
	case "":
		return f, c.missing(i, "type")
	default:
		return f, c.unsupported(i, "", "item type %q is not supported by this upstream (Chat Completions).", typ)
	}
}

// lastAssistant returns the last message when it is an assistant message.
func (c *converter) lastAssistant() *chatMsg {
	if n := len(c.msgs); n > 0 && c.msgs[n-1].role == "assistant" {
		return &c.msgs[n-1]
	}
	return nil
}

// takeReasoning hands the pending reasoning text to m.
func (c *converter) takeReasoning(m *chatMsg) {
	if c.reasoning == "" {
		return
	}
	m.reasoning = joinReasoning(m.reasoning, c.reasoning)
	c.reasoning = ""
}

// flushReasoning attaches pending reasoning at a non-assistant boundary: to
// the assistant message just before it, or nowhere.
func (c *converter) flushReasoning() {
	if m := c.lastAssistant(); m != nil {
		c.takeReasoning(m)
	}
	c.reasoning = ""
}

func joinReasoning(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n\n" + b
}

func (c *converter) message(i int, f itemFields) *apierr.Error {
	if f.role.Type != gjson.String {
		if !present(f.role) {
			return c.missing(i, "role")
		}
		return c.wrongType(i, ".role", "a string")
	}
	role := f.role.Str
	switch role {
	case "user", "system", "developer", "assistant":
	default:
		return apierr.Invalid(c.param(i, ".role"), codeInvalidValue, "Invalid value for '%s': %q is not one of user, system, developer, assistant.", c.where(i, ".role"), role)
	}
	if !present(f.content) {
		return c.missing(i, "content")
	}
	if f.content.Type != gjson.String && !f.content.IsArray() {
		return c.wrongType(i, ".content", "a string or an array of content parts")
	}
	if role == "assistant" {
		return c.assistantMessage(i, f.content)
	}
	content, err := c.inputContent(i, role, f.content)
	if err != nil {
		return err
	}
	switch role {
	case "developer":
		role = c.opts.DeveloperRole
		if role == "" {
			role = "system"
		}
	}
	c.flushReasoning()
	c.msgs = append(c.msgs, chatMsg{role: role, content: content})
	return nil
}

// eachPart walks a message's content parts, checks that each is an object
// with a string type, and hands it to fn with its param suffix. The first
// error stops the walk.
func (c *converter) eachPart(i int, content gjson.Result, fn func(suffix, typ string, p gjson.Result) *apierr.Error) *apierr.Error {
	var err *apierr.Error
	n := 0
	content.ForEach(func(_, p gjson.Result) bool {
		suffix := ".content[" + strconv.Itoa(n) + "]"
		n++
		if !p.IsObject() {
			err = c.wrongType(i, suffix, "an object")
			return false
		}
		typ := p.Get("type")
		if typ.Type != gjson.String {
			err = apierr.Invalid(c.param(i, suffix+".type"), apierr.CodeMissingField, "Missing required parameter: '%s'.", c.where(i, suffix+".type"))
			return false
		}
		err = fn(suffix, typ.Str, p)
		return err == nil
	})
	return err
}

// inputContent converts user/system/developer content to Chat content.
func (c *converter) inputContent(i int, role string, content gjson.Result) (string, *apierr.Error) {
	if content.Type == gjson.String {
		return content.Raw, nil
	}
	var parts []byte
	n, texts, single := 0, 0, ""
	err := c.eachPart(i, content, func(suffix, typ string, p gjson.Result) *apierr.Error {
		n++
		if len(parts) == 0 {
			parts = append(parts, '[')
		} else {
			parts = append(parts, ',')
		}
		switch typ {
		case "input_text", "output_text", "text":
			text := p.Get("text")
			if text.Type != gjson.String {
				return c.wrongType(i, suffix+".text", "a string")
			}
			parts = append(parts, `{"type":"text","text":`...)
			parts = append(parts, text.Raw...)
			parts = append(parts, '}')
			texts++
			single = text.Raw
		case "input_image":
			if role != "user" {
				return c.unsupported(i, suffix, "images are only supported in user messages by this upstream.")
			}
			url, fileID, detail := p.Get("image_url"), p.Get("file_id"), p.Get("detail")
			if !present(url) {
				if present(fileID) {
					return c.unsupported(i, suffix, "input_image with file_id is not supported by this upstream; send image_url (a URL or a data: URL).")
				}
				return apierr.Invalid(c.param(i, suffix+".image_url"), apierr.CodeMissingField, "Missing required parameter: '%s'.", c.where(i, suffix+".image_url"))
			}
			if url.Type != gjson.String {
				return c.wrongType(i, suffix+".image_url", "a string")
			}
			parts = append(parts, `{"type":"image_url","image_url":{"url":`...)
			parts = append(parts, url.Raw...)
			if present(detail) {
				if detail.Type != gjson.String {
					return c.wrongType(i, suffix+".detail", "a string")
				}
				parts = append(parts, `,"detail":`...)
				if detail.Str == "original" { // Chat knows auto, low and high
					parts = append(parts, `"high"`...)
				} else {
					parts = append(parts, detail.Raw...)
				}
			}
			parts = append(parts, "}}"...)
		default:
			return c.unsupported(i, suffix, "content part type %q is not supported by this upstream (Chat Completions).", typ)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	switch {
	case n == 0:
		return `""`, nil
	case n == 1 && texts == 1:
		return single, nil
	}
	return string(append(parts, ']')), nil
}

// assistantMessage converts an output message. Assistant items that follow
// each other are one Chat assistant message (package doc, "Assistant
// history"): the text joins the message before it, tool_calls included, so
// the calls stay right before their tool results, as Chat servers and
// templates require (text streamed after a call's start is an item after
// the call's: Stream.holdText).
func (c *converter) assistantMessage(i int, content gjson.Result) *apierr.Error {
	var texts []string // JSON string literals
	var refusal []string
	if content.Type == gjson.String {
		texts = append(texts, content.Raw)
	} else {
		err := c.eachPart(i, content, func(suffix, typ string, p gjson.Result) *apierr.Error {
			switch typ {
			case "output_text", "input_text", "text":
				text := p.Get("text")
				if text.Type != gjson.String {
					return c.wrongType(i, suffix+".text", "a string")
				}
				texts = append(texts, text.Raw)
			case "refusal":
				r := p.Get("refusal")
				if r.Type != gjson.String {
					return c.wrongType(i, suffix+".refusal", "a string")
				}
				refusal = append(refusal, r.Str)
			default:
				return c.unsupported(i, suffix, "content part type %q is not supported in assistant messages by this upstream (Chat Completions).", typ)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	m := c.lastAssistant()
	if m == nil {
		c.msgs = append(c.msgs, chatMsg{role: "assistant"})
		m = &c.msgs[len(c.msgs)-1]
	} else {
		texts = append(textLiterals(m.content), texts...)
		if m.refusal != "" {
			refusal = append([]string{gjson.Parse(m.refusal).Str}, refusal...)
		}
	}
	m.content = assistantContent(texts)
	if len(refusal) > 0 {
		m.refusal = string(jsonx.AppendQuote(nil, strings.Join(refusal, "")))
	}
	c.takeReasoning(m)
	return nil
}

// assistantContent renders an assistant message's texts (JSON string
// literals): none is no content, one a string, several an array of text
// parts (package doc, "Content").
func assistantContent(texts []string) string {
	switch len(texts) {
	case 0:
		return ""
	case 1:
		return texts[0]
	}
	b := []byte{'['}
	for k, t := range texts {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":`...)
		b = append(b, t...)
		b = append(b, '}')
	}
	return string(append(b, ']'))
}

// textLiterals is the inverse of assistantContent: the texts (JSON string
// literals) of an assistant message's content.
func textLiterals(content string) []string {
	if content == "" {
		return nil
	}
	r := gjson.Parse(content)
	if r.Type == gjson.String {
		return []string{content}
	}
	var texts []string
	r.ForEach(func(_, p gjson.Result) bool {
		texts = append(texts, p.Get("text").Raw)
		return true
	})
	return texts
}

func (c *converter) functionCall(i int, f itemFields) *apierr.Error {
	for _, r := range []struct {
		name string
		v    gjson.Result
	}{{"call_id", f.callID}, {"name", f.name}, {"arguments", f.arguments}} {
		if !present(r.v) {
			return c.missing(i, r.name)
		}
		if r.v.Type != gjson.String {
			return c.wrongType(i, "."+r.name, "a string")
		}
	}
	m := c.lastAssistant()
	if m == nil {
		c.msgs = append(c.msgs, chatMsg{role: "assistant"})
		m = &c.msgs[len(c.msgs)-1]
	}
	c.takeReasoning(m)
	if len(m.toolCalls) > 0 {
		m.toolCalls = append(m.toolCalls, ',')
	}
	m.toolCalls = append(m.toolCalls, `{"id":`...)
	m.toolCalls = append(m.toolCalls, f.callID.Raw...)
	m.toolCalls = append(m.toolCalls, `,"type":"function","function":{"name":`...)
	m.toolCalls = append(m.toolCalls, f.name.Raw...)
	m.toolCalls = append(m.toolCalls, `,"arguments":`...)
	if isSpace(gjson.Parse(f.arguments.Raw).Str) {
		// A call made without arguments: Chat servers parse the history's
		// arguments as JSON (emptyArguments).
		m.toolCalls = jsonx.AppendQuote(m.toolCalls, emptyArguments)
	} else {
		m.toolCalls = append(m.toolCalls, f.arguments.Raw...)
	}
	m.toolCalls = append(m.toolCalls, "}}"...)
	return nil
}

func (c *converter) functionCallOutput(i int, f itemFields) *apierr.Error {
	if !present(f.callID) {
		return c.missing(i, "call_id")
	}
	if f.callID.Type != gjson.String {
		return c.wrongType(i, ".call_id", "a string")
	}
	if !present(f.output) {
		return c.missing(i, "output")
	}
	var content string
	switch {
	case f.output.Type == gjson.String:
		content = f.output.Raw
	case f.output.IsArray():
		var parts []byte
		n := 0
		single := ""
		var err *apierr.Error
		f.output.ForEach(func(_, p gjson.Result) bool {
			suffix := ".output[" + strconv.Itoa(n) + "]"
			n++
			if !p.IsObject() {
				err = c.wrongType(i, suffix, "an object")
				return false
			}
			typ := p.Get("type")
			switch typ.Str {
			case "input_text", "output_text", "text":
			default:
				err = c.unsupported(i, suffix, "function_call_output part type %q is not supported by this upstream (Chat tool messages carry text only).", typ.Str)
				return false
			}
			text := p.Get("text")
			if text.Type != gjson.String {
				err = c.wrongType(i, suffix+".text", "a string")
				return false
			}
			if len(parts) == 0 {
				parts = append(parts, '[')
			} else {
				parts = append(parts, ',')
			}
			parts = append(parts, `{"type":"text","text":`...)
			parts = append(parts, text.Raw...)
			parts = append(parts, '}')
			single = text.Raw
			return true
		})
		if err != nil {
			return err
		}
		switch n {
		case 0:
			content = `""`
		case 1:
			content = single
		default:
			content = string(append(parts, ']'))
		}
	default:
		return c.wrongType(i, ".output", "a string or an array of content parts")
	}
	c.flushReasoning()
	c.msgs = append(c.msgs, chatMsg{role: "tool", toolCallID: f.callID.Raw, content: content})
	return nil
}

func (c *converter) reasoningItem(i int, f itemFields) *apierr.Error {
	collect := func(field string, v gjson.Result) (string, *apierr.Error) {
		if !present(v) {
			return "", nil
		}
		if !v.IsArray() {
			return "", c.wrongType(i, "."+field, "an array")
		}
		var texts []string
		n := 0
		var err *apierr.Error
		v.ForEach(func(_, p gjson.Result) bool {
			suffix := "." + field + "[" + strconv.Itoa(n) + "]"
			n++
			if !p.IsObject() {
				err = c.wrongType(i, suffix, "an object")
				return false
			}
			t := p.Get("text")
			if t.Type != gjson.String {
				err = c.wrongType(i, suffix+".text", "a string")
				return false
			}
			if t.Str != "" {
				texts = append(texts, t.Str)
			}
			return true
		})
		return strings.Join(texts, "\n\n"), err
	}
	content, err := collect("content", f.content)
	if err != nil {
		return err
	}
	summary, err := collect("summary", f.summary)
	if err != nil {
		return err
	}
	if c.opts.OmitReasoning {
		return nil
	}
	text := content
	if text == "" {
		text = summary
	}
	c.reasoning = joinReasoning(c.reasoning, text)
	return nil
}

// appendMessages renders the messages array.
func (c *converter) appendMessages(out []byte) []byte {
	out = append(out, '[')
	for k := range c.msgs {
		m := &c.msgs[k]
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"role":`...)
		out = jsonx.AppendQuote(out, m.role)
		if m.role == "tool" {
			out = append(out, `,"tool_call_id":`...)
			out = append(out, m.toolCallID...)
		}
		out = append(out, `,"content":`...)
		switch {
		case m.content != "":
			out = append(out, m.content...)
		case m.role == "assistant" && (len(m.toolCalls) > 0 || m.refusal != ""):
			out = append(out, "null"...)
		default:
			out = append(out, `""`...)
		}
		if m.refusal != "" {
			out = append(out, `,"refusal":`...)
			out = append(out, m.refusal...)
		}
		if m.reasoning != "" {
			out = append(out, `,"reasoning_content":`...)
			out = jsonx.AppendQuote(out, m.reasoning)
		}
		if len(m.toolCalls) > 0 {
			out = append(out, `,"tool_calls":[`...)
			out = append(out, m.toolCalls...)
			out = append(out, ']')
		}
		out = append(out, '}')
	}
	return append(out, ']')
}

// appendNormalised appends an input item in stored Responses shape: a
// message gets an explicit type and its string content becomes one text
// part; other items are copied as they are.
func appendNormalised(out []byte, it gjson.Result, f itemFields) []byte {
	typed := present(f.typ)
	isMessage := f.typ.Str == "message" || (!typed && f.role.Type == gjson.String)
	if !isMessage || (typed && f.content.Type != gjson.String) {
		return append(out, it.Raw...)
	}
	part := "input_text"
	if f.role.Str == "assistant" {
		part = "output_text"
	}
	out = append(out, `{"type":"message","role":`...)
	out = append(out, f.role.Raw...)
	if id := it.Get("id"); id.Type == gjson.String {
		out = append(out, `,"id":`...)
		out = append(out, id.Raw...)
	}
	out = append(out, `,"content":`...)
	if f.content.Type == gjson.String {
		out = append(out, `[{"type":"`...)
		out = append(out, part...)
		out = append(out, `","text":`...)
		out = append(out, f.content.Raw...)
		if part == "output_text" {
			out = append(out, `,"annotations":[]`...)
		}
		out = append(out, "}]"...)
	} else {
		out = append(out, f.content.Raw...)
	}
	return append(out, '}')
}

// includedLogprobs is the index of message.output_text.logprobs in a
// request's include, or -1.
func includedLogprobs(include gjson.Result) int {
	at := -1
	if include.IsArray() {
		for i, v := range include.Array() {
			if v.Str == "message.output_text.logprobs" {
				at = i
				break
			}
		}
	}
	return at
}

// OpenAI's limits on metadata (the spec's Metadata): at most 16 pairs, keys
// up to 64 characters, string values up to 512. A Responses upstream
// refuses a request past them, so a Chat one's translation does too: the
// answer does not depend on which target of a route serves it.
const (
	maxMetadataPairs    = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// checkMetadata applies OpenAI's metadata rules, answering its 400s.
func checkMetadata(v gjson.Result) *apierr.Error {
	if !present(v) {
		return nil
	}
	if !v.IsObject() {
		return typeErr("metadata", "an object")
	}
	var aerr *apierr.Error
	n := 0
	v.ForEach(func(k, val gjson.Result) bool {
		n++
		switch {
		case n > maxMetadataPairs:
			aerr = apierr.Invalid("metadata", apierr.CodeInvalidValue,
				"Invalid 'metadata': too many properties. Expected an object with at most %d properties.", maxMetadataPairs)
		case utf8.RuneCountInString(k.Str) > maxMetadataKeyLen:
			aerr = apierr.Invalid("metadata", apierr.CodeInvalidValue,
				"Invalid 'metadata': key %q is too long. Expected a key with at most %d characters.", k.Str, maxMetadataKeyLen)
		case val.Type != gjson.String:
			aerr = typeErr("metadata."+k.Str, "a string")
		case utf8.RuneCountInString(val.Str) > maxMetadataValueLen:
			aerr = apierr.Invalid("metadata."+k.Str, apierr.CodeInvalidValue,
				"Invalid 'metadata.%s': string too long. Expected a string with maximum length %d.", k.Str, maxMetadataValueLen)
		}
		return aerr == nil
	})
	return aerr
}
