package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

const shapeChunkHead = `{"id":"chatcmpl-shape","object":"chat.completion.chunk","created":7,"model":"gpt-fake-1",`

// shapeChunk is a Chat chunk of the stream chatcmpl-shape with the given
// members after its head.
func shapeChunk(members string) upstreamtest.Frame {
	return upstreamtest.SSEData([]byte(shapeChunkHead + members + `}`))
}

// shapeStream is a Chat stream "Hello world" with extra after its first
// content chunk, then the finish chunk and [DONE].
func shapeStream(extra ...upstreamtest.Frame) []upstreamtest.Frame {
	frames := []upstreamtest.Frame{
		shapeChunk(`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`),
		shapeChunk(`"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]`),
	}
	frames = append(frames, extra...)
	return append(frames,
		shapeChunk(`"choices":[{"index":0,"delta":{"content":" world"},"finish_reason":null}]`),
		shapeChunk(`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`),
		upstreamtest.SSEData([]byte("[DONE]")))
}

// specChunkOrError fails unless every event before [DONE] is a chunk
// (choices an array) or an error chunk ({"error":{…}}): what OpenAI's spec
// lets a Chat stream carry, and what the SDKs' stream helpers iterate.
func specChunkOrError(t *testing.T, evs []sse.Event) {
	t.Helper()
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("the stream does not end with [DONE]: %d events", len(evs))
	}
	for _, ev := range evs[:len(evs)-1] {
		if !gjson.GetBytes(ev.Data, "choices").IsArray() && !gjson.GetBytes(ev.Data, "error").IsObject() {
			t.Fatalf("the client got %s: neither a chunk nor an error chunk", ev.Data)
		}
	}
}

