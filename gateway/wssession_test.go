package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// upstreamWithEnds is fake upstream A behind a front that reports the end
// of each model request's handler on the returned channel: the gateway
// finished or cancelled that request.
func upstreamWithEnds(t *testing.T) (*upstreamtest.Server, <-chan struct{}) {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	ended := make(chan struct{}, 64)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			defer func() { ended <- struct{}{} }() // a hanging answer ends by panicking
		}
		up.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	up.URL = front.URL + "/v1"
	return up, ended
}

// readUntilDelta reads frames until the first text delta: the stream in
// flight has reached its client.
func (c *wsClient) readUntilDelta() {
	c.t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, data, err := c.conn.Read(ctx)
		cancel()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		var v struct{ Type string }
		_ = json.Unmarshal(data, &v)
		if v.Type == "response.output_text.delta" {
			return
		}
		if isTerminal(v.Type) || v.Type == "error" {
			c.t.Fatalf("the request in flight ended: %s", data)
		}
	}
}

// A client that pipelined more response.create frames than a session used
// to queue, then left, starts nothing more upstream: the frames it queued
// are dropped (none was answered), and the request in flight ends as the
// client stream's rules say (at once, or after the detach grace).
func TestWebSocketClientGoneStartsNoQueuedRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detach time.Duration
		leave  func(t *testing.T, c *wsClient)
	}{
		{"disconnect, cancelled at once", 0, func(_ *testing.T, c *wsClient) { c.conn.CloseNow() }},
		{"close frame, cancelled at once", 0, func(t *testing.T, c *wsClient) {
			// The gateway reads the close frame behind the queued frames and
			// answers it: the close handshake completes.
			if err := c.conn.Close(websocket.StatusNormalClosure, "bye"); err != nil {
				t.Errorf("close handshake: %v", err)
			}
		}},
		{"disconnect, detached for the grace", 200 * time.Millisecond, func(_ *testing.T, c *wsClient) { c.conn.CloseNow() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, ended := upstreamWithEnds(t)
			// KeepAlive: no ping to the client while the upstream is silent,
			// so only the client's own leaving can end the request in flight.
			h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up},
				opts: gateway.Options{KeepAlive: time.Hour, Resume: gateway.ResumeOptions{DetachGrace: tc.detach}}})
			up.Enqueue(upstreamtest.HangAfter(5)) // the first delta, then silence
			c := h.dialWS(nil)
			const frames = 20
			for i := 0; i < frames; i++ {
				c.send(createFrame(""))
			}
			c.readUntilDelta()
			tc.leave(t, c)

			select {
			case <-ended:
			case <-time.After(15 * time.Second):
				t.Fatalf("the request in flight still runs: the gateway did not notice its client leave\n%s", h.logs.String())
			}
			// Shutdown waits for the session to end: whatever it was going to
			// start, it has started by then.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.gw.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if n := up.RequestCount(); n != 1 {
				t.Fatalf("the upstream got %d requests; want only the one in flight when the client left", n)
			}
		})
	}
}

// A client that sends frames ahead of its answers beyond what the session
// holds has its socket closed with 1008; nothing it queued starts.
func TestWebSocketTooManyFramesAheadClosesTheSocket(t *testing.T) {
	up, ended := upstreamWithEnds(t)
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up},
		opts: gateway.Options{MaxWSFrameBytes: 4096, KeepAlive: time.Hour}})
	up.Enqueue(upstreamtest.HangAfter(5))
	c := h.dialWS(nil)
	c.send(createFrame(""))
	c.readUntilDelta()
	// 8 frames of max_ws_frame_bytes are held; these 12 of 3000 bytes are more.
	frame := `{"type":"response.create","model":"gpt-fake-1","input":"` + strings.Repeat("x", 3000) + `"}`
	for i := 0; i < 12; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.conn.Write(ctx, websocket.MessageText, []byte(frame))
		cancel()
		if err != nil {
			break // closed already
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, data, err := c.conn.Read(ctx)
		if err != nil {
			if got := websocket.CloseStatus(err); got != websocket.StatusPolicyViolation {
				t.Fatalf("socket ended with %v (%v), want 1008", got, err)
			}
			break
		}
		var v struct{ Type string }
		_ = json.Unmarshal(data, &v)
		if isTerminal(v.Type) || v.Type == "error" {
			t.Fatalf("got %s before the close", data)
		}
	}
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatal("the request in flight still runs after the socket closed")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := h.gw.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if n := up.RequestCount(); n != 1 {
		t.Fatalf("the upstream got %d requests; want 1", n)
	}
}

