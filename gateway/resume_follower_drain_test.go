package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// Resumers of a stream on a replica sharing Redis with the one running it
// (README "Resuming a stream", "Scale-out with Redis", "Running it").

// replicaOf is one more replica of p (its own connection to p's Redis),
// with opts' drain grace.
func replicaOf(t *testing.T, p *durablePair, drainGrace time.Duration) *harness {
	t.Helper()
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: p.redis.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	o := gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: 5 * time.Second}, LifecycleHold: -1, DrainGrace: drainGrace}
	o.Store, o.Resume.Store = rs, rs
	return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": p.up}, opts: o})
}

// readFrame reads one frame of c, failing the test after 10s.
func readFrame(t *testing.T, c *wsClient) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := c.conn.Read(ctx)
	if err != nil {
		t.Fatalf("no frame: %v", err)
	}
	return data
}

// TestResumeWhileTheStoreCannotBeRead: with Redis down, a resume on a
// replica that does not hold the response's log is the documented 503
// upstream_unavailable with Retry-After: 2 — over a WebSocket (an error
// frame with status 503 and headers.retry-after) as over HTTP, with the
// same code and message —, never a 404 saying the response is unknown,
// which a client takes as final; the replica that ran it resumes it from
// its own log, over HTTP and over a WebSocket (README "Scale-out with
// Redis").
func TestResumeWhileTheStoreCannotBeRead(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(upstreamtest.Answer("short answer", 3))
	_, evs := p.r1.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := evs[len(evs)-1]
	id := gjson.GetBytes(last.Data, "response.id").Str
	if eventType(last) != "response.completed" || id == "" {
		t.Fatalf("the stream ended with %s", last.Data)
	}
	eventually(t, "the other replica reads the response", func() bool {
		status, b := p.r2.callBody(http.MethodGet, "/v1/responses/"+id, "")
		return status == http.StatusOK && gjson.GetBytes(b, "status").Str == "completed"
	})
	p.redis.Stop()

	t.Run("the replica that ran it", func(t *testing.T) {
		status, body := p.r1.call(http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after=0", clientKey)
		if status != http.StatusOK || !strings.Contains(string(body), `"sequence_number":1,`) ||
			!strings.Contains(string(body), "event: response.completed") {
			t.Fatalf("HTTP resume: %d %s, want the events from 1 to response.completed", status, body)
		}

		c := p.r1.dialWS(nil)
		defer c.conn.CloseNow()
		c.send(`{"type":"response.resume","response_id":"` + id + `","starting_after":0}`)
		for {
			got := gjson.ParseBytes(readFrame(t, c))
			if typ := got.Get("type").Str; typ == "response.completed" {
				break
			} else if typ == "error" || typ == "response.failed" {
				t.Fatalf("WebSocket resume: %s, want the events to response.completed", got.Raw)
			}
		}
	})
	for _, r := range []struct {
		name string
		h    *harness
	}{{"the other replica", p.r2}} {
		t.Run(r.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, r.h.url+"/v1/responses/"+id+"?stream=true&starting_after=0", nil)
			req.Header.Set("Authorization", "Bearer "+clientKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" ||
				gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" {
				t.Fatalf("HTTP resume: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}

			c := r.h.dialWS(nil)
			defer c.conn.CloseNow()
			c.send(`{"type":"response.resume","response_id":"` + id + `","starting_after":0}`)
			got := gjson.ParseBytes(readFrame(t, c))
			if got.Get("type").Str != "error" || got.Get("status").Int() != http.StatusServiceUnavailable ||
				got.Get("headers.retry-after").Str != "2" ||
				got.Get("error.code").Str != gjson.GetBytes(body, "error.code").Str ||
				got.Get("error.message").Str != gjson.GetBytes(body, "error.message").Str {
				t.Fatalf("WebSocket resume: %s, want the HTTP resume's 503 %s with retry-after 2", got.Raw, body)
			}
		})
	}
}

// hangingStream starts a stream on h that sends its first events and then
// hangs, and returns its id and the sequence number of its last event.
func hangingStream(t *testing.T, p *durablePair, h *harness) (string, int64) {
	t.Helper()
	p.up.Enqueue(upstreamtest.HangAfter(3))
	ctx, drop := context.WithCancel(context.Background())
	t.Cleanup(drop)
	first, err := readEvents(openStream(t, ctx, h, `{"model":"gpt-fake-1","input":"hi","stream":true}`), 3)
	if err != nil {
		t.Fatal(err)
	}
	id := gjson.GetBytes(first[0], "response.id").Str
	if id == "" {
		t.Fatalf("no response id in %s", first[0])
	}
	return id, gjson.GetBytes(first[len(first)-1], "sequence_number").Int()
}

// follower is a client resuming a stream from starting_after=0, over a
// WebSocket or SSE.
type follower interface {
	// next is the follower's next event; io.EOF when its stream ended
	// (SSE) or its socket closed normally (WebSocket).
	next() ([]byte, error)
}

type wsFollower struct{ c *wsClient }

func (f wsFollower) next() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := f.c.conn.Read(ctx)
	if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
		return nil, io.EOF
	}
	return data, err
}

