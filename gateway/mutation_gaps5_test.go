package gateway_test

// Behaviour that mutation testing showed no other test pinned down (README,
// "Mutation testing"): each test names the user-visible rule it holds.
//
// Survivors judged equivalent (no input tells them apart):
//   - pump.go:120 (`<` -> `<=` in sseSink.Flush): the write deadline is
//     refreshed when what is left of it is below the timeout less the
//     slack; the two differ only when that is exact to the nanosecond
//     between two clock reads, and then the deadline moves one refresh
//     earlier, which no client can see.
//   - continuation.go:1462 (`ans.done != nil` -> `==`): every
//     upstreamAnswer carries a done func, so the mutant never calls it.
//     The non-2xx answers that reach that line are either no-ops (a Chat
//     bridge answer, a refused WebSocket upgrade) or an HTTP response whose
//     error body was read: read to its end, its connection already went
//     back to the pool; cut at the 1 MiB bound, the attempt's context,
//     cancelled as the attempt returns, closes the connection just the
//     same, so nothing leaks and nothing reads differently.

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// g5Frames turns Responses event JSON (placeholders allowed) into frames.
func g5Frames(evs ...string) []upstreamtest.Frame {
	fs := make([]upstreamtest.Frame, 0, len(evs))
	for _, ev := range evs {
		fs = append(fs, upstreamtest.SSEEvent([]byte(ev)))
	}
	return fs
}

const (
	g5Created   = `{"type":"response.created","sequence_number":0,"response":{"id":"{{id}}","object":"response","created_at":1767225600,"status":"in_progress","model":"{{model}}","output":[]}}`
	g5MsgAdded  = `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`
	g5PartAdded = `{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}`
	g5MsgDone   = `{"type":"response.output_item.done","sequence_number":6,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Hi"}],"role":"assistant"}}`
	g5Completed = `{"type":"response.completed","sequence_number":7,"response":{"id":"{{id}}","object":"response","created_at":1767225600,"status":"completed","model":"{{model}}","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Hi"}]}]}}`
)

// g5Text is a text event of msg_1's part at content_index 0.
func g5Text(typ, field, text string) string {
	return `{"type":"` + typ + `","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"` + field + `":"` + text + `"}`
}

// TestContinuationServerErrorIsNoPrefillRefusal: a continuation target
// that answers the prefill with a 500 has failed; it did not refuse the
// trailing assistant message (only a 4xx about the request does), so it is
// not asked again for a restart, and the client gets the failure that
// started the rescue.
func TestContinuationServerErrorIsNoPrefillRefusal(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Status5xx(500))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3)) // what a restart would get
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.failed" || last.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s: %s", last.typ, last.code, last.data)
	}
	reqs := h.ups["B"].Requests()
	if len(reqs) != 1 {
		t.Fatalf("B got %d requests, want only the prefill its 500 answered", len(reqs))
	}
	if role, _ := lastMessage(reqs[0]); role != "assistant" {
		t.Fatal("B's request was no prefill")
	}
}

// TestDeltaForAPartNeverAddedIsPassedOn: an upstream that streams text
// into a message without announcing the content part first (no
// content_part.added) still has its whole stream relayed to the client,
// the part announced ahead of its first delta (README, "What it promises").
func TestDeltaForAPartNeverAddedIsPassedOn(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: g5Frames(g5Created, g5MsgAdded,
		g5Text("response.output_text.delta", "delta", "Hi"), g5Text("response.output_text.done", "text", "Hi"),
		g5MsgDone, g5Completed)})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.completed" || len(evs) != 7 {
		t.Fatalf("%d events ending %s: %s", len(evs), last.typ, last.data)
	}
	if evs[2].typ != "response.content_part.added" || gjson.GetBytes(evs[2].data, "part.type").Str != "output_text" {
		t.Fatalf("event 2: %s", evs[2].data)
	}
	if d := gjson.GetBytes(evs[3].data, "delta").Str; evs[3].typ != "response.output_text.delta" || d != "Hi" {
		t.Fatalf("event 3: %s", evs[3].data)
	}
}

// TestContinuedTextDoneCarriesLogprobs: the response.output_text.done the
// gateway writes for a continued message has the logprobs array the
// Responses spec requires on that event.
func TestContinuedTextDoneCarriesLogprobs(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, raw := h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	var evs [][]byte
	for _, ev := range raw {
		evs = append(evs, ev.Data)
	}
	o := checkResponsesEvents(t, evs)
	if o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s", o.text, o.terminal)
	}
	n := 0
	for _, data := range evs {
		if gjson.GetBytes(data, "type").Str != "response.output_text.done" {
			continue
		}
		n++
		if !gjson.GetBytes(data, "logprobs").IsArray() {
			t.Fatalf("output_text.done without logprobs: %s", data)
		}
	}
	if n != 1 {
		t.Fatalf("%d output_text.done events, want 1", n)
	}
}

