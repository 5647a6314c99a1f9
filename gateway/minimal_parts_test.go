package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestMinimalUpstreamPartsRenderComplete: a Responses upstream that
// describes its parts minimally ({"type":"output_text","text":""}, as
// vLLM's and llama.cpp's servers do) and then breaks off, or ends with a
// bare terminal Response, still gets its client a terminal event, and a
// GET /v1/responses/{id}, whose Response the spec accepts: every
// output_text part the gateway renders carries annotations and logprobs,
// every refusal part its refusal (README, "What it promises").
func TestMinimalUpstreamPartsRenderComplete(t *testing.T) {
	spec := loadSpec(t)
	ev := func(s string) upstreamtest.Frame { return upstreamtest.SSEEvent([]byte(s)) }
	at := `"item_id":"msg_1","output_index":0`
	opening := []upstreamtest.Frame{
		ev(`{"type":"response.created","sequence_number":0,"response":{"id":"{{id}}","object":"response","created_at":{{created_at}},` +
			`"status":"in_progress","model":"{{model}}","output":[]}}`),
		ev(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message",` +
			`"role":"assistant","status":"in_progress","content":[]}}`),
		ev(`{"type":"response.content_part.added","sequence_number":2,` + at + `,"content_index":0,"part":{"type":"output_text","text":""}}`),
		ev(`{"type":"response.output_text.delta","sequence_number":3,` + at + `,"content_index":0,"delta":"Hi"}`),
	}
	doneMessage := []upstreamtest.Frame{
		ev(`{"type":"response.output_text.done","sequence_number":4,` + at + `,"content_index":0,"text":"Hi"}`),
		ev(`{"type":"response.content_part.done","sequence_number":5,` + at + `,"content_index":0,"part":{"type":"output_text","text":"Hi"}}`),
		ev(`{"type":"response.content_part.added","sequence_number":6,` + at + `,"content_index":1,"part":{"type":"refusal"}}`),
		ev(`{"type":"response.refusal.delta","sequence_number":7,` + at + `,"content_index":1,"delta":"No"}`),
		ev(`{"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":{"id":"msg_1","type":"message",` +
			`"role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi"},{"type":"refusal","refusal":"No"}]}}`),
	}
	withTail := func(fs ...[]upstreamtest.Frame) []upstreamtest.Frame {
		var out []upstreamtest.Frame
		for _, f := range fs {
			out = append(out, f...)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		script   upstreamtest.Script
		terminal string // the type of the terminal event the client gets
		status   string // its Response's status
		parts    int    // output[0]'s parts
	}{
		{name: "open part, cut", script: upstreamtest.Script{Frames: opening, End: upstreamtest.EndCut},
			terminal: "response.failed", status: "failed", parts: 1},
		{name: "done message, then a call cut", terminal: "response.failed", status: "failed", parts: 2,
			script: upstreamtest.Script{End: upstreamtest.EndCut, Frames: withTail(opening, doneMessage, []upstreamtest.Frame{
				ev(`{"type":"response.output_item.added","sequence_number":9,"output_index":1,"item":{"id":"fc_1","type":"function_call",` +
					`"call_id":"call_1","name":"f","arguments":"","status":"in_progress"}}`),
				ev(`{"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_1","output_index":1,"delta":"{\"a\""}`),
			})}},
		{name: "bare terminal Response", terminal: "response.completed", status: "completed", parts: 2,
			script: upstreamtest.Script{Frames: withTail(opening, doneMessage, []upstreamtest.Frame{
				ev(`{"type":"response.completed","sequence_number":9,"response":{"id":"{{id}}","status":"completed"}}`),
			})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: resumeOpts()})
			h.ups["A"].Enqueue(tc.script)
			_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`)
			last := assertOneTerminal(t, evs)
			if last.typ != tc.terminal || gjson.GetBytes(last.data, "response.status").Str != tc.status {
				t.Fatalf("terminal event: %s, want %s with status %s", last.data, tc.terminal, tc.status)
			}
			if v, c := validateTerminal(t, spec, last.data); len(v)+len(c) > 0 {
				t.Fatalf("the terminal event breaks the spec:\n%v %v\n%s", v, c, last.data)
			}
			checkParts(t, gjson.GetBytes(last.data, "response.output.0.content"), tc.parts)

			id := gjson.GetBytes(last.data, "response.id").Str
			status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
			if status != http.StatusOK || gjson.GetBytes(body, "status").Str != tc.status {
				t.Fatalf("GET /v1/responses/%s: %d %s", id, status, body)
			}
			validateAs(t, spec, "Response", body)
			checkParts(t, gjson.GetBytes(body, "output.0.content"), tc.parts)
		})
	}
}

// checkParts: the message's parts are what was streamed (output_text "Hi",
// then a refusal "No"), with the empty annotations and logprobs the
// upstream left out.
func checkParts(t *testing.T, content gjson.Result, parts int) {
	t.Helper()
	want := []string{`{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}`, `{"type":"refusal","refusal":"No"}`}[:parts]
	var got []string
	content.ForEach(func(_, p gjson.Result) bool { got = append(got, p.Raw); return true })
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("parts %s\nwant %s", content.Raw, strings.Join(want, ","))
	}
}
