package gateway_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A client that leaves a silent stream is noticed by the first keepalive
// flush that fails: until then it holds its slot (a key's concurrent limit)
// and its upstream. A flush error must reach the client stream, not stop
// at the status recorder.
func TestClientGoneIsNoticedByTheFailingKeepAlive(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{KeepAlive: 20 * time.Millisecond}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(3))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-fake-1","input":"hi","stream":true}`
	_, _ = conn.Write([]byte("POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(int64(len(body))) + "\r\n\r\n" + body))
	br := bufio.NewReader(conn)
	for events := 0; events < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	_ = conn.Close()
	line := ""
	for deadline := time.Now().Add(20 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		line = grepLines(h.logs.String(), "access: request")
	}
	if line == "" {
		t.Fatal("the stream whose client left did not end")
	}
	// The first keepalive after the close is accepted by the kernel (whose
	// answer is a reset); the flush of the second fails and ends the stream.
	// With the flush error lost, the second was counted too and only a third
	// write found the client gone.
	if n := metricValue(h.metrics(), `sluice_keepalives_total{surface="responses_stream"}`); n > 1 {
		t.Fatalf("%v keepalives were counted as written to a client that had left; access line: %s", n, line)
	}
}
