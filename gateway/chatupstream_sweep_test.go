package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestChatParallelCallsSharingAnIndex: a Chat upstream that streams each
// parallel tool call as index 0 with a new id and name (Ollama, some vLLM
// tool parsers) gives the client one function_call per call, each with its
// own name, call_id and arguments, rather than one call with both
// arguments run together; nothing is counted as a late name.
func TestChatParallelCallsSharingAnIndex(t *testing.T) {
	h := chatHarness(t)
	h.ups["C"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f1","arguments":"{\"a\":1}"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"f2","arguments":"{\"b\":2}"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
		chatDone,
	}})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"hi"}`)
	last := assertOneTerminal(t, evs)
	var calls []string
	gjson.GetBytes(last.data, "response.output").ForEach(func(_, it gjson.Result) bool {
		calls = append(calls, it.Get("type").Str+" "+it.Get("call_id").Str+" "+it.Get("name").Str+" "+it.Get("arguments").Str)
		return true
	})
	if want := []string{`function_call call_1 f1 {"a":1}`, `function_call call_2 f2 {"b":2}`}; last.typ != "response.completed" ||
		strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("terminal %s, output:\n%s\nwant:\n%s", last.typ, strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	var done []string
	for _, ev := range evs {
		if ev.typ == "response.output_item.done" {
			done = append(done, gjson.GetBytes(ev.data, "item.name").Str)
		}
	}
	if strings.Join(done, ",") != "f1,f2" {
		t.Fatalf("output_item.done for %v", done)
	}
	if m := h.metrics(); strings.Contains(m, `reason="late_tool_name"`) {
		t.Fatalf("a new call counted as a late name:\n%s", grep(m, "skipped_events"))
	}
}

// TestChatHistoryKeepsToolResultsAfterTheirCall: an answer whose text came
// after a tool call's start (a message item after the function_call item)
// is one assistant message in the next turn's Chat history, its text with
// its tool_calls, and the tool result follows it directly, as Chat servers
// and chat templates require.
func TestChatHistoryKeepsToolResultsAfterTheirCall(t *testing.T) {
	h := chatHarness(t)
	h.ups["C"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_t","type":"function","function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"content":"interrupt"},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
		chatDone,
	}})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"go"}`)
	first := assertOneTerminal(t, evs)
	id := gjson.GetBytes(first.data, "response.id").Str
	if first.typ != "response.completed" || gjson.GetBytes(first.data, "response.output.#").Int() != 2 {
		t.Fatalf("turn 1: %s", first.data)
	}
	_, evs = h.responsesStream(`{"model":"gpt-fake-1","stream":true,"previous_response_id":"` + id +
		`","input":[{"type":"function_call_output","call_id":"call_t","output":"1"}]}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("turn 2: %s", last.data)
	}
	got := gjson.GetBytes(h.ups["C"].Requests()[1].Body, "messages").Raw
	want := `[{"role":"user","content":"go"},{"role":"assistant","content":"interrupt","tool_calls":[{"id":"call_t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"call_t","content":"1"}]`
	if got != want {
		t.Fatalf("turn 2's messages:\n%s\nwant:\n%s", got, want)
	}
}

// TestChatNamelessCallSaysWhy: a Chat answer with a tool call that never
// got a name, with no other target to replay it on, fails with a message
// that says what was wrong with the answer, not only its code.
func TestChatNamelessCallSaysWhy(t *testing.T) {
	h := chatHarness(t)
	h.ups["C"].SetDefault(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"arguments":"{\"a\":1}"}}]},"finish_reason":null}]`),
		chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
		chatDone,
	}})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"hi"}`)
	last := assertOneTerminal(t, evs)
	msg := gjson.GetBytes(last.data, "response.error.message").Str
	if last.typ != "response.failed" || !strings.Contains(msg, "upstream_error: the upstream sent a tool call without a function name") {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
}

// TestChatToolCallsNamedAgainOrRevisited: a Chat upstream that sends the
// same function again under the same index without an id of its own, or
// goes back to an earlier call by its id after starting another under the
// same index, gives a Responses client each call with its own arguments, in
// the terminal Response and in the .done events, never two calls' arguments
// run together.
func TestChatToolCallsNamedAgainOrRevisited(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []upstreamtest.Frame
		want   []string
	}{
		{"the same function again, no id", []upstreamtest.Frame{
			chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{}"}}]},"finish_reason":null}]`),
			chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"get","arguments":"{}"}}]},"finish_reason":null}]`),
			chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
			chatDone,
		}, []string{`get {}`, `get {}`}},
		{"back to an earlier call by its id", []upstreamtest.Frame{
			chatChunk(`[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f1","arguments":"{\"a\""}}]},"finish_reason":null}]`),
			chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"f2","arguments":"{\"b\":2}"}}]},"finish_reason":null}]`),
			chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"arguments":":1}"}}]},"finish_reason":null}]`),
			chatChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
			chatDone,
		}, []string{`f1 {"a":1}`, `f2 {"b":2}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := chatHarness(t)
			h.ups["C"].Enqueue(upstreamtest.Script{ChatFrames: tc.frames})
			_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"hi"}`)
			last := assertOneTerminal(t, evs)
			var output []string
			callIDs := map[string]bool{}
			gjson.GetBytes(last.data, "response.output").ForEach(func(_, it gjson.Result) bool {
				output = append(output, it.Get("name").Str+" "+it.Get("arguments").Str)
				callIDs[it.Get("call_id").Str] = true
				return true
			})
			if last.typ != "response.completed" || strings.Join(output, "\n") != strings.Join(tc.want, "\n") || len(callIDs) != len(tc.want) {
				t.Fatalf("terminal %s, output:\n%s\nwant:\n%s\n(call ids %v)", last.typ, strings.Join(output, "\n"), strings.Join(tc.want, "\n"), callIDs)
			}
			var argsDone, itemDone []string
			for _, ev := range evs {
				switch ev.typ {
				case "response.function_call_arguments.done":
					argsDone = append(argsDone, gjson.GetBytes(ev.data, "name").Str+" "+gjson.GetBytes(ev.data, "arguments").Str)
				case "response.output_item.done":
					itemDone = append(itemDone, gjson.GetBytes(ev.data, "item.name").Str+" "+gjson.GetBytes(ev.data, "item.arguments").Str)
				}
			}
			for what, got := range map[string][]string{"function_call_arguments.done": argsDone, "output_item.done": itemDone} {
				if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
					t.Fatalf("%s events:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
				}
			}
		})
	}
}
