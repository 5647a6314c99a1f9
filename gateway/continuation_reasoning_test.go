package gateway_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// reasoningEvents is the events of reasoning item id at output_index idx
// with one summary part, its text in the given deltas; encrypted, when not
// empty, is its encrypted_content, in its added form when inAdded, else in
// its done form only (as OpenAI sends it with include
// reasoning.encrypted_content); without done, the item's output_item.done
// is left out.
func reasoningEvents(id string, idx int, deltas []string, encrypted string, inAdded, done bool) []string {
	at := `"item_id":"` + id + `","output_index":` + fmt.Sprint(idx) + `,"summary_index":0`
	text := ""
	for _, d := range deltas {
		text += d
	}
	part := `{"type":"summary_text","text":` + quoteJSON(text) + `}`
	enc := ""
	if encrypted != "" {
		enc = `,"encrypted_content":` + quoteJSON(encrypted)
	}
	added := enc
	if !inAdded {
		added = ""
	}
	evs := []string{
		`{"type":"response.output_item.added","output_index":` + fmt.Sprint(idx) + `,"item":{"id":"` + id + `","type":"reasoning","summary":[]` + added + `}}`,
		`{"type":"response.reasoning_summary_part.added",` + at + `,"part":{"type":"summary_text","text":""}}`,
	}
	for _, d := range deltas {
		evs = append(evs, `{"type":"response.reasoning_summary_text.delta",`+at+`,"delta":`+quoteJSON(d)+`}`)
	}
	evs = append(evs,
		`{"type":"response.reasoning_summary_text.done",`+at+`,"text":`+quoteJSON(text)+`}`,
		`{"type":"response.reasoning_summary_part.done",`+at+`,"part":`+part+`}`)
	if done {
		evs = append(evs, `{"type":"response.output_item.done","output_index":`+fmt.Sprint(idx)+`,"item":{"id":"`+id+`","type":"reasoning","summary":[`+part+`]`+enc+`}}`)
	}
	return evs
}

// callEvents is the events of a get_weather call (id fc_b, call_id call_b)
// at output_index idx, whole.
func callEvents(idx int) []string {
	at := `"item_id":"fc_b","output_index":` + fmt.Sprint(idx)
	item := func(status, args string) string {
		return `{"id":"fc_b","type":"function_call","status":"` + status + `","call_id":"call_b","name":"get_weather","arguments":` + quoteJSON(args) + `}`
	}
	return []string{
		`{"type":"response.output_item.added","output_index":` + fmt.Sprint(idx) + `,"item":` + item("in_progress", "") + `}`,
		`{"type":"response.function_call_arguments.delta",` + at + `,"delta":` + quoteJSON(toolArgs) + `}`,
		`{"type":"response.function_call_arguments.done",` + at + `,"arguments":` + quoteJSON(toolArgs) + `}`,
		`{"type":"response.output_item.done","output_index":` + fmt.Sprint(idx) + `,"item":` + item("completed", toolArgs) + `}`,
	}
}

