package gateway

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestClientOwnOutputIndex: whatever an upstream numbers its items (from 2,
// two alike, across a change of digits, events naming an item by its index
// alone), the client's items are numbered 0, 1, 2… in the order they were
// added, on every event about them; an event naming an index the upstream
// gave no item is refused, even where the client has an item at that index.
func TestClientOwnOutputIndex(t *testing.T) {
	added := func(at, id string) string {
		return `{"type":"response.output_item.added","output_index":` + at + `,"item":{"id":"` + id + `","type":"message","role":"assistant","content":[]}}`
	}
	part := func(at string) string {
		return `{"type":"response.content_part.added","output_index":` + at + `,"content_index":0,"part":{"type":"output_text","text":""}}`
	}
	delta := func(at, text string) string {
		return `{"type":"response.output_text.delta","output_index":` + at + `,"content_index":0,"delta":"` + text + `"}`
	}
	for _, tc := range []struct {
		name    string
		events  []string
		want    []int64 // the output_index of each event the client got, in order
		first   string  // the text filed under the first item
		refused string  // a last event, refused
	}{
		{"from two, by index alone",
			[]string{added("2", "a"), part("2"), delta("2", "x"), added("3", "b"), part("3"), delta("3", "y"), delta("2", "z")},
			[]int64{0, 0, 0, 1, 1, 1, 0}, "xz", delta("0", "w")},
		{"two alike: the later",
			[]string{added("0", "a"), part("0"), added("0", "b"), part("0"), delta("0", "y")},
			[]int64{0, 0, 1, 1, 1}, "", delta("1", "w")},
		{"digits change",
			[]string{added("9", "a"), part("9"), added("10", "b"), part("10"), delta("10", "y"), delta("9", "x")},
			[]int64{0, 0, 1, 1, 1, 0}, "x", delta("1", "w")},
		{"dense already",
			[]string{added("0", "a"), part("0"), delta("0", "x"), added("1", "b")},
			[]int64{0, 0, 0, 1}, "x", delta("2", "w")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &recordSink{}
			s := streamHookServer(t, nil)
			cs := s.newClientStream(context.Background(), recordResponder{sink: sink}, hookReq(), time.Now())
			var raw [][]byte
			for _, ev := range tc.events {
				raw = append(raw, []byte(ev))
			}
			feed(t, cs, raw)
			var got []int64
			for _, ev := range sink.evs {
				got = append(got, gjson.GetBytes(ev, "output_index").Int())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("client got %d events, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("output indices %v, want %v", got, tc.want)
				}
			}
			if text := cs.sent.Items[0].Text(); text != tc.first {
				t.Fatalf("first item's text %q, want %q", text, tc.first)
			}
			data := []byte(tc.refused)
			f, _ := scanEvent(data)
			if err := cs.sendFrom("A", f.Type.Str, data, &f); !errors.Is(err, errNoSuchOutput) {
				t.Fatalf("%s: %v, want errNoSuchOutput", tc.refused, err)
			}
		})
	}
}

// TestClientOwnOutputIndexAllocatesNothing: an event the upstream numbered
// as the client's, or whose index keeps its digits' length, is given the
// client's index without an allocation (the per-event hot path).
func TestClientOwnOutputIndexAllocatesNothing(t *testing.T) {
	for _, at := range []string{"0", "2"} {
		cs := &clientStream{}
		f, _ := scanEvent([]byte(`{"type":"response.output_item.added","output_index":` + at + `,"item":{"id":"msg_1","type":"message"}}`))
		cs.track(&f)
		cs.sent.Items[0].Index, cs.sent.Items[0].Upstream = 0, f.OutputIndex.Int()
		event := []byte(`{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":` + at + `,"content_index":0,"delta":" the"}`)
		data := bytes.Clone(event)
		if n := testing.AllocsPerRun(100, func() {
			copy(data, event)
			f, _ := scanEvent(data)
			out, nf, err := cs.clientNumberedLocked(data, &f)
			if err != nil || nf.OutputIndex.Int() != 0 || gjson.GetBytes(out, "output_index").Raw != "0" {
				t.Fatalf("upstream %s: %s %v", at, out, err)
			}
		}); n != 0 {
			t.Errorf("upstream %s: %v allocations per event", at, n)
		}
	}
}
