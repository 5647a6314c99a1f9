package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// offsetIndexEvents is a Responses stream whose upstream numbers its output
// items from first: a reasoning item rs_1 at first, the message msg_1
// streaming "The quick" " brown" at first+1. whole: it ends with the
// message done and response.completed (listing both items); else it breaks
// off after the deltas.
func offsetIndexEvents(first int, whole bool) [][]byte {
	resp := func(status string, output []any) map[string]any {
		return map[string]any{"id": "resp_offset", "object": "response", "created_at": upstreamtest.FixedCreatedAt,
			"status": status, "model": "m", "output": output}
	}
	reasoning := map[string]any{"id": "rs_1", "type": "reasoning", "summary": []any{}, "encrypted_content": "ENC"}
	summary := []any{map[string]any{"type": "summary_text", "text": "Thinking hard."}}
	reasoningDone := map[string]any{"id": "rs_1", "type": "reasoning", "summary": summary, "encrypted_content": "ENC"}
	msg := map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []any{}}
	text := map[string]any{"type": "output_text", "text": sentPart, "annotations": []any{}}
	msgDone := map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": []any{text}}
	r, m := first, first+1
	evs := []map[string]any{
		{"type": "response.created", "response": resp("in_progress", []any{})},
		{"type": "response.in_progress", "response": resp("in_progress", []any{})},
		{"type": "response.output_item.added", "output_index": r, "item": reasoning},
		{"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": r, "summary_index": 0,
			"part": map[string]any{"type": "summary_text", "text": ""}},
		{"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": r, "summary_index": 0, "delta": "Thinking hard."},
		{"type": "response.reasoning_summary_text.done", "item_id": "rs_1", "output_index": r, "summary_index": 0, "text": "Thinking hard."},
		{"type": "response.reasoning_summary_part.done", "item_id": "rs_1", "output_index": r, "summary_index": 0, "part": summary[0]},
		{"type": "response.output_item.done", "output_index": r, "item": reasoningDone},
		{"type": "response.output_item.added", "output_index": m, "item": msg},
		{"type": "response.content_part.added", "item_id": "msg_1", "output_index": m, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}},
		{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": m, "content_index": 0, "delta": "The quick"},
		{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": m, "content_index": 0, "delta": " brown"},
	}
	if whole {
		evs = append(evs,
			map[string]any{"type": "response.output_text.done", "item_id": "msg_1", "output_index": m, "content_index": 0, "text": sentPart},
			map[string]any{"type": "response.content_part.done", "item_id": "msg_1", "output_index": m, "content_index": 0, "part": text},
			map[string]any{"type": "response.output_item.done", "output_index": m, "item": msgDone},
			map[string]any{"type": "response.completed", "response": resp("completed", []any{reasoningDone, msgDone})})
	}
	out := make([][]byte, len(evs))
	for i, ev := range evs {
		ev["sequence_number"] = i
		out[i], _ = json.Marshal(ev)
	}
	return out
}

// checkClientIndices checks that every event of a stream that carries an
// output_index names the item the terminal Response lists there: reasoning
// rs_1 at 0, the message msg_1 at 1, whatever the upstream numbered them,
// and that the message holds want. It returns the terminal Response.
func checkClientIndices(t *testing.T, evs [][]byte, want string) gjson.Result {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	final := gjson.GetBytes(evs[len(evs)-1], "response")
	output := final.Get("output").Array()
	if len(output) != 2 || output[0].Get("id").Str != "rs_1" || output[1].Get("id").Str != "msg_1" {
		t.Fatalf("terminal output %s, want rs_1 then msg_1", final.Get("output").Raw)
	}
	if got := output[1].Get("content.0.text").Str; got != want {
		t.Fatalf("terminal message %q, want %q", got, want)
	}
	for _, data := range evs {
		ev := gjson.ParseBytes(data)
		at := ev.Get("output_index")
		if !at.Exists() {
			continue
		}
		id := ev.Get("item_id").Str
		if id == "" {
			id = ev.Get("item.id").Str
		}
		if at.Type != gjson.Number || at.Int() < 0 || at.Int() >= int64(len(output)) || output[at.Int()].Get("id").Str != id {
			t.Fatalf("event %s names output_index %s for item %q; the terminal output is %s", ev.Get("type").Str, at.Raw, id, final.Get("output").Raw)
		}
	}
	return final
}