// TestRestartGivesCutReasoningItsEncryptedContent: a client with store:
// false (Codex) sends its reasoning items back, and an upstream that keeps
// nothing reads one only from its encrypted_content. A reasoning item cut
// in the middle of its summary never got one; a restart whose reasoning
// item at that position carries one (in its done form, or only in its
// added form when it sends no output_item.done) gives it to the client's
// item, which ends completed with the summary the client was shown (the
// restart's own summary, and its reasoning item, do not reach the client),
// in its output_item.done, the terminal Response, GET and a resumed stream
// (README "Continuation").
func TestRestartGivesCutReasoningItsEncryptedContent(t *testing.T) {
	for _, c := range []struct {
		name           string
		inAdded, done  bool
		restartSummary []string
	}{
		{"encrypted_in_done", false, true, []string{"The user wants", " the weather."}},
		{"encrypted_in_added_no_item_done", true, false, []string{"The user wants", " the weather."}},
		{"another_summary", false, true, []string{"Looking up Paris."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
			p := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`}
			p = append(p, reasoningEvents("rs_p", 0, []string{"The user", " wants"}, "", false, true)[:4]...)
			h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(p...), End: upstreamtest.EndCut})
			b := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
			b = append(b, reasoningEvents("rs_b", 0, c.restartSummary, "enc_B", c.inAdded, c.done)...)
			b = append(b, callEvents(1)...)
			b = append(b, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
			h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})

			s := g6Post(t, h, `{"model":"m","input":"weather?","stream":true,"include":["reasoning.encrypted_content"],`+
				`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`)
			if s.terminal.typ != "response.completed" {
				t.Fatalf("client's stream ended %s: %s", s.terminal.typ, s.terminal.data)
			}
			check := func(where string, item gjson.Result) {
				t.Helper()
				if item.Get("id").Str != "rs_p" || item.Get("status").Str != "completed" ||
					item.Get("encrypted_content").Str != "enc_B" || item.Get("summary.#").Int() != 1 ||
					item.Get("summary.0.text").Str != "The user wants" {
					t.Fatalf("%s: the client's reasoning item is %s", where, item.Raw)
				}
			}
			dones := 0
			for _, ev := range s.evs {
				if ev.typ == "response.output_item.added" && gjson.GetBytes(ev.data, "item.type").Str == "reasoning" &&
					gjson.GetBytes(ev.data, "item.id").Str != "rs_p" {
					t.Fatalf("the restart's reasoning reached the client: %s", ev.data)
				}
				if ev.typ == "response.reasoning_summary_text.delta" && gjson.GetBytes(ev.data, "item_id").Str != "rs_p" {
					t.Fatalf("the restart's summary reached the client: %s", ev.data)
				}
				if ev.typ == "response.output_item.done" && gjson.GetBytes(ev.data, "item.id").Str == "rs_p" {
					dones++
					check("output_item.done", gjson.GetBytes(ev.data, "item"))
				}
			}
			if dones != 1 {
				t.Fatalf("the client's reasoning item got %d output_item.done", dones)
			}
			out := gjson.GetBytes(s.terminal.data, "response.output").Array()
			if len(out) != 2 || out[1].Get("call_id").Str != "call_b" {
				t.Fatalf("terminal output %s", gjson.GetBytes(s.terminal.data, "response.output").Raw)
			}
			check("terminal output", out[0])

			id := gjson.GetBytes(s.terminal.data, "response.id").Str
			body := h.waitFor("/v1/responses/"+id, func(body []byte) bool { return gjson.GetBytes(body, "status").Str == "completed" })
			check("GET", gjson.GetBytes(body, "output.0"))
			status, evs, msg := h.resume("sk-client-secret", id, -1)
			if status != http.StatusOK || len(evs) == 0 {
				t.Fatalf("resume: %d %s", status, msg)
			}
			resumedDone := false
			for _, e := range evs {
				if gjson.GetBytes(e, "type").Str == "response.output_item.done" && gjson.GetBytes(e, "item.id").Str == "rs_p" {
					resumedDone = true
					check("resumed output_item.done", gjson.GetBytes(e, "item"))
				}
			}
			if !resumedDone {
				t.Fatal("the resumed stream has no output_item.done for the reasoning item")
			}
			check("resumed terminal output", gjson.GetBytes(evs[len(evs)-1], "response.output.0"))
		})
	}
}

// TestRestartKeepsWholeReasoningItsOwnEncryptedContent: a reasoning item
// the client got whole (its output_item.done, with its encrypted_content)
// before the cut keeps it when the restart redoes the reasoning with one
// of its own: nothing the client was sent changes.
func TestRestartKeepsWholeReasoningItsOwnEncryptedContent(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	p := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`}
	p = append(p, reasoningEvents("rs_p", 0, []string{"The user wants"}, "enc_P", false, true)...)
	p = append(p, g6Message("msg_p", 1, []string{"It is"}, false)...)
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(p...), End: upstreamtest.EndCut})
	b := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
	b = append(b, reasoningEvents("rs_b", 0, []string{"The user wants the weather."}, "enc_B", false, true)...)
	b = append(b, g6Message("msg_b", 1, []string{"It is", " sunny."}, true)...)
	b = append(b, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})

	s := g6Post(t, h, `{"model":"m","input":"weather?","stream":true,"include":["reasoning.encrypted_content"]}`)
	if s.terminal.typ != "response.completed" || s.text != "It is sunny." {
		t.Fatalf("client got %q ending %s: %s", s.text, s.terminal.typ, s.terminal.data)
	}
	dones := 0
	for _, ev := range s.evs {
		if ev.typ == "response.output_item.done" && gjson.GetBytes(ev.data, "item.type").Str == "reasoning" {
			dones++
		}
	}
	out := gjson.GetBytes(s.terminal.data, "response.output").Array()
	if dones != 1 || len(out) != 2 || out[0].Get("id").Str != "rs_p" || out[0].Get("encrypted_content").Str != "enc_P" ||
		out[0].Get("summary.0.text").Str != "The user wants" || out[0].Get("status").Exists() {
		t.Fatalf("%d reasoning done events; terminal output %s", dones, gjson.GetBytes(s.terminal.data, "response.output").Raw)
	}
}
