package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// The answer the continuation tests stream: nine words, one per delta from
// the primary P, which fails after three ("The quick brown"); the backup B
// continues.
const (
	fullAnswer = "The quick brown fox jumps over the lazy dog"
	sentPart   = "The quick brown"
)

// contHarness is P then B behind the route "m" with the given continuation
// mode and a short stall bound (300ms).
func contHarness(t testing.TB, continuation string, hc harnessConfig) *harness {
	t.Helper()
	return contHarnessStall(t, continuation, 300*time.Millisecond, hc)
}

func contHarnessStall(t testing.TB, continuation string, stall time.Duration, hc harnessConfig) *harness {
	t.Helper()
	if hc.upstreams == nil && hc.servers == nil {
		hc.upstreams = []upstreamtest.Options{{Name: "P"}, {Name: "B"}}
	}
	hc.opts.Routes = []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}},
		Stall: stall, Continuation: continuation}}
	return newHarness(t, hc)
}

// failure is one way the primary fails after content.
type failure struct {
	name   string
	script upstreamtest.Script
	usage  [3]int64 // what P reports (input, output, total): only response.failed carries any
}

func failuresAfterContent() []failure {
	a := upstreamtest.Answer(fullAnswer, 9)
	return []failure{
		{"cut", a.CutAfterDeltas(3), [3]int64{}},
		{"stall", a.StallAfterDeltas(3), [3]int64{}},
		{"error event", a.FailAfterDeltas(3, "server_error"), [3]int64{8, 3, 11}},
	}
}

// rescueOutcome is what a client saw of a rescued stream.
type rescueOutcome struct {
	text     string
	terminal string   // the terminal event's type ("done" for Chat)
	code     string   // a response.failed's code (gatewayCode), or a Chat error's
	usage    [3]int64 // the usage the client got (input/prompt, output/completion, total)
	raw      []string // every event (Chat: chunk) the client got
}

// checkResponsesEvents checks a rescued Responses stream as a client sees
// it: numbered from 0 without a gap, one terminal event last, one response
// id, one message item whose every event is at output_index 0 with the
// client's item id, and done forms and a terminal output holding the whole
// text. It returns the text and the terminal's usage.
func checkResponsesEvents(t *testing.T, evs [][]byte) rescueOutcome {
	t.Helper()
	var o rescueOutcome
	var id, itemID string
	added := 0
	for i, data := range evs {
		o.raw = append(o.raw, string(data))
		ev := gjson.ParseBytes(data)
		typ := ev.Get("type").Str
		if seq := ev.Get("sequence_number"); !seq.Exists() || seq.Int() != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %s", i, typ, seq.Raw)
		}
		if r := ev.Get("response"); r.Exists() {
			if id == "" {
				id = r.Get("id").Str
			}
			if r.Get("id").Str != id {
				t.Fatalf("event %d (%s) names response %s; the client was shown %s", i, typ, r.Get("id").Str, id)
			}
		}
		if oi := ev.Get("output_index"); oi.Exists() && oi.Int() != 0 {
			t.Fatalf("event %d (%s) at output_index %d: %s", i, typ, oi.Int(), data)
		}
		if it := ev.Get("item_id"); it.Exists() && it.Str != itemID {
			t.Fatalf("event %d (%s) for item %s, the client's is %s", i, typ, it.Str, itemID)
		}
		switch typ {
		case "response.output_item.added":
			added++
			itemID = ev.Get("item.id").Str
		case "response.output_text.delta":
			o.text += ev.Get("delta").Str
		case "response.output_text.done":
			if ev.Get("text").Str != o.text {
				t.Fatalf("output_text.done says %q, the client got %q", ev.Get("text").Str, o.text)
			}
		case "response.output_item.done":
			if ev.Get("item.id").Str != itemID || ev.Get("item.content.0.text").Str != o.text {
				t.Fatalf("output_item.done %s", data)
			}
		}
		if isTerminal(typ) {
			if i != len(evs)-1 {
				t.Fatalf("terminal %s at %d of %d events", typ, i, len(evs))
			}
			o.terminal = typ
			o.code = gatewayCode(ev.Get("response.error.code").Str, ev.Get("response.error.message").Str)
			u := ev.Get("response.usage")
			o.usage = [3]int64{u.Get("input_tokens").Int(), u.Get("output_tokens").Int(), u.Get("total_tokens").Int()}
			out := ev.Get("response.output").Array()
			if len(out) != 1 || out[0].Get("id").Str != itemID || out[0].Get("content.0.text").Str != o.text {
				t.Fatalf("terminal output %s; the client got %q in item %s", ev.Get("response.output").Raw, o.text, itemID)
			}
		}
	}
	if added != 1 {
		t.Fatalf("%d output items added, want one message", added)
	}
	return o
}

