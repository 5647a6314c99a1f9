package gateway_test

import (
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream that sends no event: lines (llama.cpp, vLLM) has each event
// named after its type. Events the gateway holds back (the lifecycle
// events, while later ones are read into the same buffer) keep their own
// names: every event's name is its data's type.
func TestHeldEventsKeepTheirNames(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{LifecycleHold: time.Hour}})
	d := func(s string) upstreamtest.Frame { return upstreamtest.SSEData([]byte(s)) }
	h.ups["A"].Enqueue(upstreamtest.Script{Gap: 5 * time.Millisecond, Frames: []upstreamtest.Frame{
		d(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`),
		d(`{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`),
		d(`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}`),
		d(`{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`),
		d(`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}`),
		d(`{"type":"response.completed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"completed","output":[]}}`),
	}})
	_, evs := h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	if len(evs) < 6 {
		t.Fatalf("%d events", len(evs))
	}
	for i, ev := range evs {
		if typ := gjson.GetBytes(ev.Data, "type").Str; ev.Name != typ {
			t.Fatalf("event %d is named %q but is a %q", i, ev.Name, typ)
		}
	}
}
