package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestResumeWebSocketStoredNothingToSend: after a restart with
// streams.durable, a response.resume frame of a log only the store holds,
// with starting_after past its last event or of a response answered as
// JSON, gets the error frame the same resume got before the restart (the
// log in memory): the WebSocket error frame of a refused request (status
// 400, no sequence_number), invalid_value naming the parameter, with the
// code, message and param of the SSE resume's 400 — not a
// retryable-looking stream_incomplete.
func TestResumeWebSocketStoredNothingToSend(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	jsonID := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := evs[len(evs)-1]
	streamID := gjson.GetBytes(last.Data, "response.id").Str
	lastSeq := gjson.GetBytes(last.Data, "sequence_number").Int()
	if !isTerminal(eventType(last)) || streamID == "" {
		t.Fatalf("the stream ended with %s", last.Data)
	}

	cases := []struct {
		name, id string
		after    int64
		frame    string
	}{
		{"past the last event", streamID, lastSeq + 1,
			`{"type":"response.resume","response_id":"` + streamID + `","starting_after":` + itoa(lastSeq+1) + `}`},
		{"answered as JSON", jsonID, -1, `{"type":"response.resume","response_id":"` + jsonID + `"}`},
	}
	resumeFrame := func(g *harness, frame string) []byte {
		t.Helper()
		c := g.dialWS(nil)
		defer c.conn.CloseNow() // an open socket would hold the restart's shutdown for its drain
		c.send(frame)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, data, err := c.conn.Read(ctx)
		if err != nil {
			t.Fatalf("%s: no frame: %v", frame, err)
		}
		return data
	}
	inMemory := make([][]byte, len(cases))
	for k, c := range cases {
		inMemory[k] = resumeFrame(h, c.frame)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	opts.Resume.Store = openStore(t, dir)
	h2 := newHarness(t, harnessConfig{opts: opts})

	for k, c := range cases {
		status, _, body := h2.resume("sk-client-secret", c.id, c.after)
		want := gjson.Get(body, "error")
		if status != http.StatusBadRequest || want.Get("code").Str != "invalid_value" {
			t.Fatalf("%s: the SSE resume after a restart: %d %s", c.name, status, body)
		}
		got := gjson.ParseBytes(resumeFrame(h2, c.frame))
		if got.Get("type").Str != "error" || got.Get("status").Int() != http.StatusBadRequest || got.Get("error.code").Str != want.Get("code").Str ||
			got.Get("error.message").Str != want.Get("message").Str || got.Get("error.param").Str != want.Get("param").Str ||
			got.Get("sequence_number").Exists() {
			t.Errorf("%s: the WebSocket resume after a restart got %s, want the SSE resume's %s", c.name, got.Raw, want.Raw)
		}
		if got.Raw != string(inMemory[k]) {
			t.Errorf("%s: the WebSocket resume after a restart got %s, before it %s", c.name, got.Raw, inMemory[k])
		}
	}
}
