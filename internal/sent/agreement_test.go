package sent_test

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/sent"
)

// TestRefersAfterDone: an event adding to output its readers were told is
// done (the item, the part or its text, the arguments), or re-adding an
// item id or part index they have, does not refer, and is late; the done
// and added events that do not add to done output still refer. A lax
// upstream's text into a part it never announced refers only for the
// item's first part.
func TestRefersAfterDone(t *testing.T) {
	const (
		added     = `{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}`
		partAdded = `{"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}`
		delta     = `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"x"}`
		textDone  = `{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":"x"}`
		partDone  = `{"type":"response.content_part.done","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"x"}}`
		itemDone  = `{"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}`
		annot     = `{"type":"response.output_text.annotation.added","item_id":"msg_1","output_index":0,"content_index":0,"annotation":{"type":"url_citation"}}`
		fcAdded   = `{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","arguments":""}}`
		argsDelta = `{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{}"}`
		argsDone  = `{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":0,"arguments":"{}"}`
	)
	const laxDelta1 = `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":1,"delta":"x"}`
	cases := []struct {
		name  string
		track []string
		event string
		want  bool
		late  bool // a refusal for lateness (Fields.Late), not for naming output never added
	}{
		{"delta into an open part", []string{added, partAdded}, delta, true, false},
		{"delta after its text done", []string{added, partAdded, textDone}, delta, false, true},
		{"annotation after its text done", []string{added, partAdded, textDone}, annot, false, true},
		{"text done after its text done", []string{added, partAdded, textDone}, textDone, true, false},
		{"delta after its part done", []string{added, partAdded, partDone}, delta, false, true},
		{"annotation after its part done", []string{added, partAdded, partDone}, annot, false, true},
		{"part done after its part done", []string{added, partAdded, partDone}, partDone, true, false},
		{"delta after its item done", []string{added, partAdded, itemDone}, delta, false, true},
		{"part added after its item done", []string{added, itemDone}, partAdded, false, true},
		{"part added again", []string{added, partAdded}, partAdded, false, true},
		{"item added again", []string{added}, added, false, true},
		{"item added again after done", []string{added, itemDone}, added, false, true},
		{"item done again", []string{added, itemDone}, itemDone, true, false},
		{"delta into a part never announced", []string{added}, delta, true, false},
		{"delta into a second part never announced, the first not either", []string{added}, laxDelta1, false, false},
		{"arguments into open arguments", []string{fcAdded}, argsDelta, true, false},
		{"arguments after their done", []string{fcAdded, argsDone}, argsDelta, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o sent.Output
			for _, ev := range c.track {
				f := fields(ev)
				if !o.Refers(f) {
					t.Fatalf("tracked event does not refer: %s", ev)
				}
				o.Track(f)
			}
			f := fields(c.event)
			if got := o.Refers(f); got != c.want || f.Late != c.late {
				t.Fatalf("Refers = %v (late %v), want %v (late %v)", got, f.Late, c.want, c.late)
			}
		})
	}
}

// TestImpliedPart: a text delta about an open item shown no part is
// announced by an added event for a part of the delta's kind at its index,
// and Track records the part, so the Response rendered from what was sent
// holds the text; a delta into an announced part, or about a done item,
// needs none.
func TestImpliedPart(t *testing.T) {
	const msg = `{"type":"response.output_item.added","output_index":3,"item":{"id":"msg_1","type":"message","content":[]}}`
	const rs = `{"type":"response.output_item.added","output_index":3,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`
	cases := []struct {
		name, item, delta, event, output string
	}{
		{"output text", msg, `{"type":"response.output_text.delta","item_id":"msg_1","output_index":3,"content_index":0,"delta":"a\"b"}`,
			`{"type":"response.content_part.added","item_id":"msg_1","output_index":3,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}`,
			`[{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"a\"b","annotations":[],"logprobs":[]}],"status":"incomplete"}]`},
		{"refusal without a content_index", msg, `{"type":"response.refusal.delta","item_id":"msg_1","output_index":3,"delta":"no"}`,
			`{"type":"response.content_part.added","item_id":"msg_1","output_index":3,"content_index":0,"part":{"type":"refusal","refusal":""}}`,
			`[{"id":"msg_1","type":"message","content":[{"type":"refusal","refusal":"no"}],"status":"incomplete"}]`},
		{"summary text", rs, `{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":3,"summary_index":0,"delta":"t"}`,
			`{"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":3,"summary_index":0,"part":{"type":"summary_text","text":""}}`,
			`[{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"t"}],"status":"incomplete"}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o sent.Output
			o.Track(fields(c.item))
			if got := string(o.ImpliedPartEvent(fields(c.delta))); got != c.event {
				t.Fatalf("ImpliedPartEvent %s\nwant %s", got, c.event)
			}
			// Relayed without the event (a writer that shows none), the
			// delta's text is recorded all the same.
			f := fields(c.delta)
			if !o.Refers(f) {
				t.Fatal("the delta does not refer")
			}
			o.Track(f)
			if got := gjson.GetBytes(o.AppendOutput(nil), "@this").Raw; got != c.output {
				t.Fatalf("output %s\nwant %s", got, c.output)
			}
			if ev := o.ImpliedPartEvent(fields(c.delta)); ev != nil {
				t.Fatalf("a second part implied: %s", ev)
			}
		})
	}
	var o sent.Output
	o.Track(fields(msg))
	o.Track(fields(`{"type":"response.output_item.done","output_index":3,"item":{"id":"msg_1","type":"message","content":[]}}`))
	if ev := o.ImpliedPartEvent(fields(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":3,"content_index":0,"delta":"x"}`)); ev != nil {
		t.Fatalf("a part implied for a done item: %s", ev)
	}
}
