package gateway

import (
	"bytes"
	"testing"
)

// TestRenumberAnyUpstreamValue: whatever an upstream put in
// sequence_number, or when it left it out, the event carries the gateway's
// number.
func TestRenumberAnyUpstreamValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		seq  int64
		want string
	}{
		{`{"type":"x","sequence_number":"x","d":1}`, 4, `{"type":"x","sequence_number":4,"d":1}`},
		{`{"type":"x","sequence_number":"\u0031"}`, 1, `{"type":"x","sequence_number":1}`},
		{`{"sequence_number":null,"d":1}`, 12, `{"sequence_number":12,"d":1}`},
		{`{"sequence_number":7.0}`, 7, `{"sequence_number":7}`},
		{`{"sequence_number":1e1}`, 10, `{"sequence_number":10}`},
		{`{"sequence_number":-3}`, 3, `{"sequence_number":3}`},
		{`{"sequence_number":{"a":[1]},"d":1}`, 5, `{"sequence_number":5,"d":1}`},
		{`{"type":"x","d":"\"sequence_number\":1"}`, 3, `{"sequence_number":3,"type":"x","d":"\"sequence_number\":1"}`},
		{` { "foo" : 1 }`, 0, ` {"sequence_number":0, "foo" : 1 }`},
		{`{}`, 9, `{"sequence_number":9}`},
		{"{ \n }", 2, "{\"sequence_number\":2 \n }"},
	} {
		cs := &clientStream{seq: tc.seq}
		data := []byte(tc.in)
		f, ok := scanEvent(data)
		if !ok {
			t.Fatalf("not an object: %s", tc.in)
		}
		got := cs.renumber(data, f.seq)
		if string(got) != tc.want {
			t.Errorf("%s → %d: %s, want %s", tc.in, tc.seq, got, tc.want)
		}
		if _, ok := scanEvent(got); !ok {
			t.Errorf("%s → %d: %s is not a JSON object", tc.in, tc.seq, got)
		}
	}
}

// TestRenumberMatchingAllocatesNothing: an upstream that numbers like the
// gateway (the common case), or whose number has as many digits, costs no
// allocation.
func TestRenumberMatchingAllocatesNothing(t *testing.T) {
	event := []byte(`{"type":"response.output_text.delta","sequence_number":1234,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" the"}`)
	for _, seq := range []int64{1234, 4321} {
		cs := &clientStream{seq: seq}
		data := bytes.Clone(event)
		if n := testing.AllocsPerRun(100, func() {
			f, _ := scanEvent(data)
			data = cs.renumber(data, f.seq)
		}); n != 0 {
			t.Errorf("upstream 1234, gateway %d: %v allocations per event", seq, n)
		}
	}
}
