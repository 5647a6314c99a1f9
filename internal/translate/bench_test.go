package translate

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// codexRequest builds a request shaped like what Codex sends over HTTP every
// turn: instructions, developer messages, the whole history (user and
// assistant messages, reasoning items with encrypted_content and a summary,
// function_call / function_call_output pairs), tools, store:false, include,
// prompt_cache_key. Turns are added until the body reaches size bytes.
func codexRequest(size, tools int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-5-codex","instructions":"You are Codex, a coding agent. Follow the repository's conventions.",`)
	b.WriteString(`"tools":[`)
	for i := range tools {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"function","name":"tool_%d","description":"Runs tool %d with the given arguments.","strict":false,`+
			`"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},"workdir":{"type":"string"},"timeout_ms":{"type":"number"}},"required":["command"],"additionalProperties":false}}`, i, i)
	}
	b.WriteString(`],"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,`)
	b.WriteString(`"include":["reasoning.encrypted_content"],"prompt_cache_key":"0197a5b4-cache","input":[`)
	b.WriteString(`{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions instructions>sandbox: workspace-write</permissions instructions>"}]},`)
	b.WriteString(`{"type":"message","role":"user","content":[{"type":"input_text","text":"Fix the failing test in pkg/foo."}]}`)
	secret := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("encrypted reasoning state ", 40)))
	output := strings.Repeat(`ok  \tgithub.com/x/y/pkg/foo\t0.012s\n--- FAIL: TestBar (0.00s)\n    bar_test.go:12: got "a", want "b"\n`, 8)
	for turn := 0; b.Len() < size-300; turn++ {
		fmt.Fprintf(&b, `,{"type":"reasoning","id":"rs_%d","summary":[{"type":"summary_text","text":"**Inspecting the test**\n\nI will run the tests first."}],"encrypted_content":"%s"}`, turn, secret)
		fmt.Fprintf(&b, `,{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"tool_0","arguments":"{\"command\":[\"go\",\"test\",\"./...\"],\"workdir\":\"/repo\"}"}`, turn, turn)
		fmt.Fprintf(&b, `,{"type":"function_call_output","call_id":"call_%d","output":%q}`, turn, output)
		fmt.Fprintf(&b, `,{"type":"message","role":"assistant","id":"msg_%d","content":[{"type":"output_text","text":"The test fails because of a typo; fixing it now.","annotations":[]}]}`, turn)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func BenchmarkToChat(b *testing.B) {
	for _, bc := range []struct {
		name        string
		size, tools int
	}{{"1KiB", 1 << 10, 1}, {"1MiB", 1 << 20, 10}} {
		body := codexRequest(bc.size, bc.tools)
		if _, _, aerr := ToChat(body, nil, RequestOptions{}); aerr != nil {
			b.Fatal(aerr)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, aerr := ToChat(body, nil, RequestOptions{}); aerr != nil {
					b.Fatal(aerr)
				}
			}
		})
	}
}

func TestCodexRequestConverts(t *testing.T) {
	for _, size := range []int{1 << 10, 1 << 20} {
		body := codexRequest(size, 10)
		chat, info, aerr := ToChat(body, nil, RequestOptions{})
		if aerr != nil {
			t.Fatal(aerr)
		}
		if len(body) < size*9/10 || len(chat) == 0 || len(info.InputItems) < 2 {
			t.Fatalf("size %d: body %d chat %d items %d", size, len(body), len(chat), len(info.InputItems))
		}
	}
}

func BenchmarkStreamChunk(b *testing.B) {
	const head = `{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1750000000,"model":"qwen3-8b","system_fingerprint":"b5000",`
	for _, bc := range []struct{ name, chunk string }{
		{"content", head + `"choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}`},
		{"reasoning", head + `"choices":[{"index":0,"delta":{"reasoning_content":" so I"},"logprobs":null,"finish_reason":null}]}`},
		{"tool_args", head + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"./..."}}]},"logprobs":null,"finish_reason":null}]}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			chunk := []byte(bc.chunk)
			s := NewStream(StreamOptions{ResponseID: "resp_b", CreatedAt: 1, Model: "m", NewID: counterIDs()})
			s.Start()
			if bc.name == "tool_args" {
				_, _ = s.Chunk([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"shell","arguments":""}}]}}]}`))
			}
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := s.Chunk(chunk)
				if err != nil || len(ev) == 0 {
					b.Fatal(err, len(ev))
				}
			}
		})
	}
}
