package upstreamtest

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func wsSend(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func TestWebSocketTwoTurns(t *testing.T) {
	s := NewServer(Options{Name: "W", StrictPrevious: true, APIKey: "k"})
	defer s.Close()
	hdr := http.Header{"Authorization": {"Bearer k"}, "Openai-Beta": {"responses_websockets=2026-02-06"}}
	c := dialWS(t, s, hdr)

	wsSend(t, c, `{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":"hi"}]}`)
	evs, err := readWS(t, c)
	if err != nil {
		t.Fatal(err)
	}
	checkResponsesStream(t, evs, "resp_W_1", "gpt-5", "Hello from W")

	wsSend(t, c, `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_W_1","input":[]}`)
	evs, err = readWS(t, c)
	if err != nil {
		t.Fatal(err)
	}
	checkResponsesStream(t, evs, "resp_W_2", "gpt-5", "Hello from W")

	// Unknown previous: an error frame with status, and the socket lives on.
	wsSend(t, c, `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_nope"}`)
	evs, _ = readWS(t, c)
	if len(evs) != 1 || num(evs[0]["status"]) != 400 || path(evs[0], "error", "code") != "previous_response_not_found" ||
		path(evs[0], "error", "param") != "previous_response_id" {
		t.Errorf("frames = %v", evs)
	}
	// Not a response.create.
	wsSend(t, c, `{"type":"response.cancel"}`)
	evs, _ = readWS(t, c)
	if len(evs) != 1 || evs[0]["type"] != "error" || num(evs[0]["status"]) != 400 {
		t.Errorf("frames = %v", evs)
	}

	reqs := s.Requests()
	if len(reqs) != 4 || s.WebSocketConnects() != 1 {
		t.Fatalf("requests %d connects %d", len(reqs), s.WebSocketConnects())
	}
	r := reqs[1]
	if !r.WebSocket || r.Path != "/v1/responses" || r.Method != "GET" || r.PreviousResponseID != "resp_W_1" || r.ResponseID != "resp_W_2" ||
		r.Header.Get("Openai-Beta") != "responses_websockets=2026-02-06" || !strings.Contains(string(r.Body), `"input":[]`) {
		t.Errorf("request = %+v", r)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestWebSocketFaults(t *testing.T) {
	s := NewServer(Options{Name: "F"})
	defer s.Close()
	c := dialWS(t, s, nil)
	create := `{"type":"response.create","model":"m"}`

	// Status → error frame with status and headers; the socket stays open.
	s.Enqueue(Status429(2*time.Second), QuotaEvent(ShapeFailed), Garbage(), WithEmptyData(), ErrorField(nil, 1))
	wsSend(t, c, create)
	evs, err := readWS(t, c)
	if err != nil || len(evs) != 1 {
		t.Fatalf("%v %v", evs, err)
	}
	e := evs[0]
	if e["type"] != "error" || num(e["status"]) != 429 || path(e, "error", "code") != "rate_limit_exceeded" ||
		path(e, "headers", "retry-after") != "2" || !strings.Contains(str(path(e, "error", "message")), "for m ") {
		t.Errorf("error frame = %v", e)
	}

	wsSend(t, c, create)
	evs, _ = readWS(t, c)
	jsonEqualV(t, evs[0], `{"type":"response.failed","response":{"id":"resp_F_2","status":"failed","error":{"code":"usage_limit_reached",`+
		`"message":"The usage limit has been reached for this account. Try again later."}}}`)

	// Garbage arrives as a non-JSON text message.
	wsSend(t, c, create)
	var msgs []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, string(b))
		if strings.Contains(string(b), `"response.completed"`) {
			break
		}
	}
	if len(msgs) != 12 || msgs[5] != "not json{{" {
		t.Errorf("garbage messages = %q", msgs)
	}

	// Empty data lines are not sent on a WebSocket.
	wsSend(t, c, create)
	evs, err = readWS(t, c)
	if err != nil || len(evs) != 11 {
		t.Errorf("empty-data stream: %d frames, %v", len(evs), err)
	}

	// An "error:" field becomes an error frame.
	wsSend(t, c, create)
	evs, _ = readWS(t, c)
	if len(evs) != 2 || evs[1]["type"] != "error" || num(evs[1]["status"]) != 500 || path(evs[1], "error", "message") != "Internal server error" {
		t.Errorf("error field frames = %v", evs)
	}

	// Cut: the socket dies without a close frame.
	s.Enqueue(CutAfter(2))
	wsSend(t, c, create)
	evs, err = readWS(t, c)
	if len(evs) != 2 || err == nil || websocket.CloseStatus(err) != -1 {
		t.Errorf("cut: %d frames, err %v (close status %d)", len(evs), err, websocket.CloseStatus(err))
	}
	if s.WebSocketConnects() != 1 {
		t.Errorf("connects = %d", s.WebSocketConnects())
	}
}

func jsonEqualV(t *testing.T, got map[string]any, want string) {
	t.Helper()
	b, _ := json.Marshal(got)
	jsonEqual(t, b, want)
}

func TestWebSocketDisabled(t *testing.T) {
	s := NewServer(Options{DisableWebSocket: true})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, s.WebSocketURL(), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("err %v resp %v", err, resp)
	}
	if s.WebSocketRefused() != 1 || s.WebSocketConnects() != 0 || s.RequestCount() != 0 {
		t.Errorf("refused %d connects %d", s.WebSocketRefused(), s.WebSocketConnects())
	}
	// A plain GET (no upgrade) is a 400.
	resp2, _, _ := newClient(t).do(ctx, http.MethodGet, s.URL+"/responses", "")
	if resp2.StatusCode != 400 {
		t.Errorf("plain GET: %d", resp2.StatusCode)
	}
}

func TestWebSocketUnauthorized(t *testing.T) {
	s := NewServer(Options{APIKey: "k"})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, s.WebSocketURL(), nil)
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("err %v resp %v", err, resp)
	}
}

func TestWebSocketHangAndClose(t *testing.T) {
	base := runtime.NumGoroutine()
	s := NewServer(Options{})
	c := dialWS(t, s, nil)
	s.Enqueue(HangAfter(1))
	wsSend(t, c, `{"type":"response.create","model":"m"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, _, err := c.Read(short); err == nil {
		t.Fatal("a hanging socket sent a second frame")
	}
	// The read timeout above closed the client side; a fresh hang for Close.
	c2 := dialWS(t, s, nil)
	s.Enqueue(HangAfter(0))
	wsSend(t, c2, `{"type":"response.create","model":"m"}`)
	if err := s.WaitRequests(ctx, 2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, _, err := c2.Read(ctx); err == nil {
		t.Error("read after Close succeeded")
	}
	_ = c.CloseNow()
	_ = c2.CloseNow()
	waitGoroutines(t, base)
}