// TestContinuationAfterAPartEndedAddsANewPart: when the broken stream had
// already ended its content part (content_part.done) but not its message,
// the continuation's text goes into a new part of that message: the part
// the client saw done never grows and is never ended twice.
func TestContinuationAfterAPartEndedAddsANewPart(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Script{End: upstreamtest.EndCut, Frames: g5Frames(g5Created, g5MsgAdded, g5PartAdded,
		g5Text("response.output_text.delta", "delta", "The quick"), g5Text("response.output_text.done", "text", "The quick"),
		`{"type":"response.content_part.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":"The quick"}}`,
	)})
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	textDone, partDone := map[int64]int{}, map[int64]int{}
	var text strings.Builder
	for _, ev := range evs {
		ci := gjson.GetBytes(ev.data, "content_index").Int()
		switch ev.typ {
		case "response.output_text.delta":
			if partDone[ci] > 0 {
				t.Fatalf("text added to part %d after its content_part.done: %s", ci, ev.data)
			}
			text.WriteString(gjson.GetBytes(ev.data, "delta").Str)
		case "response.output_text.done":
			textDone[ci]++
		case "response.content_part.done":
			partDone[ci]++
		}
	}
	if text.String() != fullAnswer {
		t.Fatalf("client got %q", text.String())
	}
	for ci := range int64(2) {
		if textDone[ci] != 1 || partDone[ci] != 1 {
			t.Fatalf("part %d: %d output_text.done, %d content_part.done; want one each (text done %v, part done %v)",
				ci, textDone[ci], partDone[ci], textDone, partDone)
		}
	}
}

// TestRescueGivenUpKeepsTheUpstreamsError: when a stream broken by an
// upstream error event cannot be continued (the next target fails too),
// the client's error says what the upstream said: an error with neither
// code nor message is shown as its payload, never as an empty message, and
// a code without a message stays as it is.
func TestRescueGivenUpKeepsTheUpstreamsError(t *testing.T) {
	cases := []struct {
		name, payload string
		payloadShown  bool
	}{
		{"neither code nor message", `{"type":"error","sequence_number":99,"error":{"type":"server_error"}}`, true},
		{"a code alone", `{"type":"error","sequence_number":99,"error":{"code":"server_error"}}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
			a := upstreamtest.Answer(fullAnswer, 9)
			a.StopAfterDeltas, a.Tail = 3, g5Frames(c.payload)
			h.ups["P"].Enqueue(a)
			h.ups["B"].Enqueue(upstreamtest.Status5xx(503))
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			last := assertOneTerminal(t, evs)
			msg := gjson.GetBytes(last.data, "response.error.message").Str
			if last.typ != "response.failed" || h.ups["B"].RequestCount() != 1 {
				t.Fatalf("terminal %s after %d tries on B: %s", last.typ, h.ups["B"].RequestCount(), last.data)
			}
			if shown := strings.Contains(msg, `"sequence_number":99`); shown != c.payloadShown {
				t.Fatalf("the client's message %q shows the upstream payload: %v, want %v", msg, shown, c.payloadShown)
			}
		})
	}
}

// TestContinuedAnchorIsLoggedDurable: a continued response whose anchor
// was written is logged as anchored to its new owner, not as completed
// without a durable anchor (which would page an operator for nothing).
func TestContinuedAnchorIsLoggedDurable(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Store: st}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	id := gjson.GetBytes(last.data, "response.id").Str
	if last.typ != "response.completed" {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	checkDurable(t, st, id, "B")
	logs := h.logs.String() // written before the client saw the completion
	if strings.Contains(logs, "without a durable anchor") || !strings.Contains(logs, "continued response anchored") {
		t.Fatalf("logs: %s", grepLines(logs, "anchor"))
	}
}

// TestCompletedResponseWithoutCreatedIsAnchored: an upstream that never
// sends response.created still has the response anchored, under the id of
// its response.completed, so a follow-up naming it reaches that upstream.
func TestCompletedResponseWithoutCreatedIsAnchored(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	s := upstreamtest.Script{Frames: g5Frames(g5MsgAdded, g5PartAdded,
		g5Text("response.output_text.delta", "delta", "Hi"), g5Text("response.output_text.done", "text", "Hi"),
		`{"type":"response.content_part.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":"Hi"}}`,
		g5MsgDone, g5Completed)}
	h.ups["A"].Enqueue(s)
	h.ups["B"].Enqueue(s)
	evs, id := h.turn("", nil)
	own := owner(id)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" || own == "" {
		t.Fatalf("terminal %s for %q", last.typ, id)
	}
	checkDurable(t, st, id, own)
	evs, _ = h.turn(id, nil)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("follow-up: %s %s", last.typ, last.data)
	}
	if n := h.ups[other(own)].RequestCount(); n != 0 {
		t.Fatalf("%s got %d requests; the follow-up belongs to %s", other(own), n, own)
	}
}

// TestChatEmptyToolCallsIsNoFirstToken: a Chat delta with "tool_calls": []
// (and an empty content) carries no content, so it does not stop the
// route's first_token timer: the client's error names the first_token
// bound, not the far later idle timeout.
func TestChatEmptyToolCallsIsNoFirstToken(t *testing.T) {
	route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: 200 * time.Millisecond, Continuation: gateway.ContinuationOff,
		Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts:      gateway.Options{Routes: []gateway.Route{route}, IdleTimeout: 2 * time.Second},
	})
	h.ups["A"].Enqueue(upstreamtest.Script{End: upstreamtest.EndHang, ChatFrames: []upstreamtest.Frame{upstreamtest.SSEData([]byte(
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[]},"finish_reason":null}]}`))}})
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-5-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if len(evs) != 3 || !evs[2].Done {
		t.Fatalf("%d events, want the role chunk, an error and [DONE]", len(evs))
	}
	e := gjson.GetBytes(evs[1].Data, "error")
	if e.Get("code").Str != "stream_incomplete" || !strings.Contains(e.Get("message").Str, "no content within 200ms") {
		t.Fatalf("the client's error: %s", evs[1].Data)
	}
}
