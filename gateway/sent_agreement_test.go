package gateway_test

// What the client is relayed and what the gateway records of it agree: the
// text of a part its upstream never announced is kept in every Response
// the gateway writes, and an event adding to output the client was told is
// done is skipped and counted (README, "What it promises").

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// laxMessage is the events of message msg_1 streamed as a lax upstream
// streams it: added, then text deltas with no content_part.added.
func laxMessage(deltas ...string) []string {
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_lax", "in_progress", "[]") + `}`,
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`}
	for _, d := range deltas {
		evs = append(evs, `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+d+`"}`)
	}
	return evs
}

// TestUnannouncedPartTextInFailedResponse: an upstream streams text into a
// part it never announced, then cuts the stream. The client, over SSE and
// WebSocket, is shown the part (a content_part.added ahead of the first
// delta, as an SDK's stream accumulator needs), and the response.failed
// the gateway writes holds the text the client was streamed in that part.
func TestUnannouncedPartTextInFailedResponse(t *testing.T) {
	for _, ws := range []bool{false, true} {
		t.Run(map[bool]string{false: "sse", true: "websocket"}[ws], func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(upstreamtest.Script{Frames: g6Frames(laxMessage("a ", "b ")...), End: upstreamtest.EndCut})
			var evs []eventLike
			if ws {
				evs = h.dialWS(nil).turn(createFrame(""))
			} else {
				_, evs = h.responsesStream(respBody)
			}
			last := assertOneTerminal(t, evs)
			var types []string
			for i, ev := range evs {
				types = append(types, ev.typ)
				if seq := gjson.GetBytes(ev.data, "sequence_number"); seq.Int() != int64(i) {
					t.Fatalf("event %d numbered %s", i, seq.Raw)
				}
			}
			if got := strings.Join(types, " "); got != "response.created response.output_item.added response.content_part.added "+
				"response.output_text.delta response.output_text.delta response.failed" {
				t.Fatalf("events %s", got)
			}
			added := gjson.ParseBytes(evs[2].data)
			if added.Get("item_id").Str != "msg_1" || added.Get("output_index").Raw != "0" || added.Get("content_index").Raw != "0" ||
				added.Get("part").Raw != `{"type":"output_text","text":"","annotations":[],"logprobs":[]}` {
				t.Fatalf("part added %s", evs[2].data)
			}
			if got := deltaText(evs); got != "a b " {
				t.Fatalf("client deltas %q", got)
			}
			part := gjson.GetBytes(last.data, "response.output.0.content.0")
			if part.Get("type").Str != "output_text" || part.Get("text").Str != "a b " || gjson.GetBytes(last.data, "response.output.0.content.#").Int() != 1 {
				t.Fatalf("failed Response output %s", gjson.GetBytes(last.data, "response.output").Raw)
			}
		})
	}
}

// TestUnannouncedPartTextInPrefill: the continuation of a stream cut after
// text streamed into a part its upstream never announced prefills that text
// and the completed Response holds it ahead of the backup's.
func TestUnannouncedPartTextInPrefill(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(laxMessage("The quick", " brown")...), End: upstreamtest.EndCut})
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.completed" {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	if prefill := gjson.GetBytes(h.ups["B"].Requests()[0].Body, "input.1.content.0.text").Str; prefill != "The quick brown" {
		t.Fatalf("prefill %q: %s", prefill, h.ups["B"].Requests()[0].Body)
	}
	final := gjson.GetBytes(last.data, "response.output.0.content.0.text").Str
	if !strings.HasPrefix(final, "The quick brown") || final != deltaText(evs) {
		t.Fatalf("completed text %q, client deltas %q", final, deltaText(evs))
	}
}

