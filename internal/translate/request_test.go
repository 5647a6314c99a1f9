package translate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/tidwall/gjson"
)

func mustChat(t *testing.T, body string, history []json.RawMessage, opts RequestOptions) ([]byte, RequestInfo) {
	t.Helper()
	chat, info, aerr := ToChat([]byte(body), history, opts)
	if aerr != nil {
		t.Fatalf("ToChat: %v", aerr)
	}
	if !json.Valid(chat) {
		t.Fatalf("invalid chat body: %s", chat)
	}
	return chat, info
}

func TestToChatMessages(t *testing.T) {
	cases := []struct {
		name     string
		body     string
		history  []string
		opts     RequestOptions
		messages string
	}{
		{
			name:     "string input with instructions",
			body:     `{"model":"m","instructions":"Be brief.","input":"Hi \"there\""}`,
			messages: `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi \"there\""}]`,
		},
		{
			name:     "message without type, string content",
			body:     `{"model":"m","input":[{"role":"user","content":"hello"}]}`,
			messages: `[{"role":"user","content":"hello"}]`,
		},
		{
			name:     "one input_text part becomes a string",
			body:     `{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}]}`,
			messages: `[{"role":"user","content":"hello"}]`,
		},
		{
			name: "several parts and an image",
			body: `{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"What is"},
				{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"low"},{"type":"input_image","image_url":"https://x/y.png","detail":"original"},
				{"type":"input_image","image_url":"https://x/z.png"}]}]}`,
			messages: `[{"role":"user","content":[{"type":"text","text":"What is"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}},` +
				`{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"high"}},{"type":"image_url","image_url":{"url":"https://x/z.png"}}]}]`,
		},
		{
			name:     "developer becomes system by default",
			body:     `{"model":"m","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]},{"role":"system","content":"sys"},{"role":"user","content":"q"}]}`,
			messages: `[{"role":"system","content":"rules"},{"role":"system","content":"sys"},{"role":"user","content":"q"}]`,
		},
		{
			name:     "developer kept when asked",
			body:     `{"model":"m","input":[{"role":"developer","content":"rules"},{"role":"user","content":"q"}]}`,
			opts:     RequestOptions{DeveloperRole: "developer"},
			messages: `[{"role":"developer","content":"rules"},{"role":"user","content":"q"}]`,
		},
		{
			name: "assistant output_text and refusal",
			body: `{"model":"m","input":[{"role":"user","content":"q"},{"type":"message","role":"assistant","id":"msg_1","status":"completed",
				"content":[{"type":"output_text","text":"Sure","annotations":[]},{"type":"refusal","refusal":"but no"}]}]}`,
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":"Sure","refusal":"but no"}]`,
		},
		{
			name:     "assistant with several text parts, then string content: one message",
			body:     `{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"output_text","text":"b"}]},{"role":"assistant","content":"plain"}]}`,
			messages: `[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"plain"}]}]`,
		},
		{
			name:     "refusal only: content null",
			body:     `{"model":"m","input":[{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]}`,
			messages: `[{"role":"assistant","content":null,"refusal":"no"}]`,
		},
		{
			name: "function_call merges into the preceding assistant message",
			body: `{"model":"m","input":[{"role":"user","content":"q"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
				{"type":"function_call","id":"fc_1","call_id":"call_1","name":"ls","arguments":"{\"dir\":\".\"}","status":"completed"},
				{"type":"function_call","call_id":"call_2","name":"pwd","arguments":"{}"},
				{"type":"function_call_output","call_id":"call_1","output":"a.txt"},
				{"type":"function_call_output","call_id":"call_2","output":"/home"}]}`,
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":"Checking.","tool_calls":[` +
				`{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"dir\":\".\"}"}},` +
				`{"id":"call_2","type":"function","function":{"name":"pwd","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":"a.txt"},{"role":"tool","tool_call_id":"call_2","content":"/home"}]`,
		},
		{
			name: "function_call after a user message creates an assistant message",
			body: `{"model":"m","input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
				{"type":"function_call_output","call_id":"c1","output":"r1"},{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"}]}`,
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"r1"},{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}]`,
		},
		{
			name: "function_call_output with text parts",
			body: `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
				{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"one"},{"type":"input_text","text":"two"}]},
				{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"solo"}]}]}`,
			messages: `[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]},{"role":"tool","tool_call_id":"c1","content":"solo"}]`,
		},
		{
			name: "reasoning attaches to the message that follows",
			body: `{"model":"m","input":[{"role":"user","content":"q"},
				{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"First."},{"type":"summary_text","text":"Second."}],"encrypted_content":"gAAA"},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A"}]}]}`,
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":"A","reasoning_content":"First.\n\nSecond."}]`,
		},
		{
			name: "reasoning content wins over summary, and attaches to a tool call",
			body: `{"model":"m","input":[{"role":"user","content":"q"},
				{"type":"reasoning","summary":[{"type":"summary_text","text":"short"}],"content":[{"type":"reasoning_text","text":"long thoughts"}]},
				{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
				{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"more"}]},
				{"type":"function_call","call_id":"c2","name":"g","arguments":"{}"}]}`,
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":null,"reasoning_content":"long thoughts\n\nmore","tool_calls":[` +
				`{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]}]`,
		},
		{
			name: "encrypted-only reasoning adds nothing; trailing reasoning joins the previous assistant",
			body: `{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[],"encrypted_content":"gAAA"},
				{"role":"assistant","content":"A"},{"type":"reasoning","summary":[{"type":"summary_text","text":"after"}]},{"role":"user","content":"q2"},
				{"type":"reasoning","summary":[{"type":"summary_text","text":"dangling"}]}]}`,
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":"A","reasoning_content":"after"},{"role":"user","content":"q2"}]`,
		},
		{
			name:     "OmitReasoning",
			body:     `{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"x"}]},{"role":"assistant","content":"A"}]}`,
			opts:     RequestOptions{OmitReasoning: true},
			messages: `[{"role":"user","content":"q"},{"role":"assistant","content":"A"}]`,
		},
		{
			name: "history goes between instructions and input",
			body: `{"model":"m","instructions":"sys","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c1","output":"ok"}]}`,
			history: []string{
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}`,
				`{"id":"rs_1","type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"think"}]}`,
				`{"id":"fc_1","type":"function_call","status":"completed","arguments":"{}","call_id":"c1","name":"f"}`,
			},
			messages: `[{"role":"system","content":"sys"},{"role":"user","content":"q"},{"role":"assistant","content":null,"reasoning_content":"think","tool_calls":[` +
				`{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]`,
		},
		// One assistant turn is one assistant message, its text and its
		// tool_calls together, so the tool results follow the calls (Chat
		// servers and templates reject a message between them).
		{
			name: "text after a tool call joins the call's message",
			body: `{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_t","output":"1"}]}`,
			history: []string{
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}`,
				`{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"a\":1}","call_id":"call_t","name":"f"}`,
				`{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"interrupt","annotations":[]}]}`,
			},
			messages: `[{"role":"user","content":"go"},{"role":"assistant","content":"interrupt","tool_calls":[{"id":"call_t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},` +
				`{"role":"tool","tool_call_id":"call_t","content":"1"}]`,
		},
		{
			name: "text before and after tool calls, with reasoning",
			body: `{"model":"m","input":[{"role":"user","content":"go"},` +
				`{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r1"}]},` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me check."}]},` +
				`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},` +
				`{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r2"}]},` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Both."}]},` +
				`{"type":"function_call_output","call_id":"c1","output":"a"},{"type":"function_call_output","call_id":"c2","output":"b"},{"role":"user","content":"thanks"}]}`,
			messages: `[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"text","text":"Let me check."},{"type":"text","text":"Both."}],"reasoning_content":"r1\n\nr2","tool_calls":[` +
				`{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"a"},{"role":"tool","tool_call_id":"c2","content":"b"},{"role":"user","content":"thanks"}]`,
		},
		{
			name: "a refusal after a tool call, and more after it",
			body: `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` +
				`{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"no "}]},` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x"},{"type":"refusal","refusal":"more"}]},` +
				`{"type":"function_call_output","call_id":"c1","output":"a"}]}`,
			messages: `[{"role":"assistant","content":"x","refusal":"no more","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"a"}]`,
		},
		{
			name:     "turns apart stay apart",
			body:     `{"model":"m","input":[{"role":"assistant","content":"a"},{"role":"user","content":"q"},{"role":"assistant","content":"b"}]}`,
			messages: `[{"role":"assistant","content":"a"},{"role":"user","content":"q"},{"role":"assistant","content":"b"}]`,
		},
		{
			name:     "empty content array",
			body:     `{"model":"m","input":[{"role":"user","content":[]}]}`,
			messages: `[{"role":"user","content":""}]`,
		},
		{
			name:     "null fields are absent",
			body:     `{"model":"m","input":"q","instructions":null,"tools":null,"tool_choice":null,"temperature":null,"text":null,"reasoning":null,"previous_response_id":null,"store":null}`,
			messages: `[{"role":"user","content":"q"}]`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hist []json.RawMessage
			for _, h := range tc.history {
				hist = append(hist, json.RawMessage(h))
			}
			chat, _ := mustChat(t, tc.body, hist, tc.opts)
			if got := gjson.GetBytes(chat, "messages").Raw; got != tc.messages {
				t.Errorf("messages:\n%s\nwant:\n%s", got, tc.messages)
			}
		})
	}
}

