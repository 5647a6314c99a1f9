package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream stream whose only event is its [DONE] (or whose [DONE] comes
// right after the lifecycle events Sluice holds back) ended before the
// client saw anything: a transport fault like a cut before the first event
// (README "Failover and replay"), replayed on the route's next target, the
// client seeing only the second attempt, on every surface.
func TestDoneBeforeFirstEventIsReplayedOnTheNextTarget(t *testing.T) {
	afterLifecycle := upstreamtest.Script{Frames: append(upstreamtest.CutAfter(2).Frames, upstreamtest.SSEData([]byte("[DONE]")))}
	cases := []struct {
		name    string
		surface string // sse, chat or ws
		fault   upstreamtest.Script
	}{
		{"responses", "sse", upstreamtest.DoneOnly()},
		{"responses after the lifecycle events", "sse", afterLifecycle},
		{"chat", "chat", upstreamtest.DoneOnly()},
		{"websocket", "ws", upstreamtest.DoneOnly()},
		{"websocket after the lifecycle events", "ws", afterLifecycle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := routedPairHarness(t, nil, gateway.Options{})
			h.ups["A"].Enqueue(tc.fault)
			var text string
			switch tc.surface {
			case "sse":
				resp, evs := h.responsesStream(`{"model":"cm","stream":true,"input":"hi"}`)
				if last := assertOneTerminal(t, evs); resp.StatusCode != http.StatusOK || last.typ != "response.completed" {
					t.Fatalf("%d, the stream ended with %s %s, want B's answer", resp.StatusCode, last.typ, last.data)
				}
				text = gjson.GetBytes(evs[len(evs)-1].data, "response.output.0.content.0.text").Str
			case "chat":
				resp, evs := h.streamEvents("/v1/chat/completions", `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
				if resp.StatusCode != http.StatusOK || len(evs) == 0 || !evs[len(evs)-1].Done {
					t.Fatalf("%d with %d events, want B's stream ending with [DONE]", resp.StatusCode, len(evs))
				}
				for _, ev := range evs {
					if gjson.GetBytes(ev.Data, "error").Exists() {
						t.Fatalf("the client got an error chunk %s", ev.Data)
					}
					text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
				}
			case "ws":
				evs := h.dialWS(nil).turn(`{"type":"response.create","model":"cm","input":"hi"}`)
				if last := evs[len(evs)-1]; last.typ != "response.completed" {
					t.Fatalf("the turn ended with %s %s, want B's answer", last.typ, last.data)
				}
				text = gjson.GetBytes(evs[len(evs)-1].data, "response.output.0.content.0.text").Str
			}
			if text != "Hello from B" {
				t.Fatalf("the client got %q, want B's answer alone", text)
			}
			if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 1 {
				t.Fatalf("A got %d requests, B %d; want one each (one replay)", a, b)
			}
		})
	}
}

// chatChoiceChunk is a Chat stream chunk holding the given choices.
func chatChoiceChunk(choices string) upstreamtest.Frame {
	return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[` + choices + `]}`))
}

// A Chat upstream that sends a choice the request did not ask for (its
// index at or past n) has it skipped and counted, not relayed: the choices
// asked for finish the answer, which ends with [DONE] (README: a Chat
// stream whose finish chunk went out for every choice the request asked
// for ends with [DONE], not an error), and a chunk that also carries a
// requested choice keeps it.
func TestChatChoiceTheRequestDidNotAskForIsSkipped(t *testing.T) {
	frames := []upstreamtest.Frame{
		chatChoiceChunk(`{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}`),
		chatChoiceChunk(`{"index":1,"delta":{"content":"OTHER"},"finish_reason":null}`),
		chatChoiceChunk(`{"index":0,"delta":{"content":" world"},"finish_reason":null},{"index":1,"delta":{"content":"MORE"},"finish_reason":null}`),
		chatChoiceChunk(`{"index":0,"delta":{},"finish_reason":"stop"}`),
		upstreamtest.SSEData([]byte("[DONE]")),
	}
	for name, n := range map[string]string{"n omitted": "", "n=1": `"n":1,`} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames})
			resp, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,`+n+`"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != http.StatusOK || len(evs) == 0 || !evs[len(evs)-1].Done {
				t.Fatalf("%d with %d events, want a stream ending with [DONE]", resp.StatusCode, len(evs))
			}
			var text string
			for _, ev := range evs {
				if gjson.GetBytes(ev.Data, "error").Exists() {
					t.Fatalf("the client got an error chunk %s", ev.Data)
				}
				gjson.GetBytes(ev.Data, "choices").ForEach(func(_, ch gjson.Result) bool {
					if i := ch.Get("index").Int(); i != 0 {
						t.Errorf("the client got choice %d, which it did not ask for: %s", i, ev.Data)
					}
					text += ch.Get("delta.content").Str
					return true
				})
			}
			if text != "Hello world" {
				t.Fatalf("the client got %q, want %q", text, "Hello world")
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="unrequested_choice",surface="chat_stream"} 2`) {
				t.Fatalf("the skipped choices were not counted:\n%s", grepLines(m, "sluice_stream_skipped_events_total"))
			}
		})
	}
	t.Run("openai-go", func(t *testing.T) {
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames})
		client := h.client()
		s := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:    "gpt-fake-1",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		acc := openai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatalf("the SDK's stream failed: %v", err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello world" || acc.Choices[0].FinishReason != "stop" {
			t.Fatalf("accumulated %+v, want the one choice asked for", acc.Choices)
		}
	})
	t.Run("responses client", func(t *testing.T) {
		// The translation asks the Chat upstream for one choice: a chunk
		// with another is an unparseable event, skipped (README), and the
		// answer completes with the requested choice's text.
		single := []upstreamtest.Frame{frames[0], frames[1], chatChoiceChunk(`{"index":0,"delta":{"content":" world"},"finish_reason":null}`), frames[3], frames[4]}
		h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
		h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: single})
		_, evs := h.responsesStream(`{"model":"gpt-fake-1","stream":true,"input":"hi"}`)
		last := assertOneTerminal(t, evs)
		if text := gjson.GetBytes(last.data, "response.output.0.content.0.text").Str; last.typ != "response.completed" || text != "Hello world" {
			t.Fatalf("the stream ended with %s %q, want response.completed with %q", last.typ, text, "Hello world")
		}
	})
}

// untypedStream is a Responses stream answering "Hello world" whose text
// deltas carry no type in their data, only the SSE event name.
func untypedStream(t *testing.T) []upstreamtest.Frame {
	t.Helper()
	var frames []upstreamtest.Frame
	for _, data := range upstreamtest.ResponsesEvents(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "Hello world", 2) {
		typ := gjson.GetBytes(data, "type").Str
		if typ != "response.output_text.delta" {
			frames = append(frames, upstreamtest.SSEEvent(data))
			continue
		}
		untyped, err := sjson.DeleteBytes(data, "type")
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, upstreamtest.SSENamedEvent(typ, untyped))
	}
	return frames
}

// An upstream Responses event whose data has no type, only its SSE event
// name, reaches the client with that name written in as its type, on every
// surface: the SDKs and WebSocket clients dispatch on the data's type
// (README: every relayed event's SSE name is its data's type), so without
// it the text would be lost to them.
func TestUntypedUpstreamEventGetsItsNameAsType(t *testing.T) {
	t.Run("sse", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: untypedStream(t)})
		_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","stream":true,"input":"hi"}`)
		var text string
		for _, ev := range evs {
			if typ := eventType(ev); typ != ev.Name {
				t.Errorf("event %q has the type %q: %s", ev.Name, typ, ev.Data)
			}
			if ev.Name == "response.output_text.delta" {
				text += gjson.GetBytes(ev.Data, "delta").Str
			}
		}
		if text != "Hello world" {
			t.Fatalf("the deltas say %q, want %q", text, "Hello world")
		}
	})
	t.Run("openai-go", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: untypedStream(t)})
		client := h.client()
		s := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
			Model: "gpt-fake-1",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var text string
		for s.Next() {
			if ev := s.Current(); ev.Type == "response.output_text.delta" {
				text += ev.Delta
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if text != "Hello world" {
			t.Fatalf("the SDK read the deltas %q, want %q", text, "Hello world")
		}
	})
	t.Run("websocket", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: untypedStream(t)})
		evs := h.dialWS(nil).turn(createFrame(""))
		var text string
		for _, ev := range evs {
			if ev.typ == "" {
				t.Errorf("a frame without a type: %s", ev.data)
			}
			if ev.typ == "response.output_text.delta" {
				text += gjson.GetBytes(ev.data, "delta").Str
			}
		}
		if text != "Hello world" {
			t.Fatalf("the delta frames say %q, want %q", text, "Hello world")
		}
	})
}

// An upstream Responses event with neither a type nor an SSE event name
// cannot be told apart: it is an unparseable event, skipped and counted,
// never relayed without a type.
func TestUpstreamEventWithoutTypeOrNameIsUnparseable(t *testing.T) {
	frames := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "Hello world", 2)
	nameless := upstreamtest.SSEData([]byte(`{"note":"what am I?"}`))
	frames = append(frames[:3:3], append([]upstreamtest.Frame{nameless}, frames[3:]...)...)
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","stream":true,"input":"hi"}`)
	for _, ev := range evs {
		if eventType(ev) == "" {
			t.Errorf("an event without a type reached the client: %s", ev.Data)
		}
	}
	if typ := eventType(evs[len(evs)-1]); typ != "response.completed" {
		t.Fatalf("the stream ended with %s", typ)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="unparseable",surface="responses_stream"} 1`) {
		t.Fatalf("the event was not counted:\n%s", grepLines(m, "sluice_stream_skipped_events_total"))
	}
}
