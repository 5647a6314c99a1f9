package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Frames a client sent ahead of its answers, still queued behind the
// request in flight when the drain begins, start nothing upstream: each
// response.create gets the 503 an HTTP request gets during a drain, once,
// the request in flight completes within the grace, and the socket then
// closes normally (README "Running it"). Before, the session picked at
// random between its queue and the drain: a queued frame was sent upstream
// as a new request after the drain began, or was never answered.
func TestWebSocketDrainAnswersQueuedFramesWithoutStartingThem(t *testing.T) {
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	var posts atomic.Int32
	arrived, release := make(chan struct{}), make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && posts.Add(1) == 1 {
			close(arrived)
			<-release // the first request waits until the drain has begun
		}
		up.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	up.URL = front.URL + "/v1"
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up},
		opts: gateway.Options{DrainGrace: time.Hour, KeepAlive: time.Hour}})

	c := h.dialWS(nil)
	c.send(createFrame(""))
	<-arrived
	const queued = 3
	for i := 0; i < queued; i++ {
		c.send(createFrame(""))
	}
	c.send(`{"type":"input_chunk","payload":"not a request: no answer"}`)
	frames := make(chan []byte, 64)
	closed := make(chan error, 1)
	go func() {
		for {
			_, data, err := c.conn.Read(context.Background())
			if err != nil {
				closed <- err
				close(frames)
				return
			}
			frames <- data
		}
	}()
	// The pong comes after the gateway has read every frame sent before the
	// ping: they are queued behind the request in flight.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- h.gw.Shutdown(context.Background()) }()
	for !h.gw.Draining() {
		runtime.Gosched()
	}
	close(release)

	var types []string
	var refusals int
	for data := range frames {
		typ := gjson.GetBytes(data, "type").Str
		types = append(types, typ)
		if typ == "error" {
			refusals++
			if gjson.GetBytes(data, "status").Int() != http.StatusServiceUnavailable || gjson.GetBytes(data, "error.code").Str != "upstream_unavailable" ||
				!strings.Contains(gjson.GetBytes(data, "error.message").Str, "the gateway is shutting down") {
				t.Errorf("a queued frame's answer: %s, want 503 upstream_unavailable, the gateway is shutting down", data)
			}
		}
	}
	if err := <-closed; websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("socket closed with %v, want a normal close", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	completed := 0
	for _, typ := range types {
		if typ == "response.completed" {
			completed++
		}
	}
	if completed != 1 || refusals != queued || types[len(types)-1] != "error" {
		t.Fatalf("frames %v: want the request in flight completed, then one 503 error frame per queued response.create (%d)", types, queued)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the upstream got %d requests; want only the one in flight when the drain began", n)
	}
}
