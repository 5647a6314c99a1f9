package sse_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/sse"
)

// responsesStream is a realistic 10-event Responses API stream.
func responsesStream() []byte {
	resp := `{"id":"resp_68af4030592c81938ec0a5fbab4a3e9f","object":"response","created_at":1756315696,"status":"%s","model":"gpt-5-2025-08-07","output":[%s],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":%s}`
	msg := `{"id":"msg_68af40337e7c8193a1b5d0b4a6a3c2e1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello! How can I help you today?"}],"role":"assistant"}`
	usage := `{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":18,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":30}`
	var b bytes.Buffer
	seq := 0
	add := func(name, body string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", name, name, seq, body)
		seq++
	}
	add("response.created", `"response":`+fmt.Sprintf(resp, "in_progress", "", "null"))
	add("response.in_progress", `"response":`+fmt.Sprintf(resp, "in_progress", "", "null"))
	add("response.output_item.added", `"output_index":0,"item":{"id":"msg_68af40337e7c8193a1b5d0b4a6a3c2e1","type":"message","status":"in_progress","content":[],"role":"assistant"}`)
	add("response.content_part.added", `"item_id":"msg_68af40337e7c8193a1b5d0b4a6a3c2e1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`)
	for _, d := range []string{"Hello!", " How can I", " help you today?"} {
		add("response.output_text.delta", `"item_id":"msg_68af40337e7c8193a1b5d0b4a6a3c2e1","output_index":0,"content_index":0,"delta":"`+d+`","logprobs":[],"obfuscation":"x7Qp"`)
	}
	add("response.output_text.done", `"item_id":"msg_68af40337e7c8193a1b5d0b4a6a3c2e1","output_index":0,"content_index":0,"text":"Hello! How can I help you today?","logprobs":[]`)
	add("response.output_item.done", `"output_index":0,"item":`+msg)
	add("response.completed", `"response":`+fmt.Sprintf(resp, "completed", msg, usage))
	return b.Bytes()
}

// chatStream is a Chat Completions stream of n small deltas and [DONE].
func chatStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", i)
		if i%100 == 99 {
			b.WriteString(": keepalive\n\n")
		}
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

func BenchmarkReader(b *testing.B) {
	big := bytes.Repeat([]byte("x"), 256<<10)
	for _, bc := range []struct {
		name   string
		stream []byte
	}{
		{"responses-10-events", responsesStream()},
		{"chat-1000-deltas", chatStream(1000)},
		{"chat-1000-deltas-crlf", bytes.ReplaceAll(chatStream(1000), []byte("\n"), []byte("\r\n"))},
		{"one-256KiB-event", append(append([]byte("event: response.completed\ndata: "), big...), "\n\n"...)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			src := bytes.NewReader(bc.stream)
			r := sse.NewReader(src, 0)
			b.SetBytes(int64(len(bc.stream)))
			b.ReportAllocs()
			events := 0
			for b.Loop() {
				src.Reset(bc.stream)
				r.Reset(src)
				for {
					_, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					events++
				}
			}
			b.ReportMetric(float64(events)/float64(b.N), "events/op")
		})
	}
}

func BenchmarkWriter(b *testing.B) {
	delta := []byte(`{"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_68af40337e7c8193a1b5d0b4a6a3c2e1","output_index":0,"content_index":0,"delta":" help","logprobs":[]}`)
	chunk := []byte(`{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}`)
	multi := []byte(strings.Repeat(`{"line":"pretty printed"}`+"\r\n", 8))
	big := bytes.Repeat([]byte("y"), 256<<10)
	for _, bc := range []struct {
		name string
		data []byte
		do   func(w *sse.Writer, data []byte) error
	}{
		{"responses-event", delta, func(w *sse.Writer, d []byte) error { return w.WriteEvent("response.output_text.delta", d) }},
		{"chat-data", chunk, func(w *sse.Writer, d []byte) error { return w.WriteData(d) }},
		{"multi-line-crlf", multi, func(w *sse.Writer, d []byte) error { return w.WriteData(d) }},
		{"256KiB-event", big, func(w *sse.Writer, d []byte) error { return w.WriteEvent("response.completed", d) }},
		{"done", nil, func(w *sse.Writer, _ []byte) error { return w.WriteDone() }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := sse.NewWriter(&discardFlusher{})
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.do(w, bc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
