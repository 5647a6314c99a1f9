package upstreamtest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestSplitText(t *testing.T) {
	for _, tc := range []struct {
		text string
		n    int
		want []string
	}{
		{"Hello from A", 3, []string{"Hello", " from", " A"}},
		{"Hello from A", 1, []string{"Hello from A"}},
		{"one two three four", 2, []string{"one two", " three four"}},
		{"abcd", 2, []string{"ab", "cd"}},
		{"ab", 5, []string{"a", "b"}},
		{"", 3, []string{""}},
		{"héllo", 5, []string{"h", "é", "l", "l", "o"}},
		{"x{{name}}", 2, []string{"x", "{{name}}"}},
	} {
		if got := splitText(tc.text, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("splitText(%q, %d) = %q, want %q", tc.text, tc.n, got, tc.want)
		}
	}
}

func TestResponsesEventsBuilder(t *testing.T) {
	evs := ResponsesEvents("resp_1", "m", "a b c d", 4)
	var decoded []map[string]any
	for _, e := range evs {
		var m map[string]any
		if err := json.Unmarshal(e, &m); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		decoded = append(decoded, m)
	}
	if len(decoded) != 12 || decoded[2]["item"].(map[string]any)["id"] != "msg_1" {
		t.Errorf("events = %v", decoded)
	}
	if !strings.HasPrefix(string(evs[0]), `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":`) {
		t.Errorf("key order: %s", evs[0])
	}
	fs := ResponsesStream("resp_1", "m", "x", 1)
	if !strings.HasPrefix(string(fs[0].Raw), "event: response.created\ndata: {") || !strings.HasSuffix(string(fs[0].Raw), "}\n\n") ||
		string(fs[0].WS) != string(fs[0].Raw[len("event: response.created\ndata: "):len(fs[0].Raw)-2]) {
		t.Errorf("frame = %q / %q", fs[0].Raw, fs[0].WS)
	}
	var r map[string]any
	if err := json.Unmarshal(ResponseJSON("resp_9", "m", "hi"), &r); err != nil || path(r, "output", 0, "content", 0, "text") != "hi" {
		t.Errorf("ResponseJSON: %v %v", r, err)
	}
}

func TestChatSpec(t *testing.T) {
	spec := ChatSpec{
		ID: "chatcmpl-1", Model: "m", Created: 42,
		Reasoning: "think hard", ReasoningDeltas: 2,
		ToolCalls: []ToolCallSpec{
			{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`, Pieces: 3},
			{ID: "call_b", Name: "get_time", Arguments: `{"tz":"UTC"}`, Pieces: 2},
		},
		InterleaveTools: true,
		Usage:           true,
	}
	chunks := spec.Chunks()
	if string(chunks[len(chunks)-1]) != "[DONE]" {
		t.Fatalf("last = %s", chunks[len(chunks)-1])
	}
	var ms []map[string]any
	for _, c := range chunks[:len(chunks)-1] {
		var m map[string]any
		if err := json.Unmarshal(c, &m); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if m["id"] != "chatcmpl-1" || num(m["created"]) != 42 {
			t.Errorf("chunk = %v", m)
		}
		ms = append(ms, m)
	}
	if d := path(ms[0], "choices", 0, "delta"); path(d, "role") != "assistant" || asObj(d)["content"] != nil {
		t.Errorf("role chunk = %v", d)
	}
	var reasoning strings.Builder
	var order []int
	args := map[int]string{}
	names := map[int]string{}
	for _, m := range ms[1:] {
		d := path(m, "choices", 0, "delta")
		reasoning.WriteString(str(path(d, "reasoning_content")))
		if tc := path(d, "tool_calls", 0); tc != nil {
			i := num(path(tc, "index"))
			order = append(order, i)
			args[i] += str(path(tc, "function", "arguments"))
			if n := str(path(tc, "function", "name")); n != "" {
				names[i] = n
				if path(tc, "id") == nil || path(tc, "type") != "function" {
					t.Errorf("tool header = %v", tc)
				}
			}
		}
	}
	if reasoning.String() != "think hard" {
		t.Errorf("reasoning = %q", reasoning.String())
	}
	if args[0] != `{"city":"Paris"}` || args[1] != `{"tz":"UTC"}` || names[0] != "get_weather" || names[1] != "get_time" {
		t.Errorf("args %v names %v", args, names)
	}
	if !slices.Equal(order[:4], []int{0, 1, 0, 1}) {
		t.Errorf("tool calls not interleaved: %v", order)
	}
	finish := ms[len(ms)-2]
	if path(finish, "choices", 0, "finish_reason") != "tool_calls" || path(ms[len(ms)-1], "usage", "completion_tokens") == nil {
		t.Errorf("finish %v usage %v", finish, ms[len(ms)-1])
	}

	for _, reason := range []string{"length", "content_filter"} {
		fs := ChatSpec{ID: "c", Model: "m", Text: "x", FinishReason: reason}.Frames()
		if !strings.Contains(string(fs[len(fs)-2].Raw), `"finish_reason":"`+reason+`"`) || string(fs[len(fs)-1].Raw) != "data: [DONE]\n\n" {
			t.Errorf("%s: %q", reason, fs[len(fs)-2].Raw)
		}
	}
	plain := ChatChunks("c", "m", "Hello there", 2)
	if len(plain) != 5 {
		t.Errorf("ChatChunks = %d chunks", len(plain))
	}
	var cc map[string]any
	if err := json.Unmarshal(ChatCompletionJSON("c", "m", "hi"), &cc); err != nil || path(cc, "choices", 0, "message", "content") != "hi" {
		t.Errorf("ChatCompletionJSON: %v %v", cc, err)
	}
}

func TestTemplate(t *testing.T) {
	var v vars
	v[holeID] = []byte("ID")
	v[holeModel] = []byte("M")
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"{{id}}", "ID"},
		{"a{{id}}b{{model}}c", "aIDbMc"},
		{"not json{{", "not json{{"},
		{"{{unknown}}{{id}}", "{{unknown}}ID"},
		{"{{{id}}}", "{ID}"},
	} {
		if got := string(compile([]byte(tc.in)).render(nil, &v)); got != tc.want {
			t.Errorf("%q → %q, want %q", tc.in, got, tc.want)
		}
	}
	if string(jsonEscape(`a"b`)) != `a\"b` || string(jsonEscape("plain")) != "plain" {
		t.Error("jsonEscape")
	}
	if idSafe("my upstream/1") != "my_upstream_1" {
		t.Error(idSafe("my upstream/1"))
	}
}

func TestBuildersDeterministic(t *testing.T) {
	a := ResponsesEvents("resp_x", "m", "Hello there, world", 4)
	b := ResponsesEvents("resp_x", "m", "Hello there, world", 4)
	if !slices.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) }) {
		t.Error("ResponsesEvents is not deterministic")
	}
	if !strings.Contains(string(a[0]), `"created_at":1767225600`) {
		t.Errorf("created_at: %s", a[0])
	}
	c1, c2 := ChatChunks("c", "m", "x", 1), ChatChunks("c", "m", "x", 1)
	if string(c1[0]) != string(c2[0]) || !strings.Contains(string(c1[0]), `"created":1767225600`) {
		t.Error("ChatChunks is not deterministic")
	}
}
