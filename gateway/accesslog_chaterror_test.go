package gateway_test

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestChatStreamErrorChunkCodeIsLogged: a Chat upstream's error chunk after
// content ends the Chat client's stream with that error, and the request's
// access line has its code (README "Access log": a stream that ended in an
// error event has its code), tracing on or off.
func TestChatStreamErrorChunkCodeIsLogged(t *testing.T) {
	chunks := upstreamtest.ChatChunks("chatcmpl-1", "gpt-fake-1", "Hello there", 2)
	script := upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		upstreamtest.SSEData(chunks[0]), upstreamtest.SSEData(chunks[1]),
		upstreamtest.SSEData([]byte(`{"error":{"code":"content_filter_triggered","message":"filtered","type":"invalid_request_error"}}`)),
		upstreamtest.SSEData([]byte("[DONE]")),
	}}
	h := singleChatUpstream(t, "chat", script)
	_, body := readAll(t, h, "/v1/chat/completions", chatStreamBody)
	if !strings.Contains(string(body), "content_filter_triggered") {
		t.Fatalf("the client was not sent the upstream's error:\n%s", body)
	}
	line := accessLineOf(h.logs.String(), "POST", "/v1/chat/completions")
	if !strings.Contains(line, "code=content_filter_triggered") {
		t.Fatalf("access line %q lacks the error chunk's code\n%s", line, h.logs.String())
	}
}
