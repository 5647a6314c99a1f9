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
		l := h.open(fmt.Sprintf("resp_%d", i), "k", false, false, nil)
		for seq := range int64(5) {
			l.append(seq, "e", event, seq == 4)
		}
	}
	live := h.open("resp_live", "k", false, false, nil)
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

// TestStreamLogChargesWhatItKeeps: input items, JSON answers and terminal
// Responses count against the memory budget like events, and are given
// back when a log goes; what cannot fit is not kept.
func TestStreamLogChargesWhatItKeeps(t *testing.T) {
	h := testLogs(1000, 1700)
	h.answered("resp_json", "k", []byte(`[1,2]`), []byte(strings.Repeat("r", 900)))
	if got := h.bytes.Load(); got != 905 {
		t.Fatalf("a JSON answer and its input: %d bytes charged, want 905", got)
	}
	h.answered("resp_big", "k", nil, []byte(strings.Repeat("r", 5000)))
	if h.get("resp_big", "k") != nil || h.bytes.Load() != 905 {
		t.Fatalf("an answer over resume_max_bytes was kept (%d bytes charged)", h.bytes.Load())
	}
	l := h.open("resp_s", "k", false, false, []byte(`[3]`))
	l.append(0, "response.completed", []byte(`{"type":"response.completed","response":{"id":"resp_s"}}`), true)
	if resp, ended := l.response(); !ended || string(resp) != `{"id":"resp_s"}` {
		t.Fatalf("the terminal Response kept: %s (ended %v)", resp, ended)
	}
	if h.bytes.Load() <= 905 {
		t.Fatal("the stream's log charged nothing")
	}
	h.remove(context.Background(), "resp_json")
	h.remove(context.Background(), "resp_s")
	if got := h.bytes.Load(); got != 0 {
		t.Fatalf("%d bytes still charged after every log went", got)
	}
}

// A log deleted while its stream runs is out of the memory budget: what it
// held is refunded when it is forgotten, and what it gets after (the rest
// of the stream, the terminal event) is never charged.
func TestDeletedLiveLogLeavesTheBudget(t *testing.T) {
	h := testLogs(1<<20, 1<<20)
	l := h.open("resp_live", "k", false, false, []byte(`[{"role":"user","content":"hi"}]`))
	l.append(0, "response.created", []byte(`{"type":"response.created","response":{"id":"resp_live"}}`), false)
	l.append(1, "response.output_text.delta", []byte(`{"type":"response.output_text.delta","delta":"Hel"}`), false)
	h.remove(context.Background(), "resp_live")
	l.append(2, "response.output_text.delta", []byte(`{"type":"response.output_text.delta","delta":"lo"}`), false)
	l.append(3, "response.failed", []byte(`{"type":"response.failed","response":{"id":"resp_live","status":"cancelled","output":[]}}`), true)
	if n := h.bytes.Load(); n != 0 {
		t.Fatalf("%d bytes still charged for a deleted log", n)
	}
	// A follower still gets the stream through its end.
	l.mu.Lock()
	n, ended := len(l.events), l.ended
	l.mu.Unlock()
	if n != 4 || !ended {
		t.Fatalf("the deleted log holds %d events, ended %v", n, ended)
	}
}