// TestEventsAfterDoneAreSkipped: an event adding to an item, part or
// arguments the client was told is done, or re-adding an item the client
// has, is skipped and counted (after_done): the client's text agrees with
// the completed Response. Late events are not a broken stream: three in a
// row (the limit for unparseable ones) do not fail a finished answer.
func TestEventsAfterDoneAreSkipped(t *testing.T) {
	const at = `"item_id":"msg_1","output_index":0,"content_index":0`
	late := `{"type":"response.output_text.delta",` + at + `,"delta":"LATE"}`
	msg := g6Message("msg_1", 0, []string{"a ", "b "}, true) // added, part added, deltas, part done, item done
	textDone := `{"type":"response.output_text.done",` + at + `,"text":"a b "}`
	completed := `{"type":"response.completed","response":` + g6Resp("resp_late", "completed",
		`[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"a b ","annotations":[]}]}]`) + `}`
	created := `{"type":"response.created","response":` + g6Resp("resp_late", "in_progress", "[]") + `}`
	n := len(msg)
	join := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	cases := []struct {
		name string
		evs  []string
	}{
		{"delta after output_item.done", join([]string{created}, msg, []string{late, completed})},
		{"three deltas after output_item.done", join([]string{created}, msg, []string{late, late, late, completed})},
		{"delta after content_part.done", join([]string{created}, msg[:n-1], []string{late}, msg[n-1:], []string{completed})},
		{"delta after output_text.done", join([]string{created}, msg[:n-2], []string{textDone, late}, msg[n-2:], []string{completed})},
		{"item re-added", join([]string{created}, msg, []string{
			`{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
			`{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"LATE"}`, completed})},
		{"part re-added", join([]string{created}, msg[:n-2], []string{
			`{"type":"response.content_part.added",` + at + `,"part":{"type":"output_text","annotations":[],"text":"LATE"}}`}, msg[n-2:], []string{completed})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(upstreamtest.Script{Frames: g6Frames(c.evs...)})
			_, evs := h.responsesStream(respBody)
			last := assertOneTerminal(t, evs)
			if last.typ != "response.completed" {
				t.Fatalf("terminal %s: %s", last.typ, last.data)
			}
			for _, ev := range evs {
				if strings.Contains(string(ev.data), "LATE") {
					t.Fatalf("relayed %s", ev.data)
				}
			}
			if got, final := deltaText(evs), gjson.GetBytes(last.data, "response.output.0.content.0.text").Str; got != "a b " || final != got ||
				gjson.GetBytes(last.data, "response.output.#").Int() != 1 {
				t.Fatalf("client deltas %q, completed %s", got, gjson.GetBytes(last.data, "response.output").Raw)
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="after_done",surface="responses_stream"} `) ||
				strings.Contains(m, `reason="unparseable"`) {
				t.Fatalf("not counted:\n%s", grep(m, "skipped_events"))
			}
		})
	}
}

// TestArgumentsAfterDoneAreSkipped: function call arguments streamed after
// their done event are skipped: the client's arguments are the done ones.
func TestArgumentsAfterDoneAreSkipped(t *testing.T) {
	const at = `"item_id":"fc_1","output_index":0`
	evs := []string{
		`{"type":"response.created","response":` + g6Resp("resp_fc", "in_progress", "[]") + `}`,
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"f","arguments":""}}`,
		`{"type":"response.function_call_arguments.delta",` + at + `,"delta":"{}"}`,
		`{"type":"response.function_call_arguments.done",` + at + `,"arguments":"{}"}`,
		`{"type":"response.function_call_arguments.delta",` + at + `,"delta":"LATE"}`,
	}
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...), End: upstreamtest.EndCut})
	_, got := h.responsesStream(respBody)
	last := assertOneTerminal(t, got)
	for _, ev := range got {
		if strings.Contains(string(ev.data), "LATE") {
			t.Fatalf("relayed %s", ev.data)
		}
	}
	if args := gjson.GetBytes(last.data, "response.output.0.arguments").Str; last.typ != "response.failed" || args != "{}" {
		t.Fatalf("terminal %s, arguments %q", last.typ, args)
	}
}