// rescueSurface sends the request the continuation tests use ("m", "hi")
// the way a client of that surface does, and checks its stream.
type rescueSurface struct {
	name string
	chat bool
	do   func(t *testing.T, h *harness) rescueOutcome
}

var rescueSurfaces = []rescueSurface{
	{"responses_sse", false, func(t *testing.T, h *harness) rescueOutcome {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := h.client()
		stream := cl.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var evs [][]byte
		var text string
		for stream.Next() {
			ev := stream.Current()
			evs = append(evs, []byte(ev.RawJSON()))
			if ev.Type == "response.output_text.delta" {
				text += ev.Delta
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("openai-go: %v", err)
		}
		o := checkResponsesEvents(t, evs)
		if o.text != text {
			t.Fatalf("openai-go accumulated %q, the events say %q", text, o.text)
		}
		return o
	}},
	{"responses_websocket", false, func(t *testing.T, h *harness) rescueOutcome {
		c := h.dialWS(nil)
		defer c.conn.CloseNow()
		var evs [][]byte
		for _, ev := range c.turn(`{"type":"response.create","model":"m","input":"hi"}`) {
			evs = append(evs, ev.data)
		}
		return checkResponsesEvents(t, evs)
	}},
	{"chat_sse", true, func(t *testing.T, h *harness) rescueOutcome {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := h.client()
		stream := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var o rescueOutcome
		var id string
		roles, finishes := 0, 0
		for stream.Next() {
			c := stream.Current()
			o.raw = append(o.raw, c.RawJSON())
			if id == "" {
				id = c.ID
			}
			if c.ID != id {
				t.Fatalf("chunk id %s; the client was shown %s", c.ID, id)
			}
			if len(c.Choices) > 0 {
				o.text += c.Choices[0].Delta.Content
				if c.Choices[0].Delta.Role != "" {
					roles++
				}
				if c.Choices[0].FinishReason != "" {
					finishes++
				}
			}
			if c.Usage.TotalTokens > 0 {
				o.usage = [3]int64{c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens}
			}
		}
		if err := stream.Err(); err != nil {
			var ae *openai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("openai-go: %v", err)
			}
			o.terminal, o.code = "error", ae.Code
			return o
		}
		if roles != 1 || finishes != 1 {
			t.Fatalf("%d role chunks, %d finish chunks; want one each", roles, finishes)
		}
		o.terminal = "done"
		return o
	}},
}

// lastMessage is the text of the assistant message a recorded request
// ends with (Responses input or Chat messages); ok is false without one.
func lastMessage(r upstreamtest.Request) (role, text string) {
	body := gjson.ParseBytes(r.Body)
	list := body.Get("input")
	if strings.HasSuffix(r.Path, "/chat/completions") {
		list = body.Get("messages")
	}
	msgs := list.Array()
	if len(msgs) == 0 {
		return "", ""
	}
	last := msgs[len(msgs)-1]
	c := last.Get("content")
	if c.IsArray() {
		return last.Get("role").Str, c.Get("0.text").Str
	}
	return last.Get("role").Str, c.Str
}

