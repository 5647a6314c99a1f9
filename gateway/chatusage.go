package gateway

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/translate"
)

// Usage from Chat upstreams (README "Keys, limits and usage"). A Chat
// Completions stream reports usage only when asked
// (stream_options.include_usage), in a last chunk whose choices are empty.
// The gateway asks every Chat upstream it streams from: a Responses request
// translated to Chat always asks (translate.ToChat), and a Chat client's
// streaming request that does not ask gets include_usage: true set in its
// stream_options. What the client sees stays what it asked for: that
// usage-only chunk is counted (usage, limits, the access log, spans) and not
// sent (meterSink). Otherwise a client could stream without being counted
// against its key's token limits by sending include_usage: false.

// askChatUsage sets stream_options.include_usage on a streaming Chat
// client's request that does not ask for usage (no stream_options, null,
// or include_usage not true; stream_options' other members are kept), and
// marks its usage-only chunk to be hidden. stream_options of another JSON
// type is left for the upstream to refuse. It needs the request's meta (the
// meter hides the chunk), which every HTTP request has.
func (s *Server) askChatUsage(req *clientRequest) {
	if !req.ep.chat || !req.stream || req.meta == nil {
		return
	}
	opts := gjson.GetBytes(req.body, "stream_options")
	if opts.Get("continuous_usage_stats").Type == gjson.True {
		req.meta.mu.Lock()
		req.meta.showRunningUsage = true
		req.meta.mu.Unlock()
	}
	switch {
	case opts.Exists() && opts.Type != gjson.Null && !opts.IsObject():
		return
	case opts.Get("include_usage").Type == gjson.True:
		return // the client asked: it gets the chunk
	}
	// Missing or null stream_options becomes {"include_usage":true}; an
	// object keeps its other members.
	b, err := sjson.SetRawBytes(req.body, "stream_options.include_usage", []byte(`true`))
	if err != nil {
		return
	}
	req.body = b
	req.meta.mu.Lock()
	req.meta.hideChatUsage = true
	req.meta.mu.Unlock()
}

// usageOnlyChunk reports whether a Chat chunk carries usage and no choice:
// the chunk include_usage adds at the end of a stream.
func usageOnlyChunk(data []byte) bool {
	ch := gjson.GetBytes(data, "choices")
	return !ch.Exists() || ch.Type == gjson.Null || (ch.IsArray() && len(ch.Array()) == 0)
}

// withNullUsage is a Chat chunk with choices as a client that did not ask
// continuous_usage_stats gets it: with usage null. OpenAI sends a non-null
// usage only in the usage-only chunk, the last before [DONE], and only with
// include_usage; a client gets usage once (openai-go's
// ChatCompletionAccumulator adds every non-null usage it reads). A running
// count on other chunks, as a stream continued on another target would
// otherwise show the cut attempt's, is superseded by the final usage; the
// final count some upstreams send on the finish chunk as well as (vLLM,
// llama.cpp) or instead of (older llama.cpp builds) the usage-only chunk
// reaches a client that asked in that chunk (meterSink.Done). The meter
// has already counted it.
func withNullUsage(chunk []byte) []byte {
	out, err := sjson.SetRawBytes(chunk, "usage", []byte("null"))
	if err != nil {
		return chunk
	}
	return out
}

// noteChatUsage keeps, for Done, the usage-only chunk a Chat client that
// asked for usage is owed when its upstream sent the final usage on a
// finish chunk (o.finalUsage): data as the client's other chunks are (id,
// object, created, model), with no choice and that usage. A usage-only
// chunk from the stream (shown or hidden) makes it moot, and an error
// chunk ends the stream without one, as OpenAI's failed streams do. It is
// called with every chunk meterSink.Event writes, before its usage is
// nulled; plainEvent's chunks carry no usage and are not errors.
func (k *meterSink) noteChatUsage(name string, data []byte, o observation) {
	switch {
	case name != "":
	case o.usageOnly:
		k.usageChunkSent, k.finalUsage = true, nil
	case o.finalUsage:
		if !k.usageChunkSent {
			k.finalUsage = usageOnlyChunkOf(data)
		}
	case k.finalUsage != nil && gjson.GetBytes(data, "error").Exists():
		k.finalUsage = nil
	}
}

