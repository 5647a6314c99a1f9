package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A Responses upstream that ignores a stream request's stream:true and
// answers with one whole Response (200, application/json) serves the
// client the event stream a stream of that Response carries (README,
// "Chat-Completions-only upstreams"), as a Chat upstream's whole
// chat.completion does: each event valid against the spec, numbered from 0
// without a gap, usage kept, ended by the Response's status; the
// Response's id owns its follow-ups, and GET /v1/responses/{id} (whole and
// as a resumed stream) shows what the client was streamed.

// jsonForStream is a script answering a stream request with body as JSON.
func jsonForStream(body string) upstreamtest.Script {
	return upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
		Frames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(body))}}
}

// wholeResponse is a Response the fake upstream sends as JSON: its own
// id (resp_<upstream>_<n>, so the owner shows), the given status, output
// and incomplete_details, usage 8/2/10.
func wholeResponse(status, output, incomplete string) string {
	return `{"id":"` + upstreamtest.PlaceholderID + `","object":"response","created_at":1700000000,"status":"` + status + `",` +
		`"completed_at":null,"error":null,"incomplete_details":` + incomplete + `,"instructions":null,"max_output_tokens":null,` +
		`"model":"gpt-fake-1","output":` + output + `,"parallel_tool_calls":true,"previous_response_id":null,` +
		`"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1,"text":{"format":{"type":"text"}},` +
		`"tool_choice":"auto","tools":[],"top_p":1,"truncation":"disabled",` +
		`"usage":{"input_tokens":8,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":2,` +
		`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":10},"metadata":{}}`
}

const (
	wholeMessage = `{"id":"msg_w1","type":"message","status":"completed","role":"assistant","content":[` +
		`{"type":"output_text","text":"Whole \"answer\"","annotations":[],"logprobs":[]}]}`
	wholeCall = `{"id":"fc_w1","type":"function_call","status":"completed","call_id":"call_w1","name":"get_weather",` +
		`"arguments":"{\"city\":\"Paris\"}"}`
	wholeReasoning = `{"id":"rs_w1","type":"reasoning","summary":[{"type":"summary_text","text":"Thinking it over"}]}`
)