// TestContinuationAfterContent: every failure after content (a cut, a
// stall past the route's stall, a retryable response.failed / error chunk),
// on every client surface, by prefill and by restart: the client reads one
// stream (one id, numbering from 0, one message) holding the whole answer,
// and the usage of both attempts summed.
func TestContinuationAfterContent(t *testing.T) {
	for _, kind := range []string{"prefill", "restart"} {
		for _, s := range rescueSurfaces {
			for _, f := range failuresAfterContent() {
				t.Run(kind+"/"+s.name+"/"+f.name, func(t *testing.T) {
					mode := gateway.ContinuationAuto
					deltas := 3 // a prefill's rest: " fox jumps over" " the lazy" " dog"
					if kind == "restart" {
						mode = gateway.ContinuationRestart
						deltas = 4 // "The quick" " brown fox" …: the overlap ends inside a delta
					}
					h := contHarness(t, mode, harnessConfig{})
					h.ups["P"].Enqueue(f.script)
					h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, deltas))
					o := s.do(t, h)
					if o.text != fullAnswer || (o.terminal != "response.completed" && o.terminal != "done") {
						t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
					}
					want := [3]int64{8, 3, 11} // B's
					if kind == "restart" {
						want = [3]int64{8, 4, 12}
					}
					if !s.chat {
						want = [3]int64{want[0] + f.usage[0], want[1] + f.usage[1], want[2] + f.usage[2]}
					}
					if o.usage != want {
						t.Fatalf("usage %v, want %v (the attempts' usage summed)", o.usage, want)
					}
					if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 1 || b != 1 {
						t.Fatalf("P called %d times, B %d; want 1, 1", p, b)
					}
					role, text := lastMessage(h.ups["B"].Requests()[0])
					switch {
					case kind == "prefill" && (role != "assistant" || text != sentPart):
						t.Fatalf("B's request ends with %s %q; want the text sent as an assistant message", role, text)
					case kind == "restart" && role == "assistant":
						t.Fatalf("a restart sent B a trailing %s message %q", role, text)
					}
					h.waitMetric(fmt.Sprintf(`sluice_rescues_total{kind=%q,outcome="completed"`, kind))
				})
			}
		}
	}
}

