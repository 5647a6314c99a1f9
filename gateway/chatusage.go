package gateway

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
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

// withNullUsage is a Chat chunk with choices whose usage is a running
// count (observe: not a finish chunk, the client did not ask
// continuous_usage_stats) as the client gets it: with usage null. OpenAI's
// include_usage sends usage on the usage-only chunk alone (every other
// chunk's is null), and a stream continued on another target would
// otherwise show the cut attempt's running counts, which the final usage
// chunk supersedes. A finish chunk keeps its usage: some upstreams send the
// final count there instead of in a usage-only chunk. The meter has already
// counted it.
func withNullUsage(chunk []byte) []byte {
	out, err := sjson.SetRawBytes(chunk, "usage", []byte("null"))
	if err != nil {
		return chunk
	}
	return out
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
