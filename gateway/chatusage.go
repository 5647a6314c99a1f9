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
// streaming request without stream_options gets
// stream_options: {"include_usage": true} added. What the client sees stays
// what it asked for: that usage-only chunk is counted (usage, limits, the
// access log, spans) and not sent (meterSink). A client that set
// stream_options itself is left as it is, include_usage false included.

// askChatUsage adds stream_options.include_usage to a streaming Chat
// client's request that has no stream_options, and marks its usage-only
// chunk to be hidden. It needs the request's meta (the meter hides the
// chunk), which every HTTP request has.
func (s *Server) askChatUsage(req *clientRequest) {
	if !req.ep.chat || !req.stream || req.meta == nil {
		return
	}
	if gjson.GetBytes(req.body, "stream_options").Exists() {
		return
	}
	b, err := sjson.SetRawBytes(req.body, "stream_options", []byte(`{"include_usage":true}`))
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