// An upstream's stream error without a code (OpenAI's own shape, code
// null) or with an error that is only a string, as a stream's first event,
// names the upstream's message in the answer the client gets when no
// target is left, from one target as after a replay on a second (README
// "Failover and replay": the answer names the failures).
func TestChatFirstErrorWithoutCodeNamesTheMessage(t *testing.T) {
	for _, tt := range []struct{ name, event, msg string }{
		{"code null", `{"error":{"message":"The server had an error","type":"server_error","code":null}}`, "The server had an error"},
		{"string error", `{"error":"string\n boom"}`, "string boom"},
	} {
		script := upstreamtest.Script{ChatFrames: []upstreamtest.Frame{upstreamtest.SSEData([]byte(tt.event)), upstreamtest.SSEData([]byte("[DONE]"))}}
		for _, protocol := range []string{"chat", "responses"} {
			t.Run(tt.name+"/one target/"+protocol, func(t *testing.T) {
				resp, b := readAll(t, singleChatUpstream(t, protocol, script), "/v1/chat/completions", chatStreamBody)
				if resp.StatusCode/100 != 5 || !strings.HasSuffix(gjson.GetBytes(b, "error.message").Str, ": "+tt.msg) {
					t.Fatalf("%d %s, want a 5xx whose message ends with the upstream's %q", resp.StatusCode, b, tt.msg)
				}
			})
		}
		t.Run(tt.name+"/two targets", func(t *testing.T) {
			h := routedPairHarness(t, map[string]string{"A": "chat", "B": "chat"}, gateway.Options{})
			h.ups["A"].SetDefault(script)
			h.ups["B"].SetDefault(script)
			resp, b := readAll(t, h, "/v1/chat/completions", `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode/100 != 5 || !strings.Contains(gjson.GetBytes(b, "error.message").Str, strings.Fields(tt.msg)[0]) {
				t.Fatalf("%d %s, want a 5xx with the upstream's %q", resp.StatusCode, b, tt.msg)
			}
		})
	}
}

// An upstream error object sent unwrapped ({"object":"error",…}, vLLM's
// HTTP error body) is an upstream error, not a chunk to relay: after
// content the stream ends with an error chunk carrying its message (a
// Responses stream with response.failed); as the first event the client,
// who has seen nothing, gets the HTTP status.
func TestChatUnwrappedErrorObjectIsAnError(t *testing.T) {
	bare := upstreamtest.SSEData([]byte(`{"object":"error","message":"vllm boom","type":"InternalServerError","param":null,"code":500}`))
	t.Run("after content", func(t *testing.T) {
		h := singleChatUpstream(t, "chat", upstreamtest.Script{ChatFrames: shapeStream(bare)})
		_, evs := postWith(t, h, "/v1/chat/completions", chatStreamBody, nil)
		specChunkOrError(t, evs)
		last := evs[len(evs)-2].Data
		if gjson.GetBytes(last, "error.message").Str != "vllm boom" {
			t.Fatalf("the stream ended with %s, want an error chunk with the upstream's message", last)
		}
	})
	t.Run("responses stream after content", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(afterContent(upstreamtest.Script{Frames: []upstreamtest.Frame{bare}}))
		_, evs := h.responsesStream(respStreamBody)
		last := assertOneTerminal(t, evs)
		if last.typ != "response.failed" || !strings.HasSuffix(gjson.GetBytes(last.data, "response.error.message").Str, "vllm boom") {
			t.Fatalf("the stream ended with %s, want response.failed with the upstream's message", last.data)
		}
	})
	t.Run("first", func(t *testing.T) {
		h := singleChatUpstream(t, "chat", upstreamtest.Script{ChatFrames: []upstreamtest.Frame{bare, upstreamtest.SSEData([]byte("[DONE]"))}})
		resp, b := readAll(t, h, "/v1/chat/completions", chatStreamBody)
		if resp.StatusCode/100 != 5 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			!strings.Contains(gjson.GetBytes(b, "error.message").Str, "500") {
			t.Fatalf("%d %s %s, want a 5xx JSON error naming the upstream's code", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	})
}

// A chunk whose choices is not an array is unparseable (README's
// terminal-event rule: a single one is skipped and counted), and a usage
// chunk with choices null or without choices reaches a client that asked
// as the usage-only chunk, choices []; openai-go's accumulator reads the
// stream whole.
func TestChatChunkWithoutAChoicesArray(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	for _, tt := range []struct {
		name  string
		extra []upstreamtest.Frame
	}{
		{"choices null", []upstreamtest.Frame{shapeChunk(`"choices":null`)}},
		{"choices an object", []upstreamtest.Frame{shapeChunk(`"choices":{"index":0}`)}},
		{"no choices", []upstreamtest.Frame{shapeChunk(`"system_fingerprint":"fp"`)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: shapeStream(tt.extra...)})
			_, evs := postWithKey(t, h, `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			var raw []sse.Event
			for _, ev := range evs {
				raw = append(raw, sse.Event{Data: ev.Data, Done: ev.Done})
			}
			specChunkOrError(t, raw)
			if n := len(evs); n != 5 {
				t.Fatalf("%d events, want the 4 chunks and [DONE] (the odd one skipped)", n)
			}
		})
	}
	const usage = `"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`
	for _, tt := range []struct{ name, chunk string }{
		{"usage with choices null", `"choices":null,` + usage},
		{"usage without choices", usage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			frames := shapeStream()
			frames = append(frames[:len(frames)-1], shapeChunk(tt.chunk), frames[len(frames)-1])
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames})
			_, evs := postWithKey(t, h, `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
			if len(evs) < 2 || !evs[len(evs)-1].Done {
				t.Fatalf("the stream does not end with [DONE]: %d events", len(evs))
			}
			if last := evs[len(evs)-2].Data; !gjson.GetBytes(last, "choices").IsArray() || gjson.GetBytes(last, "usage.total_tokens").Int() != 18 {
				t.Fatalf("the last chunk is %s, want the usage-only chunk with choices []", last)
			}
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames})
			c := openai.NewClient(option.WithBaseURL(h.url+"/v1/"), option.WithAPIKey(teamAKey), option.WithMaxRetries(0))
			s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
				Model:         "gpt-fake-1",
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			})
			acc := openai.ChatCompletionAccumulator{}
			var last string
			for s.Next() {
				acc.AddChunk(s.Current())
				last = s.Current().RawJSON()
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if ch := gjson.Get(last, "choices"); !ch.IsArray() || len(ch.Array()) != 0 {
				t.Fatalf("the last chunk is %s, want the usage-only chunk with choices []", last)
			}
			if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello world" || acc.Usage.TotalTokens != 18 {
				t.Fatalf("accumulated %+v, usage %+v", acc.Choices, acc.Usage)
			}
		})
	}
}

// A usage-only chunk an upstream sends before its finish chunk reaches a
// client that asked as the last chunk before [DONE] (README "Usage"),
// once, also when the finish chunk repeats the usage; a client that did
// not ask gets none; the request is counted with the upstream's usage.
func TestChatEarlyUsageChunkIsLastBeforeDone(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	const usage = `{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`
	requests := int64(0)
	for _, finishUsage := range []string{"null", usage} {
		for _, asked := range []bool{true, false} {
			name := "finish chunk usage repeated"
			if finishUsage == "null" {
				name = "finish chunk usage null"
			}
			body := `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if asked {
				name += "/asked"
				body = `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			t.Run(name, func(t *testing.T) {
				frames := []upstreamtest.Frame{
					shapeChunk(`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`),
					shapeChunk(`"choices":[{"index":0,"delta":{"content":"Hello world"},"finish_reason":null}]`),
					shapeChunk(`"choices":[],"usage":` + usage),
					shapeChunk(`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":` + finishUsage),
					upstreamtest.SSEData([]byte("[DONE]")),
				}
				h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames})
				_, evs := postWithKey(t, h, body)
				requests++
				if len(evs) < 2 || !evs[len(evs)-1].Done {
					t.Fatalf("the stream does not end with [DONE]: %v", evs)
				}
				var usages []int
				for i, ev := range evs[:len(evs)-1] {
					if u := gjson.GetBytes(ev.Data, "usage"); u.Exists() && u.Type != gjson.Null {
						usages = append(usages, i)
					}
				}
				if !asked {
					if len(usages) != 0 {
						t.Fatalf("a client that did not ask got usage: %s", evs[usages[0]].Data)
					}
					return
				}
				last := len(evs) - 2
				if len(usages) != 1 || usages[0] != last {
					t.Fatalf("usage in chunks %v of %d, want exactly one, in the last before [DONE] (%d)", usages, len(evs), last)
				}
				if gjson.GetBytes(evs[last].Data, "usage.total_tokens").Int() != 18 || len(gjson.GetBytes(evs[last].Data, "choices").Array()) != 0 {
					t.Fatalf("the last chunk is %s, want the usage-only chunk", evs[last].Data)
				}
			})
		}
	}
	rep := waitUsage(t, h, requests)
	if rep.Total.Requests != requests || rep.Total.InputTokens != 11*requests || rep.Total.OutputTokens != 7*requests {
		t.Fatalf("usage %+v, want %d requests, each counted once (11 in, 7 out)", rep.Total, requests)
	}
}
