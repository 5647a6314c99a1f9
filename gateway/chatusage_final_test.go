package gateway_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// finishUsageChunks is a Chat stream "Hello world" whose finish chunk
// carries the final usage (11 prompt, 7 completion tokens), followed, with
// usageChunk, by the usage-only chunk repeating it (vLLM, llama.cpp) or,
// without, by nothing (older llama.cpp builds), then [DONE].
func finishUsageChunks(usageChunk bool) []upstreamtest.Frame {
	const head = `{"id":"chatcmpl-fin","object":"chat.completion.chunk","created":7,"model":"gpt-fake-1",`
	const usage = `{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`
	chunk := func(choice, usage string) upstreamtest.Frame {
		return upstreamtest.SSEData([]byte(head + `"choices":[` + choice + `],"usage":` + usage + `}`))
	}
	frames := []upstreamtest.Frame{
		chunk(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`, "null"),
		chunk(`{"index":0,"delta":{"content":"Hello"},"finish_reason":null}`, "null"),
		chunk(`{"index":0,"delta":{"content":" world"},"finish_reason":null}`, "null"),
		chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`, usage),
	}
	if usageChunk {
		frames = append(frames, chunk("", usage))
	}
	return append(frames, upstreamtest.SSEData([]byte("[DONE]")))
}

// A Chat client gets one non-null usage, in the usage-only chunk before
// [DONE], and only when it asked (stream_options.include_usage), also from
// an upstream that sends the final usage on the finish chunk, with or
// without a usage-only chunk after it: the finish chunk's usage reaches it
// as null, and when no usage-only chunk follows the gateway writes one
// with the stream's id, object, created and model (README "Keys, limits and
// usage"). The request is counted once, with the upstream's usage.
func TestChatUsageOnTheFinishChunkReachesTheClientOnce(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	requests := int64(0)
	for _, usageChunk := range []bool{true, false} {
		for _, opts := range []struct {
			name, body string
			asked      bool
		}{
			{"include_usage true", `,"stream_options":{"include_usage":true}`, true},
			{"include_usage false", `,"stream_options":{"include_usage":false}`, false},
			{"no stream_options", ``, false},
		} {
			t.Run(fmt.Sprintf("usage-only chunk %v/%s", usageChunk, opts.name), func(t *testing.T) {
				h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: finishUsageChunks(usageChunk)})
				_, evs := postWithKey(t, h, `{"model":"gpt-fake-1","stream":true`+opts.body+`,"messages":[{"role":"user","content":"hi"}]}`)
				requests++
				if len(evs) < 2 || !evs[len(evs)-1].Done {
					t.Fatalf("the stream does not end with [DONE]: %v", evs)
				}
				var text string
				var usages []int
				for i, ev := range evs[:len(evs)-1] {
					text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
					if u := gjson.GetBytes(ev.Data, "usage"); u.Exists() && u.Type != gjson.Null {
						usages = append(usages, i)
					}
				}
				if text != "Hello world" {
					t.Fatalf("text %q", text)
				}
				if !opts.asked {
					if len(usages) != 0 {
						t.Fatalf("a client that did not ask got usage: %s", evs[usages[0]].Data)
					}
					return
				}
				last := len(evs) - 2
				if len(usages) != 1 || usages[0] != last {
					t.Fatalf("usage in chunks %v of %d, want exactly one, in the last before [DONE] (%d)", usages, len(evs), last)
				}
				chunk := gjson.ParseBytes(evs[last].Data)
				if ch := chunk.Get("choices"); !ch.IsArray() || len(ch.Array()) != 0 {
					t.Fatalf("the usage chunk has choices: %s", evs[last].Data)
				}
				if u := chunk.Get("usage"); u.Get("prompt_tokens").Int() != 11 || u.Get("completion_tokens").Int() != 7 || u.Get("total_tokens").Int() != 18 {
					t.Fatalf("the usage chunk's usage is %s, want the upstream's (11, 7, 18)", u.Raw)
				}
				first := gjson.ParseBytes(evs[0].Data)
				for _, key := range []string{"id", "object", "created", "model"} {
					if got, want := chunk.Get(key).Raw, first.Get(key).Raw; got != want || want == "" {
						t.Fatalf("the usage chunk's %s is %s, the stream's %s", key, got, want)
					}
				}
			})
		}
	}
	rep := waitUsage(t, h, requests)
	if rep.Total.Requests != requests || rep.Total.InputTokens != 11*requests || rep.Total.OutputTokens != 7*requests {
		t.Fatalf("usage %+v, want %d requests, each counted once (11 in, 7 out)", rep.Total, requests)
	}
}

// openai-go's ChatCompletionAccumulator adds every non-null usage it
// reads: from an upstream that sends the final usage on the finish chunk,
// it accumulates the upstream's usage, not twice it.
func TestChatUsageOnTheFinishChunkAccumulatesOnce(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	c := openai.NewClient(option.WithBaseURL(h.url+"/v1/"), option.WithAPIKey(teamAKey), option.WithMaxRetries(0))
	for _, usageChunk := range []bool{true, false} {
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: finishUsageChunks(usageChunk)})
		s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:         "gpt-fake-1",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello world" {
			t.Fatalf("usage-only chunk %v: accumulated %+v", usageChunk, acc.Choices)
		}
		if u := acc.Usage; u.PromptTokens != 11 || u.CompletionTokens != 7 || u.TotalTokens != 18 {
			t.Fatalf("usage-only chunk %v: accumulated usage %d/%d/%d, want the upstream's 11/7/18", usageChunk, u.PromptTokens, u.CompletionTokens, u.TotalTokens)
		}
	}
}
