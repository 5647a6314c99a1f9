package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A Responses request without input is served, as OpenAI's CreateResponse
// has no required field: its input comes from a prompt template, a
// conversation or previous_response_id. A Responses upstream gets it as
// sent, with no input added.
func TestResponsesRequestWithoutInputReachesTheUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	first := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	for _, body := range []string{
		`{"model":"gpt-fake-1","prompt":{"id":"pmpt_123","variables":{"city":"Paris"}}}`,
		`{"model":"gpt-fake-1","conversation":"conv_1","stream":true}`,
		`{"model":"gpt-fake-1","previous_response_id":"` + first + `"}`,
	} {
		t.Run(body, func(t *testing.T) {
			before := h.ups["A"].RequestCount()
			resp, b := readAll(t, h, "/v1/responses", body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s, want 200", resp.StatusCode, b)
			}
			reqs := h.ups["A"].Requests()
			if len(reqs) != before+1 {
				t.Fatalf("the upstream got %d requests, want 1", len(reqs)-before)
			}
			if got := reqs[before].Body; gjson.GetBytes(got, "input").Exists() {
				t.Fatalf("the upstream got %s, want no input", got)
			}
		})
	}
	// Over a WebSocket too.
	ws := h.dialWS(nil)
	before := h.ups["A"].RequestCount()
	evs := ws.turn(`{"type":"response.create","model":"gpt-fake-1","prompt":{"id":"pmpt_123"}}`)
	if last := evs[len(evs)-1]; last.typ != "response.completed" {
		t.Fatalf("WebSocket turn ended with %s %s", last.typ, last.data)
	}
	reqs := h.ups["A"].Requests()
	if len(reqs) != before+1 || gjson.GetBytes(reqs[before].Body, "input").Exists() || !gjson.GetBytes(reqs[before].Body, "prompt").Exists() {
		t.Fatalf("the upstream got %d requests, the last %s; want one with the prompt and no input", len(reqs)-before, reqs[len(reqs)-1].Body)
	}
}

// A Chat upstream has nothing to take a turn's input from but input: a
// request without one is a 400 naming input, even when instructions or a
// previous response would give the Chat body messages, and the upstream is
// not called.
func TestResponsesRequestWithoutInputOnAChatUpstream(t *testing.T) {
	h := chatHarness(t) // with a conversation store, so previous_response_id has a history
	first := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	for _, body := range []string{
		`{"model":"gpt-fake-1"}`,
		`{"model":"gpt-fake-1","instructions":"be brief","stream":true}`,
		`{"model":"gpt-fake-1","previous_response_id":"` + first + `"}`,
	} {
		t.Run(body, func(t *testing.T) {
			before := h.ups["C"].RequestCount()
			resp, b := readAll(t, h, "/v1/responses", body)
			e := gjson.GetBytes(b, "error")
			if resp.StatusCode != http.StatusBadRequest || e.Get("code").Str != "missing_required_parameter" || e.Get("param").Str != "input" {
				t.Fatalf("%d %s, want 400 missing_required_parameter naming input", resp.StatusCode, b)
			}
			if n := h.ups["C"].RequestCount() - before; n != 0 {
				t.Fatalf("the upstream was called %d times", n)
			}
		})
	}
}

// A continuation of a request without input prefills into an input of its
// own: the text sent as one assistant message item, the prompt kept.
func TestContinuationPrefillOfARequestWithoutInput(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","stream":true,"prompt":{"id":"pmpt_123"}}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s", last.typ)
	}
	got := gjson.ParseBytes(h.ups["B"].Requests()[0].Body)
	want := `[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"The quick brown"}]}]`
	if got.Get("input").Raw != want || got.Get("prompt.id").Str != "pmpt_123" {
		t.Fatalf("B got %s", got.Raw)
	}
}
