package upstreamtest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCutAfter(t *testing.T) {
	s := NewServer(Options{Name: "A"})
	defer s.Close()
	c := newClient(t)

	s.Enqueue(CutAfter(3))
	resp, body, err := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error = %v, want unexpected EOF", err)
	}
	evs := decodeEvents(t, parseSSE(t, body))
	if got := types(evs); strings.Join(got, ",") != "response.created,response.in_progress,response.output_item.added" {
		t.Errorf("types = %v", got)
	}
	if path(evs[0], "response", "id") != "resp_A_1" {
		t.Errorf("created = %v", evs[0])
	}

	s.Enqueue(CutAfter(2))
	_, body, err = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(parseSSE(t, body)) != 2 || strings.Contains(string(body), "[DONE]") {
		t.Errorf("chat cut: err %v body %s", err, body)
	}

	// Non-streaming: the connection closes before any response byte.
	s.Enqueue(CutAfter(1))
	if _, _, err = c.post(s.URL+"/responses", `{"model":"m"}`); err == nil {
		t.Error("non-stream cut returned a response")
	}
}

func TestErrorField(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(ErrorField(nil, 2), ErrorField([]byte(`{"code":503,"message":"busy","type":"unavailable_error"}`), 0))
	_, body, err := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	blocks := parseSSE(t, body)
	if len(blocks) != 3 || blocks[2].HasData || blocks[2].Fields["error"] == "" {
		t.Fatalf("blocks = %+v", blocks)
	}
	if !strings.HasSuffix(string(body), "\n\nerror: {\"code\":500,\"message\":\"Internal server error\",\"type\":\"server_error\"}\n\n") {
		t.Errorf("body = %s", body)
	}
	_, body, _ = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
	if string(body) != "error: {\"code\":503,\"message\":\"busy\",\"type\":\"unavailable_error\"}\n\n" {
		t.Errorf("chat body = %q", body)
	}
}

func TestWithEmptyData(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	for _, p := range []string{"/responses", "/chat/completions"} {
		s.Enqueue(WithEmptyData())
		_, body, err := c.post(s.URL+p, `{"model":"m","stream":true}`)
		if err != nil {
			t.Fatal(err)
		}
		b := string(body)
		if !strings.Contains(b, "\n\ndata:\n\n") || !strings.Contains(b, "\n\ndata: \n\n") {
			t.Errorf("%s: no empty data lines:\n%s", p, b)
		}
		var real []sseBlock
		empty := 0
		for _, blk := range parseSSE(t, body) {
			if blk.Data == "" {
				empty++
				continue
			}
			real = append(real, blk)
		}
		if p == "/responses" {
			if len(real) != 11 || empty != 10 {
				t.Errorf("real %d empty %d", len(real), empty)
			}
			decodeEvents(t, real)
		} else if real[len(real)-1].Data != "[DONE]" || empty != len(real)-1 {
			t.Errorf("chat real %d empty %d", len(real), empty)
		}
	}
}

