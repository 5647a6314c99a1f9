package gateway_test

import (
	"context"
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

// checkAbandonedTerminal resumes response id, whose gateway stopped
// mid-stream (its log is in the store, unended), on h, over SSE and the
// WebSocket, and checks that its terminal event has one number: every
// resume from before it gets what the store holds after starting_after and
// then the same error event (stream_incomplete), numbered past clientLast
// (the last event its client got); one from that terminal event gets
// nothing more (an empty SSE stream; on a WebSocket the error frame saying
// no event follows), and one past it the 400 invalid_value of a resume past
// the last event, as for a stream that ended (README "Resuming a
// stream"). It returns the terminal event's number.
func checkAbandonedTerminal(t *testing.T, h *harness, key, id string, stored, clientLast int64) int64 {
	t.Helper()
	terminalOf := func(what string, after int64) int64 {
		t.Helper()
		status, evs, body := h.resume(key, id, after)
		if status != http.StatusOK || len(evs) == 0 {
			t.Fatalf("%s (starting_after=%d): %d %s", what, after, status, body)
		}
		for i, ev := range evs[:len(evs)-1] {
			if n := gjson.GetBytes(ev, "sequence_number").Int(); n != after+1+int64(i) {
				t.Fatalf("%s (starting_after=%d): event %d is numbered %d: %s", what, after, i, n, ev)
			}
		}
		if want := max(stored-after-1, 0); int64(len(evs)-1) != want {
			t.Fatalf("%s (starting_after=%d): %d events before the terminal one, want the %d stored", what, after, len(evs)-1, want)
		}
		last := gjson.ParseBytes(evs[len(evs)-1])
		if last.Get("type").Str != "error" || last.Get("code").Str != "stream_incomplete" {
			t.Fatalf("%s (starting_after=%d): ends with %s, want the stream_incomplete error", what, after, last.Raw)
		}
		return last.Get("sequence_number").Int()
	}
	terminal := terminalOf("the first resume", clientLast)
	if terminal <= clientLast {
		t.Fatalf("the terminal event is numbered %d, a number the client holds (it got up to %d)", terminal, clientLast)
	}
	for _, after := range []int64{-1, 1, clientLast, terminal - 1} {
		if got := terminalOf("a later resume", after); got != terminal {
			t.Errorf("resume from %d: the terminal event is numbered %d; the first resume got %d", after, got, terminal)
		}
	}
	if status, evs, body := h.resume(key, id, terminal); status != http.StatusOK || len(evs) != 0 {
		t.Errorf("SSE resume at the terminal event %d: %d, %d events %q %s; want an empty stream", terminal, status, len(evs), evs, body)
	}
	for _, after := range []int64{terminal + 1, terminal + 5000} {
		status, evs, body := h.resume(key, id, after)
		if status != http.StatusBadRequest || gjson.Get(body, "error.code").Str != "invalid_value" ||
			gjson.Get(body, "error.param").Str != "starting_after" || !strings.Contains(gjson.Get(body, "error.message").Str, "past the last event") {
			t.Errorf("SSE resume from %d, past the terminal event %d: %d %q %s; want a 400 invalid_value", after, terminal, status, evs, body)
		}
	}

	if got := wsResumeAnswer(t, h, id, clientLast); got.Get("type").Str != "error" || got.Get("code").Str != "stream_incomplete" ||
		got.Get("sequence_number").Int() != terminal {
		t.Errorf("WebSocket resume from %d: %s, want the stream_incomplete error numbered %d", clientLast, got.Raw, terminal)
	}
	wantRefusedResume(t, "WebSocket resume at the terminal event", wsResumeAnswer(t, h, id, terminal), "no event follows")
	wantRefusedResume(t, "WebSocket resume past the terminal event", wsResumeAnswer(t, h, id, terminal+1), "past the last event")
	wantRefusedResume(t, "WebSocket resume far past the terminal event", wsResumeAnswer(t, h, id, terminal+5000), "past the last event")
	return terminal
}

// TestAbandonedStreamHasOneTerminalEvent: a stream whose gateway stopped
// mid-stream (here a gateway whose upstream went silent, left running, and
// another gateway on its store, as after a kill -9 and a restart) is
// resumed up to where the store has it and ended with an error event whose
// number is the same for every resume, and a resume from that terminal
// event, or past it, is answered as for any ended stream, over SSE and the
// WebSocket, rather than with another terminal event numbered after
// starting_after.
func TestAbandonedStreamHasOneTerminalEvent(t *testing.T) {
	const key = "sk-client-secret"
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Resume.Store = st
	opts.DrainGrace = 50 * time.Millisecond // the running gateway's stream ends at the test's end
	running := newHarness(t, harnessConfig{opts: opts})
	running.ups["A"].Enqueue(upstreamtest.Answer(resumeText, 12).StallAfterDeltas(3))
	resp := running.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var id string
	clientLast, deltas := int64(-1), 0
	for deltas < 3 {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("the stream broke after event %d: %v", clientLast, err)
		}
		if id == "" {
			id = gjson.GetBytes(ev.Data, "response.id").Str
		}
		clientLast = gjson.GetBytes(ev.Data, "sequence_number").Int()
		if eventType(ev) == "response.output_text.delta" {
			deltas++
		}
	}
	stored := int64(0)
	eventually(t, "the store has the events the client got", func() bool {
		evs, err := st.StreamEvents(context.Background(), id, -1, 1000)
		stored = int64(len(evs))
		return err == nil && stored == clientLast+1
	})

	restarted := newHarness(t, harnessConfig{opts: opts})
	checkAbandonedTerminal(t, restarted, key, id, stored, clientLast)
}

// TestScaleOutAbandonedStreamHasOneTerminalEvent: on a shared store
// (Redis) a stream whose replica stopped writing it for timeouts.idle gets
// one terminal event too, numbered from its record's IssuedBelow, the same
// on every resume and every replica, and a resume from it or past it is
// answered as for an ended stream.
func TestScaleOutAbandonedStreamHasOneTerminalEvent(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	dead := deadReplicaStore(t, p)
	ctx := context.Background()
	const id = "resp_crashed"
	const issued = 256
	owner := clientkey.Hash(http.Header{"Authorization": {"Bearer " + clientKey}})
	if err := dead.PutStreamLog(ctx, store.StreamLog{ResponseID: id, Owner: owner, Status: "in_progress", IssuedBelow: issued,
		ExpiresAt: time.Now().Add(2 * time.Hour), Response: crashedLogRecord(id, false, "Hel")}); err != nil {
		t.Fatal(err)
	}
	evs := crashedLogEvents(id, false, "Hel", "lo")
	if err := dead.AppendStreamEvents(ctx, id, 0, evs); err != nil {
		t.Fatal(err)
	}
	stored := int64(len(evs))
	for _, h := range []*harness{p.r1, p.r2} {
		if got := checkAbandonedTerminal(t, h, clientKey, id, stored, stored+3); got != issued {
			t.Errorf("the terminal event is numbered %d, want the record's IssuedBelow %d", got, issued)
		}
	}
}