func TestResponsesStreamAnsweredWithWholeResponse(t *testing.T) {
	spec := loadSpec(t)
	v := &validator{spec: spec, cache: map[string]*schema{}}
	cases := []struct {
		name, status, output, incomplete string
		terminal                         string
		types                            []string // the events between response.in_progress and the terminal one
		text, args                       string
	}{
		{name: "text", status: "completed", output: "[" + wholeMessage + "]", incomplete: "null", terminal: "response.completed",
			types: []string{"response.output_item.added", "response.content_part.added", "response.output_text.delta",
				"response.output_text.done", "response.content_part.done", "response.output_item.done"},
			text: `Whole "answer"`},
		{name: "reasoning, text and function call", status: "completed", output: "[" + wholeReasoning + "," + wholeMessage + "," + wholeCall + "]",
			incomplete: "null", terminal: "response.completed",
			types: []string{"response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
				"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
				"response.output_item.added", "response.content_part.added", "response.output_text.delta",
				"response.output_text.done", "response.content_part.done", "response.output_item.done",
				"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
				"response.output_item.done"},
			text: `Whole "answer"`, args: `{"city":"Paris"}`},
		{name: "incomplete", status: "incomplete", output: "[" + strings.Replace(wholeMessage, `"completed"`, `"incomplete"`, 1) + "]",
			incomplete: `{"reason":"max_output_tokens"}`, terminal: "response.incomplete",
			types: []string{"response.output_item.added", "response.content_part.added", "response.output_text.delta",
				"response.output_text.done", "response.content_part.done", "response.output_item.done"},
			text: `Whole "answer"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := continuityHarness(t, openStore(t, t.TempDir()), gateway.Options{})
			whole := jsonForStream(wholeResponse(tc.status, tc.output, tc.incomplete))
			h.ups["A"].Enqueue(whole)
			h.ups["B"].Enqueue(whole)
			resp, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			last := assertOneTerminal(t, evs)
			var got []string
			for i, e := range evs {
				got = append(got, e.typ)
				if n := gjson.GetBytes(e.data, "sequence_number"); n.Type != gjson.Number || n.Int() != int64(i) {
					t.Fatalf("event %d (%s) has sequence_number %s", i, e.typ, n.Raw)
				}
				checkStreamedEvent(t, v, e)
			}
			want := append(append([]string{"response.created", "response.in_progress"}, tc.types...), tc.terminal)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("events\n%v\nwant\n%v", got, want)
			}
			if viol, codes := validateTerminal(t, spec, last.data); len(viol)+len(codes) > 0 {
				t.Fatalf("terminal event breaks the spec: %v %v\n%s", viol, codes, last.data)
			}
			final := gjson.GetBytes(last.data, "response")
			id := final.Get("id").Str
			if owner(id) == "" || final.Get("usage.total_tokens").Int() != 10 || final.Get("status").Str != tc.status {
				t.Fatalf("terminal response: id %q, usage %s, status %s", id, final.Get("usage").Raw, final.Get("status").Str)
			}
			if tc.text != "" && deltaText(evs) != tc.text {
				t.Fatalf("streamed text %q, want %q", deltaText(evs), tc.text)
			}
			if tc.args != "" {
				if a := wholeStreamField(evs, "response.function_call_arguments.done", "arguments"); a != tc.args {
					t.Fatalf("arguments %q, want %q", a, tc.args)
				}
				if n := wholeStreamField(evs, "response.function_call_arguments.done", "name"); n != "get_weather" {
					t.Fatalf("arguments done names %q", n)
				}
			}

			// GET /v1/responses/{id} is the Response the stream ended with,
			// and its resumed stream the events the client got.
			resp, body := callRaw(t, h, http.MethodGet, "/v1/responses/"+id)
			if resp.StatusCode != http.StatusOK || gjson.GetBytes(body, "status").Str != tc.status ||
				gjson.GetBytes(body, "output").Raw != final.Get("output").Raw {
				t.Fatalf("GET: %d %s\nwant the streamed %s", resp.StatusCode, body, final.Raw)
			}
			resp, body = callRaw(t, h, http.MethodGet, "/v1/responses/"+id+"?stream=true")
			if resp.StatusCode != http.StatusOK || bytes.Count(body, []byte("data: ")) != len(evs) {
				t.Fatalf("resumed stream: %d, %d events, want %d:\n%s", resp.StatusCode, bytes.Count(body, []byte("data: ")), len(evs), body)
			}

			// The id owns its follow-ups: the other upstream (strict) would
			// reject it.
			own := owner(id)
			h.ups[own].ClearRequests()
			h.ups[other(own)].ClearRequests()
			evs2, _ := h.turn(id, nil)
			if l := assertOneTerminal(t, evs2); l.typ != "response.completed" || !strings.Contains(string(l.data), "Hello from "+own) {
				t.Fatalf("follow-up: %s %s: %s", l.typ, l.code, l.data)
			}
			if h.ups[own].RequestCount() != 1 || h.ups[other(own)].RequestCount() != 0 {
				t.Fatalf("follow-up reached %s %d times, %s %d times", own, h.ups[own].RequestCount(), other(own), h.ups[other(own)].RequestCount())
			}
		})
	}
}

// A JSON body that is no Response (here a chat.completion, or a Response
// in a status no stream ends with) is still an unusable answer: the next
// upstream serves the stream.
func TestResponsesStreamAnsweredWithNonResponseJSONFailsOver(t *testing.T) {
	for _, body := range []string{
		string(upstreamtest.ChatCompletionJSON("chatcmpl-1", "gpt-fake-1", "not a Response")),
		wholeResponse("queued", "[]", "null"),
		`{"object":"response","id":"resp_x","status":"completed","output":{}}`,
		`{"object":"response","id":"resp_x","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":7}]}]}`,
	} {
		h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
		h.ups["A"].Enqueue(jsonForStream(body), jsonForStream(body))
		release := h.pool.Get("B").Acquire()
		_, evs := h.responsesStream(respBody)
		release()
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" || !strings.Contains(string(last.data), "Hello from B") {
			t.Fatalf("%s\nterminal %s: %s, want B's answer", body, last.typ, last.data)
		}
		if h.ups["A"].RequestCount() == 0 {
			t.Fatal("A was never tried")
		}
	}
}

// checkStreamedEvent checks an event against what the spec requires of
// its type: the item of an output_item event is a valid OutputItem, and
// the item events name their item, index and text.
func checkStreamedEvent(t *testing.T, v *validator, e eventLike) {
	t.Helper()
	ev := gjson.ParseBytes(e.data)
	required := map[string][]string{
		"response.created":                       {"response"},
		"response.in_progress":                   {"response"},
		"response.output_item.added":             {"output_index", "item"},
		"response.output_item.done":              {"output_index", "item"},
		"response.content_part.added":            {"item_id", "output_index", "content_index", "part"},
		"response.content_part.done":             {"item_id", "output_index", "content_index", "part"},
		"response.output_text.delta":             {"item_id", "output_index", "content_index", "delta", "logprobs"},
		"response.output_text.done":              {"item_id", "output_index", "content_index", "text", "logprobs"},
		"response.function_call_arguments.delta": {"item_id", "output_index", "delta"},
		"response.function_call_arguments.done":  {"item_id", "output_index", "arguments", "name"},
		"response.reasoning_summary_part.added":  {"item_id", "output_index", "summary_index", "part"},
		"response.reasoning_summary_part.done":   {"item_id", "output_index", "summary_index", "part"},
		"response.reasoning_summary_text.delta":  {"item_id", "output_index", "summary_index", "delta"},
		"response.reasoning_summary_text.done":   {"item_id", "output_index", "summary_index", "text"},
		"response.completed":                     {"response"},
		"response.incomplete":                    {"response"},
	}[e.typ]
	if required == nil {
		t.Fatalf("unexpected event %s", e.data)
	}
	for _, k := range required {
		if !ev.Get(k).Exists() {
			t.Fatalf("%s lacks %s: %s", e.typ, k, e.data)
		}
	}
	if item := ev.Get("item"); item.Exists() {
		dec := json.NewDecoder(strings.NewReader(item.Raw))
		dec.UseNumber()
		var x any
		if err := dec.Decode(&x); err != nil {
			t.Fatal(err)
		}
		if viol := v.validate(&schema{Ref: "#/OutputItem"}, x, "$.item"); len(viol) > 0 {
			t.Fatalf("%s item breaks the spec: %v\n%s", e.typ, viol, e.data)
		}
	}
	if r := ev.Get("response"); r.Exists() && !strings.HasSuffix(e.typ, "completed") && !strings.HasSuffix(e.typ, "incomplete") &&
		(r.Get("status").Str != "in_progress" || r.Get("output").Raw != "[]") {
		t.Fatalf("%s response is not the opening one: %s", e.typ, e.data)
	}
}

// wholeStreamField is member key of the first event of type typ.
func wholeStreamField(evs []eventLike, typ, key string) string {
	for _, e := range evs {
		if e.typ == typ {
			return gjson.GetBytes(e.data, key).Str
		}
	}
	return ""
}

// A WebSocket client's turn, sent to the upstream over HTTP, gets the
// whole Response as the same events.
func TestWebSocketTurnAnsweredWithWholeResponse(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(jsonForStream(wholeResponse("completed", "["+wholeMessage+","+wholeCall+"]", "null")))
	evs := h.dialWS(nil).turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi"}`)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.completed" || deltaText(evs) != `Whole "answer"` ||
		wholeStreamField(evs, "response.function_call_arguments.done", "arguments") != `{"city":"Paris"}` {
		t.Fatalf("terminal %s, text %q: %s", last.typ, deltaText(evs), last.data)
	}
	for i, e := range evs {
		if n := gjson.GetBytes(e.data, "sequence_number"); n.Int() != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %s", i, e.typ, n.Raw)
		}
	}
}