type sseFollower struct{ src *sse.Reader }

func (f sseFollower) next() ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		ev, err := f.src.Next()
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{data: append([]byte(nil), ev.Data...)}
	}()
	select {
	case r := <-got:
		return r.data, r.err
	case <-time.After(10 * time.Second):
		return nil, errors.New("no event within 10s")
	}
}

func startFollower(t *testing.T, via string, h *harness, id string) follower {
	t.Helper()
	// The replica running it writes its log to the store moments after
	// response.created: a follower elsewhere that comes earlier is told
	// the response is unknown.
	eventually(t, "the follower's replica reads the response", func() bool {
		status, _ := h.callBody(http.MethodGet, "/v1/responses/"+id, "")
		return status == http.StatusOK
	})
	if via == "websocket" {
		c := h.dialWS(nil)
		t.Cleanup(func() { c.conn.CloseNow() })
		c.send(`{"type":"response.resume","response_id":"` + id + `","starting_after":0}`)
		return wsFollower{c: c}
	}
	src, closeBody, err := resumeStream(context.Background(), h, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeBody)
	return sseFollower{src: src}
}

// followUpTo reads f's events up to sequence number last.
func followUpTo(t *testing.T, f follower, last int64) {
	t.Helper()
	for {
		data, err := f.next()
		if err != nil || gjson.GetBytes(data, "type").Str == "error" {
			t.Fatalf("the follower stopped before event %d: %s %v", last, data, err)
		}
		if gjson.GetBytes(data, "sequence_number").Int() >= last {
			return
		}
	}
}

// endOf reads f's events to the end of its stream (SSE's end, a
// WebSocket's normal close) and returns the last one.
func endOf(t *testing.T, f follower) []byte {
	t.Helper()
	var last []byte
	for {
		data, err := f.next()
		if errors.Is(err, io.EOF) {
			if last == nil {
				t.Fatal("the follower's stream ended without an event")
			}
			return last
		}
		if err != nil {
			t.Fatalf("the follower's stream broke off after %s: %v", last, err)
		}
		last = data
	}
}

// TestDrainEndsResumeFollowers: a drain ends a client that follows, on the
// draining replica, a stream another replica runs (through the store), at
// drain_grace (or at once on the second signal: EndDrainGrace) like any
// stream it writes: with an error event (stream_incomplete) that says the
// gateway is shutting down and names the starting_after to resume from on
// another instance — not a terminal event of a response that goes on
// elsewhere — and then the end of its SSE stream or a normal close of its
// socket; Shutdown then returns. A follower of a stream running on the
// draining replica itself gets that stream's own terminal event.
func TestDrainEndsResumeFollowers(t *testing.T) {
	for _, via := range []string{"websocket", "sse"} {
		for _, end := range []string{"grace", "second signal"} {
			t.Run(via+"/"+end, func(t *testing.T) {
				p := newDurablePair(t, 300*time.Millisecond)
				grace := 200 * time.Millisecond
				if end == "second signal" {
					grace = time.Hour
				}
				r2 := replicaOf(t, p, grace)
				id, last := hangingStream(t, p, p.r1)
				f := startFollower(t, via, r2, id)
				followUpTo(t, f, last)

				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					done <- r2.gw.Shutdown(ctx)
				}()
				if end == "second signal" {
					eventually(t, "the drain begins", r2.gw.Draining)
					r2.gw.EndDrainGrace()
				}
				ev := endOf(t, f)
				msg := gjson.GetBytes(ev, "message").Str
				if gjson.GetBytes(ev, "type").Str != "error" || gjson.GetBytes(ev, "code").Str != "stream_incomplete" ||
					!strings.Contains(msg, "shutting down") || !strings.Contains(msg, fmt.Sprintf("starting_after=%d", last)) ||
					gjson.GetBytes(ev, "sequence_number").Int() != last+1 {
					t.Fatalf("the follower's stream ended with %s, want the drain's error event naming starting_after=%d", ev, last)
				}
				if err := <-done; err != nil {
					t.Fatalf("shutdown: %v", err)
				}
			})
		}
		t.Run(via+"/stream on the draining replica", func(t *testing.T) {
			p := newDurablePair(t, 5*time.Second)
			r1 := replicaOf(t, p, 200*time.Millisecond)
			id, last := hangingStream(t, p, r1)
			f := startFollower(t, via, r1, id)
			followUpTo(t, f, last)
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				done <- r1.gw.Shutdown(ctx)
			}()
			ev := endOf(t, f)
			var v struct {
				Type     string
				Response struct{ ID, Status string }
			}
			if err := json.Unmarshal(ev, &v); err != nil || v.Type != "response.failed" || v.Response.ID != id {
				t.Fatalf("the follower's stream ended with %s, want the stream's response.failed", ev)
			}
			if err := <-done; err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		})
	}
}
