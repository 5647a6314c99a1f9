package gateway

import (
	"bytes"
	"testing"
)

// The tool name a Chat client was shown is kept past its event: the event's
// bytes are the SSE reader's buffer, which the next event overwrites (a
// restart compared the next upstream's call against whatever the buffer held
// by then, and refused it as "another tool").
func TestTrackedToolNameOutlivesTheEventBuffer(t *testing.T) {
	cs := &clientStream{chat: true}
	buf := []byte(`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`)
	cs.trackChatLocked(buf)
	copy(buf, bytes.Repeat([]byte{'x'}, len(buf)))
	if len(cs.chatTools) != 1 || string(cs.chatTools[0].name) != "get_weather" || cs.chatHead.id != `"chatcmpl-1"` {
		t.Fatalf("tracked %+v, id %s after the buffer was reused", cs.chatTools, cs.chatHead.id)
	}
}
