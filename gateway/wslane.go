package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// maxStreamIDLen is the longest stream_id OpenAI's spec accepts
// (ResponsesClientEventResponseCreate.stream_id: maxLength 256).
const maxStreamIDLen = 256

// streamIDOf reads a WebSocket frame's stream_id, its lane: "" when the
// frame has none. OpenAI's spec makes it a string of 1 to 256 characters
// from [A-Za-z0-9_.-]; anything else is refused with an error naming
// stream_id, and the lane it returns is then "", so that what the client
// sent is never echoed. The frame need not be valid JSON yet: a refusal
// that comes before the frame is checked (the drain, a revoked key) still
// carries a lane that reads as one.
func streamIDOf(frame []byte) (string, *apierr.Error) {
	if frame == nil {
		return "", nil
	}
	v := gjson.GetBytes(frame, "stream_id")
	switch {
	case !v.Exists():
		return "", nil
	case v.Type != gjson.String:
		return "", apierr.Invalid("stream_id", apierr.CodeInvalidType, "stream_id must be a string")
	case v.Str == "" || len(v.Str) > maxStreamIDLen:
		return "", apierr.Invalid("stream_id", apierr.CodeInvalidValue, "stream_id is %d characters; it must be 1 to %d", len(v.Str), maxStreamIDLen)
	case !isStreamIDText(v.Str):
		return "", apierr.Invalid("stream_id", apierr.CodeInvalidValue, "stream_id may hold only letters, digits, '_', '.' and '-'")
	}
	return v.Str, nil
}

// isStreamIDText reports whether s matches the spec's ^[A-Za-z0-9_.-]+$.
func isStreamIDText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// quotedStreamIDKey is how a stream_id key appears in an event that has
// one: only as a key or as a whole string value (inside a string a quote
// is escaped), so an event without it is never re-encoded.
var quotedStreamIDKey = []byte(`"stream_id"`)

// laneField is the "stream_id":"lane" member withLane splices into each
// event, built once per frame rather than once per event.
func laneField(lane string) []byte {
	quoted, _ := json.Marshal(lane) // a string always encodes
	return append(append(append([]byte(nil), quotedStreamIDKey...), ':'), quoted...)
}

// withLane is the event (a JSON object) with its lane's field (laneField)
// added, as OpenAI's spec says every server event of a response, and its
// error frames, echo the stream_id of the response.create that asked for
// it. The field is spliced in before the closing brace, so an event is
// copied, not re-encoded; one that already names stream_id (an error frame
// whose param is stream_id) goes through sjson, which sets the top-level
// key alone.
func withLane(event []byte, lane string, field []byte) []byte {
	if bytes.Contains(event, quotedStreamIDKey) {
		if b, err := sjson.SetBytes(event, "stream_id", lane); err == nil {
			return b
		}
		return event
	}
	end := bytes.LastIndexByte(event, '}')
	if end < 0 {
		return event // not an object: every event and error frame is one
	}
	out := make([]byte, 0, len(event)+len(field)+1)
	out = append(out, event[:end]...)
	if last := bytes.TrimRight(event[:end], " \t\r\n"); len(last) > 0 && last[len(last)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, field...)
	return append(out, event[end:]...)
}
