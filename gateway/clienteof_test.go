package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A client closes its connection cleanly, which the gateway first sees as
// a clean EOF on the read side, like a half-close (requestContext). These
// tests go over real loopback TCP with raw clients: one that sends its
// request and closes, one that half-closes (CloseWrite) and still reads.

// fronted is a fake upstream behind a front that reports on arrived when
// a model request comes in and on ended when its handler ends (a held or
// hanging answer ends when the gateway lets its request go), and holds
// each model request until gate is closed (nil: not held).
type fronted struct {
	*upstreamtest.Server
	arrived, ended <-chan struct{}
}

func frontedUpstream(t *testing.T, name string, gate <-chan struct{}) fronted {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: name})
	t.Cleanup(up.Close)
	arrived, ended := make(chan struct{}, 64), make(chan struct{}, 64)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			arrived <- struct{}{}
			defer func() { ended <- struct{}{} }()
			if gate != nil {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
		}
		up.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	up.URL = front.URL + "/v1"
	return fronted{Server: up, arrived: arrived, ended: ended}
}

// sendRaw opens a connection to the gateway and sends body to path as one
// HTTP/1.1 request.
func sendRaw(t *testing.T, h *harness, path, body string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: "+
		itoa(int64(len(body)))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

// waitAccessLine waits for the gateway's access line of the one request
// (its handler returned); the bound only ends a broken run.
func waitAccessLine(t *testing.T, h *harness) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); grepLines(h.logs.String(), "access: request") == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the request whose client left is still running\n%s", h.logs.String())
		}
	}
}

// waitFor waits for a signal of a fronted upstream; the bound only ends a
// broken run.
func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatal(what)
	}
}

