package gateway

import (
	"bytes"
	"testing"
)

// TestGaps9bLogArenaAllocatesPerChunkNotPerEvent: a log copies its events
// into shared chunks, so a stream of many small events costs a handful of
// allocations (and chunks), not one per event; every kept event still
// reads back as it was. The events' content alone cannot show this, so it
// is measured here.
func TestGaps9bLogArenaAllocatesPerChunkNotPerEvent(t *testing.T) {
	const events = 200 // 20 KB of 100-byte events: chunks of 1, 2, 4, 8 and 16 KiB
	data := make([][]byte, events)
	for i := range data {
		data[i] = bytes.Repeat([]byte{byte('a' + i%26)}, 100)
	}
	var l *streamLog
	kept := make([][]byte, events)
	allocs := testing.AllocsPerRun(20, func() {
		l = &streamLog{}
		for i, d := range data {
			kept[i] = l.keep(d)
		}
	})
	// One for the log itself and one per chunk, with room to spare.
	if allocs > 12 {
		t.Fatalf("keeping %d small events took %v allocations; want one per chunk", events, allocs)
	}
	for i, k := range kept {
		if !bytes.Equal(k, data[i]) || cap(k) != len(k) {
			t.Fatalf("event %d kept as %q (cap %d)", i, k, cap(k))
		}
	}
}
