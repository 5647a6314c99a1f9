package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestPrefillBody: the text a prefill continuation sends extends the
// assistant message the request already ends with when it is plain text
// (string content, or text parts: the last part grows), and is otherwise a
// trailing assistant message (item) of its own.
func TestPrefillBody(t *testing.T) {
	const text = ` fox "jumps"`
	chat := []struct {
		name, messages, want string
	}{
		{"user last", `[{"role":"user","content":"hi"}]`,
			`[{"role":"user","content":"hi"},{"role":"assistant","content":" fox \"jumps\""}]`},
		{"assistant string", `[{"role":"user","content":"hi"},{"role":"assistant","content":"The quick"}]`,
			`[{"role":"user","content":"hi"},{"role":"assistant","content":"The quick fox \"jumps\""}]`},
		{"assistant empty string", `[{"role":"assistant","content":""}]`,
			`[{"role":"assistant","content":" fox \"jumps\""}]`},
		{"assistant text parts", `[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`,
			`[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b fox \"jumps\""}]}]`},
		{"assistant keeps its other fields", `[{"role":"assistant","content":"The","prefix":true,"reasoning_content":"r","refusal":null,"tool_calls":[]}]`,
			`[{"role":"assistant","content":"The fox \"jumps\"","prefix":true,"reasoning_content":"r","refusal":null,"tool_calls":[]}]`},
		{"assistant with tool calls", `[{"role":"assistant","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]`,
			`[{"role":"assistant","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"assistant","content":" fox \"jumps\""}]`},
		{"assistant with a refusal", `[{"role":"assistant","content":null,"refusal":"no"}]`,
			`[{"role":"assistant","content":null,"refusal":"no"},{"role":"assistant","content":" fox \"jumps\""}]`},
		{"assistant with a refusal part", `[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"no"}]}]`,
			`[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"no"}]},{"role":"assistant","content":" fox \"jumps\""}]`},
		// An empty assistant turn is the same open prefill as "".
		{"assistant with no parts", `[{"role":"assistant","content":[]}]`,
			`[{"role":"assistant","content":" fox \"jumps\""}]`},
		{"assistant with null content", `[{"role":"assistant","content":null}]`,
			`[{"role":"assistant","content":" fox \"jumps\""}]`},
		{"assistant without content", `[{"role":"assistant"}]`,
			`[{"role":"assistant","content":" fox \"jumps\""}]`},
	}
	for _, tc := range chat {
		t.Run("chat/"+tc.name, func(t *testing.T) {
			got := gjson.GetBytes(withChatPrefill([]byte(`{"model":"m","messages":`+tc.messages+`}`), text), "messages").Raw
			if got != tc.want {
				t.Fatalf("messages\n got %s\nwant %s", got, tc.want)
			}
		})
	}
	responses := []struct {
		name, input, want string
	}{
		{"string input", `"hi"`,
			`[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":" fox \"jumps\""}]}]`},
		{"user last", `[{"role":"user","content":"hi"}]`,
			`[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":" fox \"jumps\""}]}]`},
		{"assistant string", `[{"role":"assistant","content":"The quick"}]`,
			`[{"role":"assistant","content":"The quick fox \"jumps\""}]`},
		{"assistant output_text parts", `[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[]},{"type":"output_text","text":"b"}]}]`,
			`[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[]},{"type":"output_text","text":"b fox \"jumps\""}]}]`},
		{"function call last", `[{"type":"function_call","role":"assistant","call_id":"c","name":"f","arguments":"{}"}]`,
			`[{"type":"function_call","role":"assistant","call_id":"c","name":"f","arguments":"{}"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":" fox \"jumps\""}]}]`},
		{"assistant refusal part", `[{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]`,
			`[{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"no"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":" fox \"jumps\""}]}]`},
	}
	for _, tc := range responses {
		t.Run("responses/"+tc.name, func(t *testing.T) {
			got := gjson.GetBytes(withResponsesPrefill([]byte(`{"model":"m","input":`+tc.input+`}`), text), "input").Raw
			if got != tc.want {
				t.Fatalf("input\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