func TestToChatFullBody(t *testing.T) {
	body := `{"model":"gpt-oss-20b","instructions":"sys","input":"hi","stream":true,"store":false,"include":["reasoning.encrypted_content"],
		"prompt_cache_key":"pck","max_output_tokens":256,"temperature":0.5,"top_p":0.9,"user":"u1","safety_identifier":"s1","service_tier":"auto",
		"reasoning":{"effort":"high","summary":"auto"},"text":{"format":{"type":"json_schema","name":"out","description":"d","schema":{"type":"object"},"strict":true},"verbosity":"low"},
		"tools":[{"type":"function","name":"f","description":"does f","parameters":{"type":"object","properties":{}},"strict":true},
			{"type":"web_search"},{"type":"custom","name":"apply_patch","format":{"type":"grammar"}},{"type":"function","name":"g"}],
		"tool_choice":{"type":"function","name":"g"},"parallel_tool_calls":false,"truncation":"auto","metadata":{"a":"b"},"frobnicate":1}`
	chat, info := mustChat(t, body, nil, RequestOptions{})
	want := `{"model":"gpt-oss-20b","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}],` +
		`"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object","properties":{}},"strict":true}},{"type":"function","function":{"name":"g"}}],` +
		`"tool_choice":{"type":"function","function":{"name":"g"}},"parallel_tool_calls":false,"max_tokens":256,"temperature":0.5,"top_p":0.9,"user":"u1",` +
		`"prompt_cache_key":"pck","safety_identifier":"s1","service_tier":"auto","reasoning_effort":"high",` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"out","description":"d","schema":{"type":"object"},"strict":true}},"verbosity":"low",` +
		`"stream":true,"stream_options":{"include_usage":true}}`
	if string(chat) != want {
		t.Errorf("chat body:\n%s\nwant:\n%s", chat, want)
	}
	if info.Model != "gpt-oss-20b" || !info.Stream || info.Store == nil || *info.Store || info.PreviousResponseID != "" {
		t.Errorf("info %+v", info)
	}
	if got := strings.Join(info.DroppedTools, ","); got != "web_search,custom:apply_patch" {
		t.Errorf("DroppedTools %s", got)
	}
	if got := strings.Join(info.DroppedFields, ","); got != "store,include,truncation,metadata,frobnicate" {
		t.Errorf("DroppedFields %s", got)
	}
	if string(info.Echo.Tools) != `[{"type":"function","name":"f","description":"does f","parameters":{"type":"object","properties":{}},"strict":true},{"type":"function","name":"g"}]` {
		t.Errorf("echo tools %s", info.Echo.Tools)
	}
}

// TestForwardedFields keeps the documented lists and the code in step: every
// listed field is forwarded, translated or as is, and a sample of others is
// not; no field is on both lists.
func TestForwardedFields(t *testing.T) {
	var f reqFields
	for k := range forwardedFields {
		if !f.set(k, gjson.Result{}) {
			t.Errorf("%s is listed as forwarded but set drops it", k)
		}
		if passthroughFields[k] {
			t.Errorf("%s is listed as both translated and passed through", k)
		}
	}
	for k := range passthroughFields {
		if !f.set(k, gjson.Parse("1")) {
			t.Errorf("%s is listed as passed through but set drops it", k)
		}
	}
	for _, k := range []string{"previous_response_id", "store", "metadata", "include", "truncation", "background", "conversation", "prompt", "stream_options",
		"max_tool_calls", "top_logprobs", "n", "logprobs", "response_format", "max_tokens", "messages", "x"} {
		if f.set(k, gjson.Result{}) || forwardedFields[k] != "" || passthroughFields[k] {
			t.Errorf("%s should not be forwarded", k)
		}
	}
}

func TestToChatParams(t *testing.T) {
	cases := []struct {
		name string
		body string
		want map[string]string // gjson path in the chat body → raw JSON ("" = absent)
	}{
		{"non-stream has no stream fields", `{"model":"m","input":"q","stream":false}`, map[string]string{"stream": "", "stream_options": ""}},
		{"json_object", `{"model":"m","input":"q","text":{"format":{"type":"json_object"}}}`, map[string]string{"response_format": `{"type":"json_object"}`}},
		{"text format omitted", `{"model":"m","input":"q","text":{"format":{"type":"text"}}}`, map[string]string{"response_format": ""}},
		{"reasoning without effort", `{"model":"m","input":"q","reasoning":{"summary":"auto"}}`, map[string]string{"reasoning_effort": ""}},
		{"tool_choice string kept", `{"model":"m","input":"q","tools":[{"type":"function","name":"f"}],"tool_choice":"required"}`, map[string]string{"tool_choice": `"required"`}},
		{"only dropped tools: no tools, tool_choice, parallel_tool_calls", `{"model":"m","input":"q","tools":[{"type":"web_search"}],"tool_choice":"auto","parallel_tool_calls":true}`,
			map[string]string{"tools": "", "tool_choice": "", "parallel_tool_calls": ""}},
		{"allowed_tools narrows the tools", `{"model":"m","input":"q","tools":[{"type":"function","name":"a"},{"type":"function","name":"b"},{"type":"web_search"}],
			"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"b"},{"type":"web_search"}]}}`,
			map[string]string{"tools": `[{"type":"function","function":{"name":"b"}}]`, "tool_choice": `"required"`}},
		{"default model", `{"input":"q"}`, map[string]string{"model": `"fallback"`}},
		{"Chat sampling fields forwarded unchanged", `{"model":"m","input":"q","seed":5,"stop":["x","y"],"frequency_penalty":0.5,"presence_penalty":-0.25,"logit_bias":{"50256":-100}}`,
			map[string]string{"seed": "5", "stop": `["x","y"]`, "frequency_penalty": "0.5", "presence_penalty": "-0.25", "logit_bias": `{"50256":-100}`}},
		{"llama.cpp and vLLM sampling fields forwarded unchanged", `{"model":"m","input":"q","top_k":40,"min_p":0.1,"repetition_penalty":1.1,"repeat_penalty":1.2,"typical_p":0.9,
			"min_tokens":3,"stop_token_ids":[2],"ignore_eos":false,"mirostat":2,"dry_sequence_breakers":["\n"],"samplers":["top_k","min_p"]}`,
			map[string]string{"top_k": "40", "min_p": "0.1", "repetition_penalty": "1.1", "repeat_penalty": "1.2", "typical_p": "0.9",
				"min_tokens": "3", "stop_token_ids": "[2]", "ignore_eos": "false", "mirostat": "2", "dry_sequence_breakers": `["\n"]`, "samplers": `["top_k","min_p"]`}},
		{"a null sampling field is left out", `{"model":"m","input":"q","seed":null,"stop":"x"}`, map[string]string{"seed": "", "stop": `"x"`}},
		{"fields that change the answer's form are not forwarded", `{"model":"m","input":"q","n":2,"logprobs":true,"response_format":{"type":"json_object"},"max_tokens":9,"frobnicate":1}`,
			map[string]string{"n": "", "logprobs": "", "response_format": "", "max_tokens": "", "frobnicate": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chat, _ := mustChat(t, tc.body, nil, RequestOptions{DefaultModel: "fallback"})
			for path, want := range tc.want {
				if got := gjson.GetBytes(chat, path).Raw; got != want {
					t.Errorf("%s = %s, want %s (body %s)", path, got, want, chat)
				}
			}
		})
	}
}

