package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

func TestRenumber(t *testing.T) {
	for _, tc := range []struct {
		in   string
		seq  int64
		want string
	}{
		{`{"type":"x","sequence_number":7,"delta":"a"}`, 7, `{"type":"x","sequence_number":7,"delta":"a"}`},
		{`{"type":"x","sequence_number":7,"delta":"a"}`, 6, `{"type":"x","sequence_number":6,"delta":"a"}`},
		{`{"type":"x","sequence_number":10,"delta":"a"}`, 9, `{"type":"x","sequence_number":9,"delta":"a"}`},
		{`{"type":"x","sequence_number": 9 ,"d":1}`, 12, `{"type":"x","sequence_number": 12 ,"d":1}`},
		{`{"delta":"\"sequence_number\":1","sequence_number":1}`, 0, `{"delta":"\"sequence_number\":1","sequence_number":0}`},
		{`{"response":{"sequence_number":3},"sequence_number":3}`, 4, `{"response":{"sequence_number":3},"sequence_number":4}`},
	} {
		cs := &clientStream{seq: tc.seq}
		data := []byte(tc.in)
		f, _ := scanEvent(data)
		if got := cs.renumber(data, f.seq); string(got) != tc.want {
			t.Errorf("%s → %d: %s, want %s", tc.in, tc.seq, got, tc.want)
		}
	}
}

// BenchmarkRenumber: rewriting sequence_number in place (the gateway's
// way) against setting it with sjson and against a re-marshal, on a
// typical text delta.
func BenchmarkRenumber(b *testing.B) {
	event := []byte(`{"type":"response.output_text.delta","sequence_number":1234,"item_id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41","output_index":0,"content_index":0,"delta":" the","logprobs":[]}`)
	b.Run("in-place/same", func(b *testing.B) {
		cs := &clientStream{seq: 1234}
		data := bytes.Clone(event)
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			f, _ := scanEvent(data)
			data = cs.renumber(data, f.seq)
		}
	})
	b.Run("in-place/changed", func(b *testing.B) {
		cs := &clientStream{}
		data := bytes.Clone(event)
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			cs.seq = int64(1000 + i%9000) // four digits, like the event's
			f, _ := scanEvent(data)
			data = cs.renumber(data, f.seq)
		}
	})
	b.Run("in-place/rewrite-only", func(b *testing.B) { // the rewrite alone, without the scan
		cs := &clientStream{}
		data := bytes.Clone(event)
		f, _ := scanEvent(data) // f.seq aliases data: it sees every rewrite
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			cs.seq = int64(2000 + i%8000)
			data = cs.renumber(data, f.seq)
		}
	})
	b.Run("in-place/longer", func(b *testing.B) {
		cs := &clientStream{seq: 123456}
		b.SetBytes(int64(len(event)))
		for i := 0; i < b.N; i++ {
			data := event
			f, _ := scanEvent(data)
			_ = cs.renumber(data, f.seq)
		}
	})
	b.Run("sjson", func(b *testing.B) {
		b.SetBytes(int64(len(event)))
		for i := 0; i < b.N; i++ {
			_, _ = sjson.SetBytes(event, "sequence_number", 1000+i%9000)
		}
	})
	b.Run("remarshal", func(b *testing.B) {
		b.SetBytes(int64(len(event)))
		for i := 0; i < b.N; i++ {
			var m map[string]any
			_ = json.Unmarshal(event, &m)
			m["sequence_number"] = 1000 + i%9000
			_, _ = json.Marshal(m)
		}
	})
	b.Run("scan-only", func(b *testing.B) { // the event scan every relayed event gets anyway
		b.SetBytes(int64(len(event)))
		for i := 0; i < b.N; i++ {
			f, _ := scanEvent(event)
			_ = f.seq.Type == gjson.Number && strconv.Itoa(int(f.seq.Num)) != ""
		}
	})
}

// TestSentItems: what the stream records of the events it sent, and how
// unfinished items close in a terminal Response.
func TestSentItems(t *testing.T) {
	cs := &clientStream{}
	for _, ev := range []string{
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
		`{"type":"response.reasoning_summary_part.added","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`,
		`{"type":"response.reasoning_summary_text.delta","output_index":0,"summary_index":0,"delta":"think"}`,
		`{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.content_part.added","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}`,
		`{"type":"response.output_text.delta","output_index":1,"content_index":0,"delta":"Hi \"there\"\n"}`,
		`{"type":"response.output_text.delta","output_index":1,"content_index":0,"delta":"caf\u00e9"}`,
		`{"type":"response.output_item.added","output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"c","name":"f","arguments":""}}`,
		`{"type":"response.function_call_arguments.delta","output_index":2,"delta":"{\"a\":"}`,
		`{"type":"response.output_item.added","output_index":3,"item":{"id":"msg_2","type":"message","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.output_item.done","output_index":3,"item":{"id":"msg_2","type":"message","role":"assistant","status":"completed","content":[]}}`,
	} {
		f, ok := scanEvent([]byte(ev))
		if !ok {
			t.Fatal(ev)
		}
		cs.track(&f)
	}
	if len(cs.sent.Items) != 4 {
		t.Fatalf("%d items", len(cs.sent.Items))
	}
	if got := cs.sent.Items[1].Text(); got != "Hi \"there\"\ncafé" {
		t.Errorf("text %q", got)
	}
	if got := cs.sent.Items[2].Arguments(); got != `{"a":` {
		t.Errorf("arguments %q", got)
	}
	if cs.sent.Items[1].Status() != "in_progress" || cs.sent.Items[3].Status() != "completed" {
		t.Errorf("statuses %s %s", cs.sent.Items[1].Status(), cs.sent.Items[3].Status())
	}
	var out []byte
	for _, it := range cs.sent.Items {
		out = it.AppendJSON(append(out, '\n'))
	}
	want := `
{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"think"}],"status":"incomplete"}
{"id":"msg_1","type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"Hi \"there\"\ncaf\u00e9","annotations":[],"logprobs":[]}]}
{"id":"fc_1","type":"function_call","status":"incomplete","call_id":"c","name":"f","arguments":"{\"a\":"}
{"id":"msg_2","type":"message","role":"assistant","status":"completed","content":[]}`
	if string(out) != want {
		t.Errorf("items:%s\nwant:%s", out, want)
	}
}
