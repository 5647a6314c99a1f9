package translate

import (
	"strings"
	"testing"
)

// TestStreamToolCallsSharingAnIndex: some servers (Ollama, some vLLM tool
// parsers) send each parallel tool call as index 0 with a new id and name.
// Each such call is a function_call of its own, the one before it done
// first; a delta with the call's own id, or with none, continues it, as does
// a new id that comes without a name, or with the call's name while its
// arguments are unfinished.
func TestStreamToolCallsSharingAnIndex(t *testing.T) {
	const (
		open   = `{"choices":[{"index":0,"delta":`
		finish = `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
	)
	for _, tc := range []struct {
		name   string
		chunks []string
		output []string
	}{
		{"two whole calls at index 0", []string{
			open + `{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f1","arguments":"{\"a\":1}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"f2","arguments":"{\"b\":2}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f1 {"a":1}`, `function_call completed: call_2 f2 {"b":2}`}},
		{"calls in pieces, the id with the first delta", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f1","arguments":""}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"f2","arguments":""}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"b\":2}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f1 {"a":1}`, `function_call completed: call_2 f2 {"b":2}`}},
		{"the same function twice, then a third call", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_2","function":{"name":"f","arguments":"{\"a\":2}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_3","function":{"name":"g","arguments":"{}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":1}`, `function_call completed: call_2 f {"a":2}`, `function_call completed: call_3 g {}`}},
		{"the same function twice, the second's arguments after an empty first delta", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_2","function":{"name":"f","arguments":""}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":2}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":1}`, `function_call completed: call_2 f {"a":2}`}},
		{"a new call after text that closed the first", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f1","arguments":"{}"}}]}}]}`,
			open + `{"content":"and"}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_2","function":{"name":"f2","arguments":"{}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f1 {}`, "message completed: and", `function_call completed: call_2 f2 {}`}},
		{"the call's own id on every delta", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"1}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":1}`}},
		{"a new id without a name continues the call", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_x","function":{"arguments":"1}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":1}`}},
		{"a new id with the call's name, its arguments unfinished, continues it", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_x","function":{"name":"f","arguments":"1}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":1}`}},
		{"another name with a new id, the arguments unfinished: a new call", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_2","function":{"name":"g","arguments":"{}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":`, `function_call completed: call_2 g {}`}},
		{"calls under their own indexes that repeat one id stay apart", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f1","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":1,"id":"call_1","function":{"name":"f2","arguments":"{\"b\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":1,"id":"call_1","function":{"arguments":"2}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"arguments":"1}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f1 {"a":1}`, `function_call completed: call_1 f2 {"b":2}`}},
		{"calls under their own indexes, each delta with its id", []string{
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f1","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"f2","arguments":"{\"b\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":1,"id":"call_2","function":{"arguments":"2}"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_1","function":{"arguments":"1}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f1 {"a":1}`, `function_call completed: call_2 f2 {"b":2}`}},
		{"an id after the call was shown with a generated one", []string{
			open + `{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":"}}]}}]}`,
			open + `{"tool_calls":[{"index":0,"id":"call_late","function":{"name":"f","arguments":"1}"}}]}}]}`,
			finish,
		}, []string{`function_call completed: call_1 f {"a":1}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			events := feedChunks(t, s, tc.chunks)
			checkTerminalOutput(t, events, "response.completed", tc.output)
			if n := s.LateNameFragments(); n != 0 {
				t.Fatalf("%d late name fragments counted", n)
			}
		})
	}
}

// TestCompletionToolCallsSharingAnIndex: a whole chat.completion whose
// calls all say index 0 (as the servers above stream them) has one
// function_call per call, for a JSON client (FromChatResponse) and a
// streaming one (Completion): a message's calls are told apart by position.
func TestCompletionToolCallsSharingAnIndex(t *testing.T) {
	for _, tc := range []struct {
		name, calls string
		output      []string
	}{
		{"distinct ids", `[{"index":0,"id":"call_1","type":"function","function":{"name":"f1","arguments":"{\"a\":1}"}},{"index":0,"id":"call_2","type":"function","function":{"name":"f2","arguments":"{\"b\":2}"}}]`,
			[]string{`function_call completed: call_1 f1 {"a":1}`, `function_call completed: call_2 f2 {"b":2}`}},
		{"no ids", `[{"index":0,"type":"function","function":{"name":"f","arguments":"{}"}},{"index":0,"type":"function","function":{"name":"f","arguments":"{}"}}]`,
			[]string{`function_call completed: call_1 f {}`, `function_call completed: call_2 f {}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(`{"object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":` + tc.calls + `}}]}`)
			resp, _, aerr, _ := FromChatResponse(body, testStreamOptions())
			if aerr != nil {
				t.Fatal(aerr)
			}
			s := NewStream(testStreamOptions())
			events, err := s.Completion(body)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateEvents(events); err != nil {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			checkOutputs(t, resp, events, tc.output)
		})
	}
}

// TestStreamToolCallsNamedAgainOrRevisited: the two ways a Chat stream says
// which call a tool call delta belongs to, by index or (some servers send
// none) by position after the last, agree on two shapes: a delta that names
// a function once the call's arguments are a complete JSON value starts
// another call (the same function called twice, its second call without an
// id of its own), and a delta with the id of a call already seen goes to
// that call, even after another call was started under the same index
// (parallel calls interleaved by id). Each case runs with "index":0 on every
// tool call delta and with no index at all.
func TestStreamToolCallsNamedAgainOrRevisited(t *testing.T) {
	const finish = `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
	// call renders one chunk with one tool call delta; INDEX marks where
	// the index goes.
	call := func(fields string) string {
		return `{"choices":[{"index":0,"delta":{"tool_calls":[{INDEX` + fields + `}]}}]}`
	}
	for _, tc := range []struct {
		name   string
		chunks []string
		output []string
	}{
		{"the same function again, no id, after complete arguments", []string{
			call(`"id":"call_a","type":"function","function":{"name":"get","arguments":"{}"}`),
			call(`"function":{"name":"get","arguments":"{}"}`),
			finish,
		}, []string{`function_call completed: call_a get {}`, `function_call completed: call_1 get {}`}},
		{"the same function again, no id, its arguments in pieces", []string{
			call(`"id":"call_a","type":"function","function":{"name":"get","arguments":"{\"x\":1}"}`),
			call(`"function":{"name":"get","arguments":"{\"x\":"}`),
			call(`"function":{"arguments":"2}"}`),
			finish,
		}, []string{`function_call completed: call_a get {"x":1}`, `function_call completed: call_1 get {"x":2}`}},
		{"another function, no id, after complete arguments", []string{
			call(`"id":"call_a","type":"function","function":{"name":"get","arguments":"{}"}`),
			call(`"function":{"name":"put"}`),
			call(`"function":{"arguments":"{}"}`),
			finish,
		}, []string{`function_call completed: call_a get {}`, `function_call completed: call_1 put {}`}},
		{"the name alone again after complete arguments is no call", []string{
			call(`"id":"call_a","type":"function","function":{"name":"get","arguments":"{}"}`),
			call(`"function":{"name":"get"}`),
			finish,
		}, []string{`function_call completed: call_a get {}`}},
		{"the name repeated while the arguments are unfinished continues the call", []string{
			call(`"id":"call_a","type":"function","function":{"name":"get","arguments":"{\"x\":"}`),
			call(`"function":{"name":"get","arguments":"1}"}`),
			finish,
		}, []string{`function_call completed: call_a get {"x":1}`}},
		{"back to an earlier call by its id", []string{
			call(`"id":"call_a","type":"function","function":{"name":"f1","arguments":"{\"a\""}`),
			call(`"id":"call_b","type":"function","function":{"name":"f2","arguments":"{\"b\":2}"}`),
			call(`"id":"call_a","function":{"arguments":":1}"}`),
			finish,
		}, []string{`function_call completed: call_a f1 {"a":1}`, `function_call completed: call_b f2 {"b":2}`}},
		{"back to an earlier call by its id, then arguments alone continue it", []string{
			call(`"id":"call_a","type":"function","function":{"name":"f1","arguments":"{\"a\""}`),
			call(`"id":"call_b","type":"function","function":{"name":"f2","arguments":"{\"b\":"}`),
			call(`"id":"call_a","function":{"arguments":":"}`),
			call(`"function":{"arguments":"1}"}`),
			call(`"id":"call_b","function":{"arguments":"2}"}`),
			finish,
		}, []string{`function_call completed: call_a f1 {"a":1}`, `function_call completed: call_b f2 {"b":2}`}},
		{"back to an earlier call by its id and name", []string{
			call(`"id":"call_a","type":"function","function":{"name":"f1","arguments":"{\"a\""}`),
			call(`"id":"call_b","type":"function","function":{"name":"f2","arguments":"{\"b\":2}"}`),
			call(`"id":"call_a","type":"function","function":{"name":"f1","arguments":":1}"}`),
			finish,
		}, []string{`function_call completed: call_a f1 {"a":1}`, `function_call completed: call_b f2 {"b":2}`}},
	} {
		for _, index := range []string{`"index":0,`, ``} {
			label := "indexed"
			if index == "" {
				label = "unindexed"
			}
			t.Run(tc.name+"/"+label, func(t *testing.T) {
				chunks := make([]string, len(tc.chunks))
				for i, c := range tc.chunks {
					chunks[i] = strings.ReplaceAll(c, "{INDEX", "{"+index)
				}
				s := NewStream(testStreamOptions())
				events := feedChunks(t, s, chunks)
				checkTerminalOutput(t, events, "response.completed", tc.output)
				if n := s.LateNameFragments(); n != 0 {
					t.Fatalf("%d late name fragments counted", n)
				}
			})
		}
	}
}
