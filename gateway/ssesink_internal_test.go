package gateway

import (
	"net/http/httptest"
	"testing"
)

// TestSSESinkOfMetered: the client stream reaches the SSE sink under the
// usage metering, so a stream fed by an upstream reader flushes before each
// blocking read (events that arrived together leave in one write) instead of
// once per event.
func TestSSESinkOfMetered(t *testing.T) {
	s := newSSESink(httptest.NewRecorder(), 0)
	if got := sseSinkOf(s); got != s {
		t.Fatal("bare sink not found")
	}
	if got := sseSinkOf(&meterSink{eventSink: s, m: &reqMeta{}}); got != s {
		t.Fatal("metered sink not unwrapped")
	}
	if got := sseSinkOf(&meterSink{eventSink: &meterSink{eventSink: s}}); got != s {
		t.Fatal("twice-wrapped sink not unwrapped")
	}
	if sseSinkOf(nil) != nil {
		t.Fatal("nil sink")
	}
}
