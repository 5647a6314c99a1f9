package gateway_test

import (
	"fmt"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Rescues of answers that are not plain text: tool calls whose name or
// arguments arrive in forms other than one delta per piece, and reasoning.

// chatCallChunks is a Chat answer with one get_weather call (call id
// callID, its arguments in 2 pieces) whose name comes in pieces: the
// header carries the first, and each further piece has a chunk of its own.
func chatCallChunks(id, callID string, name ...string) [][]byte {
	spec := upstreamtest.ChatSpec{ID: id, Model: "gpt-fake-1", ToolCalls: []upstreamtest.ToolCallSpec{
		{ID: callID, Name: "get_weather", Arguments: `{"city":"Paris","unit":"C"}`, Pieces: 2}}}
	var out [][]byte
	for _, c := range spec.Chunks() {
		if gjson.GetBytes(c, "choices.0.delta.tool_calls.0.function.name").Exists() {
			head, _ := sjson.SetBytes(c, "choices.0.delta.tool_calls.0.function.name", name[0])
			out = append(out, head)
			for _, piece := range name[1:] {
				more, _ := sjson.SetBytes(c, "choices.0.delta.tool_calls",
					[]map[string]any{{"index": 0, "function": map[string]any{"name": piece}}})
				out = append(out, more)
			}
			continue
		}
		out = append(out, c)
	}
	return out
}

// chatToolClient runs a streaming Chat request with a tool through h and
// returns the joined call name and arguments, the finish reason, the call
// ids and the error code the client got.
func chatToolClient(t *testing.T, h *harness) (name, args, finish string, ids []string, errCode string) {
	t.Helper()
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`)
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("chat stream does not end with [DONE]: %d events", len(evs))
	}
	for _, ev := range evs[:len(evs)-1] {
		c := gjson.ParseBytes(ev.Data)
		errCode += c.Get("error.code").Str
		c.Get("choices.0.delta.tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if id := tc.Get("id").Str; id != "" {
				ids = append(ids, id)
			}
			name += tc.Get("function.name").Str
			args += tc.Get("function.arguments").Str
			return true
		})
		finish += c.Get("choices.0.finish_reason").Str
	}
	return name, args, finish, ids, errCode
}

// TestChatRestartOfAToolNameInPieces: a tool call's name may come in
// pieces, which the client joins (README "What it promises"); a restart
// that spells the same name in other pieces reproduces the call and the
// stream ends with the call whole; one whose pieces spell another name
// diverges.
func TestChatRestartOfAToolNameInPieces(t *testing.T) {
	for _, c := range []struct {
		testName        string
		sent, restarted []string
		diverges        bool
	}{
		{"restart_in_pieces", []string{"get_weather"}, []string{"get_", "weather"}, false},
		{"sent_in_pieces", []string{"get_", "weather"}, []string{"get_weather"}, false},
		{"both_in_other_pieces", []string{"get", "_weather"}, []string{"get_w", "eat", "her"}, false},
		{"restart_another_name", []string{"get_weather"}, []string{"get_", "weathers"}, true},
		{"restart_a_shorter_name", []string{"get_weather"}, []string{"get_", "weath"}, true},
	} {
		t.Run(c.testName, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			sent := chatCallChunks("chatcmpl-p", "call_P", c.sent...)
			// P is cut after the name and the first argument piece.
			h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: chatFramesOf(sent[:2+len(c.sent)]), End: upstreamtest.EndCut})
			h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: chatFramesOf(chatCallChunks("chatcmpl-b", "call_B", c.restarted...))})
			name, args, finish, ids, errCode := chatToolClient(t, h)
			if c.diverges {
				if errCode != "stream_incomplete" || finish != "" {
					t.Fatalf("client got finish %q, error %q; want stream_incomplete", finish, errCode)
				}
				return
			}
			if errCode != "" || name != "get_weather" || args != `{"city":"Paris","unit":"C"}` || finish != "tool_calls" ||
				len(ids) != 1 || ids[0] != "call_P" {
				t.Fatalf("client got name %q, args %q, finish %q, call ids %v, error %q", name, args, finish, ids, errCode)
			}
		})
	}
}

func chatFramesOf(chunks [][]byte) []upstreamtest.Frame {
	frames := make([]upstreamtest.Frame, len(chunks))
	for i, c := range chunks {
		frames[i] = upstreamtest.SSEData(c)
	}
	return frames
}

// nontextCall is the events of function call fcID at output_index 0 (call
// id callID): added with argsAdded, then the given argument deltas, then
// the done events given.
func nontextCall(fcID, callID, argsAdded string, deltas []string, done ...string) []string {
	item := func(status, args string) string {
		return `{"id":"` + fcID + `","type":"function_call","status":"` + status + `","call_id":"` + callID +
			`","name":"get_weather","arguments":` + quoteJSON(args) + `}`
	}
	evs := []string{`{"type":"response.output_item.added","output_index":0,"item":` + item("in_progress", argsAdded) + `}`}
	at := `"item_id":"` + fcID + `","output_index":0`
	for _, d := range deltas {
		evs = append(evs, `{"type":"response.function_call_arguments.delta",`+at+`,"delta":`+quoteJSON(d)+`}`)
	}
	for _, d := range done {
		switch d {
		case "arguments":
			evs = append(evs, `{"type":"response.function_call_arguments.done",`+at+`,"name":"get_weather","arguments":`+quoteJSON(toolArgs)+`}`)
		case "item":
			evs = append(evs, `{"type":"response.output_item.done","output_index":0,"item":`+item("completed", toolArgs)+`}`)
		}
	}
	return evs
}

const toolArgs = `{"city":"Paris","unit":"C"}`

func quoteJSON(s string) string {
	b, _ := sjson.Set(`{}`, "v", s)
	return gjson.Get(b, "v").Raw
}

// TestRestartReproducingInDoneFormsOnly: a restart whose tool call's
// arguments, or message's text, come whole in their done events (the
// arguments' or text's done, the part's, the item's) with no delta has
// reproduced what the client has: the client gets the rest as deltas and
// the stream completes with the call or message whole.
func TestRestartReproducingInDoneFormsOnly(t *testing.T) {
	created := func(id string) string {
		return `{"type":"response.created","response":` + g6Resp(id, "in_progress", "[]") + `}`
	}
	completed := `{"type":"response.completed","response":` + g6Resp("resp_b", "completed", "[]") + `}`
	callCut := append([]string{created("resp_p")}, nontextCall("fc_p", "call_p", "", []string{`{"city":`, `"Pa`})...)
	textCut := append([]string{created("resp_p")}, g6Message("msg_p", 0, []string{"The", " quick", " brown"}, false)...)
	textDoneOnly := g6Message("msg_b", 0, []string{fullAnswer}, true)
	textDoneOnly = append(textDoneOnly[:2:2], textDoneOnly[3:]...) // no delta: the text's, part's and item's done
	itemDoneOnly := append(append([]string(nil), textDoneOnly[:2]...), textDoneOnly[4])
	for _, c := range []struct {
		name    string
		p, b    []string
		message bool
	}{
		{"arguments_done", callCut, nontextCall("fc_b", "call_b", "", nil, "arguments", "item"), false},
		{"arguments_in_added_and_done", callCut, nontextCall("fc_b", "call_b", toolArgs, nil, "arguments", "item"), false},
		{"arguments_in_item_done", callCut, nontextCall("fc_b", "call_b", "", nil, "item"), false},
		{"arguments_done_after_some_deltas", callCut, nontextCall("fc_b", "call_b", "", []string{`{"ci`}, "arguments", "item"), false},
		{"text_done", textCut, textDoneOnly, true},
		{"text_in_item_done", textCut, itemDoneOnly, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
			h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(c.p...), End: upstreamtest.EndCut})
			b := append(append([]string{created("resp_b")}, c.b...), completed)
			h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})
			s := g6Post(t, h, `{"model":"m","input":"weather?","stream":true,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`)
			if s.terminal.typ != "response.completed" {
				t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.message, s.terminal.data)
			}
			out := gjson.GetBytes(s.terminal.data, "response.output").Array()
			if len(out) != 1 || out[0].Get("status").Str != "completed" {
				t.Fatalf("terminal output %s", gjson.GetBytes(s.terminal.data, "response.output").Raw)
			}
			if c.message {
				if s.text != fullAnswer || out[0].Get("id").Str != "msg_p" || out[0].Get("content.0.text").Str != fullAnswer {
					t.Fatalf("client got text %q; output %s", s.text, out[0].Raw)
				}
				return
			}
			args := ""
			for _, ev := range s.evs {
				if ev.typ == "response.function_call_arguments.delta" {
					args += gjson.GetBytes(ev.data, "delta").Str
				}
			}
			if args != toolArgs || out[0].Get("call_id").Str != "call_p" || out[0].Get("arguments").Str != toolArgs {
				t.Fatalf("client got arguments %q; output %s", args, out[0].Raw)
			}
		})
	}
}

