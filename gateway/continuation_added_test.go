package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestRestartThatFailsWhileReproducingReportsTheOriginalFailure: a restart
// that fails while everything it sent was text the client already had (and
// so suppressed) has added nothing: the client gets the failure that
// started the continuation, never the restart's own (README
// "Continuation"), whether the restart is cut or ends with the terminal
// event of another response.
func TestRestartThatFailsWhileReproducingReportsTheOriginalFailure(t *testing.T) {
	// B's first two deltas, "The" " quick", reproduce what P sent.
	foreignAfterTwo := scriptOf(append(upstreamtest.ResponsesEvents("resp_b", "m", fullAnswer, 9)[:6:6], foreignCompleted()))
	for _, s := range rescueSurfaces {
		for _, b := range []struct {
			name   string
			script upstreamtest.Script
		}{
			{"cut", upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(2)},
			{"foreign_terminal", foreignAfterTwo},
		} {
			if s.chat && b.name == "foreign_terminal" {
				continue // a Chat upstream's chunks name no response
			}
			t.Run(s.name+"/"+b.name, func(t *testing.T) {
				h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
				h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(3, "server_error"))
				h.ups["B"].Enqueue(b.script)
				o := restartFailureOutcome(t, h, s)
				if o.text != sentPart {
					t.Fatalf("client got %q, want only what P sent", o.text)
				}
				if (!s.chat && o.terminal != "response.failed") || o.code != "server_error" {
					t.Fatalf("terminal %s %s, want P's server_error: %s", o.terminal, o.code, o.raw[len(o.raw)-1])
				}
				if last := o.raw[len(o.raw)-1]; !s.chat && !strings.Contains(last, "The server had an error") {
					t.Fatalf("terminal %s, want P's message", last)
				}
				if n := h.ups["B"].RequestCount(); n != 1 {
					t.Fatalf("B called %d times, want once (the restart)", n)
				}
			})
		}
	}
}

// restartFailureOutcome is what a client of s saw of a stream that ends
// with a failure (openai-go does not hand a Chat error chunk back as an
// API error: the chunks are read here).
func restartFailureOutcome(t *testing.T, h *harness, s rescueSurface) rescueOutcome {
	t.Helper()
	if !s.chat {
		return s.do(t, h)
	}
	var o rescueOutcome
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	for _, ev := range evs {
		o.raw = append(o.raw, string(ev.Data))
		o.text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
		if c := gjson.GetBytes(ev.Data, "error.code"); c.Exists() {
			o.terminal, o.code = "error", c.Str
		}
	}
	if len(evs) == 0 || !evs[len(evs)-1].Done || o.terminal != "error" {
		t.Fatalf("chat stream does not end with an error chunk and [DONE]: %v", o.raw)
	}
	return o
}

// TestContinuationThatAddsNothingLeavesNoEmptyItem: a stream whose every
// item was sent and closed but whose terminal event never came (a cut, or
// the terminal event of another response) is continued by a prefill; the
// target, given the whole answer, adds nothing. The client gets no second,
// empty message: the stream ends completed with a terminal output holding
// exactly what the client was sent (docs/ARCHITECTURE.md §3).
func TestContinuationThatAddsNothingLeavesNoEmptyItem(t *testing.T) {
	evs := upstreamtest.ResponsesEvents("resp_first", "m", fullAnswer, 9)
	whole := evs[: len(evs)-1 : len(evs)-1] // up to output_item.done
	for _, s := range rescueSurfaces {
		if s.chat {
			continue // a Chat answer whose finish_reason went out is complete: not continued
		}
		for _, p := range []struct {
			name   string
			script upstreamtest.Script
		}{
			{"cut", scriptOf(whole)},
			{"foreign_terminal", scriptOf(append(whole, foreignCompleted()))},
		} {
			t.Run(s.name+"/"+p.name, func(t *testing.T) {
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
				h.ups["P"].Enqueue(p.script)
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3)) // the rest of a whole prefill: nothing
				o := s.do(t, h)                                        // one message item, in the terminal output too
				if o.text != fullAnswer || o.terminal != "response.completed" {
					t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
				}
				if role, text := lastMessage(h.ups["B"].Requests()[0]); role != "assistant" || text != fullAnswer {
					t.Fatalf("B's request ends with %s %q; want the prefill", role, text)
				}
				h.waitMetric(`sluice_rescues_total{kind="prefill",outcome="completed"`)
			})
		}
	}
}

// TestContinuationAfterAClosedItemOpensANewOne: a prefill continuing a
// stream whose message the client saw closed puts what the target adds in
// a new message item after it, every one of its events in order at the
// next output_index, and the terminal output holds both.
func TestContinuationAfterAClosedItemOpensANewOne(t *testing.T) {
	evs := upstreamtest.ResponsesEvents("resp_first", "m", sentPart, 3)
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(scriptOf(evs[: len(evs)-1 : len(evs)-1]))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, got := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, got)
	if last.typ != "response.completed" {
		t.Fatalf("terminal %s %s", last.typ, last.data)
	}
	var types []string
	var text string
	for i, ev := range got {
		e := gjson.ParseBytes(ev.data)
		if e.Get("sequence_number").Int() != int64(i) {
			t.Fatalf("event %d numbered %s", i, e.Get("sequence_number").Raw)
		}
		if e.Get("output_index").Int() == 1 {
			types = append(types, strings.TrimPrefix(ev.typ, "response."))
			text += e.Get("delta").Str
		}
	}
	want := "output_item.added content_part.added output_text.delta output_text.delta output_text.delta " +
		"output_text.done content_part.done output_item.done"
	if strings.Join(types, " ") != want || text != " fox jumps over the lazy dog" {
		t.Fatalf("the new item's events: %v with %q", types, text)
	}
	out := gjson.GetBytes(last.data, "response.output").Array()
	if len(out) != 2 || out[0].Get("content.0.text").Str != sentPart || out[1].Get("content.0.text").Str != " fox jumps over the lazy dog" {
		t.Fatalf("terminal output %s", gjson.GetBytes(last.data, "response.output").Raw)
	}
}
