package gateway_test

// Rules of a continuation after content that mutation testing showed no
// other test pinned down: an empty tools list is no tools, the facts a
// replay policy is told about tool calls the client has (finished or still
// in flight), and the class a continuation target's complete (non-stream)
// answer is reported under.
//
// Mutants left untested, as no input can tell them apart:
//   - continuation.go nextFor (t == cur -> t != cur), in a loop that only
//     computed an index its one caller discarded. The loop is gone since.
//   - proxy.go process (DetachGrace > 0 -> >= 0): with no grace the
//     mutant runs the stream on a detached context that the client's
//     cancellation reaches through context.AfterFunc -> goneLocked ->
//     abandon(errClientGone) (goneLocked abandons at once when the grace is
//     0), instead of cancelling it directly. The work stops either way;
//     only the cancellation's cause differs (errClientGone instead of
//     context.Canceled), and the code that reads a cause looks only for
//     errDraining, errCancelled and the timeouts.
//   - limits_redis.go Admit (Concurrent > 0 -> >= 0): with no
//     concurrency limit the mutant makes a random lease id, but the admit
//     script reads the lease only when the limit is > 0, and the settle
//     script's ZREM of a member that was never added to the set changes
//     nothing (and leaves a missing key missing).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// g9aFrames numbers a Responses stream's events from 0, as an upstream does.
func g9aFrames(evs []string) []upstreamtest.Frame {
	fs := make([]upstreamtest.Frame, 0, len(evs))
	for i, e := range evs {
		typ := gjson.Get(e, "type").Str
		e = strings.Replace(e, `{"type":"`+typ+`"`, `{"type":"`+typ+`","sequence_number":`+fmt.Sprint(i), 1)
		fs = append(fs, upstreamtest.SSEEvent([]byte(e)))
	}
	return fs
}

// TestGaps9aEmptyToolsListIsNoTools: a request that sends "tools": [] has
// no tool a prefill could make the next target skip, so a failure after
// content is continued by a prefill (the text sent as a trailing assistant
// message), and the replay policy is told the request has no tools.
func TestGaps9aEmptyToolsListIsNoTools(t *testing.T) {
	pol := &contPolicy{}
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Policy: pol}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true,"tools":[]}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.completed" || gjson.GetBytes(last.data, "response.output.0.content.0.text").Str != fullAnswer {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	if h.ups["B"].RequestCount() != 1 {
		t.Fatalf("B called %d times, want once", h.ups["B"].RequestCount())
	}
	if role, text := lastMessage(h.ups["B"].Requests()[0]); role != "assistant" || text != sentPart {
		t.Fatalf("B's request ends with %s %q; want the prefill %q", role, text, sentPart)
	}
	ins := pol.asked()
	if len(ins) != 1 || ins[0].HasTools {
		t.Fatalf("replay inputs %+v; want one, without tools", ins)
	}
	h.waitMetric(`sluice_rescues_total{kind="prefill",outcome="completed"`)
}