// TestRestartLeavesCutReasoningIncomplete: a reasoning item cut in the
// middle of its summary is not continued by a restart (README
// "Continuation": reasoning is neither compared nor shown twice): when the
// restart's reasoning carries no encrypted_content to give it (a Chat
// upstream's, or one not asked for it), it ends incomplete without one, as
// when the stream fails, and the restart's reasoning, one item or more,
// does not reach the client.
func TestRestartLeavesCutReasoningIncomplete(t *testing.T) {
	reasoning := func(id string, idx int, summary string) []string {
		at := `"item_id":"` + id + `","output_index":` + fmt.Sprint(idx) + `,"summary_index":0`
		part := `{"type":"summary_text","text":` + quoteJSON(summary) + `}`
		return []string{
			`{"type":"response.output_item.added","output_index":` + fmt.Sprint(idx) + `,"item":{"id":"` + id + `","type":"reasoning","summary":[]}}`,
			`{"type":"response.reasoning_summary_part.added",` + at + `,"part":{"type":"summary_text","text":""}}`,
			`{"type":"response.reasoning_summary_text.delta",` + at + `,"delta":` + quoteJSON(summary) + `}`,
			`{"type":"response.reasoning_summary_text.done",` + at + `,"text":` + quoteJSON(summary) + `}`,
			`{"type":"response.reasoning_summary_part.done",` + at + `,"part":` + part + `}`,
			`{"type":"response.output_item.done","output_index":` + fmt.Sprint(idx) + `,"item":{"id":"` + id + `","type":"reasoning","summary":[` + part + `]}}`,
		}
	}
	for _, extra := range []bool{false, true} {
		t.Run(fmt.Sprint("extra_reasoning_", extra), func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
			p := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`}
			p = append(p, reasoning("rs_p", 0, "The user wants")[:3]...)
			h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(p...), End: upstreamtest.EndCut})
			b := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
			idx := 0
			if extra {
				b = append(b, reasoning("rs_x", 0, "Restart reasoning first.")...)
				idx++
			}
			b = append(b, reasoning("rs_b", idx, "The user wants the weather.")...)
			b = append(b, g6Message("msg_b", idx+1, []string{"It is", " sunny."}, true)...)
			b = append(b, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
			h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})
			s := g6Post(t, h, `{"model":"m","input":"weather?","stream":true}`)
			if s.terminal.typ != "response.completed" || s.text != "It is sunny." {
				t.Fatalf("client got %q ending %s: %s", s.text, s.terminal.typ, s.terminal.data)
			}
			for _, ev := range s.evs {
				if ev.typ == "response.output_item.added" && gjson.GetBytes(ev.data, "item.type").Str == "reasoning" &&
					gjson.GetBytes(ev.data, "item.id").Str != "rs_p" {
					t.Fatalf("the restart's reasoning reached the client: %s", ev.data)
				}
				if ev.typ == "response.output_item.done" && gjson.GetBytes(ev.data, "item.id").Str == "rs_p" &&
					gjson.GetBytes(ev.data, "item.status").Str != "incomplete" {
					t.Fatalf("the cut reasoning closed as %s", ev.data)
				}
			}
			out := gjson.GetBytes(s.terminal.data, "response.output").Array()
			if len(out) != 2 || out[0].Get("id").Str != "rs_p" || out[0].Get("status").Str != "incomplete" || out[0].Get("encrypted_content").Exists() ||
				out[0].Get("summary.0.text").Str != "The user wants" || out[1].Get("content.0.text").Str != "It is sunny." {
				t.Fatalf("terminal output %s", gjson.GetBytes(s.terminal.data, "response.output").Raw)
			}
		})
	}
}
