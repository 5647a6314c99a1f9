package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// withTokenLogprobs gives every text delta of events (Chat chunks'
// choices.0.delta.content, Responses output_text.delta) the logprobs an
// upstream asked for them sends: tokens of tokenBytes bytes that join to
// the delta, each with its bytes.
func withTokenLogprobs(t *testing.T, events [][]byte, tokenBytes int) [][]byte {
	t.Helper()
	out := make([][]byte, 0, len(events))
	for _, ev := range events {
		path, text := "", ""
		switch {
		case gjson.GetBytes(ev, "type").Str == "response.output_text.delta":
			path, text = "logprobs", gjson.GetBytes(ev, "delta").Str
		case gjson.GetBytes(ev, "choices.0.delta.content").Str != "":
			path, text = "choices.0.logprobs", gjson.GetBytes(ev, "choices.0.delta.content").Str
		}
		if path == "" {
			out = append(out, ev)
			continue
		}
		var tokens []string
		for i := 0; i < len(text); i += tokenBytes {
			tok := text[i:min(i+tokenBytes, len(text))]
			bs := make([]string, len(tok))
			for j := range len(tok) {
				bs[j] = fmt.Sprint(tok[j])
			}
			tokens = append(tokens, fmt.Sprintf(`{"token":%q,"logprob":-0.5,"bytes":[%s],"top_logprobs":[]}`, tok, strings.Join(bs, ",")))
		}
		list := "[" + strings.Join(tokens, ",") + "]"
		if path != "logprobs" {
			list = `{"content":` + list + `,"refusal":null}`
		}
		b, err := sjson.SetRawBytes(ev, path, []byte(list))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// dataFramesOf sends each event as an SSE frame (named by its type, if any).
func dataFramesOf(events [][]byte) []upstreamtest.Frame {
	fs := make([]upstreamtest.Frame, len(events))
	for i, e := range events {
		fs[i] = upstreamtest.SSEEvent(e)
	}
	return fs
}

// cutAfterTextDeltas is events up to and with the n-th text delta.
func cutAfterTextDeltas(t *testing.T, events [][]byte, n int) [][]byte {
	t.Helper()
	for i, ev := range events {
		if gjson.GetBytes(ev, "type").Str == "response.output_text.delta" || gjson.GetBytes(ev, "choices.0.delta.content").Str != "" {
			if n--; n == 0 {
				return events[:i+1]
			}
		}
	}
	t.Fatal("not that many text deltas")
	return nil
}

// checkLogprobsAgree checks one delta as the client got it: its logprobs'
// tokens, and their bytes, join to its text. It returns the tokens joined.
func checkLogprobsAgree(t *testing.T, text string, list gjson.Result, raw []byte) string {
	t.Helper()
	var tokens string
	var bs []byte
	list.ForEach(func(_, e gjson.Result) bool {
		tokens += e.Get("token").Str
		e.Get("bytes").ForEach(func(_, b gjson.Result) bool {
			bs = append(bs, byte(b.Int()))
			return true
		})
		return true
	})
	if tokens != text || string(bs) != text {
		t.Fatalf("a delta's text is %q, its logprobs' tokens join to %q and their bytes to %q: %s", text, tokens, bs, raw)
	}
	return tokens
}

// TestRestartLogprobsCoverOnlyTheTextSent: a restart reproduces text the
// client has in deltas that straddle the end of it; the client gets the
// surplus of such a delta with the logprobs of that surplus only (a token
// straddling the end trimmed to its part), so on either surface its tokens
// join to its text, once (README "Continuation").
func TestRestartLogprobsCoverOnlyTheTextSent(t *testing.T) {
	for _, surface := range []string{"chat", "responses"} {
		t.Run(surface, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
			// P's 9 word deltas are cut after "The quick brown"; B's 2
			// straddle it, in 4-byte tokens ("own " covers its end).
			var p, b [][]byte
			if surface == "chat" {
				p = upstreamtest.ChatChunks("chatcmpl-p", "gpt-fake-1", fullAnswer, 9)
				b = upstreamtest.ChatChunks("chatcmpl-b", "gpt-fake-1", fullAnswer, 2)
			} else {
				p = upstreamtest.ResponsesEvents("resp_p", "gpt-fake-1", fullAnswer, 9)
				b = upstreamtest.ResponsesEvents("resp_b", "gpt-fake-1", fullAnswer, 2)
			}
			p, b = withTokenLogprobs(t, p, 4), withTokenLogprobs(t, b, 4)
			cut := dataFramesOf(cutAfterTextDeltas(t, p, 3))
			if surface == "chat" {
				h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: cut, End: upstreamtest.EndCut})
				h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: dataFramesOf(b)})
			} else {
				h.ups["P"].Enqueue(upstreamtest.Script{Frames: cut, End: upstreamtest.EndCut})
				h.ups["B"].Enqueue(upstreamtest.Script{Frames: dataFramesOf(b)})
			}
			var text, tokens string
			if surface == "chat" {
				_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"logprobs":true,"messages":[{"role":"user","content":"hi"}]}`)
				for _, ev := range evs {
					c := gjson.ParseBytes(ev.Data)
					if c.Get("error").Exists() {
						t.Fatalf("error chunk: %s", ev.Data)
					}
					d := c.Get("choices.0.delta.content").Str
					text += d
					tokens += checkLogprobsAgree(t, d, c.Get("choices.0.logprobs.content"), ev.Data)
				}
			} else {
				_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true,"include":["message.output_text.logprobs"]}`)
				o := checkResponsesEvents(t, func() (d [][]byte) {
					for _, ev := range evs {
						d = append(d, ev.data)
					}
					return d
				}())
				text = o.text
				for _, ev := range evs {
					if gjson.GetBytes(ev.data, "type").Str == "response.output_text.delta" {
						tokens += checkLogprobsAgree(t, gjson.GetBytes(ev.data, "delta").Str, gjson.GetBytes(ev.data, "logprobs"), ev.data)
					}
				}
			}
			if text != fullAnswer || tokens != fullAnswer {
				t.Fatalf("client got text %q, tokens %q", text, tokens)
			}
		})
	}
}

