package store_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// lockedLog collects the gateway's log lines from its goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// streamEvents posts a streaming Responses request and returns the event
// names it got and the id of the response.
func streamEvents(t *testing.T, base, body string) (events []string, id string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, name)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && id == "" {
			var ev struct {
				Response struct {
					ID string `json:"id"`
				} `json:"response"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil {
				id = ev.Response.ID
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v (events %v)", err, events)
	}
	return events, id
}

// TestFullDiskStreamsEndWithTheirTerminalEvent: streams that end while the
// data dir's disk is full still end with response.completed (the anchor
// write fails instead of panicking the gateway), and their anchors are
// written in the background once the disk has room again, so a follow-up
// reaches the owner (README "Continuity").
func TestFullDiskStreamsEndWithTheirTerminalEvent(t *testing.T) {
	logs := &lockedLog{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	var full atomic.Bool
	st, err := store.OpenOnFullDisk(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: logger}, &full)
	if err != nil {
		t.Fatal(err)
	}
	base := serveGatewayOn(t, st, logger, nil)

	full.Store(true)
	var ids []string
	for range 2 { // the first hits the full disk, the second the failed store
		events, id := streamEvents(t, base, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		if len(events) == 0 || events[len(events)-1] != "response.completed" {
			t.Fatalf("a stream ended while the disk is full ends with %v, want response.completed", events)
		}
		ids = append(ids, id)
	}
	if st.Health() == nil {
		t.Fatal("the store does not report the full disk")
	}
	if !strings.Contains(logs.String(), "recording anchor failed") {
		t.Errorf("the failed anchor write is not logged:\n%s", logs.String())
	}

	full.Store(false)
	deadline := time.Now().Add(time.Minute)
	for _, id := range ids {
		for {
			_, err := st.GetAnchor(context.Background(), id)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("anchor of %s not written after the disk had room again: %v\n%s", id, err, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	events, _ := streamEvents(t, base, `{"model":"gpt-fake-1","input":"more","stream":true,"previous_response_id":"`+ids[0]+`"}`)
	if events[len(events)-1] != "response.completed" {
		t.Fatalf("the follow-up after the reopen ends with %v", events)
	}
}

// serveGatewayOn serves a gateway on st with one fake upstream, "A", on
// loopback, and returns its base URL; health, when given, is the gateway's
// StoreHealth (as cmd/sluice wires the store's). The gateway is shut down
// and st closed when the test ends.
func serveGatewayOn(t *testing.T, st store.Store, logger hclog.Logger, health func() error) string {
	t.Helper()
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: up.URL}}, upstream.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	pool.ProbeAll(context.Background())
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger, Store: st, StoreHealth: health})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		<-served
		if err := st.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("closing the store: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}