func TestStatus429(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	s.Enqueue(Status429(2 * time.Second))
	resp, body, _ := newClient(t).post(s.URL+"/responses", `{"model":"gpt-4o","stream":true}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Retry-After-Ms") != "2000" {
		t.Fatalf("status %d header %v", resp.StatusCode, resp.Header)
	}
	m := mustJSON(t, body)
	msg := str(path(m, "error", "message"))
	if path(m, "error", "code") != "rate_limit_exceeded" || path(m, "error", "type") != "requests" ||
		!strings.HasPrefix(msg, "Rate limit reached for gpt-4o ") || !strings.HasSuffix(msg, "Please try again in 2s.") {
		t.Errorf("body = %s", body)
	}
}

func TestStatus5xx(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	for _, code := range []int{500, 502, 503} {
		s.Enqueue(Status5xx(code))
		resp, body, _ := c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
		if resp.StatusCode != code || path(mustJSON(t, body), "error", "type") != "server_error" {
			t.Errorf("%d: %d %s", code, resp.StatusCode, body)
		}
	}
}

func TestQuotaEvent(t *testing.T) {
	s := NewServer(Options{Name: "Q"})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(QuotaEvent(ShapeErrorEvent), QuotaEvent(ShapeFailed), QuotaEvent(ShapeStatus))
	msg := "The usage limit has been reached for this account. Try again later."

	_, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	blocks := parseSSE(t, body)
	if len(blocks) != 1 || blocks[0].Event != "error" {
		t.Fatalf("blocks = %+v", blocks)
	}
	jsonEqual(t, []byte(blocks[0].Data), `{"type":"error","status":429,"error":{"type":"invalid_request_error","code":"usage_limit_reached","message":"`+msg+`"}}`)

	_, body, _ = c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	blocks = parseSSE(t, body)
	if len(blocks) != 1 || blocks[0].Event != "response.failed" {
		t.Fatalf("blocks = %+v", blocks)
	}
	jsonEqual(t, []byte(blocks[0].Data), `{"type":"response.failed","response":{"id":"resp_Q_2","status":"failed","error":{"code":"usage_limit_reached","message":"`+msg+`"}}}`)

	resp, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	if resp.StatusCode != 429 || path(mustJSON(t, body), "error", "code") != "usage_limit_reached" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}

	// On chat: data: {"error":…} then [DONE].
	s.Enqueue(QuotaEvent(ShapeErrorEvent))
	_, body, _ = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
	blocks = parseSSE(t, body)
	if len(blocks) != 2 || path(mustJSON(t, []byte(blocks[0].Data)), "error", "code") != "usage_limit_reached" || blocks[1].Data != "[DONE]" {
		t.Errorf("chat = %s", body)
	}
}

func TestAfterCreated(t *testing.T) {
	s := NewServer(Options{Name: "AC"})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(QuotaEvent(ShapeFailed).AfterCreated(), Status429(time.Second).AfterCreated(), Status429(0).AfterCreated())

	_, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	evs := decodeEvents(t, parseSSE(t, body))
	if got := strings.Join(types(evs), ","); got != "response.created,response.failed" {
		t.Fatalf("types = %s", got)
	}
	if path(evs[0], "response", "id") != "resp_AC_1" || path(evs[1], "response", "id") != "resp_AC_1" {
		t.Errorf("ids: %v", evs)
	}

	resp, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	evs = decodeEvents(t, parseSSE(t, body))
	if resp.StatusCode != 200 || strings.Join(types(evs), ",") != "response.created,error" ||
		num(evs[1]["status"]) != 429 || path(evs[1], "error", "code") != "rate_limit_exceeded" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}

	_, body, _ = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
	blocks := parseSSE(t, body)
	if len(blocks) != 3 || path(mustJSON(t, []byte(blocks[0].Data)), "choices", 0, "delta", "role") != "assistant" ||
		path(mustJSON(t, []byte(blocks[1].Data)), "error", "code") != "rate_limit_exceeded" || blocks[2].Data != "[DONE]" {
		t.Errorf("chat = %s", body)
	}

	// The canned stream is unchanged by AfterCreated.
	if sc := Canned().AfterCreated(); sc.Frames != nil || sc.ChatFrames != nil {
		t.Error("AfterCreated changed the canned script")
	}
}

func TestGarbage(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(Garbage(), Garbage())
	_, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	blocks := parseSSE(t, body)
	if len(blocks) != 12 || blocks[5].Data != "not json{{" || blocks[4].Event != "response.output_text.delta" ||
		!strings.Contains(string(body), "\n\ndata: not json{{\n\n") {
		t.Errorf("body = %s", body)
	}
	_, body, _ = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
	blocks = parseSSE(t, body)
	if blocks[2].Data != "not json{{" || blocks[len(blocks)-1].Data != "[DONE]" {
		t.Errorf("chat = %s", body)
	}
}

func TestOversize(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	const n = 1 << 20
	s.Enqueue(Oversize(n), Oversize(n))
	for _, p := range []string{"/responses", "/chat/completions"} {
		_, body, err := c.post(s.URL+p, `{"model":"m","stream":true}`)
		if err != nil {
			t.Fatal(err)
		}
		big := 0
		for _, b := range parseSSE(t, body) {
			if len(b.Data) > n {
				big++
			}
		}
		// Responses: the delta, then output_text.done, content_part.done,
		// output_item.done and completed, which repeat the whole text.
		want := map[string]int{"/responses": 5, "/chat/completions": 1}[p]
		if big != want {
			t.Errorf("%s: %d events over %d bytes, want %d", p, big, n, want)
		}
	}
}

func TestSlowAndLatency(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(Slow(15*time.Millisecond), Script{Latency: 100 * time.Millisecond})
	start := time.Now()
	_, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	if d := time.Since(start); d < 10*15*time.Millisecond {
		t.Errorf("slow stream took %v", d)
	}
	decodeEvents(t, parseSSE(t, body))
	start = time.Now()
	c.post(s.URL+"/responses", `{"model":"m"}`)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("latency %v", d)
	}
}

func TestHangAndCloseUnblocks(t *testing.T) {
	base := runtime.NumGoroutine()
	s := NewServer(Options{})
	c := newClient(t)
	s.Enqueue(HangAfter(2), HangAfter(0), Script{End: EndHang}, Script{Latency: time.Hour})

	// A hanging stream ends when the client gives up: once it has the two
	// events, which a loaded machine can take long to send.
	resp, body, err := c.doUntil(`{"model":"m","stream":true}`, s.URL+"/responses", func(b []byte) bool {
		return len(parseSSEPrefix(b)) >= 2
	})
	if resp == nil || err == nil || len(parseSSEPrefix(body)) != 2 {
		t.Errorf("hang: resp %v err %v body %s", resp, err, body)
	}

	// Three more requests hang (stream, non-stream, latency); Close ends them.
	errs := make(chan error, 3)
	for _, req := range []string{`{"model":"m","stream":true}`, `{"model":"m"}`, `{"model":"m","stream":true}`} {
		go func() {
			_, _, err := c.post(s.URL+"/responses", req)
			errs <- err
		}()
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := s.WaitRequests(wctx, 4); err != nil {
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
	for range 3 {
		if err := <-errs; err == nil {
			t.Error("a hanging request ended without an error")
		}
	}
	c.hc.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	waitGoroutines(t, base)
}

// doUntil posts body to url and reads the answer until enough(what was
// read) holds, then gives up the request and reads on until the body ends;
// it returns the response, the whole body and the error that ended it.
func (c *client) doUntil(body, url string, enough func([]byte) bool) (*http.Response, []byte, error) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var got []byte
	buf := make([]byte, 4<<10)
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return resp, got, err
		}
		if enough(got) {
			cancel()
		}
	}
}

// parseSSEPrefix counts complete blocks of a possibly truncated stream.
func parseSSEPrefix(b []byte) []string {
	parts := strings.Split(string(b), "\n\n")
	return parts[:len(parts)-1]
}

func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, baseline %d\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