func TestToChatRejects(t *testing.T) {
	cases := []struct {
		name, body, param, code, msg string
		history                      []string
	}{
		{"malformed JSON", `{"model":`, "", "invalid_json", "not valid JSON", nil},
		{"too deep", `{"input":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, "", "invalid_json", "deeper", nil},
		{"body not an object", `[1]`, "", "invalid_type", "JSON object", nil},
		{"model missing", `{"input":"q"}`, "model", "missing_required_parameter", "model", nil},
		{"model wrong type", `{"model":1,"input":"q"}`, "model", "invalid_type", "model", nil},
		{"input a number", `{"model":"m","input":5}`, "input", "invalid_type", "input", nil},
		{"no input at all", `{"model":"m"}`, "input", "missing_required_parameter", "input", nil},
		{"stream wrong type", `{"model":"m","input":"q","stream":"yes"}`, "stream", "invalid_type", "stream", nil},
		{"temperature wrong type", `{"model":"m","input":"q","temperature":"hot"}`, "temperature", "invalid_type", "temperature", nil},
		{"max_output_tokens not integer", `{"model":"m","input":"q","max_output_tokens":1.5}`, "max_output_tokens", "invalid_type", "integer", nil},
		{"previous_response_id wrong type", `{"model":"m","input":"q","previous_response_id":7}`, "previous_response_id", "invalid_type", "", nil},
		{"store wrong type", `{"model":"m","input":"q","store":"no"}`, "store", "invalid_type", "", nil},
		{"metadata wrong type", `{"model":"m","input":"q","metadata":[]}`, "metadata", "invalid_type", "", nil},
		{"background", `{"model":"m","input":"q","background":true}`, "background", "unsupported_parameter", "Background", nil},
		{"conversation", `{"model":"m","input":"q","conversation":"conv_1"}`, "conversation", "unsupported_parameter", "", nil},
		{"prompt", `{"model":"m","input":"q","prompt":{"id":"pmpt_1"}}`, "prompt", "unsupported_parameter", "", nil},
		{"logprobs included", `{"model":"m","input":"q","include":["reasoning.encrypted_content","message.output_text.logprobs"]}`, "include[1]", "unsupported_parameter", "Logprobs", nil},
		{"top_logprobs", `{"model":"m","input":"q","top_logprobs":3}`, "top_logprobs", "unsupported_parameter", "", nil},
		{"reasoning effort wrong type", `{"model":"m","input":"q","reasoning":{"effort":3}}`, "reasoning.effort", "invalid_type", "", nil},
		{"reasoning wrong type", `{"model":"m","input":"q","reasoning":"high"}`, "reasoning", "invalid_type", "", nil},
		{"text format unknown", `{"model":"m","input":"q","text":{"format":{"type":"yaml"}}}`, "text.format.type", "invalid_value", "yaml", nil},
		{"json_schema without name", `{"model":"m","input":"q","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name", "missing_required_parameter", "", nil},
		{"json_schema without schema", `{"model":"m","input":"q","text":{"format":{"type":"json_schema","name":"x"}}}`, "text.format.schema", "missing_required_parameter", "", nil},
		{"tools not an array", `{"model":"m","input":"q","tools":{"type":"function"}}`, "tools", "invalid_type", "", nil},
		{"tool not an object", `{"model":"m","input":"q","tools":[{"type":"function","name":"f"},"f"]}`, "tools[1]", "invalid_type", "", nil},
		{"tool without type", `{"model":"m","input":"q","tools":[{"name":"f"}]}`, "tools[0].type", "missing_required_parameter", "", nil},
		{"function tool without name", `{"model":"m","input":"q","tools":[{"type":"function","parameters":{}}]}`, "tools[0].name", "missing_required_parameter", "", nil},
		{"function parameters wrong type", `{"model":"m","input":"q","tools":[{"type":"function","name":"f","parameters":"{}"}]}`, "tools[0].parameters", "invalid_type", "", nil},
		{"tool_choice needs a dropped tool", `{"model":"m","input":"q","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}`, "tool_choice", "unsupported_value", "web_search", nil},
		{"tool_choice names a missing function", `{"model":"m","input":"q","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice", "invalid_value", `"g"`, nil},
		{"tool_choice names a dropped custom tool", `{"model":"m","input":"q","tools":[{"type":"custom","name":"apply_patch"}],"tool_choice":{"type":"custom","name":"apply_patch"}}`, "tool_choice", "unsupported_value", "custom", nil},
		{"tool_choice required without functions", `{"model":"m","input":"q","tools":[{"type":"file_search"}],"tool_choice":"required"}`, "tool_choice", "invalid_value", "required", nil},
		{"tool_choice unknown string", `{"model":"m","input":"q","tool_choice":"always"}`, "tool_choice", "invalid_value", "always", nil},
		{"tool_choice wrong type", `{"model":"m","input":"q","tool_choice":1}`, "tool_choice", "invalid_type", "", nil},
		{"allowed_tools only dropped", `{"model":"m","input":"q","tools":[{"type":"function","name":"f"},{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"web_search"}]}}`, "tool_choice", "unsupported_value", "", nil},
		{"allowed_tools unknown function", `{"model":"m","input":"q","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"},{"type":"function","name":"zz"}]}}`, "tool_choice.tools[1]", "invalid_value", "zz", nil},
		{"unknown item type", `{"model":"m","input":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"},{"type":"web_search_call","id":"ws_1","status":"completed"}]}`, "input[3]", "unsupported_value", "web_search_call", nil},
		{"item_reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0]", "unsupported_value", "item_reference", nil},
		{"item not an object", `{"model":"m","input":[{"role":"user","content":"a"},{"role":"user","content":"b"},"c"]}`, "input[2]", "invalid_type", "", nil},
		{"item type wrong type", `{"model":"m","input":[{"type":5}]}`, "input[0].type", "invalid_type", "", nil},
		{"item without type or role", `{"model":"m","input":[{"content":"x"}]}`, "input[0].type", "missing_required_parameter", "", nil},
		{"input_file part", `{"model":"m","input":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_file","file_id":"file_1"}]}]}`, "input[1].content[1]", "unsupported_value", "input_file", nil},
		{"input_image by file_id", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1","detail":"auto"}]}]}`, "input[0].content[0]", "unsupported_value", "file_id", nil},
		{"input_image without source", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","detail":"auto"}]}]}`, "input[0].content[0].image_url", "missing_required_parameter", "", nil},
		{"image in a system message", `{"model":"m","input":[{"role":"system","content":[{"type":"input_image","image_url":"https://x"}]}]}`, "input[0].content[0]", "unsupported_value", "user messages", nil},
		{"unknown part type", `{"model":"m","input":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "input[0].content[0]", "unsupported_value", "input_audio", nil},
		{"part text wrong type", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":1}]}]}`, "input[0].content[0].text", "invalid_type", "", nil},
		{"part not an object", `{"model":"m","input":[{"role":"user","content":["x"]}]}`, "input[0].content[0]", "invalid_type", "", nil},
		{"assistant part unknown", `{"model":"m","input":[{"role":"assistant","content":[{"type":"output_audio"}]}]}`, "input[0].content[0]", "unsupported_value", "output_audio", nil},
		{"bad role", `{"model":"m","input":[{"type":"message","role":"critic","content":"x"}]}`, "input[0].role", "invalid_value", "critic", nil},
		{"message without role", `{"model":"m","input":[{"type":"message","content":"x"}]}`, "input[0].role", "missing_required_parameter", "", nil},
		{"message without content", `{"model":"m","input":[{"role":"user"}]}`, "input[0].content", "missing_required_parameter", "", nil},
		{"content wrong type", `{"model":"m","input":[{"role":"user","content":{"text":"x"}}]}`, "input[0].content", "invalid_type", "", nil},
		{"function_call without call_id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", "missing_required_parameter", "", nil},
		{"function_call arguments object", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]}`, "input[0].arguments", "invalid_type", "", nil},
		{"function_call_output without output", `{"model":"m","input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output", "missing_required_parameter", "", nil},
		{"function_call_output image", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"https://x"}]}]}`, "input[0].output[1]", "unsupported_value", "input_image", nil},
		{"function_call_output wrong type", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":5}]}`, "input[0].output", "invalid_type", "", nil},
		{"reasoning summary wrong type", `{"model":"m","input":[{"type":"reasoning","summary":"x"}]}`, "input[0].summary", "invalid_type", "", nil},
		{"reasoning part text wrong type", `{"model":"m","input":[{"type":"reasoning","summary":[{"type":"summary_text","text":null}]}]}`, "input[0].summary[0].text", "invalid_type", "", nil},
		{"bad history item", `{"model":"m","input":"q"}`, "previous_response_id", "unsupported_value", "stored conversation item 1", []string{`{"role":"user","content":"a"}`, `{"type":"computer_call"}`}},
		{"history not JSON", `{"model":"m","input":"q"}`, "previous_response_id", "invalid_json", "item 0", []string{`{`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hist []json.RawMessage
			for _, h := range tc.history {
				hist = append(hist, json.RawMessage(h))
			}
			chat, _, aerr := ToChat([]byte(tc.body), hist, RequestOptions{})
			if aerr == nil {
				t.Fatalf("accepted: %s", chat)
			}
			if aerr.Status != 400 || aerr.Type != "invalid_request_error" || aerr.Param != tc.param || aerr.Code != tc.code || !strings.Contains(aerr.Message, tc.msg) {
				t.Errorf("got status %d type %s param %q code %q message %q; want param %q code %q message containing %q",
					aerr.Status, aerr.Type, aerr.Param, aerr.Code, aerr.Message, tc.param, tc.code, tc.msg)
			}
		})
	}
}

