package gateway_test

// What a continuation may add next to what the client already has: a
// restart's reasoning ahead of the items the client was sent is neither
// compared nor shown (README, "Continuation"), and a part whose text the
// client saw done (its response.output_text.done, before its
// content_part.done) never grows (docs/ARCHITECTURE.md §3).

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// reasoningFirstFrames is a Responses answer that thinks ("thinking", in a
// reasoning item at output_index 0) before it streams fullAnswer in a
// message at output_index 1.
func reasoningFirstFrames() []upstreamtest.Frame {
	at := `"item_id":"rs_b","output_index":0,"summary_index":0`
	evs := []string{
		`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`,
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_b","type":"reasoning","summary":[]}}`,
		`{"type":"response.reasoning_summary_part.added",` + at + `,"part":{"type":"summary_text","text":""}}`,
		`{"type":"response.reasoning_summary_text.delta",` + at + `,"delta":"thinking"}`,
		`{"type":"response.reasoning_summary_text.done",` + at + `,"text":"thinking"}`,
		`{"type":"response.reasoning_summary_part.done",` + at + `,"part":{"type":"summary_text","text":"thinking"}}`,
		`{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_b","type":"reasoning","summary":[{"type":"summary_text","text":"thinking"}]}}`,
	}
	evs = append(evs, g6Message("msg_b", 1, []string{"The quick", " brown fox", " jumps over the lazy dog"}, true)...)
	evs = append(evs, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
	return g6Frames(evs...)
}

// TestRestartDropsReasoningAheadOfWhatWasSent: the primary streams a
// message and is cut; the restart's target thinks first (a reasoning
// model backing one that is not), then reproduces the message. Its
// reasoning is no contradiction of the message the client has: it is
// dropped (not shown, not compared) and the stream completes with the whole
// answer in the one message the client has, over SSE and WebSocket, on a
// restart route and on a prefill route whose request carries tools (always
// restarted), from a Responses or a Chat backup.
func TestRestartDropsReasoningAheadOfWhatWasSent(t *testing.T) {
	const tools = `,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	chatBackup := upstreamtest.Script{ChatFrames: upstreamtest.ChatSpec{ID: "chatcmpl-b", Model: "gpt-fake-1",
		Reasoning: "thinking", ReasoningDeltas: 1, Text: fullAnswer, Deltas: 4}.Frames()}
	cases := []struct {
		name, mode, extra string
		ws                bool
		chatB             bool
	}{
		{"restart/sse", gateway.ContinuationRestart, "", false, false},
		{"restart/websocket", gateway.ContinuationRestart, "", true, false},
		{"tools on a prefill route/sse", gateway.ContinuationAuto, tools, false, false},
		{"tools on a prefill route/websocket", gateway.ContinuationAuto, tools, true, false},
		{"restart from a chat backup/sse", gateway.ContinuationRestart, "", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hc := harnessConfig{}
			if c.chatB {
				hc.protocol = map[string]string{"B": "chat"}
			}
			h := contHarness(t, c.mode, hc)
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			if c.chatB {
				h.ups["B"].Enqueue(chatBackup)
			} else {
				h.ups["B"].Enqueue(upstreamtest.Script{Frames: reasoningFirstFrames()})
			}
			var evs [][]byte
			if c.ws {
				for _, ev := range h.dialWS(nil).turn(`{"type":"response.create","model":"m","input":"hi"` + c.extra + `}`) {
					evs = append(evs, ev.data)
				}
			} else {
				_, es := h.responsesStream(`{"model":"m","input":"hi","stream":true` + c.extra + `}`)
				for _, ev := range es {
					evs = append(evs, ev.data)
				}
			}
			o := checkResponsesEvents(t, evs) // one message item, at the client's index, whole in the terminal
			if o.terminal != "response.completed" || o.text != fullAnswer {
				t.Fatalf("client got %q ending %s %s: %s", o.text, o.terminal, o.code, o.raw[len(o.raw)-1])
			}
			for _, raw := range o.raw {
				if strings.Contains(raw, "thinking") || strings.Contains(raw, "rs_b") {
					t.Fatalf("the restart's reasoning reached the client: %s", raw)
				}
			}
			if role, _ := lastMessage(h.ups["B"].Requests()[0]); role == "assistant" {
				t.Fatal("the continuation was a prefill, not a restart")
			}
			h.waitMetric(`sluice_rescues_total{kind="restart",outcome="completed"`)
		})
	}
}

// textDoneThenCut is a primary that streams fullAnswer and its
// response.output_text.done, then breaks before the part's
// content_part.done: the client has the part's final text.
func textDoneThenCut() upstreamtest.Script {
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`}
	evs = append(evs, g6Message("msg_p", 0, []string{"The quick", " brown fox", " jumps over", " the lazy dog"}, false)...)
	evs = append(evs, `{"type":"response.output_text.done","item_id":"msg_p","output_index":0,"content_index":0,"text":"`+fullAnswer+`"}`)
	return upstreamtest.Script{Frames: g6Frames(evs...), End: upstreamtest.EndCut}
}

// partsSeen is what a Responses client saw of the parts of its one message.
type partsSeen struct {
	text     string   // every output_text delta, in order
	parts    []string // each content part's text, by content_index
	terminal eventLike
	output   gjson.Result // the terminal's message content
}

// checkPartsOnce checks a Responses stream of one message (output_index 0,
// item msg_p) as a client reads it: numbered from 0 without a gap, one
// terminal event last; each content part added, its text done and its
// part done exactly once, no text for a part after its text done, and no
// part added before the ones ahead of it ended.
func checkPartsOnce(t *testing.T, evs []eventLike) partsSeen {
	t.Helper()
	var s partsSeen
	s.terminal = assertOneTerminal(t, evs)
	textDone, partDone := map[int64]int{}, map[int64]int{}
	for i, ev := range evs {
		v := gjson.ParseBytes(ev.data)
		if seq := v.Get("sequence_number"); !seq.Exists() || seq.Int() != int64(i) {
			t.Fatalf("event %d (%s) numbered %s", i, ev.typ, seq.Raw)
		}
		if id := v.Get("item_id"); id.Exists() && id.Str != "msg_p" {
			t.Fatalf("event %d (%s) for item %s: %s", i, ev.typ, id.Str, ev.data)
		}
		if oi := v.Get("output_index"); oi.Exists() && oi.Int() != 0 {
			t.Fatalf("event %d (%s) at output_index %d", i, ev.typ, oi.Int())
		}
		ci := v.Get("content_index").Int()
		switch ev.typ {
		case "response.content_part.added":
			if ci != int64(len(s.parts)) {
				t.Fatalf("part %d added after %d parts", ci, len(s.parts))
			}
			for k := range ci {
				if partDone[k] == 0 {
					t.Fatalf("part %d added before part %d ended", ci, k)
				}
			}
			s.parts = append(s.parts, "")
		case "response.output_text.delta":
			if textDone[ci] > 0 {
				t.Fatalf("text for part %d after its output_text.done: %s", ci, ev.data)
			}
			s.parts[ci] += v.Get("delta").Str
			s.text += v.Get("delta").Str
		case "response.output_text.done":
			textDone[ci]++
			if v.Get("text").Str != s.parts[ci] {
				t.Fatalf("output_text.done of part %d says %q, its deltas %q", ci, v.Get("text").Str, s.parts[ci])
			}
		case "response.content_part.done":
			partDone[ci]++
		}
	}
	for ci := range int64(len(s.parts)) {
		if textDone[ci] != 1 || (partDone[ci] != 1 && s.terminal.typ == "response.completed") {
			t.Fatalf("part %d: %d output_text.done, %d content_part.done; want one each", ci, textDone[ci], partDone[ci])
		}
	}
	out := gjson.GetBytes(s.terminal.data, "response.output")
	if n := len(out.Array()); n != 1 || out.Get("0.id").Str != "msg_p" {
		t.Fatalf("terminal output %s", out.Raw)
	}
	s.output = out.Get("0.content")
	for k, p := range s.parts {
		if got := s.output.Get(strconv.Itoa(k) + ".text").Str; got != p {
			t.Fatalf("terminal part %d %q, the client got %q", k, got, p)
		}
	}
	return s
}

// TestContinuationKeepsAPartWhoseTextWasDone: the primary breaks after
// the client got a part's response.output_text.done but before its
// content_part.done. That part's text is final: a restart that writes more
// into it ends the stream as diverged before the extra text goes out; a
// prefill's further text goes into a new part (as after content_part.done);
// a continuation that adds nothing ends the part and the message once, with
// no second output_text.done. Over SSE and WebSocket.
func TestContinuationKeepsAPartWhoseTextWasDone(t *testing.T) {
	const more = fullAnswer + " and more words"
	cases := []struct {
		name, mode string
		backup     upstreamtest.Script
		terminal   string
		parts      []string
	}{
		{"restart writing more", gateway.ContinuationRestart, upstreamtest.Answer(more, 4), "response.failed", []string{fullAnswer}},
		{"restart reproducing it", gateway.ContinuationRestart, upstreamtest.Answer(fullAnswer, 3), "response.completed", []string{fullAnswer}},
		{"prefill adding text", gateway.ContinuationAuto, upstreamtest.Answer(more, 3), "response.completed", []string{fullAnswer, " and more words"}},
		{"prefill adding nothing", gateway.ContinuationAuto, upstreamtest.Answer(fullAnswer, 3), "response.completed", []string{fullAnswer}},
	}
	for _, c := range cases {
		for _, ws := range []bool{false, true} {
			name := c.name + "/sse"
			if ws {
				name = c.name + "/websocket"
			}
			t.Run(name, func(t *testing.T) {
				h := contHarness(t, c.mode, harnessConfig{})
				h.ups["P"].Enqueue(textDoneThenCut())
				h.ups["B"].Enqueue(c.backup)
				var evs []eventLike
				if ws {
					evs = h.dialWS(nil).turn(`{"type":"response.create","model":"m","input":"hi"}`)
				} else {
					_, evs = h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
				}
				s := checkPartsOnce(t, evs)
				if s.terminal.typ != c.terminal || strings.Join(s.parts, "|") != strings.Join(c.parts, "|") {
					t.Fatalf("client got parts %q ending %s %s; want %q ending %s", s.parts, s.terminal.typ, s.terminal.data, c.parts, c.terminal)
				}
				if c.terminal == "response.failed" {
					if s.terminal.code != "stream_incomplete" || !strings.Contains(string(s.terminal.data), "saw complete") {
						t.Fatalf("terminal %s", s.terminal.data)
					}
					for _, ev := range evs {
						if strings.Contains(string(ev.data), "more words") {
							t.Fatalf("the extra text reached the client: %s", ev.data)
						}
					}
					h.waitMetric(`sluice_rescues_total{kind="restart",outcome="diverged"`)
				}
				if role, text := lastMessage(h.ups["B"].Requests()[0]); c.mode == gateway.ContinuationAuto && (role != "assistant" || text != fullAnswer) {
					t.Fatalf("B's request ends with %s %q; want the prefill of what was sent", role, text)
				}
			})
		}
	}
}
