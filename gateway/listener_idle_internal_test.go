package gateway

import (
	"net"
	"net/http"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The listener closes the connection idle longest first, and never one
// with a request in flight or hijacked (a WebSocket), whatever order the
// http.Server reports their states in.
func TestLimitListenerClosesTheOldestIdleFirst(t *testing.T) {
	l := newLimitListener(nil, &Server{log: hclog.NewNullLogger()}, 4)
	var closed []string
	conns := map[string]*trackedConn{}
	for _, name := range []string{"a", "b", "c", "ws"} {
		client, server := net.Pipe()
		t.Cleanup(func() { _ = client.Close() })
		conns[name] = &trackedConn{Conn: server, release: func() { closed = append(closed, name) }}
	}
	for _, step := range []struct {
		conn  string
		state http.ConnState
	}{
		{"a", http.StateNew}, {"b", http.StateNew}, {"c", http.StateNew}, {"ws", http.StateNew},
		{"a", http.StateActive}, {"b", http.StateActive}, {"c", http.StateActive}, {"ws", http.StateActive},
		{"a", http.StateIdle}, {"b", http.StateIdle}, {"ws", http.StateIdle}, {"c", http.StateIdle},
		{"a", http.StateActive},    // a's next request: busy again
		{"ws", http.StateActive},   // the upgrade request
		{"ws", http.StateHijacked}, // a WebSocket now
		{"a", http.StateIdle},      // idle again, after c
	} {
		l.connState(conns[step.conn], step.state)
	}
	for range 4 {
		l.closeOldestIdle()
	}
	if want := []string{"b", "c", "a"}; !slices.Equal(closed, want) {
		t.Fatalf("closed %v; want %v (oldest idle first, never the WebSocket)", closed, want)
	}
}
