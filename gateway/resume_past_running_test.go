package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"
)

// TestResumePastTheEndOfARunningStream: a resume whose starting_after is
// past the end of a stream that was still running when it came gets, once
// the stream ends short of it, the 400 invalid_value a resume of an ended
// stream gets (README "Resuming a stream"), over SSE and as a WebSocket
// error frame: not a 200 with an error event numbered after an event that
// never existed.
func TestResumePastTheEndOfARunningStream(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	background := func() string {
		h.ups["A"].Enqueue(slowAnswer()) // 12 deltas, 40 ms apart: it runs while the resume waits
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := gjson.GetBytes(b, "id").Str
		if resp.StatusCode != http.StatusOK || gjson.GetBytes(b, "status").Str != "in_progress" {
			t.Fatalf("background create: %d %s", resp.StatusCode, b)
		}
		return id
	}

	id := background()
	status, evs, body := h.resume("sk-client-secret", id, 500)
	if status != http.StatusBadRequest || gjson.Get(body, "error.code").Str != "invalid_value" || gjson.Get(body, "error.param").Str != "starting_after" {
		t.Fatalf("SSE resume past the end of a running stream: %d %q %s, want 400 invalid_value", status, evs, body)
	}

	id = background()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := h.dialWS(nil).conn
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"`+id+`","starting_after":500}`)); err != nil {
		t.Fatal(err)
	}
	_, data, err := c.Read(ctx)
	if err != nil || gjson.GetBytes(data, "type").Str != "error" || gjson.GetBytes(data, "status").Int() != 400 ||
		gjson.GetBytes(data, "error.code").Str != "invalid_value" || gjson.GetBytes(data, "sequence_number").Exists() {
		t.Fatalf("WebSocket resume past the end of a running stream: %s (%v), want an error frame with status 400", data, err)
	}
}

// TestWebSocketResumeFrameIsCountedAndLogged: a response.resume frame
// answered with its stream is a request like the same resume over HTTP: it
// is counted in sluice_requests_total and its access line says 200.
func TestWebSocketResumeFrameIsCountedAndLogged(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(slowAnswer())
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("background create: %d %s", resp.StatusCode, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := h.dialWS(nil).conn
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"`+id+`","starting_after":2}`)); err != nil {
		t.Fatal(err)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("the resumed stream: %v", err)
		}
		if typ := gjson.GetBytes(data, "type").Str; typ == "response.completed" {
			break
		} else if typ == "error" || typ == "response.failed" {
			t.Fatalf("the resumed stream failed: %s", data)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := h.metrics()
		line := grepLines(h.logs.String(), "method=WS")
		if strings.Contains(m, `sluice_requests_total{code="200",surface="websocket"} 1`) && strings.Contains(line, "status=200") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resume frame is not counted and logged with its 200:\n%s\n%s", grepLines(m, "sluice_requests_total"), line)
		}
	}
}