const (
	responsesStream = `{"model":"m","input":"hi","stream":true}`
	chatStream      = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`
)

func routeAB() []gateway.Route {
	return []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}
}

// A client that sends a streaming request and closes its connection before
// the first event is noticed (the gateway probes a client whose read side
// ended): the upstream request is cancelled, and no retry or next target
// starts. Nothing reached the client, so there is nothing to resume: the
// work is cancelled at once with a detach grace too. The same probe
// notices a client that leaves a silent stream after content. The
// keepalive period is an hour, so only the probe can notice the client.
func TestClientGoneBeforeFirstEventStopsTheWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		path    string
		body    string
		detach  time.Duration
		script  upstreamtest.Script
		content bool // the client reads until the first text delta, then leaves
	}{
		{name: "headers held", path: "/v1/responses", body: responsesStream,
			script: upstreamtest.Script{Latency: time.Hour}},
		{name: "headers held, detach grace", path: "/v1/responses", body: responsesStream, detach: time.Hour,
			script: upstreamtest.Script{Latency: time.Hour}},
		{name: "headers then silence", path: "/v1/responses", body: responsesStream, detach: time.Hour,
			script: upstreamtest.HangAfter(0)},
		{name: "lifecycle events then silence", path: "/v1/responses", body: responsesStream,
			script: upstreamtest.HangAfter(2)},
		{name: "Retry-After wait", path: "/v1/responses", body: responsesStream, detach: time.Hour,
			script: upstreamtest.Status429(time.Hour)},
		{name: "chat, headers held", path: "/v1/chat/completions", body: chatStream,
			script: upstreamtest.Script{Latency: time.Hour}},
		{name: "after content, upstream silent", path: "/v1/responses", body: responsesStream, content: true,
			script: upstreamtest.HangAfter(5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := frontedUpstream(t, "A", nil), frontedUpstream(t, "B", nil)
			h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a.Server, "B": b.Server},
				opts: gateway.Options{Routes: routeAB(), KeepAlive: time.Hour, IdleTimeout: time.Hour, RetryMaxWait: 2 * time.Hour,
					Resume: gateway.ResumeOptions{DetachGrace: tc.detach}}})
			a.Enqueue(tc.script)
			c := sendRaw(t, h, tc.path, tc.body)
			if tc.content {
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("no text delta: %v", err)
					}
					if strings.Contains(line, "response.output_text.delta") {
						break
					}
				}
			} else if err := a.WaitRequests(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()

			waitAccessLine(t, h)
			waitFor(t, a.ended, "A's request still runs: the gateway did not let it go when its client left")
			if n := a.RequestCount(); n != 1 {
				t.Errorf("A got %d requests, want 1: no retry once the client left", n)
			}
			if n := b.RequestCount(); n != 0 {
				t.Errorf("B got %d requests, want none: no next target once the client left", n)
			}
		})
	}
}

// A client that half-closes after sending its streaming request still gets
// the whole stream. Its read side ended, so the gateway commits the stream
// at once (A answers only once the client saw the headers): a failure
// before the first event then reaches it as a stream, response.created and
// response.failed (a Chat error chunk and [DONE]), never as a status.
func TestHalfClosedStreamClientGetsTheWholeStream(t *testing.T) {
	badRequest := upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest,
		upstreamtest.ErrorBody("the tool schema is invalid", "invalid_request_error", "invalid_tool_schema", "tools"))
	for _, tc := range []struct {
		name   string
		path   string
		body   string
		a, b   upstreamtest.Script
		chatB  bool   // B is a Chat-only upstream
		want   string // in the terminal event (Responses) or the last chunk before [DONE] (Chat)
		failed bool
	}{
		{name: "completes", path: "/v1/responses", body: responsesStream, a: upstreamtest.Canned(),
			want: "Hello from A"},
		{name: "upstream client error", path: "/v1/responses", body: responsesStream, a: badRequest,
			want: "the tool schema is invalid", failed: true},
		{name: "no target left", path: "/v1/responses", body: responsesStream,
			a: upstreamtest.Status5xx(http.StatusServiceUnavailable), b: upstreamtest.Status5xx(http.StatusServiceUnavailable),
			want: "upstream_unavailable", failed: true},
		{name: "the next target cannot take the request", path: "/v1/responses",
			body: `{"model":"m","stream":true,"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`,
			a:    upstreamtest.Status5xx(http.StatusServiceUnavailable), chatB: true, want: "input_file", failed: true},
		{name: "chat completes", path: "/v1/chat/completions", body: chatStream, a: upstreamtest.Canned(),
			want: `"finish_reason":"stop"`},
		{name: "chat, upstream client error", path: "/v1/chat/completions", body: chatStream, a: badRequest,
			want: "the tool schema is invalid", failed: true},
		// Committed before its first event, the stream stays one with no target
		// left: not the status a Chat client that still writes gets.
		{name: "chat, no target left", path: "/v1/chat/completions", body: chatStream,
			a: upstreamtest.Status5xx(http.StatusServiceUnavailable), b: upstreamtest.Status5xx(http.StatusServiceUnavailable),
			want: "upstream_unavailable", failed: true},
		{name: "chat, upstream client error without a body", path: "/v1/chat/completions", body: chatStream,
			a:    upstreamtest.Script{Status: http.StatusBadRequest, Body: []byte{}},
			want: `"message":"the upstream answered HTTP 400 Bad Request without an error message","param":null,"type":"invalid_request_error"`, failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(chan struct{})
			a, b := frontedUpstream(t, "A", gate), frontedUpstream(t, "B", nil)
			protocol := map[string]string{}
			if tc.chatB {
				protocol["B"] = "chat"
			}
			h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a.Server, "B": b.Server}, protocol: protocol,
				opts: gateway.Options{Routes: routeAB(), KeepAlive: 20 * time.Millisecond}})
			release := sync.OnceFunc(func() { close(gate) })
			t.Cleanup(release) // before the gateway shuts down, which waits for A's answer
			a.Enqueue(tc.a)
			b.Enqueue(tc.b)
			c := sendRaw(t, h, tc.path, tc.body)
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no headers for a half-closed client while the upstream holds its answer: %v", err)
			}
			release()
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			r := sse.NewReader(resp.Body, 1<<20)
			var evs []sse.Event
			for {
				ev, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("the stream broke after %d events: %v", len(evs), err)
				}
				evs = append(evs, ev.Clone())
			}
			if len(evs) == 0 {
				t.Fatal("no event")
			}
			if strings.HasPrefix(tc.path, "/v1/chat") {
				checkChatEnd(t, evs, tc.want, tc.failed)
			} else {
				checkResponsesEnd(t, evs, tc.want, tc.failed)
			}
		})
	}
}

// checkResponsesEnd: the stream opens with response.created, numbers its
// events from 0, and ends with exactly one terminal event, which carries
// want.
func checkResponsesEnd(t *testing.T, evs []sse.Event, want string, failed bool) {
	t.Helper()
	var types []string
	terminals := 0
	for i, ev := range evs {
		var v struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal(ev.Data, &v); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, ev.Data)
		}
		if v.Seq == nil || *v.Seq != i {
			t.Fatalf("event %d (%s) has sequence_number %v", i, v.Type, v.Seq)
		}
		types = append(types, v.Type)
		switch v.Type {
		case "response.completed", "response.failed", "response.incomplete":
			terminals++
		}
	}
	last := evs[len(evs)-1]
	wantLast := "response.completed"
	if failed {
		wantLast = "response.failed"
	}
	if types[0] != "response.created" || types[len(types)-1] != wantLast || terminals != 1 || !strings.Contains(string(last.Data), want) {
		t.Fatalf("events %v; want response.created … one %s carrying %q; last: %s", types, wantLast, want, last.Data)
	}
}