// TestContinuationPrefillRequestShapes: the prefill keeps the request as the
// client sent it and appends the text sent: a string input becomes a user
// message, a list gets an assistant message item, Chat messages a trailing
// assistant message; nothing else changes (no system prompt is injected).
func TestContinuationPrefillRequestShapes(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true,"instructions":"be brief","x_unknown":1}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s", last.typ)
	}
	got := gjson.ParseBytes(h.ups["B"].Requests()[0].Body)
	want := `[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"The quick brown"}]}]`
	if got.Get("input").Raw != want || got.Get("instructions").Str != "be brief" || got.Get("x_unknown").Int() != 1 {
		t.Fatalf("B got %s", got.Raw)
	}
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs = h.responsesStream(`{"model":"m","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`)
	assertOneTerminal(t, evs)
	got = gjson.ParseBytes(h.ups["B"].Requests()[1].Body)
	if n := len(got.Get("input").Array()); n != 2 || got.Get("input.0.content.0.text").Str != "hi" || got.Get("input.1.role").Str != "assistant" {
		t.Fatalf("B got %s", got.Raw)
	}
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, _ = h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`)
	got = gjson.ParseBytes(h.ups["B"].Requests()[2].Body)
	if got.Get("messages").Raw != `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"The quick brown"}]` {
		t.Fatalf("B got %s", got.Raw)
	}
}

// TestContinuationRestartDiverges: a restart that answers differently ends
// the stream with response.failed stream_incomplete (a Chat error chunk),
// and the client never gets a word of the contradicting answer.
func TestContinuationRestartDiverges(t *testing.T) {
	for _, s := range rescueSurfaces {
		t.Run(s.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Answer("The quick red fox naps", 5))
			var o rescueOutcome
			if s.chat {
				_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
				for _, ev := range evs {
					o.raw = append(o.raw, string(ev.Data))
					o.text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
					if c := gjson.GetBytes(ev.Data, "error.message"); c.Exists() {
						o.terminal, o.code = "error", strings.SplitN(c.Str, ":", 2)[0]
					}
				}
				if !evs[len(evs)-1].Done || o.terminal != "error" {
					t.Fatalf("chat stream does not end with an error chunk and [DONE]: %v", o.raw)
				}
				o.code = gjson.Get(o.raw[len(o.raw)-2], "error.code").Str
			} else {
				var evs [][]byte
				if s.name == "responses_websocket" {
					for _, ev := range h.dialWS(nil).turn(`{"type":"response.create","model":"m","input":"hi"}`) {
						evs = append(evs, ev.data)
					}
				} else {
					_, es := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
					for _, ev := range es {
						evs = append(evs, ev.data)
					}
				}
				o = checkResponsesEvents(t, evs)
			}
			if o.text != sentPart {
				t.Fatalf("client got %q, want only what P sent", o.text)
			}
			for _, raw := range o.raw {
				if strings.Contains(raw, "red") || strings.Contains(raw, "naps") {
					t.Fatalf("contradicting text reached the client: %s", raw)
				}
			}
			if s.chat {
				if o.code != "stream_incomplete" {
					t.Fatalf("chat error code %q", o.code)
				}
			} else if o.terminal != "response.failed" || o.code != "stream_incomplete" {
				t.Fatalf("terminal %s %s", o.terminal, o.code)
			}
			h.waitMetric(`sluice_rescues_total{kind="restart",outcome="diverged"`)
			// The restart that diverged is counted as such, not ok, and not
			// charged: it answered, differently (README "Observability").
			m := h.waitMetric(`sluice_upstream_attempts_total{outcome="continuation_diverged",upstream="B"} 1`)
			if strings.Contains(m, `sluice_upstream_attempts_total{outcome="ok",upstream="B"}`) ||
				strings.Contains(m, `sluice_target_failures_total{class="server_error",model="m",upstream="B"}`) {
				t.Fatalf("the diverged restart counted as:\n%s%s", grep(m, "upstream_attempts"), grep(m, "target_failures"))
			}
		})
	}
}

// TestContinuationNeverPrefillsARefusingTarget: an upstream configured
// prefill:false never gets a trailing assistant message (a restart
// instead); one that answers a prefill with a 400 is restarted, and its 400
// never reaches the client.
func TestContinuationNeverPrefillsARefusingTarget(t *testing.T) {
	t.Run("prefill false", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, harnessConfig{prefill: map[string]bool{"B": false}})
		h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
		h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
		o := rescueSurfaces[0].do(t, h)
		if o.text != fullAnswer || o.terminal != "response.completed" {
			t.Fatalf("client got %q ending %s", o.text, o.terminal)
		}
		if role, text := lastMessage(h.ups["B"].Requests()[0]); role == "assistant" {
			t.Fatalf("B (prefill: false) got a trailing assistant message %q", text)
		}
		h.waitMetric(`sluice_rescues_total{kind="restart",outcome="completed",surface="responses_stream"} 1`)
	})
	for _, s := range rescueSurfaces {
		t.Run("400 to a prefill/"+s.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B", RefusePrefill: true}}})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
			o := s.do(t, h)
			if o.text != fullAnswer || (o.terminal != "response.completed" && o.terminal != "done") {
				t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
			}
			reqs := h.ups["B"].Requests()
			if len(reqs) != 2 {
				t.Fatalf("B got %d requests, want the prefill then the restart", len(reqs))
			}
			if role, _ := lastMessage(reqs[0]); role != "assistant" {
				t.Fatalf("B's first request was no prefill")
			}
			if role, _ := lastMessage(reqs[1]); role == "assistant" {
				t.Fatalf("B's second request was a prefill again")
			}
			h.waitMetric(`sluice_rescues_total{kind="prefill",outcome="prefill_refused"`)
			h.waitMetric(`sluice_rescues_total{kind="restart",outcome="completed"`)
			if !strings.Contains(h.logs.String(), "refused the prefill") {
				t.Fatal("the refusal was not logged")
			}
		})
	}
	t.Run("400 and nothing left: the real failure", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B", RefusePrefill: true}}})
		h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
		h.ups["B"].Enqueue(upstreamtest.Status5xx(503)) // the restart fails too
		_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
		last := assertOneTerminal(t, evs)
		if last.typ != "response.failed" || last.code != "stream_incomplete" || !strings.Contains(string(last.data), "closed the stream") {
			t.Fatalf("terminal %s %s: %s", last.typ, last.code, last.data)
		}
		if strings.Contains(string(last.data), "prefill") {
			t.Fatalf("the prefill's 400 hides the real failure: %s", last.data)
		}
	})
}

// functionCallFrames is a Responses stream calling get_weather with args
// in the given argument deltas; n > 0 stops it (cut) after n of them.
func functionCallFrames(id, callID string, deltas []string, n int) []upstreamtest.Frame {
	itemID := "fc_" + id
	var evs []string
	add := func(s string) { evs = append(evs, s) }
	resp := func(status, output string) string {
		return `{"id":"` + id + `","object":"response","created_at":1767225600,"status":"` + status + `","model":"gpt-fake-1","output":` + output + `}`
	}
	add(`{"type":"response.created","response":` + resp("in_progress", "[]") + `}`)
	add(`{"type":"response.in_progress","response":` + resp("in_progress", "[]") + `}`)
	add(`{"type":"response.output_item.added","output_index":0,"item":{"id":"` + itemID + `","type":"function_call","status":"in_progress","arguments":"","call_id":"` + callID + `","name":"get_weather"}}`)
	args := strings.Join(deltas, "")
	for i, d := range deltas {
		if n > 0 && i == n {
			break
		}
		q, _ := json.Marshal(d)
		add(`{"type":"response.function_call_arguments.delta","item_id":"` + itemID + `","output_index":0,"delta":` + string(q) + `}`)
	}
	if n == 0 {
		q, _ := json.Marshal(args)
		item := `{"id":"` + itemID + `","type":"function_call","status":"completed","arguments":` + string(q) + `,"call_id":"` + callID + `","name":"get_weather"}`
		add(`{"type":"response.function_call_arguments.done","item_id":"` + itemID + `","output_index":0,"arguments":` + string(q) + `}`)
		add(`{"type":"response.output_item.done","output_index":0,"item":` + item + `}`)
		add(`{"type":"response.completed","response":` + resp("completed", "["+item+"]") + `}`)
	}
	var fs []upstreamtest.Frame
	for i, e := range evs {
		fs = append(fs, upstreamtest.SSEEvent([]byte(strings.Replace(e, `{"type":"`+gjson.Get(e, "type").Str+`"`,
			`{"type":"`+gjson.Get(e, "type").Str+`","sequence_number":`+fmt.Sprint(i), 1))))
	}
	return fs
}

// TestContinuationToolCallInFlight: a tool call cut mid-arguments is
// continued by a restart only (the request carries tools, so never by a
// text prefill), and the client sees one function call whose arguments are
// whole, under the call id it was shown.
func TestContinuationToolCallInFlight(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: functionCallFrames("resp_p", "call_P", []string{`{"city":`, `"Par`, `is"}`}, 2), End: upstreamtest.EndCut})
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: functionCallFrames("resp_b", "call_B", []string{`{"ci`, `ty":"Paris"}`}, 0)})
	_, evs := h.responsesStream(`{"model":"m","stream":true,"input":"weather in Paris?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.completed" {
		t.Fatalf("terminal %s %s", last.typ, last.data)
	}
	assertContiguous(t, evs)
	var args string
	added := 0
	for _, ev := range evs {
		v := gjson.ParseBytes(ev.data)
		switch ev.typ {
		case "response.output_item.added":
			added++
		case "response.function_call_arguments.delta":
			args += v.Get("delta").Str
			if v.Get("item_id").Str != "fc_resp_p" {
				t.Fatalf("delta for item %s", v.Get("item_id").Str)
			}
		case "response.function_call_arguments.done": // the gateway's own, closing the continued call
			if v.Get("name").Str != "get_weather" || v.Get("arguments").Str != `{"city":"Paris"}` {
				t.Fatalf("arguments done without the call's name (required by the spec) or its arguments: %s", ev.data)
			}
		}
	}
	out := gjson.GetBytes(last.data, "response.output")
	if added != 1 || args != `{"city":"Paris"}` || len(out.Array()) != 1 || out.Get("0.arguments").Str != args ||
		out.Get("0.call_id").Str != "call_P" || gjson.GetBytes(last.data, "response.id").Str != "resp_p" {
		t.Fatalf("client saw %d items, arguments %q, output %s", added, args, out.Raw)
	}
	if role, _ := lastMessage(h.ups["B"].Requests()[0]); role == "assistant" {
		t.Fatal("a tool call in flight was continued by a prefill")
	}
}

// TestContinuationOff: continuation: off keeps the old behaviour, the
// gateway's response.failed stream_incomplete, and calls no other target.
func TestContinuationOff(t *testing.T) {
	h := contHarness(t, gateway.ContinuationOff, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.failed" || last.code != "stream_incomplete" || gjson.GetBytes(last.data, "response.id").Str != "resp_P_1" {
		t.Fatalf("terminal %s %s: %s", last.typ, last.code, last.data)
	}
	if h.ups["B"].RequestCount() != 0 {
		t.Fatal("continuation off called the next target")
	}
}

// TestContinuationFollowUpReachesTheFinisher: the client-visible id of a
// continued response is owned by the target that finished it; a follow-up
// naming it reaches that target with the id the target knows (its own).
func TestContinuationFollowUpReachesTheFinisher(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B", StrictPrevious: true}}, opts: gateway.Options{Store: st}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	id := gjson.GetBytes(last.data, "response.id").Str
	if last.typ != "response.completed" || id != "resp_P_1" {
		t.Fatalf("terminal %s for %s", last.typ, id)
	}
	bID := h.ups["B"].Requests()[0].ResponseID
	var a struct{ Owner string }
	if code := h.getJSON("/admin/continuity/"+id, &a); code != 200 || a.Owner != "B" {
		t.Fatalf("anchor of %s: %d owner %q", id, code, a.Owner)
	}
	_, evs = h.responsesStream(`{"model":"m","input":"and then?","stream":true,"previous_response_id":"` + id + `"}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("follow-up: %s %s", last.typ, last.data)
	}
	if h.ups["P"].RequestCount() != 1 {
		t.Fatal("the follow-up went to P, which no longer owns the response")
	}
	reqs := h.ups["B"].Requests()
	if len(reqs) != 2 || reqs[1].PreviousResponseID != bID {
		t.Fatalf("B's follow-up names %q; want its own %q", reqs[len(reqs)-1].PreviousResponseID, bID)
	}
}

// TestContinuationOnAChatUpstream: a Responses client continued on a
// Chat-only upstream gets the prefill through the translation (a trailing
// assistant message), and a follow-up naming the client-visible id expands
// the whole answer from the conversation the gateway kept.
func TestContinuationOnAChatUpstream(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"B": "chat"},
		opts: gateway.Options{Store: st, Conversations: st}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	o := rescueSurfaces[0].do(t, h)
	if o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s", o.text, o.terminal)
	}
	r := h.ups["B"].Requests()[0]
	if role, text := lastMessage(r); r.Path != "/v1/chat/completions" || role != "assistant" || text != sentPart {
		t.Fatalf("B got %s %s", r.Path, r.Body)
	}
	id := gjson.Get(o.raw[len(o.raw)-1], "response.id").Str
	_, evs := h.responsesStream(`{"model":"m","input":"and then?","stream":true,"previous_response_id":"` + id + `"}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("follow-up: %s %s", last.typ, last.data)
	}
	msgs := gjson.GetBytes(h.ups["B"].Requests()[1].Body, "messages").Array()
	if len(msgs) != 3 || msgs[1].Get("role").Str != "assistant" || msgs[1].Get("content").Str != fullAnswer {
		t.Fatalf("follow-up history %v", msgs)
	}
}

// TestKeepAlive: while the upstream is silent (shorter than the stall
// bound), and while a continuation connects, SSE clients get ": keepalive"
// comment lines and WebSocket clients pings; the stream is unchanged.
func TestKeepAliveWhileTheUpstreamIsSilent(t *testing.T) {
	opts := gateway.Options{KeepAlive: 40 * time.Millisecond}
	countComments := func(t *testing.T, h *harness) (int, string) {
		resp := h.post("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		n, text := 0, ""
		for sc.Scan() {
			line := sc.Text()
			if line == ": keepalive" {
				n++
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				text += gjson.Get(d, "delta").Str
			}
		}
		return n, text
	}
	t.Run("sse, silent upstream", func(t *testing.T) {
		h := contHarnessStall(t, gateway.ContinuationAuto, 2*time.Second, harnessConfig{opts: opts})
		slow := upstreamtest.Answer(fullAnswer, 3)
		slow.Gap = 250 * time.Millisecond
		h.ups["P"].Enqueue(slow)
		n, text := countComments(t, h)
		if n < 3 || text != fullAnswer || h.ups["B"].RequestCount() != 0 {
			t.Fatalf("%d keepalives, text %q, B called %d times", n, text, h.ups["B"].RequestCount())
		}
	})
	t.Run("sse, continuation connecting", func(t *testing.T) {
		h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: opts})
		h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
		late := upstreamtest.Answer(fullAnswer, 3)
		late.Latency = 300 * time.Millisecond
		h.ups["B"].Enqueue(late)
		n, text := countComments(t, h)
		if n < 2 || text != fullAnswer {
			t.Fatalf("%d keepalives, text %q", n, text)
		}
	})
	t.Run("websocket", func(t *testing.T) {
		h := contHarnessStall(t, gateway.ContinuationAuto, 2*time.Second, harnessConfig{opts: opts})
		slow := upstreamtest.Answer(fullAnswer, 3)
		slow.Gap = 250 * time.Millisecond
		h.ups["P"].Enqueue(slow)
		var evs [][]byte
		for _, ev := range h.dialWS(nil).turn(`{"type":"response.create","model":"m","input":"hi"}`) {
			evs = append(evs, ev.data)
		}
		if o := checkResponsesEvents(t, evs); o.text != fullAnswer {
			t.Fatalf("text %q", o.text)
		}
		m := h.metrics()
		if v := metricValue(m, `sluice_keepalives_total{surface="websocket"}`); v < 3 {
			t.Fatalf("%v websocket pings:\n%s", v, grep(m, "keepalives"))
		}
	})
}

// waitMetric waits until /metrics has a line starting with prefix (a
// WebSocket turn can end before its attempt's counters move). The bound only
// ends a broken run: a loaded machine can move them late.
func (h *harness) waitMetric(prefix string) string {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		m := h.metrics()
		if strings.Contains(m, prefix) {
			return m
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("metrics lack %s:\n%s", prefix, grep(m, "sluice_rescues"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue reads one sample's value from a /metrics page (0 if absent).
func metricValue(page, series string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// TestContinuationChatToolCallRestart: a Chat client's tool call cut
// mid-arguments is restarted: the client gets one call (the id it was
// shown), its arguments whole, and one finish.
func TestContinuationChatToolCallRestart(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	call := func(id, callID string, pieces int) upstreamtest.ChatSpec {
		return upstreamtest.ChatSpec{ID: id, Model: "gpt-fake-1", ToolCalls: []upstreamtest.ToolCallSpec{
			{ID: callID, Name: "get_weather", Arguments: `{"city":"Paris","unit":"C"}`, Pieces: pieces}}}
	}
	h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: call("chatcmpl-p", "call_P", 3).Frames()[:3], End: upstreamtest.EndCut})
	h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: call("chatcmpl-b", "call_B", 2).Frames()})
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`)
	var args, finish string
	ids := map[string]bool{}
	for _, ev := range evs[:len(evs)-1] {
		c := gjson.ParseBytes(ev.Data)
		if c.Get("id").Str != "chatcmpl-p" {
			t.Fatalf("chunk id %s: %s", c.Get("id").Str, ev.Data)
		}
		c.Get("choices.0.delta.tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if id := tc.Get("id").Str; id != "" {
				ids[id] = true
			}
			args += tc.Get("function.arguments").Str
			return true
		})
		finish += c.Get("choices.0.finish_reason").Str
	}
	if !evs[len(evs)-1].Done || args != `{"city":"Paris","unit":"C"}` || finish != "tool_calls" || len(ids) != 1 || !ids["call_P"] {
		t.Fatalf("client got args %q, finish %q, call ids %v", args, finish, ids)
	}
	if role, _ := lastMessage(h.ups["B"].Requests()[0]); role == "assistant" {
		t.Fatal("a tool call in flight was continued by a prefill")
	}
}

// TestContinuedTerminalEventsMatchTheSpec: the terminal events of continued
// streams (rebuilt with the client-visible id and the whole output, or the
// gateway's own when the continuation fails) validate against OpenAI's
// OpenAPI spec.
func TestContinuedTerminalEventsMatchTheSpec(t *testing.T) {
	spec := loadSpec(t)
	a := upstreamtest.Answer(fullAnswer, 9)
	refused := upstreamtest.Answer(fullAnswer, 3).FailAfterDeltas(1, "invalid_prompt")
	cases := []struct {
		name, mode string
		chatB      bool
		b          upstreamtest.Script
		terminal   string
	}{
		{"prefill", gateway.ContinuationAuto, false, upstreamtest.Answer(fullAnswer, 3), "response.completed"},
		{"restart", gateway.ContinuationRestart, false, upstreamtest.Answer(fullAnswer, 4), "response.completed"},
		{"restart on a chat upstream", gateway.ContinuationRestart, true, upstreamtest.Answer(fullAnswer, 4), "response.completed"},
		{"prefill on a chat upstream", gateway.ContinuationAuto, true, upstreamtest.Answer(fullAnswer, 2), "response.completed"},
		{"diverged", gateway.ContinuationRestart, false, upstreamtest.Answer("The quick red fox", 2), "response.failed"},
		{"no target left", gateway.ContinuationAuto, false, upstreamtest.Status5xx(503), "response.failed"},
		{"the continuation fails", gateway.ContinuationAuto, false, refused, "response.failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hc := harnessConfig{}
			if tc.chatB {
				hc.protocol = map[string]string{"B": "chat"}
			}
			h := contHarness(t, tc.mode, hc)
			h.ups["P"].Enqueue(a.CutAfterDeltas(3))
			h.ups["B"].Enqueue(tc.b)
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true,"metadata":{"k":"v"},"instructions":"be brief"}`)
			last := assertOneTerminal(t, evs)
			assertContiguous(t, evs)
			if last.typ != tc.terminal {
				t.Fatalf("terminal %s: %s", last.typ, last.data)
			}
			all, c := validateTerminal(t, spec, last.data)
			var v []violation
			for _, e := range all {
				// usage is the upstreams' own, summed field by field (the fake
				// upstream's lacks the newest cache_write_tokens).
				if !strings.HasPrefix(e.path, "$.response.usage.") {
					v = append(v, e)
				}
			}
			if len(v) > 0 {
				t.Fatalf("terminal event breaks the spec:\n%v\n%s", v, last.data)
			}
			if len(c) > 0 && tc.name != "the continuation fails" {
				t.Fatalf("error.code outside the spec's enum: %v\n%s", c, last.data)
			}
			if id := gjson.GetBytes(last.data, "response.id").Str; id != "resp_P_1" {
				t.Fatalf("terminal for %s, the client was shown resp_P_1", id)
			}
		})
	}
}

// contPolicy is the built-in policy, recording the after-content replay
// inputs it is asked, answering them with verdict when set.
type contPolicy struct {
	gateway.BuiltinPolicy
	verdict *hostabi.ReplayVerdict

	mu  sync.Mutex
	ins []hostabi.ReplayInput
}

func (p *contPolicy) Replay(ctx context.Context, in hostabi.ReplayInput) hostabi.ReplayOutput {
	if in.Phase == hostabi.PhaseAfterContent {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.ins = append(p.ins, in)
		if p.verdict != nil {
			return hostabi.ReplayOutput{Verdict: *p.verdict}
		}
	}
	return p.BuiltinPolicy.Replay(ctx, in)
}

func (p *contPolicy) asked() []hostabi.ReplayInput {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]hostabi.ReplayInput(nil), p.ins...)
}

