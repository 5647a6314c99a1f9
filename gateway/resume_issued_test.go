package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestAbandonedResumeIsNumberedPastWhatWasIssued: a resume of a log whose
// gateway stopped mid-stream (a crash, a killed replica) ends with an error
// event numbered past every event that gateway may have sent a client, as
// its record bounds them (IssuedBelow), not right after the last stored
// event: the client that was reading the stream got more than the store
// holds, and a number it holds for a text delta must not come back for an
// error.
func TestAbandonedResumeIsNumberedPastWhatWasIssued(t *testing.T) {
	const key = "sk-client-secret"
	owner := clientkey.Hash(http.Header{"Authorization": {"Bearer " + key}})
	for _, tc := range []struct {
		name   string
		issued int64 // the record's IssuedBelow (0: a writer that does not say)
		after  int64 // the resume's starting_after
		want   int64 // the error event's sequence_number
	}{
		{"from the start", 40, -1, 40},
		{"past the stored events", 40, 20, 40},
		{"just before the bound", 40, 39, 40},
		{"a record without the bound", 0, -1, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const id = "resp_crashed"
			if err := st.PutStreamLog(ctx, store.StreamLog{ResponseID: id, Owner: owner, Status: "in_progress", IssuedBelow: tc.issued,
				ExpiresAt: time.Now().Add(time.Hour), Response: crashedLogRecord(id, false, "Hel")}); err != nil {
				t.Fatal(err)
			}
			if err := st.AppendStreamEvents(ctx, id, 0, crashedLogEvents(id, false, "Hel", "lo")); err != nil {
				t.Fatal(err)
			}
			opts := resumeOpts()
			opts.Resume.Store = st
			h := newHarness(t, harnessConfig{opts: opts})
			status, evs, body := h.resume(key, id, tc.after)
			if status != http.StatusOK || len(evs) == 0 {
				t.Fatalf("resume: %d %s", status, body)
			}
			last := evs[len(evs)-1]
			if gjson.GetBytes(last, "type").Str != "error" || gjson.GetBytes(last, "code").Str != "stream_incomplete" ||
				gjson.GetBytes(last, "sequence_number").Int() != tc.want {
				t.Fatalf("the resume ends with %s, want the stream_incomplete error numbered %d", last, tc.want)
			}
			for i, ev := range evs[:len(evs)-1] {
				if n := gjson.GetBytes(ev, "sequence_number").Int(); n != tc.after+1+int64(i) {
					t.Fatalf("event %d is numbered %d: %s", i, n, ev)
				}
			}
		})
	}
}

// TestDurableLogBoundsWhatItIssued: while a durable stream runs, its record
// in the store bounds every sequence number its client was sent, written
// ahead of the event: whenever the client holds event n (past the first
// issueAhead, which the record carries from its first write), the store
// already says the gateway may have issued numbers up to past n.
func TestDurableLogBoundsWhatItIssued(t *testing.T) {
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	const deltas = 700
	h.ups["A"].Enqueue(upstreamtest.Script{Text: strings.Repeat("x", deltas), Deltas: deltas})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var id string
	n := 0
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		n++
		seq := gjson.GetBytes(ev.Data, "sequence_number").Int()
		if id == "" {
			id = gjson.GetBytes(ev.Data, "response.id").Str
		}
		rec, err := st.GetStreamLog(context.Background(), id)
		switch {
		case errors.Is(err, store.ErrNotFound) && seq < 256:
			continue // the record's first write is under way: it carries the first bound
		case err != nil:
			t.Fatalf("event %d: reading the record: %v", seq, err)
		case rec.IssuedBelow <= seq && !rec.Ended:
			t.Fatalf("the client holds event %d while the record bounds what was issued below %d", seq, rec.IssuedBelow)
		}
	}
	if n < deltas {
		t.Fatalf("the client got %d events, want more than %d", n, deltas)
	}
}
