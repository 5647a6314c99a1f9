package gateway_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// pingCounter reads what the gateway sends a WebSocket client, as the
// client's connection does, and counts the ping frames in it and the ones
// that came before the first data frame (the library answers pings
// without telling its caller).
type pingCounter struct {
	net.Conn
	mu          sync.Mutex
	handshake   []byte // the 101 answer while it is read
	upgraded    bool
	header      []byte // the frame header being read
	payloadLeft uint64
	pings       int
	beforeData  int // pings before the first text frame
	sawData     bool
}

func (c *pingCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range p[:n] {
		c.feed(b)
	}
	return n, err
}

func (c *pingCounter) feed(b byte) {
	if !c.upgraded {
		c.handshake = append(c.handshake, b)
		c.upgraded = bytes.HasSuffix(c.handshake, []byte("\r\n\r\n"))
		return
	}
	if c.payloadLeft > 0 {
		c.payloadLeft--
		return
	}
	c.header = append(c.header, b)
	if len(c.header) < 2 {
		return
	}
	size, ext := uint64(c.header[1]&0x7f), 0
	switch size {
	case 126:
		ext = 2
	case 127:
		ext = 8
	}
	if len(c.header) < 2+ext {
		return
	}
	if ext > 0 {
		size = 0
		for _, x := range c.header[2 : 2+ext] {
			size = size<<8 | uint64(x)
		}
	}
	switch c.header[0] & 0x0f {
	case 0x9: // ping
		c.pings++
		if !c.sawData {
			c.beforeData++
		}
	case 0x1: // text
		c.sawData = true
	}
	c.header, c.payloadLeft = c.header[:0], size
}

func (c *pingCounter) counts() (pings, beforeData int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pings, c.beforeData
}

// TestWebSocketPingedWhileTheUpstreamWithholdsItsHeaders: a WebSocket client
// whose response.create waits for an upstream that holds its headers for
// several timeouts.keepalive periods is pinged meanwhile, before its first
// frame (a socket has no HTTP status to keep uncommitted), and gets the
// same frames as without the wait.
func TestWebSocketPingedWhileTheUpstreamWithholdsItsHeaders(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{KeepAlive: 40 * time.Millisecond}})
	late := upstreamtest.Answer(fullAnswer, 3)
	late.Latency = 400 * time.Millisecond // ten keepalive periods before the headers
	h.ups["A"].Enqueue(late)

	var counter *pingCounter
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			counter = &pingCounter{Conn: conn}
			conn = counter
		}
		return conn, err
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/responses", &websocket.DialOptions{HTTPClient: client,
		HTTPHeader: http.Header{"Authorization": {"Bearer sk-client-secret"}, "OpenAI-Beta": {"responses_websockets=2026-02-06"}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	conn.SetReadLimit(64 << 20)
	c := &wsClient{t: t, conn: conn}

	var evs [][]byte
	for _, ev := range c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi"}`) {
		evs = append(evs, ev.data)
	}
	if o := checkResponsesEvents(t, evs); o.terminal != "response.completed" || o.text != fullAnswer {
		t.Fatalf("%s, text %q", o.terminal, o.text)
	}
	if pings, before := counter.counts(); before < 3 {
		t.Fatalf("%d pings before the first frame (%d in all) while the upstream withheld its headers for ten keepalive periods", before, pings)
	}
	m := h.metrics()
	if v := metricValue(m, `sluice_keepalives_total{surface="websocket"}`); v < 3 {
		t.Fatalf("%v websocket keepalives counted:\n%s", v, grep(m, "keepalives"))
	}
}