// checkChatEnd: the stream ends with [DONE], after a chunk carrying want
// (an error chunk when failed).
func checkChatEnd(t *testing.T, evs []sse.Event, want string, failed bool) {
	t.Helper()
	if string(evs[len(evs)-1].Data) != "[DONE]" || len(evs) < 2 {
		t.Fatalf("the Chat stream does not end with a chunk and [DONE]: %d events", len(evs))
	}
	last := evs[len(evs)-2].Data
	if !strings.Contains(string(last), want) || strings.Contains(string(last), `"error"`) != failed {
		t.Fatalf("last chunk %s; want %q (an error: %v)", last, want, failed)
	}
}

// A stream committed early goes out without the headers of an attempt that
// failed before the client saw anything: A answers (its X-Request-Id) and
// fails before content, invisibly; the client half-closes while B holds its
// answer, and gets B's stream under headers of neither (the x-request-id
// the gateway minted).
func TestEarlyCommitSendsNoHeadersOfAFailedAttempt(t *testing.T) {
	gate := make(chan struct{})
	a, b := frontedUpstream(t, "A", nil), frontedUpstream(t, "B", gate)
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a.Server, "B": b.Server},
		opts: gateway.Options{Routes: routeAB()}})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	a.Enqueue(upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusInternalServerError,
		upstreamtest.ErrorBody("the server had an error", "server_error", "server_error", "")))
	c := sendRaw(t, h, "/v1/responses", responsesStream)
	waitFor(t, b.arrived, "the request never reached B")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no headers for a half-closed client while B holds its answer: %v", err)
	}
	release()
	defer resp.Body.Close()
	if id := resp.Header.Get("X-Request-Id"); !regexp.MustCompile(`^req_[0-9a-f]{32}$`).MatchString(id) { // the gateway's own
		t.Errorf("the stream went out with X-Request-Id %q, of an attempt whose answer the client never got", id)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the stream broke: %v", err)
	}
	if !strings.Contains(string(body), "Hello from B") || strings.Count(string(body), "event: response.completed") != 1 {
		t.Fatalf("B's answer did not reach the client whole:\n%s", body)
	}
}

// A background request's client reads one JSON answer, so a client that
// half-closes after sending it is not probed as a stream's is: an upstream
// 400 reaches it as that 400, not as a 200 with a failed Response.
func TestHalfClosedBackgroundClientGetsTheUpstreamError(t *testing.T) {
	badRequest := upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest,
		upstreamtest.ErrorBody("the tool schema is invalid", "invalid_request_error", "invalid_tool_schema", "tools"))
	gate := make(chan struct{})
	a, b := frontedUpstream(t, "A", gate), frontedUpstream(t, "B", nil)
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a.Server, "B": b.Server},
		opts: gateway.Options{Routes: routeAB(), KeepAlive: 20 * time.Millisecond}})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	a.Enqueue(badRequest)
	c := sendRaw(t, h, "/v1/responses", `{"model":"m","input":"hi","background":true}`)
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a.arrived, "A not asked")
	time.Sleep(300 * time.Millisecond) // long enough for a probe to have run
	release()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_tool_schema") {
		t.Fatalf("HTTP %d %s", resp.StatusCode, body)
	}
}

// slowAdmission is a limiter whose admissions wait for release: the
// request is still being checked when its client leaves.
type slowAdmission struct {
	gateway.LocalLimiter
	asked   chan struct{}
	release chan struct{}
}

func (l *slowAdmission) Admit(ctx context.Context, key string, lim store.KeyLimits, estimate int64) (gateway.Admission, *gateway.LimitError) {
	l.asked <- struct{}{}
	<-l.release
	return l.LocalLimiter.Admit(ctx, key, lim, estimate)
}

// A client that closes while its request is still being checked (a limiter
// round trip, an owner lookup) is noticed once the stream exists, and its
// upstream request is cancelled like any other's.
func TestClientGoneWhileCheckedStopsTheWork(t *testing.T) {
	a := frontedUpstream(t, "A", nil)
	a.Enqueue(upstreamtest.Script{Latency: time.Hour}) // holds its headers
	lim := &slowAdmission{asked: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": a.Server},
		opts: gateway.Options{KeepAlive: time.Hour, Accounts: gateway.AccountsOptions{Required: true, Limiter: lim,
			Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}}}})
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer "+teamAKey+
		"\r\nContent-Type: application/json\r\nContent-Length: "+itoa(int64(len(responsesStream)))+"\r\n\r\n"+responsesStream)
	waitFor(t, lim.asked, "the limiter was not asked")
	_ = c.Close()
	time.Sleep(100 * time.Millisecond) // the gateway reads the EOF while the request is checked
	close(lim.release)
	waitFor(t, a.arrived, "A not asked")
	waitFor(t, a.ended, "the upstream request of a client that left while it was checked was not cancelled")
}
