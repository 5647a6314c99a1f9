package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
)

// At limits.max_connections, a new client takes the slot of a keep-alive
// connection idle between requests, which the gateway closes for it
// (SECURITY.md "Limits"); connections with a request in flight, and
// WebSockets, keep theirs. These tests go over real loopback TCP.

// dialGateway opens a raw TCP connection to the gateway, closed when the
// test ends.
func dialGateway(t *testing.T, h *harness) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// getHealthz sends GET /healthz on c and reads its answer within timeout.
func getHealthz(t *testing.T, c net.Conn, br *bufio.Reader, timeout time.Duration) (*http.Response, error) {
	t.Helper()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// TestConnectionLimitClosesAnIdleKeepAliveConnection: with every slot held
// by keep-alive connections that completed a request and sit idle, a new
// client (a /healthz probe) is answered at once, and an idle connection is
// closed by the gateway to make room.
func TestConnectionLimitClosesAnIdleKeepAliveConnection(t *testing.T) {
	const max = 2
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxConnections: max, DrainGrace: 100 * time.Millisecond}})
	var idle []net.Conn
	for range max {
		c := dialGateway(t, h)
		resp, err := getHealthz(t, c, bufio.NewReader(c), 10*time.Second)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("an idle-to-be connection's GET /healthz: %v %v", resp, err)
		}
		idle = append(idle, c) // kept open: a pooled client between requests
	}

	// The bound only ends a regression (a wait for the 120s idle timeout)
	// instead of hanging the test.
	c := dialGateway(t, h)
	resp, err := getHealthz(t, c, bufio.NewReader(c), 10*time.Second)
	if err != nil {
		t.Fatalf("a new client while %d idle keep-alive connections hold every slot: %v; want it answered", max, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a new client's /healthz: %d", resp.StatusCode)
	}

	// Its slot came from an idle connection, closed by the gateway: a read
	// on it ends (EOF) instead of waiting. The others stay open, so each
	// read is bounded, and the first EOF ends the wait.
	type readResult struct {
		i   int
		err error
	}
	results := make(chan readResult, max)
	for i, ic := range idle {
		go func() {
			_ = ic.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := ic.Read(make([]byte, 1))
			results <- readResult{i, err}
		}()
	}
	for range max {
		r := <-results
		if errors.Is(r.err, io.EOF) || errors.Is(r.err, net.ErrClosed) || errors.Is(r.err, syscall.ECONNRESET) {
			return
		}
		t.Logf("idle connection %d: %v", r.i, r.err)
	}
	t.Fatalf("no idle keep-alive connection was closed to make room for the new client")
}

// TestConnectionLimitKeepsBusyConnections: a connection with a request in
// flight (a stream) and a client WebSocket are not closed for a new
// client: it waits until one of them ends, and is answered then.
func TestConnectionLimitKeepsBusyConnections(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxConnections: 2, DrainGrace: 100 * time.Millisecond}})
	h.ups["A"].SetDefault(steadyStream(50 * time.Millisecond))

	stream := dialGateway(t, h)
	if _, err := stream.Write([]byte("POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer sk-client-secret\r\n" +
		"Content-Type: application/json\r\nContent-Length: 42\r\n\r\n" + `{"model":"m","input":"x","stream":true}` + "\n\n\n")); err != nil {
		t.Fatal(err)
	}
	_ = stream.SetReadDeadline(time.Now().Add(10 * time.Second))
	readToFirstDelta(t, stream)
	ws := h.dialWS(nil)

	c := dialGateway(t, h)
	br := bufio.NewReader(c)
	// The one timed wait here is the assertion itself: while both slots
	// are busy the client must not be answered, and "not answered" can
	// only be seen as a read that times out. It is kept short (300 ms):
	// a gateway that closed a busy connection answers well within it.
	if resp, err := getHealthz(t, c, br, 300*time.Millisecond); err == nil {
		t.Fatalf("a new client was answered (%d) while a stream and a WebSocket held every slot", resp.StatusCode)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a new client's read while every slot is busy: %v; want it still waiting", err)
	}
	// The WebSocket was left open: a turn on it still streams.
	ws.send(`{"type":"response.create","model":"m","input":"x"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, frame, err := ws.conn.Read(ctx); err != nil {
		t.Fatalf("the client WebSocket after a new client waited: %v; want it left open", err)
	} else if !strings.Contains(string(frame), "response.") {
		t.Fatalf("the client WebSocket's first frame: %s", frame)
	}

	// The stream's client leaves: its slot is given back (a write to it
	// fails) and the waiting client is answered.
	_ = stream.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the waiting client once the stream's client left: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the waiting client's /healthz: %d", resp.StatusCode)
	}
}
