package gateway_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// oddlyNumberedStream is a five-delta answer whose upstream numbers some
// events with a string, null, a non-integer form, an object or not at all,
// with a typeless event and an empty object among them (neither has an
// SSE event name either: both are unparseable, skipped).
func oddlyNumberedStream(t *testing.T) upstreamtest.Script {
	t.Helper()
	evs := upstreamtest.ResponsesEvents(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "one two three four five", 5)
	set := func(i int, raw string) {
		out, err := sjson.SetRawBytes(evs[i], "sequence_number", []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = out
	}
	// 0 created, 1 in_progress, 2 item added, 3 part added, 4–8 deltas.
	set(4, `"x"`)
	out, err := sjson.DeleteBytes(evs[5], "sequence_number")
	if err != nil {
		t.Fatal(err)
	}
	evs[5] = out
	set(6, `null`)
	set(7, `7.0`)
	set(8, `{"n":8}`)
	odd := [][]byte{[]byte(`{"foo":1}`), []byte(`{ }`)}
	evs = append(evs[:9], append(odd, evs[9:]...)...)
	frames := make([]upstreamtest.Frame, len(evs))
	for i, ev := range evs {
		frames[i] = upstreamtest.SSEEvent(ev)
	}
	return upstreamtest.Script{Frames: frames}
}

// checkNumbering: every event the client got carries sequence_number as
// the JSON integer of its position, and the stream completed.
func checkNumbering(t *testing.T, evs []eventLike) {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the stream did not complete: %d events", len(evs))
	}
	for i, ev := range evs {
		var v map[string]json.RawMessage
		if err := json.Unmarshal(ev.data, &v); err != nil {
			t.Fatalf("event %d is not a JSON object: %s", i, ev.data)
		}
		if got := string(v["sequence_number"]); got != strconv.Itoa(i) {
			t.Fatalf("event %d has sequence_number %s: %s", i, got, ev.data)
		}
	}
}

// TestSequenceNumberWhateverTheUpstreamSent: README, "sequence_number runs
// from 0 without a gap": an upstream event numbered with a non-number, a
// non-integer form, or not at all reaches the client with the gateway's
// number, over SSE and over the Responses WebSocket; the events skipped
// leave no gap.
func TestSequenceNumberWhateverTheUpstreamSent(t *testing.T) {
	t.Run("sse", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(oddlyNumberedStream(t))
		_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
		if len(evs) != 13 {
			t.Fatalf("%d events, want the upstream's 15 but the 2 without a type or name", len(evs))
		}
		checkNumbering(t, evs)
	})
	t.Run("websocket", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(oddlyNumberedStream(t))
		evs := h.dialWS(nil).turn(createFrame(""))
		checkNumbering(t, evs)
	})
}
