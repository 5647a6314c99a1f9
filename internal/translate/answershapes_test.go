package translate

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/tidwall/gjson"
)

// feedChunks drives a Stream with Chat chunks, then [DONE], as the gateway
// does, and returns every event.
func feedChunks(t *testing.T, s *Stream, chunks []string) []Event {
	t.Helper()
	events := s.Start()
	for _, c := range chunks {
		ev, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		events = append(events, ev...)
	}
	return append(events, s.Finish()...)
}

// TestStreamAnswerShapes: the answer shapes some Chat servers send besides
// OpenAI's — a legacy function_call, content as text parts, a tool call
// whose name never comes — become what they mean: a function_call item, the
// parts' text, or a failed response (never a function_call named "").
func TestStreamAnswerShapes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		chunks   []string
		terminal string
		output   []string
	}{
		{"legacy function_call in pieces", []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","function_call":{"name":"get_weather","arguments":""}}}]}`,
			`{"choices":[{"index":0,"delta":{"function_call":{"arguments":"{\"city\":"}}}]}`,
			`{"choices":[{"index":0,"delta":{"function_call":{"arguments":"\"Paris\"}"}}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"function_call"}]}`,
		}, "response.completed", []string{`function_call completed: call_1 get_weather {"city":"Paris"}`}},
		{"legacy function_call after text", []string{
			`{"choices":[{"index":0,"delta":{"content":"Let me check."}}]}`,
			`{"choices":[{"index":0,"delta":{"function_call":{"name":"f","arguments":"{}"}},"finish_reason":"function_call"}]}`,
		}, "response.completed", []string{"message completed: Let me check.", "function_call completed: call_1 f {}"}},
		{"content as text parts", []string{
			`{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"p1"},{"type":"text","text":"p2"}]}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		}, "response.completed", []string{"message completed: p1p2"}},
		{"tool call named in a later chunk", []string{
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"arguments":"{\"a\""}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		}, "response.completed", []string{`function_call completed: call_a f {"a":1}`}},
		{"tool call never named", []string{
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"arguments":"{\"a\":1}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		}, "response.failed", nil},
		{"tool call never named, after text", []string{
			`{"choices":[{"index":0,"delta":{"content":"Calling."}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		}, "response.failed", []string{"message completed: Calling."}},
		{"tool call never named, text after it", []string{
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"Done."},"finish_reason":"stop"}]}`,
		}, "response.failed", []string{"message completed: Done."}},
		{"named call, then one never named", []string{
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"call_b","function":{"arguments":"{}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		}, "response.failed", []string{"function_call completed: call_a f {}"}},
		{"legacy function_call without a name", []string{
			`{"choices":[{"index":0,"delta":{"function_call":{"arguments":"{}"}},"finish_reason":"function_call"}]}`,
		}, "response.failed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			events := feedChunks(t, s, tc.chunks)
			last := checkTerminalOutput(t, events, tc.terminal, tc.output)
			for _, ev := range events {
				if strings.Contains(string(ev.Data), `"name":""`) {
					t.Fatalf("a nameless call was shown: %s", ev.Data)
				}
			}
			if tc.terminal != "response.failed" {
				return
			}
			e := s.UpstreamError()
			if e == nil || e.Status != 502 || e.Type != apierr.TypeServer || e.Code != apierr.CodeUpstreamError || !strings.Contains(e.Message, "without a function name") {
				t.Fatalf("upstream error %+v", e)
			}
			if (s.ErrorBeforeOutput() != nil) != (len(tc.output) == 0) {
				t.Fatalf("ErrorBeforeOutput %+v with output %q", s.ErrorBeforeOutput(), tc.output)
			}
			if msg := last.Get("response.error.message").Str; !strings.Contains(msg, "without a function name") {
				t.Fatalf("error %s", last.Get("response.error").Raw)
			}
		})
	}
}

// TestCompletionAnswerShapes: the same shapes in a whole chat.completion,
// for a JSON client (FromChatResponse) and a streaming one (Completion).
func TestCompletionAnswerShapes(t *testing.T) {
	const head = `{"object":"chat.completion","model":"llama-x","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant",`
	for _, tc := range []struct {
		name, message string
		output        []string // nil: unusable
	}{
		{"legacy function_call", `"content":null,"function_call":{"name":"f","arguments":"{\"a\":1}"}`, []string{`function_call completed: call_1 f {"a":1}`}},
		{"content as text parts", `"content":[{"type":"text","text":"p1"},{"type":"text","text":"p2"}]`, []string{"message completed: p1p2"}},
		{"tool call without a name", `"content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_b","type":"function","function":{"arguments":"{}"}}]`, nil},
		{"tool call with an empty name", `"tool_calls":[{"id":"call_a","type":"function","function":{"name":"","arguments":"{}"}}]`, nil},
		{"legacy function_call without a name", `"function_call":{"arguments":"{}"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(head + tc.message + `}}]}`)
			resp, _, aerr, upstream := FromChatResponse(body, testStreamOptions())
			s := NewStream(testStreamOptions())
			events, err := s.Completion(body)
			if tc.output == nil {
				if aerr == nil || upstream || aerr.Code != apierr.CodeStreamIncomplete || !strings.Contains(aerr.Message, "without a function name") {
					t.Fatalf("FromChatResponse %s %+v", resp, aerr)
				}
				if err == nil || events != nil || s.Done() {
					t.Fatalf("Completion %v %s", err, dumpEvents(events))
				}
				return
			}
			if aerr != nil || err != nil {
				t.Fatal(aerr, err)
			}
			checkOutputs(t, resp, events, tc.output)
		})
	}
}