// A handshake the WebSocket library refuses is answered in OpenAI's error
// shape with the library's status, and announces no turn state.
func TestWebSocketRefusedUpgradeIsOpenAIShaped(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	host := strings.TrimPrefix(h.url, "http://")
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	valid := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key}
	with := func(change map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range valid {
			m[k] = v
		}
		for k, v := range change {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		proto    string
		headers  map[string]string
		status   int
		code     string
		mentions string
	}{
		{"no Sec-WebSocket-Key", "HTTP/1.1", with(map[string]string{"Sec-WebSocket-Key": ""}), 400, "invalid_value", "Sec-WebSocket-Key"},
		{"bad Sec-WebSocket-Key", "HTTP/1.1", with(map[string]string{"Sec-WebSocket-Key": "short"}), 400, "invalid_value", "Sec-WebSocket-Key"},
		{"version 8", "HTTP/1.1", with(map[string]string{"Sec-WebSocket-Version": "8"}), 400, "invalid_value", "version"},
		{"no version", "HTTP/1.1", with(map[string]string{"Sec-WebSocket-Version": ""}), 400, "invalid_value", "version"},
		{"no Connection header", "HTTP/1.1", with(map[string]string{"Connection": ""}), 426, "websocket_required", "Connection"},
		{"HTTP/1.0", "HTTP/1.0", valid, 426, "websocket_required", "HTTP/1.1"},
		{"foreign Origin", "HTTP/1.1", with(map[string]string{"Origin": "http://evil.example"}), 403, "invalid_value", "evil.example"},
		// Scope ids are stored with every anchor the socket records.
		{"overlong turn state", "HTTP/1.1", with(map[string]string{"X-Codex-Turn-State": strings.Repeat("t", 1025)}), 400, "invalid_value", "X-Codex-Turn-State"},
		{"overlong session id", "HTTP/1.1", with(map[string]string{"Session_id": strings.Repeat("s", 1025)}), 400, "invalid_value", "session_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			var b strings.Builder
			b.WriteString("GET /v1/responses " + tc.proto + "\r\nHost: " + host + "\r\nAuthorization: Bearer sk-client-secret\r\n")
			for k, v := range tc.headers {
				b.WriteString(k + ": " + v + "\r\n")
			}
			b.WriteString("\r\n")
			if _, err := conn.Write([]byte(b.String())); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Message, Type string
					Code          *string
				}
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			switch {
			case resp.StatusCode != tc.status:
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			case !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"):
				t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
			case err != nil:
				t.Fatalf("body is not JSON: %v", err)
			case body.Error.Type != "invalid_request_error" || body.Error.Code == nil || *body.Error.Code != tc.code:
				t.Fatalf("error %+v, want type invalid_request_error, code %s", body.Error, tc.code)
			case !strings.Contains(body.Error.Message, tc.mentions):
				t.Fatalf("message %q does not say what is wrong (%s)", body.Error.Message, tc.mentions)
			case resp.Header.Get("X-Codex-Turn-State") != "":
				t.Fatalf("a refused upgrade announced turn state %q", resp.Header.Get("X-Codex-Turn-State"))
			}
		})
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_requests_total{code="400",surface="websocket"} 6`) {
		t.Fatalf("refused upgrades not counted:\n%s", grep(m, "sluice_requests_total"))
	}
}

// A frame that repeats "type" is refused like a frame that repeats any
// other key, and reaches no upstream.
func TestWebSocketDuplicateTypeKeyRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	for frame, key := range map[string]string{
		`{"type":"response.create","model":"gpt-fake-1","input":"hi","type":"response.create"}`:     "type",
		`{"type":"response.create","model":"gpt-fake-1","input":"hi","stream":false,"stream":true}`: "stream",
	} {
		evs := c.turn(frame)
		var v struct {
			Status int
			Error  struct{ Code, Param string }
		}
		_ = json.Unmarshal(evs[0].data, &v)
		if len(evs) != 1 || evs[0].typ != "error" || v.Status != 400 || v.Error.Code != "duplicate_key" || v.Error.Param != key {
			t.Fatalf("%s → %s", frame, evs[0].data)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("a refused frame reached the upstream (%d requests)", n)
	}
	if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the socket is unusable after the refusals: %s", evs[len(evs)-1].data)
	}
	if body := h.ups["A"].Requests()[0].Body; gjson.GetBytes(body, "type").Exists() {
		t.Fatalf("the upstream got the frame's type: %s", body)
	}
}
