package plugins

import (
	"bytes"
	"fmt"
	"strings"
)

// codexBody builds a Codex-shaped Responses request of about size bytes: the
// model first, a long input history (messages, function calls and their
// outputs), then tools (one of them web_search) and the small flags.
func codexBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-5-codex","instructions":"You are Codex, a coding agent.","input":[`)
	for i := 0; i == 0 || b.Len() < size-700; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"look at f%d.go and fix the \"bug\"; %s"}]}`, i, strings.Repeat("lorem ipsum ", min(20, size/200)))
		case 1:
			fmt.Fprintf(&b, `{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cat\",\"f%d.go\"]}","call_id":"call_%d"}`, i, i)
		default:
			fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%d","output":"package main\n\nfunc main() {}\n%s"}`, i, strings.Repeat(`// code line with a \"quote\"\n`, min(30, size/300)))
		}
	}
	b.WriteString(`],"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array"}}}},{"type":"web_search"},{"type":"function","name":"apply_patch","parameters":{}}],`)
	b.WriteString(`"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"k"}`)
	return b.Bytes()
}