// TestGaps9aToolCallInFlightIsTheOpenOne: the replay policy is told a tool
// call is in flight when the client has a function call whose item is not
// done (cut mid-arguments), and not when the call finished and the model
// went on to a message that was cut.
func TestGaps9aToolCallInFlightIsTheOpenOne(t *testing.T) {
	const tools = `"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	resp := func(status string) string {
		return `{"id":"resp_p","object":"response","created_at":1767225600,"status":"` + status + `","model":"gpt-fake-1","output":[]}`
	}
	call := func(status, args string) string {
		q, _ := json.Marshal(args)
		return `{"id":"fc_p","type":"function_call","status":"` + status + `","arguments":` + string(q) + `,"call_id":"call_P","name":"get_weather"}`
	}
	finishedThenText := g9aFrames([]string{
		`{"type":"response.created","response":` + resp("in_progress") + `}`,
		`{"type":"response.in_progress","response":` + resp("in_progress") + `}`,
		`{"type":"response.output_item.added","output_index":0,"item":` + call("in_progress", "") + `}`,
		`{"type":"response.function_call_arguments.delta","item_id":"fc_p","output_index":0,"delta":"{\"city\":\"Paris\"}"}`,
		`{"type":"response.function_call_arguments.done","item_id":"fc_p","output_index":0,"arguments":"{\"city\":\"Paris\"}"}`,
		`{"type":"response.output_item.done","output_index":0,"item":` + call("completed", `{"city":"Paris"}`) + `}`,
		`{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_p","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
		`{"type":"response.content_part.added","item_id":"msg_p","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`,
		`{"type":"response.output_text.delta","item_id":"msg_p","output_index":1,"content_index":0,"delta":"It is sunny"}`,
	})
	for _, tc := range []struct {
		name     string
		frames   []upstreamtest.Frame
		inFlight bool
		items    int
	}{
		{"call cut mid-arguments", functionCallFrames("resp_p", "call_P", []string{`{"city":`, `"Par`, `is"}`}, 2), true, 1},
		{"call done, then a message cut", finishedThenText, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The policy declines, so the client keeps the stream as it
			// was cut: only what the policy was told is under test.
			no := hostabi.ReplayNo
			pol := &contPolicy{verdict: &no}
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Policy: pol}})
			h.ups["P"].Enqueue(upstreamtest.Script{Frames: tc.frames, End: upstreamtest.EndCut})
			_, evs := h.responsesStream(`{"model":"m","stream":true,"input":"weather in Paris?",` + tools + `}`)
			if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "stream_incomplete" {
				t.Fatalf("terminal %s %s: %s", last.typ, last.code, last.data)
			}
			ins := pol.asked()
			if len(ins) != 1 {
				t.Fatalf("asked %d times", len(ins))
			}
			if in := ins[0]; in.ToolCallInFlight != tc.inFlight || in.ItemsSent != tc.items || !in.HasTools || in.FailureClass != hostabi.FailureCut {
				t.Fatalf("replay input %+v; want tool_call_in_flight %v, items_sent %d", in, tc.inFlight, tc.items)
			}
			if n := h.ups["B"].RequestCount(); n != 0 {
				t.Fatalf("B called %d times after the policy said no", n)
			}
		})
	}
}

// TestGaps9aCompleteAnswerFromAContinuationTarget: a continuation target
// that answers the streaming continuation with a complete JSON body (200,
// not an event stream) has failed: the replay policy is asked about it
// under the class "other" (not a 4xx client error), the operator's log says
// why, and with nothing left the client gets the original failure, never
// the JSON body.
func TestGaps9aCompleteAnswerFromAContinuationTarget(t *testing.T) {
	p := upstreamtest.NewServer(upstreamtest.Options{Name: "P"})
	t.Cleanup(p.Close)
	b := upstreamtest.NewHandler(upstreamtest.Options{Name: "B"})
	t.Cleanup(b.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(upstreamtest.ResponseJSON("resp_b_json", "gpt-fake-1", "a whole answer from B"))
			return
		}
		b.Handler().ServeHTTP(w, r) // the model probe
	}))
	t.Cleanup(front.Close)
	b.URL = front.URL + "/v1"

	pol := &contPolicy{}
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
		opts: gateway.Options{Policy: pol}})
	p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.failed" || last.code != "stream_incomplete" || strings.Contains(string(last.data), "a whole answer") {
		t.Fatalf("terminal %s %s: %s", last.typ, last.code, last.data)
	}
	ins := pol.asked()
	if len(ins) != 2 {
		t.Fatalf("asked %d times, want about P's cut and about B's answer: %+v", len(ins), ins)
	}
	if in := ins[1]; in.Upstream != "B" || in.FailureClass != hostabi.FailureOther {
		t.Fatalf("B's failure told to the policy as %+v; want class %q", in, hostabi.FailureOther)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "a complete answer instead of a stream") {
		t.Fatalf("the log does not say why B failed:\n%s", grep(logs, "continuation"))
	}
}
