package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// wsResumeAnswer sends one response.resume frame on a new socket and
// returns the first frame that answers it; none within 10 s fails the test
// (the socket would otherwise wait for timeouts.ws_idle).
func wsResumeAnswer(t *testing.T, h *harness, id string, after int64) gjson.Result {
	t.Helper()
	c := h.dialWS(nil)
	defer c.conn.CloseNow()
	c.send(`{"type":"response.resume","response_id":"` + id + `","starting_after":` + itoa(after) + `}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := c.conn.Read(ctx)
	if err != nil {
		t.Fatalf("resume %s after %d: no frame: %v", id, after, err)
	}
	return gjson.ParseBytes(data)
}

// wantRefusedResume checks frame is the WebSocket error frame of a refused
// resume (the shape an unknown id gets): status 400, invalid_value on
// starting_after, and no sequence_number, which would name an event the
// stream does not have.
func wantRefusedResume(t *testing.T, what string, frame gjson.Result, message string) {
	t.Helper()
	if frame.Get("type").Str != "error" || frame.Get("status").Int() != http.StatusBadRequest ||
		frame.Get("error.code").Str != "invalid_value" || frame.Get("error.type").Str != "invalid_request_error" ||
		!strings.Contains(frame.Get("error.message").Str, message) {
		t.Errorf("%s: got %s, want a 400 invalid_value error frame saying %q", what, frame.Raw, message)
	}
	if frame.Get("sequence_number").Exists() || frame.Get("code").Exists() {
		t.Errorf("%s: got %s, an in-stream error event; want the error frame of a refused request", what, frame.Raw)
	}
}

// TestWebSocketResumeNothingLeftIsAnswered: every response.resume frame
// gets an answer. One whose starting_after is the terminal event (over SSE
// an empty 200) gets an error frame saying no event follows; one past the
// last event, or of a response answered as JSON (over SSE a 400), gets the
// same error frame as the other refused resumes, in memory and from the
// store after a restart.
func TestWebSocketResumeNothingLeftIsAnswered(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	jsonID := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := evs[len(evs)-1]
	id := gjson.GetBytes(last.Data, "response.id").Str
	lastSeq := gjson.GetBytes(last.Data, "sequence_number").Int()
	if !isTerminal(eventType(last)) || id == "" {
		t.Fatalf("the stream ended with %s", last.Data)
	}

	check := func(g *harness, where string) {
		t.Helper()
		// The SSE resume at the terminal event is an empty stream.
		if status, frames, _ := g.resume("sk-client-secret", id, lastSeq); status != http.StatusOK || len(frames) != 0 {
			t.Fatalf("%s: SSE resume at the terminal event: %d with %d events", where, status, len(frames))
		}
		wantRefusedResume(t, where+": at the terminal event", wsResumeAnswer(t, g, id, lastSeq), "no event follows")
		wantRefusedResume(t, where+": past the last event", wsResumeAnswer(t, g, id, lastSeq+1), "past the last event")
		wantRefusedResume(t, where+": far past the last event", wsResumeAnswer(t, g, id, lastSeq+100), "past the last event")
		wantRefusedResume(t, where+": answered as JSON", wsResumeAnswer(t, g, jsonID, -1), "")
		// The one before the terminal event still gets it.
		if got := wsResumeAnswer(t, g, id, lastSeq-1); got.Get("type").Str != eventType(last) || got.Get("sequence_number").Int() != lastSeq {
			t.Errorf("%s: resume before the terminal event got %s, want the terminal event", where, got.Raw)
		}
	}
	check(h, "in memory")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	opts.Resume.Store = openStore(t, dir)
	check(newHarness(t, harnessConfig{opts: opts}), "from the store")
}