// holdUsageOnly counts a usage-only chunk an upstream sent before every
// choice's finish chunk, as Event would, and keeps it, for a client that
// asked for usage, for Done: README "Usage" promises that chunk as the last
// before [DONE]. A usage-only chunk written later replaces it, and an error
// chunk drops it (noteChatUsage), as it drops the one a finish chunk's
// usage makes.
func (k *meterSink) holdUsageOnly(data []byte) {
	o := k.m.observe("", data)
	k.noteChatUsage("", data, o)
	if !o.hide {
		k.finalUsage = bytes.Clone(data)
	}
}

// Done writes the usage-only chunk noteChatUsage kept, if any, then [DONE].
// The meter read its usage on the finish chunk it came from.
func (k *meterSink) Done() error {
	if chunk := k.finalUsage; chunk != nil {
		k.finalUsage = nil
		if err := k.eventSink.Event("", chunk); err != nil {
			return err
		}
	}
	return k.eventSink.Done()
}

// usageOnlyChunkOf is the usage-only chunk that goes with a Chat chunk
// carrying usage: its id, object, created, model, system_fingerprint and
// service_tier, no choice, and its usage.
func usageOnlyChunkOf(chunk []byte) []byte {
	root := gjson.ParseBytes(chunk)
	var members []byte
	for _, key := range []string{"id", "object", "created", "model", "system_fingerprint", "service_tier"} {
		if v := root.Get(key); v.Exists() {
			members = appendMember(members, strconv.Quote(key), v.Raw)
		}
	}
	members = appendMember(appendMember(members, `"choices"`, `[]`), `"usage"`, root.Get("usage").Raw)
	return object(members)
}

// finishesAChoice reports whether a Chat chunk carries a finish_reason.
func finishesAChoice(chunk []byte) bool {
	finish := false
	gjson.GetBytes(chunk, "choices").ForEach(func(_, ch gjson.Result) bool {
		r := ch.Get("finish_reason")
		finish = r.Type == gjson.String && r.Str != ""
		return !finish
	})
	return finish
}

// chatOutputDeltas is how many output deltas a Chat chunk carries, for the
// estimate of a stream without usage (README "Usage": one output token per
// delta): one per choice whose delta holds a piece of output
// (chatDeltaHasOutput). The role chunk (role, content "") and the finish
// chunk (an empty delta) carry none, as the Responses events a Chat stream
// becomes hold no delta for them: a stream is charged the same, whichever
// API its client speaks.
func chatOutputDeltas(chunk []byte) int64 {
	var n int64
	gjson.GetBytes(chunk, "choices").ForEach(func(_, ch gjson.Result) bool {
		if chatDeltaHasOutput(ch.Get("delta")) {
			n++
		}
		return true
	})
	return n
}

// chatDeltaHasOutput reports whether a Chat delta holds a piece of output:
// non-empty content (a string, or parts with text or a refusal), refusal
// or reasoning, or a tool call's non-empty arguments: what the Responses
// translation streams as a *.delta event (translate.Stream). A tool call's
// id and name alone are announced, not streamed, there; they are content
// for first_token all the same (chatContent).
func chatDeltaHasOutput(delta gjson.Result) bool {
	found := false
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			if text, refusal, parts := translate.JoinParts(v); parts {
				found = text != "" || refusal != ""
			} else {
				found = nonEmptyText(v)
			}
		case "refusal", "reasoning_content", "reasoning":
			found = nonEmptyText(v)
		case "tool_calls":
			v.ForEach(func(_, tc gjson.Result) bool {
				found = nonEmptyText(tc.Get("function.arguments"))
				return !found
			})
		case "function_call":
			found = nonEmptyText(v.Get("arguments"))
		}
		return !found
	})
	return found
}

// nonEmptyText reports whether v is a string with at least one character.
func nonEmptyText(v gjson.Result) bool { return v.Type == gjson.String && v.Str != "" }