func TestJoinParts(t *testing.T) {
	for _, tc := range []struct {
		content, text, refusal string
		ok                     bool
	}{
		{`[{"type":"text","text":"p1"},{"type":"text","text":"p2"}]`, "p1p2", "", true},
		{`[{"type":"text","text":"a\u00e9"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":""},{"text":5},"s",{"type":"text","text":"b"}]`, "aéb", "", true},
		{`[{"type":"refusal","refusal":"R"},{"type":"text","text":"D4"},{"type":"refusal","refusal":"S"}]`, "D4", "RS", true},
		{`[]`, "", "", true},
		{`"plain"`, "", "", false},
		{`null`, "", "", false},
	} {
		text, refusal, ok := JoinParts(gjson.Parse(tc.content))
		if text != tc.text || refusal != tc.refusal || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.content, text, refusal, ok, tc.text, tc.refusal, tc.ok)
		}
	}
}

// checkTerminalOutput checks that events are a valid stream ending with an
// event of type terminal whose Response's output items summarize
// (summarizeItem) as output, and returns that last event.
func checkTerminalOutput(t *testing.T, events []Event, terminal string, output []string) gjson.Result {
	t.Helper()
	if err := validateEvents(events); err != nil {
		t.Fatalf("%v\n%s", err, dumpEvents(events))
	}
	last := gjson.ParseBytes(events[len(events)-1].Data)
	if last.Get("type").Str != terminal {
		t.Fatalf("terminal %s", last.Raw)
	}
	var outs []string
	last.Get("response.output").ForEach(func(_, it gjson.Result) bool {
		outs = append(outs, summarizeItem(it))
		return true
	})
	if strings.Join(outs, "\n") != strings.Join(output, "\n") {
		t.Fatalf("output:\n%s\nwant:\n%s", strings.Join(outs, "\n"), strings.Join(output, "\n"))
	}
	return last
}

// checkOutputs checks that the answer resp and the terminal event of events
// both hold the output items want (as summarizeItem renders them).
func checkOutputs(t *testing.T, resp []byte, events []Event, want []string) {
	t.Helper()
	for _, out := range []gjson.Result{gjson.GetBytes(resp, "output"), gjson.GetBytes(events[len(events)-1].Data, "response.output")} {
		var outs []string
		out.ForEach(func(_, it gjson.Result) bool {
			outs = append(outs, summarizeItem(it))
			return true
		})
		if strings.Join(outs, "\n") != strings.Join(want, "\n") {
			t.Fatalf("output:\n%s\nwant:\n%s", strings.Join(outs, "\n"), strings.Join(want, "\n"))
		}
	}
}