// TestUpstreamNumberingFromTwoGivesTheClientItsOwn: an upstream numbering
// its items from 2 (a reasoning item at 2, the message at 3) reaches the
// client numbered 0 and 1 on every event, as the terminal Response's output
// lists them (openai-node's stream helper failed with "missing output at
// index 2"), whether it ends the stream itself or is cut and continued on a
// second target; a resume of the stream and GET /v1/responses/{id} agree
// with it (docs/ARCHITECTURE.md §3).
func TestUpstreamNumberingFromTwoGivesTheClientItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		whole bool
		want  string
	}{
		{"completed", true, sentPart},
		{"continued", false, fullAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: resumeOpts()})
			h.ups["P"].Enqueue(scriptOf(offsetIndexEvents(2, tc.whole)))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9))
			_, got := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			if last := assertOneTerminal(t, got); last.typ != "response.completed" {
				t.Fatalf("terminal %s %s", last.typ, last.data)
			}
			evs := make([][]byte, len(got))
			for i, ev := range got {
				evs[i] = ev.data
			}
			final := checkClientIndices(t, evs, tc.want)
			if n := h.ups["B"].RequestCount(); tc.whole == (n != 0) {
				t.Fatalf("B called %d times", n)
			}

			id := final.Get("id").Str
			status, replay, errBody := h.resume("sk-client-secret", id, -1)
			if status != http.StatusOK || len(replay) != len(evs) {
				t.Fatalf("resume from the start: %d, %d events of %d %s", status, len(replay), len(evs), errBody)
			}
			for i := range replay {
				if gjson.GetBytes(replay[i], "output_index").Raw != gjson.GetBytes(evs[i], "output_index").Raw {
					t.Fatalf("resumed event %d %s, the client got %s", i, replay[i], evs[i])
				}
			}
			checkClientIndices(t, replay, tc.want)

			status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
			stored := gjson.ParseBytes(body)
			if status != http.StatusOK || stored.Get("output.#.id").Raw != final.Get("output.#.id").Raw ||
				stored.Get("output.1.content.0.text").Str != tc.want {
				t.Fatalf("GET: %d %s; the stream's output %s", status, body, final.Get("output").Raw)
			}
		})
	}
}

// TestUpstreamNumberingFromTwoWithOpenAIGo: the official Go SDK streaming
// from an upstream that numbers its items from 2 reads every event's
// output_index as the position of its item in the final Response's output
// (what openai-node's stream helper requires of the stream).
func TestUpstreamNumberingFromTwoWithOpenAIGo(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(scriptOf(offsetIndexEvents(2, true)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := h.client()
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-fake-1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	type named struct {
		typ string
		at  int64
		id  string
	}
	var indexed []named
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "response.completed" {
			final = ev.Response
			continue
		}
		if ev.JSON.OutputIndex.Valid() {
			id := ev.ItemID
			if id == "" {
				id = ev.Item.ID
			}
			indexed = append(indexed, named{ev.Type, ev.OutputIndex, id})
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(final.Output) != 2 || final.OutputText() != sentPart || len(indexed) == 0 {
		t.Fatalf("final output %d items, text %q; %d indexed events", len(final.Output), final.OutputText(), len(indexed))
	}
	for _, ev := range indexed {
		if ev.at < 0 || ev.at >= int64(len(final.Output)) || final.Output[ev.at].ID != ev.id {
			t.Fatalf("%s at output_index %d for item %q; final output ids %q, %q", ev.typ, ev.at, ev.id, final.Output[0].ID, final.Output[1].ID)
		}
	}
}
