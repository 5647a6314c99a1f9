package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestResumeOvergrownLogAtItsEnd: a stream whose log outgrew
// streams.resume_max_bytes cannot be resumed from before its end
// (stream_incomplete), but a resume at its terminal event or past it is
// answered as for any ended stream (README "Resuming a stream"): over SSE an
// empty stream and a 400 invalid_value, on a WebSocket the error frames of a
// refused resume — never stream_incomplete for a stream that completed.
func TestResumeOvergrownLogAtItsEnd(t *testing.T) {
	opts := resumeOpts()
	opts.Resume.MaxBytes = 1500
	h := newHarness(t, harnessConfig{opts: opts})
	h.ups["A"].Enqueue(upstreamtest.Answer(resumeText, 12))
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := evs[len(evs)-1]
	id := gjson.GetBytes(last.Data, "response.id").Str
	lastSeq := gjson.GetBytes(last.Data, "sequence_number").Int()
	if eventType(last) != "response.completed" || id == "" {
		t.Fatalf("the stream ended with %s", last.Data)
	}

	// From before the end: the events are gone.
	status, frames, body := h.resume("sk-client-secret", id, 2)
	if status != http.StatusOK || len(frames) != 1 || gjson.GetBytes(frames[0], "code").Str != "stream_incomplete" {
		t.Fatalf("SSE resume before the end: %d %q %s; want one stream_incomplete error event (did the log outgrow its bound?)", status, frames, body)
	}
	if got := wsResumeAnswer(t, h, id, 2); got.Get("code").Str != "stream_incomplete" {
		t.Errorf("WebSocket resume before the end: %s, want a stream_incomplete error event", got.Raw)
	}

	// At the terminal event: nothing is left, and nothing is missing.
	if status, frames, body := h.resume("sk-client-secret", id, lastSeq); status != http.StatusOK || len(frames) != 0 {
		t.Errorf("SSE resume at the terminal event: %d %q %s, want an empty stream", status, frames, body)
	}
	wantRefusedResume(t, "WebSocket at the terminal event", wsResumeAnswer(t, h, id, lastSeq), "no event follows")

	// Past the last event.
	for _, after := range []int64{lastSeq + 1, lastSeq + 100} {
		if status, frames, body := h.resume("sk-client-secret", id, after); status != http.StatusBadRequest ||
			gjson.Get(body, "error.code").Str != "invalid_value" || gjson.Get(body, "error.param").Str != "starting_after" {
			t.Errorf("SSE resume after %d (the last is %d): %d %q %s, want 400 invalid_value", after, lastSeq, status, frames, body)
		}
		wantRefusedResume(t, "WebSocket past the last event", wsResumeAnswer(t, h, id, after), "past the last event")
	}

	if _, got := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret"); gjson.GetBytes(got, "status").Str != "completed" {
		t.Errorf("GET: %s, want completed", got)
	}
}