func TestToChatInputItems(t *testing.T) {
	body := `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":"yo"},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
		{"role":"developer","id":"m1","content":"d"}]}`
	_, info := mustChat(t, body, nil, RequestOptions{})
	want := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`,
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"yo","annotations":[]}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}`,
		`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}`,
		`{"type":"message","role":"developer","id":"m1","content":[{"type":"input_text","text":"d"}]}`,
	}
	if len(info.InputItems) != len(want) {
		t.Fatalf("InputItems %s", info.InputItems)
	}
	for i := range want {
		if string(info.InputItems[i]) != want[i] {
			t.Errorf("InputItems[%d] = %s, want %s", i, info.InputItems[i], want[i])
		}
	}
	_, info = mustChat(t, `{"model":"m","input":"plain \u00e9"}`, nil, RequestOptions{})
	if len(info.InputItems) != 1 || string(info.InputItems[0]) != `{"type":"message","role":"user","content":[{"type":"input_text","text":"plain \u00e9"}]}` {
		t.Errorf("string input item %s", info.InputItems)
	}
	// Stored items round-trip through ToChat as history unchanged in meaning.
	chat1, _ := mustChat(t, body, nil, RequestOptions{})
	chat2, _ := mustChat(t, `{"model":"m"}`, info0(t, body).InputItems, RequestOptions{})
	if gjson.GetBytes(chat1, "messages").Raw != gjson.GetBytes(chat2, "messages").Raw {
		t.Errorf("history replay differs:\n%s\n%s", gjson.GetBytes(chat1, "messages").Raw, gjson.GetBytes(chat2, "messages").Raw)
	}
}

func info0(t *testing.T, body string) RequestInfo {
	_, info := mustChat(t, body, nil, RequestOptions{})
	return info
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\n\r\t", "é—😀", "bad\xffutf8", "<&>\u2028"} {
		got := jsonx.AppendQuote(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q → %s: %v", s, got, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("%q → %s → %q", s, got, back)
		}
	}
}
