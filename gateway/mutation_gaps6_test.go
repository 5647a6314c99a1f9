package gateway_test

// Restart continuation rules that mutation testing showed no other test
// pinned down: each test names the client-visible rule it holds.
//
// Mutants left untested, as no client can tell them apart:
//   - continuation.go:1117 (cs.seq++ -> --, after a continued stream's
//     terminal event) and clientstream.go:550 (the same after abortLocked's
//     response.failed): once the stream has ended nothing reads cs.seq again
//     (every writer checks cs.ended first, and close only ends the resume
//     log of a stream that has not ended).
//   - continuation.go:1114 (err != nil -> == after writing the terminal):
//     on a successful write the mutant leaves cs.ended unset, but the pump
//     stops at the terminal event anyway and the resume log has already
//     ended with it, so close's extra terminal is dropped; on a failed write
//     (the client gone at that very event) only the
//     sluice_stream_terminal_total reason differs, and only in a race.

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// g6Frames numbers Responses events from 0 and frames them as SSE.
func g6Frames(evs ...string) []upstreamtest.Frame {
	var fs []upstreamtest.Frame
	for i, e := range evs {
		typ := gjson.Get(e, "type").Str
		e = strings.Replace(e, `{"type":"`+typ+`"`, `{"type":"`+typ+`","sequence_number":`+fmt.Sprint(i), 1)
		fs = append(fs, upstreamtest.SSEEvent([]byte(e)))
	}
	return fs
}

func g6Resp(id, status, output string) string {
	return `{"id":"` + id + `","object":"response","created_at":1767225600,"status":"` + status + `","model":"gpt-fake-1","output":` + output + `}`
}

// g6Message is the events of message item itemID at output_index idx:
// added, its one output_text part, the given deltas; with done, the part's
// and the item's done events.
func g6Message(itemID string, idx int, deltas []string, done bool) []string {
	at := `"item_id":"` + itemID + `","output_index":` + fmt.Sprint(idx) + `,"content_index":0`
	evs := []string{
		`{"type":"response.output_item.added","output_index":` + fmt.Sprint(idx) + `,"item":{"id":"` + itemID + `","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`{"type":"response.content_part.added",` + at + `,"part":{"type":"output_text","annotations":[],"text":""}}`,
	}
	for _, d := range deltas {
		evs = append(evs, `{"type":"response.output_text.delta",`+at+`,"delta":"`+d+`"}`)
	}
	if done {
		text := strings.Join(deltas, "")
		part := `{"type":"output_text","annotations":[],"text":"` + text + `"}`
		evs = append(evs,
			`{"type":"response.output_text.done",`+at+`,"text":"`+text+`"}`,
			`{"type":"response.content_part.done",`+at+`,"part":`+part+`}`,
			`{"type":"response.output_item.done","output_index":`+fmt.Sprint(idx)+`,"item":{"id":"`+itemID+`","type":"message","status":"completed","content":[`+part+`],"role":"assistant"}}`)
	}
	return evs
}

// g6Stream is what a Responses client of h got for body: its events
// (checked numbered from 0 without a gap), the terminal event, that
// event's error code and message, and the text of its output_text deltas.
type g6Stream struct {
	evs           []eventLike
	terminal      eventLike
	code, message string
	text          string
}

func g6Post(t *testing.T, h *harness, body string) g6Stream {
	t.Helper()
	_, evs := h.responsesStream(body)
	var s g6Stream
	s.evs = evs
	s.terminal = assertOneTerminal(t, evs)
	for i, ev := range evs {
		if seq := gjson.GetBytes(ev.data, "sequence_number"); !seq.Exists() || seq.Int() != int64(i) {
			t.Fatalf("event %d (%s) numbered %s", i, ev.typ, seq.Raw)
		}
		if ev.typ == "response.output_text.delta" {
			s.text += gjson.GetBytes(ev.data, "delta").Str
		}
	}
	s.code = s.terminal.code
	s.message = gjson.GetBytes(s.terminal.data, "response.error.message").Str
	return s
}

// TestRestartWithAnotherToolDiverges: a restart that answers the tool
// call the client was streaming with a call to another function (same
// arguments) contradicts it: the stream ends response.failed
// stream_incomplete and the other function's name never reaches the client.
func TestRestartWithAnotherToolDiverges(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	deltas := []string{`{"city":`, `"Par`, `is"}`}
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: functionCallFrames("resp_p", "call_P", deltas, 2), End: upstreamtest.EndCut})
	var other []upstreamtest.Frame
	for _, f := range functionCallFrames("resp_b", "call_B", deltas, 0) {
		other = append(other, upstreamtest.Frame{Raw: bytes.ReplaceAll(f.Raw, []byte(`"get_weather"`), []byte(`"get_time"`))})
	}
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: other})
	s := g6Post(t, h, `{"model":"m","stream":true,"input":"weather in Paris?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`)
	if s.terminal.typ != "response.failed" || s.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.code, s.terminal.data)
	}
	for _, ev := range s.evs {
		if strings.Contains(string(ev.data), "get_time") {
			t.Fatalf("the other tool reached the client: %s", ev.data)
		}
	}
	if h.ups["B"].RequestCount() != 1 {
		t.Fatalf("B called %d times", h.ups["B"].RequestCount())
	}
}

