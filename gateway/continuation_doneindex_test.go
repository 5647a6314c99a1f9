package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestRestartCatchUpComparesThePartItsEventsNamed: a restart's message
// whose parts' content_index are not their positions (the second at index
// 2) streams each part's text once, to the part its deltas went to; its
// output_item.done, which lists the parts by position, adds nothing the
// deltas carried, and the client's text and terminal output are the
// restart's answer, each part once.
func TestRestartCatchUpComparesThePartItsEventsNamed(t *testing.T) {
	part := func(text string) string {
		return `{"type":"output_text","annotations":[],"text":` + quoteJSON(text) + `}`
	}
	at := func(item string, ci int) string {
		return `"item_id":"` + item + `","output_index":0,"content_index":` + fmt.Sprint(ci)
	}
	// partEvents: part ci of item added, its deltas, and with done its
	// text's and part's done events.
	partEvents := func(item string, ci int, deltas []string, done bool) []string {
		evs := []string{`{"type":"response.content_part.added",` + at(item, ci) + `,"part":` + part("") + `}`}
		for _, d := range deltas {
			evs = append(evs, `{"type":"response.output_text.delta",`+at(item, ci)+`,"delta":`+quoteJSON(d)+`}`)
		}
		if done {
			text := strings.Join(deltas, "")
			evs = append(evs, `{"type":"response.output_text.done",`+at(item, ci)+`,"text":`+quoteJSON(text)+`}`,
				`{"type":"response.content_part.done",`+at(item, ci)+`,"part":`+part(text)+`}`)
		}
		return evs
	}
	added := func(item string) string {
		return `{"type":"response.output_item.added","output_index":0,"item":{"id":"` + item +
			`","type":"message","status":"in_progress","content":[],"role":"assistant"}}`
	}

	// P: part 0 "Hello." whole, part 1 opened, then cut.
	p := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`, added("msg_p")}
	p = append(p, partEvents("msg_p", 0, []string{"Hel", "lo."}, true)...)
	p = append(p, partEvents("msg_p", 1, nil, false)...)

	// B: part 0 "Hello." again, then its second part at content_index 2.
	b := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`, added("msg_b")}
	b = append(b, partEvents("msg_b", 0, []string{"Hello."}, true)...)
	b = append(b, partEvents("msg_b", 2, []string{"It is", " sunny."}, true)...)
	item := `{"id":"msg_b","type":"message","status":"completed","content":[` + part("Hello.") + `,` + part("It is sunny.") +
		`],"role":"assistant"}`
	b = append(b, `{"type":"response.output_item.done","output_index":0,"item":`+item+`}`,
		`{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "["+item+"]")+`}`)

	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(p...), End: upstreamtest.EndCut})
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})
	s := g6Post(t, h, `{"model":"m","input":"weather?","stream":true}`)
	if s.terminal.typ != "response.completed" || s.text != "Hello.It is sunny." {
		t.Fatalf("client got text %q ending %s: %s", s.text, s.terminal.typ, s.terminal.data)
	}
	deltas := map[int64]string{}
	for _, ev := range s.evs {
		if ev.typ == "response.output_text.delta" {
			deltas[gjson.GetBytes(ev.data, "content_index").Int()] += gjson.GetBytes(ev.data, "delta").Str
		}
	}
	var joined []string
	out := gjson.GetBytes(s.terminal.data, "response.output").Array()
	if len(out) == 1 {
		for _, c := range out[0].Get("content").Array() {
			joined = append(joined, c.Get("text").Str)
		}
	}
	if len(out) != 1 || strings.Join(joined, "") != "Hello.It is sunny." || deltas[1] != "" {
		t.Fatalf("client deltas by part %v; terminal output %s", deltas, gjson.GetBytes(s.terminal.data, "response.output").Raw)
	}
}