// chatCalls is a Chat stream's tool calls, each as a ChatSpec sends it:
// its id and name in one chunk, then its arguments in two, at the given
// Chat index.
func chatCalls(id string, index []int, calls ...upstreamtest.ToolCallSpec) [][]byte {
	var out [][]byte
	for i, c := range calls {
		chunks := upstreamtest.ChatSpec{ID: id, Model: "gpt-fake-1", ToolCalls: []upstreamtest.ToolCallSpec{c}}.Chunks()
		for _, ch := range chunks[1 : len(chunks)-2] { // no role, finish, [DONE]
			ch, _ = sjson.SetBytes(ch, "choices.0.delta.tool_calls.0.index", index[i])
			out = append(out, ch)
		}
	}
	return out
}

// TestRestartOfIndexZeroParallelCalls: a restart target that numbers every
// parallel call index 0 (Ollama, some vLLM tool parsers) reproduces the
// client's call and starts the next with a new id and a name under index
// 0: that call is the client's next (index 1), as the relay tells such
// calls apart (README "What it promises"), and openai-go accumulates both.
// A restart that calls another tool fails the stream with a message that
// says which.
func TestRestartOfIndexZeroParallelCalls(t *testing.T) {
	weather := func(id, city string) upstreamtest.ToolCallSpec {
		return upstreamtest.ToolCallSpec{ID: id, Name: "get_weather", Arguments: `{"city":"` + city + `"}`, Pieces: 2}
	}
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	frames := func(id string, index []int, calls ...upstreamtest.ToolCallSpec) []upstreamtest.Frame {
		all := upstreamtest.ChatSpec{ID: id, Model: "gpt-fake-1", ToolCalls: calls[:1]}.Chunks()
		out := append([][]byte{all[0]}, chatCalls(id, index, calls...)...)
		return dataFramesOf(append(out, all[len(all)-2:]...)) // finish, [DONE]
	}
	for _, cutMid := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut mid-arguments %v", cutMid), func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			first := frames("chatcmpl-p", []int{0}, weather("call_P1", "Paris"))
			first = first[:len(first)-2] // cut before the finish
			if cutMid {
				first = first[:len(first)-1]
			}
			h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: first, End: upstreamtest.EndCut})
			h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: frames("chatcmpl-b", []int{0, 0}, weather("call_B1", "Paris"), weather("call_B2", "Rome"))})
			c := h.client()
			s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
				Model:    "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
					Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object"}})},
			})
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("accumulated %+v", acc.Choices)
			}
			var got []string
			for _, c := range acc.Choices[0].Message.ToolCalls {
				got = append(got, c.ID+" "+c.Function.Name+" "+c.Function.Arguments)
			}
			if want := []string{`call_P1 get_weather {"city":"Paris"}`, `call_B2 get_weather {"city":"Rome"}`}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("client's calls %q, want %q", got, want)
			}
		})
	}
	t.Run("another tool", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
		first := frames("chatcmpl-p", []int{0}, weather("call_P1", "Paris"))
		h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: first[:len(first)-2], End: upstreamtest.EndCut})
		other := upstreamtest.ToolCallSpec{ID: "call_B1", Name: "get_time", Arguments: `{"city":"Paris"}`, Pieces: 2}
		h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: frames("chatcmpl-b", []int{0}, other)})
		_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}],`+tools+`}`)
		msg := gjson.GetBytes(evs[len(evs)-2].Data, "error.message").Str
		if !evs[len(evs)-1].Done || !strings.Contains(msg, `called "get_time" as tool call 0, where the call already sent calls "get_weather"`) {
			t.Fatalf("the stream ends with %s", evs[len(evs)-2].Data)
		}
	})
}