// TestContinuationAsksTheReplayPolicy: the decision is the replay
// policy's, asked with the after-content facts; a policy that says no
// keeps the old terminal event.
func TestContinuationAsksTheReplayPolicy(t *testing.T) {
	pol := &contPolicy{}
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{prefill: map[string]bool{"B": false}, opts: gateway.Options{Policy: pol}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(3, "server_error"))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s", last.typ)
	}
	ins := pol.asked()
	if len(ins) != 1 {
		t.Fatalf("asked %d times", len(ins))
	}
	in := ins[0]
	if in.Phase != hostabi.PhaseAfterContent || in.FailureClass != hostabi.FailureErrorEvent || in.Code != "server_error" ||
		in.BytesSent != int64(len(sentPart)) || in.ItemsSent != 1 || in.ToolCallInFlight || !in.HasTools || in.TargetIndex != 0 ||
		in.TargetCount != 2 || !in.HasNextTarget || in.Continuation != "auto" || in.PrefillAllowed || in.Upstream != "P" ||
		in.Surface != "responses_stream" || !in.ResponseCreatedSeen || !in.ResponseIDAssigned {
		t.Fatalf("replay input %+v", in)
	}

	no := hostabi.ReplayNo
	pol.mu.Lock()
	pol.verdict = &no
	pol.mu.Unlock()
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	_, evs = h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "stream_incomplete" || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("a policy's no: terminal %s %s, B called %d times", last.typ, last.code, h.ups["B"].RequestCount())
	}
	if in := pol.asked()[1]; in.FailureClass != hostabi.FailureCut || in.HasTools {
		t.Fatalf("replay input %+v", in)
	}
}

// TestContinuationOverAnUpstreamWebSocket: a continuation target reached
// over a WebSocket refuses the prefill with an error frame (not a status):
// it is restarted all the same.
func TestContinuationOverAnUpstreamWebSocket(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B", RefusePrefill: true}},
		transport: map[string]string{"B": "websocket"}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 4))
	o := rescueSurfaces[1].do(t, h)
	if o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s", o.text, o.terminal)
	}
	reqs := h.ups["B"].Requests()
	if len(reqs) != 2 || !reqs[0].WebSocket {
		t.Fatalf("B got %d requests", len(reqs))
	}
	if role, _ := lastMessage(reqs[1]); role == "assistant" {
		t.Fatal("the restart after a refused prefill was a prefill")
	}
}
