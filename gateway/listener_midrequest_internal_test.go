package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run the listener under a real http.Server over loopback TCP.
// They look at the listener's idle list only to know when the server has
// seen what a client sent (nothing a client can observe says so); what they
// assert is what the clients get.

// limitedTestServer serves "ok" on every path behind a limitListener of
// max slots.
func limitedTestServer(t *testing.T, max int) (*limitListener, *prometheus.Registry, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := &Server{log: hclog.NewNullLogger(), metrics: newMetrics(reg)}
	l := newLimitListener(ln, s, max)
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ConnState: l.connState,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, reg, ln.Addr().String()
}

// counterValue is the value of the counter name on reg (-1: none).
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// idleCount is how many connections the listener holds idle now.
func (l *limitListener) idleCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle.Len()
}

// awaitIdleCount waits until the listener holds want connections idle; the
// bound only ends a broken run, which the assertions after it then report.
func awaitIdleCount(l *limitListener, want int) {
	for deadline := time.Now().Add(5 * time.Second); l.idleCount() != want && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// midRequestConn is a raw client connection with a bufio.Reader on it.
type midRequestConn struct {
	net.Conn
	br *bufio.Reader
}

func dialMidRequest(t *testing.T, addr string) *midRequestConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &midRequestConn{Conn: c, br: bufio.NewReader(c)}
}

func (c *midRequestConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// answer reads one response, bounded so that a regression fails instead of
// hanging; it returns its status or the read's error.
func (c *midRequestConn) answer() (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

const getHead = "GET /x HTTP/1.1\r\nHost: sluice\r\n"

// At the connection limit, a keep-alive connection whose client has sent
// part of its next request head is not closed for a new client: net/http
// reports it active only once the head is whole, but the request is
// already on its way, and closing the connection would lose it. The new
// client gets the slot of another idle connection, and the first request,
// once finished, is answered.
func TestLimitListenerKeepsAConnectionWhoseNextRequestArrives(t *testing.T) {
	for _, partial := range []string{getHead, "GET /x", "G"} {
		t.Run(strings.TrimSpace(strings.ReplaceAll(partial, "\r\n", " ")), func(t *testing.T) {
			l, _, addr := limitedTestServer(t, 2)
			oldest, other := dialMidRequest(t, addr), dialMidRequest(t, addr)
			for i, c := range []*midRequestConn{oldest, other} { // oldest idle first
				c.send(t, getHead+"\r\n")
				if status, err := c.answer(); err != nil || status != http.StatusOK {
					t.Fatalf("a first request: %d %v", status, err)
				}
				awaitIdleCount(l, i+1)
			}

			oldest.send(t, partial)
			awaitIdleCount(l, 1) // the server has read the partial head

			newcomer := dialMidRequest(t, addr)
			newcomer.send(t, getHead+"\r\n")
			if status, err := newcomer.answer(); err != nil || status != http.StatusOK {
				t.Fatalf("a new client at the limit: %d %v; want it answered", status, err)
			}
			oldest.send(t, strings.TrimPrefix(getHead, partial)+"\r\n")
			if status, err := oldest.answer(); err != nil || status != http.StatusOK {
				t.Fatalf("the request whose head had started to arrive when a new client came: %d %v; want it answered", status, err)
			}
		})
	}
}

// A client that finds every slot held by a connection with a request on
// its way waits, and is counted as a wait; once one of them turns idle,
// the gateway closes it for the client, which counts as an idle connection
// closed.
func TestLimitListenerCountsARealWait(t *testing.T) {
	_, reg, addr := limitedTestServer(t, 1)
	waits := func() float64 { return counterValue(t, reg, "sluice_connection_limit_waits_total") }
	idleClosed := func() float64 { return counterValue(t, reg, "sluice_connection_limit_idle_closed_total") }
	busy := dialMidRequest(t, addr)
	busy.send(t, getHead) // the head not finished: its slot is not idle

	newcomer := dialMidRequest(t, addr)
	newcomer.send(t, getHead+"\r\n")
	for deadline := time.Now().Add(5 * time.Second); waits() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := idleClosed(); got != 0 {
		t.Fatalf("%v idle connections closed while the only one had a request on its way", got)
	}
	busy.send(t, "\r\n")
	if status, err := busy.answer(); err != nil || status != http.StatusOK {
		t.Fatalf("the busy connection's request: %d %v", status, err)
	}
	if status, err := newcomer.answer(); err != nil || status != http.StatusOK {
		t.Fatalf("the waiting client once a slot turned idle: %d %v", status, err)
	}
	if waits, closed := waits(), idleClosed(); waits != 1 || closed != 1 {
		t.Fatalf("waits %v, idle connections closed %v; want 1 and 1", waits, closed)
	}
}