// TestRestartEndingAnItemWithoutItsTextDiverges: a restart whose message
// ends without ever opening the part the client has text in has not
// reproduced that text: the stream ends response.failed stream_incomplete,
// not completed with the text cut short.
func TestRestartEndingAnItemWithoutItsTextDiverges(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	empty := `{"id":"msg_b","type":"message","status":"completed","content":[],"role":"assistant"}`
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(
		`{"type":"response.created","response":`+g6Resp("resp_b", "in_progress", "[]")+`}`,
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_b","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`{"type":"response.output_item.done","output_index":0,"item":`+empty+`}`,
		`{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "["+empty+"]")+`}`,
	)})
	s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
	if s.terminal.typ != "response.failed" || s.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.code, s.terminal.data)
	}
	if s.text != sentPart {
		t.Fatalf("client got %q, want %q", s.text, sentPart)
	}
}

// TestRestartEndingAPartEarlyDiverges: a restart that ends the text part
// before reproducing the text already sent diverges at that part's end, and
// the client's error says so.
func TestRestartEndingAPartEarlyDiverges(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
	evs = append(evs, g6Message("msg_b", 0, []string{"The ", "quick"}, true)...)
	evs = append(evs, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
	s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
	if s.terminal.typ != "response.failed" || s.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.code, s.terminal.data)
	}
	if !strings.Contains(s.message, "ended a part before reproducing the text already sent") {
		t.Fatalf("error %q does not name the part ended early", s.message)
	}
	if s.text != sentPart {
		t.Fatalf("client got %q, want %q", s.text, sentPart)
	}
}

// TestRestartRedoingReasoningCompletes: a restart that redoes the
// reasoning item the client was shown and then the whole message has
// reproduced everything: the client's stream completes with the whole text
// and both items, the reasoning shown once.
func TestRestartRedoingReasoningCompletes(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	reasoning := func(id string) []string {
		item := `{"id":"` + id + `","type":"reasoning","summary":[]}`
		return []string{
			`{"type":"response.output_item.added","output_index":0,"item":` + item + `}`,
			`{"type":"response.output_item.done","output_index":0,"item":` + item + `}`,
		}
	}
	p := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`}
	p = append(p, reasoning("rs_p")...)
	p = append(p, g6Message("msg_p", 1, []string{"The", " quick", " brown"}, false)...)
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(p...), End: upstreamtest.EndCut})
	b := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
	b = append(b, reasoning("rs_b")...)
	b = append(b, g6Message("msg_b", 1, []string{"The quick", " brown fox", " jumps over the lazy dog"}, true)...)
	b = append(b, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})
	s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
	if s.terminal.typ != "response.completed" || s.text != fullAnswer {
		t.Fatalf("client got %q ending %s %s: %s", s.text, s.terminal.typ, s.code, s.terminal.data)
	}
	added := 0
	for _, ev := range s.evs {
		if ev.typ == "response.output_item.added" {
			added++
		}
	}
	out := gjson.GetBytes(s.terminal.data, "response.output").Array()
	if added != 2 || len(out) != 2 || out[0].Get("id").Str != "rs_p" || out[1].Get("content.0.text").Str != fullAnswer {
		t.Fatalf("%d items added; terminal output %s", added, gjson.GetBytes(s.terminal.data, "response.output").Raw)
	}
}

