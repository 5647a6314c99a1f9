package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"
)

func testLogs(maxBytes, memory int64) *streamLogs {
	return newStreamLogs(ResumeOptions{MaxBytes: maxBytes, MemoryBytes: memory, Window: time.Minute}, time.Now, hclog.NewNullLogger())
}

// TestStreamLogBounds: the memory budget evicts the logs that ended first
// (never a live one), and a log over its own bound is dropped: a follower
// gets what it can never have as an error event, not a stream that stops.
func TestStreamLogBounds(t *testing.T) {
	event := []byte(strings.Repeat("x", 100))
	h := testLogs(1000, 1700) // ~10 events per log, ~10 logs in all
	for i := range 4 {
		l := h.open(fmt.Sprintf("resp_%d", i), "k", false, nil)
		for seq := range int64(5) {
			l.append(seq, "e", event, seq == 4)
		}
	}
	live := h.open("resp_live", "k", false, nil)
	for seq := range int64(5) {
		live.append(seq, "e", event, false)
	}
	// The budget (about 10 events) is full: the logs that ended first go.
	if h.get("resp_0", "k") != nil || h.get("resp_1", "k") != nil {
		t.Fatal("the logs that ended first were not evicted")
	}
	if h.get("resp_3", "k") == nil || h.get("resp_live", "k") == nil {
		t.Fatal("a recent or live log was evicted")
	}
	if got := h.bytes.Load(); got > 1700 {
		t.Fatalf("%d bytes held, the budget is 1700", got)
	}
	// Past its own bound a log is dropped.
	for seq := int64(5); seq < 12; seq++ {
		live.append(seq, "e", event, false)
	}
	rec := &recordingSink{}
	err := live.follow(context.Background(), -1, rec, time.Second)
	if err != nil || len(rec.types) != 1 || rec.types[0] != "error" || rec.flushes == 0 {
		t.Fatalf("a follower of a dropped log got %q, %d flushes (%v)", rec.types, rec.flushes, err)
	}
	if h.get("resp_x", "k") != nil || h.get("resp_3", "other") != nil {
		t.Fatal("an unknown id or another owner found a log")
	}
}

// recordingSink is a resumeSink that keeps the events' types.
type recordingSink struct {
	types   []string
	flushes int
}

func (r *recordingSink) Event(_ string, data []byte) error {
	r.types = append(r.types, gjson.GetBytes(data, "type").Str)
	return nil
}
func (r *recordingSink) Flush() error                  { r.flushes++; return nil }
func (r *recordingSink) KeepAlive(time.Duration) error { return nil }
