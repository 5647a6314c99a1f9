package eventring

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestRingKeepsTheLastEvents(t *testing.T) {
	var r Ring
	if r.Events() != nil || (*Ring)(nil).Len() != 0 {
		t.Fatal("empty ring has events")
	}
	for i := range Size + 5 {
		r.Add("", []byte(`{"n":`+strconv.Itoa(i)+`}`), nil, false)
	}
	r.Add("error", []byte("not json"), nil, false)
	r.Add("", nil, []byte(`{"message":"boom"}`), false)
	r.Add("", nil, nil, true)
	r.Add("", []byte(strings.Repeat("x", MaxEventBytes+10)), nil, false)
	evs := r.Events()
	if len(evs) != Size || r.Len() != Size {
		t.Fatalf("%d events", len(evs))
	}
	if got := string(evs[0].Data); got != `{"n":9}` { // Size+5+4 added: the first 9 are gone
		t.Fatalf("oldest %s", got)
	}
	tail := evs[Size-4:]
	b, err := json.Marshal(tail[:3])
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"event":"error","data":"not json"},{"error":{"message":"boom"}},{"done":true}]`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if last := tail[3]; !last.Truncated || len(last.Data) != MaxEventBytes+2 {
		t.Fatalf("long event: truncated=%v, %d bytes", last.Truncated, len(last.Data))
	}
	r.Reset()
	if r.Len() != 0 || r.Events() != nil {
		t.Fatal("Reset kept events")
	}
	if FromContext(context.Background()) != nil || FromContext(NewContext(context.Background(), &r)) != &r {
		t.Fatal("context")
	}
}

// TestRingAddAllocs: once its slots have grown, a ring keeps events without
// allocating.
func TestRingAddAllocs(t *testing.T) {
	var r Ring
	data := []byte(`{"type":"response.output_text.delta","delta":"hello"}`)
	for range Size {
		r.Add("", data, nil, false)
	}
	if n := testing.AllocsPerRun(1000, func() { r.Add("", data, nil, false) }); n != 0 {
		t.Fatalf("%v allocs per Add", n)
	}
}