// TestRestartChatSendsNoEmptyChunks: a Chat client of a restarted stream
// gets no chunk for what the restart only repeats (its role chunk, its text
// the client already has): every chunk carries text, a finish reason or
// usage.
func TestRestartChatSendsNoEmptyChunks(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 4))
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`)
	text, finishes := "", 0
	for _, ev := range evs {
		if ev.Done {
			continue
		}
		c := gjson.ParseBytes(ev.Data)
		choice := c.Get("choices.0")
		text += choice.Get("delta.content").Str
		if choice.Get("finish_reason").Str != "" {
			finishes++
		}
		if !c.Get("usage").IsObject() && choice.Get("finish_reason").Type == gjson.Null &&
			choice.Get("delta.content").Str == "" && choice.Get("delta.role").Str == "" {
			t.Fatalf("a chunk with nothing for the client: %s", ev.Data)
		}
	}
	if text != fullAnswer || finishes != 1 {
		t.Fatalf("client got %q with %d finish chunks", text, finishes)
	}
}

// TestRestartWithoutDoneEventsCompletes: a restart that reproduces the
// text the client has and goes on, but never sends content_part.done or
// output_item.done (the spec does not require them before the terminal
// event), completes: its terminal event or its next item closes the item.
// Before, the client got the new text and then a response.failed saying the
// restart "ended before reproducing what was already sent".
func TestRestartWithoutDoneEventsCompletes(t *testing.T) {
	rest := []string{"The quick brown", " fox jumps over the lazy dog"}
	for name, more := range map[string][]string{
		"terminal":  nil,
		"next item": g6Message("msg_c", 1, []string{"Done."}, true),
	} {
		t.Run(name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			evs := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
			evs = append(evs, g6Message("msg_b", 0, rest, false)...)
			evs = append(evs, more...)
			evs = append(evs, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
			h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
			s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
			if s.terminal.typ != "response.completed" {
				t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.message, s.terminal.data)
			}
			want := fullAnswer
			if more != nil {
				want += "Done."
			}
			if s.text != want {
				t.Fatalf("client got %q, want %q", s.text, want)
			}
			if got := gjson.GetBytes(s.terminal.data, "response.output.0.content.0.text").Str; got != fullAnswer {
				t.Fatalf("the completed response's first item %q, want %q", got, fullAnswer)
			}
		})
	}
}

// TestRestartShortAtItsEndAnchorsNothing: a restart that ends (its
// response.completed) before reproducing what the client has fails the
// client's stream, and its answer is not the client's response: the
// response id stays owned by the target the client's text came from, so a
// follow-up is not continued from an answer that contradicts it.
func TestRestartShortAtItsEndAnchorsNothing(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{opts: gateway.Options{Store: openStore(t, t.TempDir())}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
	evs = append(evs, g6Message("msg_b", 0, []string{"The ", "quick"}, false)...)
	evs = append(evs, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
	s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
	if s.terminal.typ != "response.failed" || s.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.code, s.terminal.data)
	}
	id := gjson.GetBytes(s.terminal.data, "response.id").Str
	var anchor struct{ Owner string }
	if code := h.getJSON("/admin/continuity/"+id, &anchor); code != http.StatusOK || anchor.Owner != "P" {
		t.Fatalf("the failed response's anchor: %d, owner %q; want P, whose text the client has", code, anchor.Owner)
	}
}
