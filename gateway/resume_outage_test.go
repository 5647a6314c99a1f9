package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// outageStore is a shared Redis stream log store whose writes fail while
// down is set, as while Redis is briefly unavailable to one replica.
type outageStore struct {
	*store.RedisStore
	down atomic.Bool

	mu      sync.Mutex
	refused []time.Time // when each write was refused
	reach   reachableSignal
}

func (o *outageStore) unavailable(what string) error {
	if o.down.Load() {
		o.mu.Lock()
		o.refused = append(o.refused, time.Now())
		o.mu.Unlock()
		return fmt.Errorf("test outage: %s: %w", what, store.ErrUnavailable)
	}
	return nil
}

// lastRefusalGap is the time between the last two refused writes.
func (o *outageStore) lastRefusalGap() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.refused); n >= 2 {
		return o.refused[n-1].Sub(o.refused[n-2])
	}
	return 0
}

// reachableSignal is a test store's store.ReachabilityNotifier: signal
// closes the channel Reachable handed out, as the Redis health ping does
// when Redis answers again.
type reachableSignal struct {
	mu   sync.Mutex
	back chan struct{}
}

func (r *reachableSignal) Reachable() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.back == nil {
		r.back = make(chan struct{})
	}
	return r.back
}

func (r *reachableSignal) signal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.back != nil {
		close(r.back)
		r.back = nil
	}
}

// Reachable is closed by recover (the embedded RedisStore's is its own).
func (o *outageStore) Reachable() <-chan struct{} { return o.reach.Reachable() }

// recover ends the outage and says so.
func (o *outageStore) recover() {
	o.down.Store(false)
	o.reach.signal()
}

func (o *outageStore) PutStreamLog(ctx context.Context, l store.StreamLog) error {
	if err := o.unavailable("put stream log"); err != nil {
		return err
	}
	return o.RedisStore.PutStreamLog(ctx, l)
}

func (o *outageStore) PutStreamLogUnlessDeleted(ctx context.Context, l store.StreamLog) error {
	if err := o.unavailable("put stream log"); err != nil {
		return err
	}
	return o.RedisStore.PutStreamLogUnlessDeleted(ctx, l)
}

func (o *outageStore) AppendStreamEvents(ctx context.Context, id string, first int64, events []store.StreamEvent) error {
	if err := o.unavailable("append stream events"); err != nil {
		return err
	}
	return o.RedisStore.AppendStreamEvents(ctx, id, first, events)
}

// newOutagePair is newDurablePair whose first replica writes its stream
// logs through an outageStore.
func newOutagePair(t *testing.T) (*durablePair, *outageStore) {
	t.Helper()
	p := newDurablePair(t, 5*time.Second)
	out := &outageStore{RedisStore: p.s1}
	o := gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: 5 * time.Second}, LifecycleHold: -1}
	o.Store, o.Resume.Store = p.s1, out
	p.r1 = newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": p.up}, opts: o})
	return p, out
}

// TestScaleOutLogEndedDuringAnOutage: a stream that ends while its
// replica cannot write to the shared store still reaches the store once it
// can, all of it: the other replica then reads the response as it ended
// (completed, or cancelled by an acknowledged cancel), and can replay it,
// rather than in_progress, failed or unknown (README "Durable").
func TestScaleOutLogEndedDuringAnOutage(t *testing.T) {
	t.Run("completed before its first write", func(t *testing.T) {
		p, out := newOutagePair(t)
		out.down.Store(true)
		p.up.Enqueue(upstreamtest.Answer("short answer", 3))
		_, evs := p.r1.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		if len(evs) == 0 || gjson.GetBytes(evs[len(evs)-1].Data, "type").Str != "response.completed" {
			t.Fatalf("the stream did not complete: %d events", len(evs))
		}
		id := gjson.GetBytes(evs[0].Data, "response.id").Str
		if status, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey); status != http.StatusNotFound {
			t.Fatalf("GET on the other replica during the outage: %d %s", status, b)
		}
		out.down.Store(false)
		eventually(t, "the completed response on the other replica", func() bool {
			_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
			return gjson.GetBytes(b, "status").Str == "completed"
		})
		status, replay, body := p.r2.resume(clientKey, id, -1)
		if status != http.StatusOK || len(replay) != len(evs) {
			t.Fatalf("replay on the other replica: %d, %d events of %d\n%s", status, len(replay), len(evs), body)
		}
		for i := range evs {
			if string(replay[i]) != string(evs[i].Data) {
				t.Fatalf("event %d replayed as %s, the client got %s", i, replay[i], evs[i].Data)
			}
		}
		logged := func(what string) int { return strings.Count(p.r1.logs.String(), what) }
		eventually(t, "the success logged", func() bool { return logged("durable after all") == 1 })
		if n := logged("before its log was durable"); n != 1 {
			t.Fatalf("the failed seal logged %d times, want once\n%s", n, p.r1.logs.String())
		}
	})

	t.Run("cancelled while it ran", func(t *testing.T) {
		p, out := newOutagePair(t)
		p.up.Enqueue(longAnswer(100 * time.Millisecond))
		id := startBackground(t, p.r1)
		eventually(t, "output on the other replica", func() bool {
			_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
			return gjson.GetBytes(b, "output.0.content.0.text").Str != ""
		})
		out.down.Store(true)
		status, answer := p.r1.call(http.MethodPost, "/v1/responses/"+id+"/cancel", clientKey)
		text := gjson.GetBytes(answer, "output.0.content.0.text").Str
		if status != http.StatusOK || gjson.GetBytes(answer, "status").Str != "cancelled" || text == "" {
			t.Fatalf("cancel during the outage: %d %s", status, answer)
		}
		out.down.Store(false)
		eventually(t, "the cancelled response on the other replica", func() bool {
			_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
			return gjson.GetBytes(b, "status").Str == "cancelled"
		})
		_, got := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		if gjson.GetBytes(got, "output.0.content.0.text").Str != text {
			t.Fatalf("GET on the other replica: %s; the cancel answered %q", got, text)
		}
		status, replay, body := p.r2.resume(clientKey, id, -1)
		if status != http.StatusOK || len(replay) == 0 {
			t.Fatalf("replay on the other replica: %d %s", status, body)
		}
		end := gjson.ParseBytes(replay[len(replay)-1])
		if end.Get("type").Str != "response.failed" || end.Get("response.status").Str != "cancelled" {
			t.Fatalf("the replay ended with %s", replay[len(replay)-1])
		}
	})
}

// TestScaleOutFollowerOfADeletedStream: a resumer following a stream
// through the store on another replica when the response is deleted ends
// with the error saying it was deleted, never one asking to retry (a
// retry gets a 404).
func TestScaleOutFollowerOfADeletedStream(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(longAnswer(100 * time.Millisecond))
	src := openStream(t, context.Background(), p.r1, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	first, err := readEvents(src, 5)
	if err != nil {
		t.Fatal(err)
	}
	id := gjson.GetBytes(first[0], "response.id").Str
	follow, closeBody, err := resumeStream(context.Background(), p.r2, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBody()
	if _, err := readEvents(follow, 2); err != nil {
		t.Fatal(err)
	}
	if status, b := p.r2.call(http.MethodDelete, "/v1/responses/"+id, clientKey); status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	rest, err := readEvents(follow, -1)
	if err != nil || len(rest) == 0 {
		t.Fatalf("the follower's stream after the delete: %v, %d events", err, len(rest))
	}
	end := gjson.ParseBytes(rest[len(rest)-1])
	cancelled := end.Get("type").Str == "response.failed" && end.Get("response.status").Str == "cancelled"
	deleted := end.Get("type").Str == "error" && strings.Contains(end.Get("message").Str, "deleted") &&
		!strings.Contains(end.Get("message").Str, "retry")
	if !cancelled && !deleted {
		t.Fatalf("the follower on the other replica ended with %s", rest[len(rest)-1])
	}
}

func (o *outageStore) PutAnchor(ctx context.Context, a store.Anchor) error {
	if err := o.unavailable("put anchor"); err != nil {
		return err
	}
	return o.RedisStore.PutAnchor(ctx, a)
}

func (o *outageStore) ReplaceAnchor(ctx context.Context, a store.Anchor) error {
	if err := o.unavailable("replace anchor"); err != nil {
		return err
	}
	return o.RedisStore.ReplaceAnchor(ctx, a)
}

// TestScaleOutAnchorWrittenAfterAnOutage: a response that completed while
// its replica could not write its anchor gets the anchor once the store
// takes writes again, so it can be continued from any replica (README
// "Continuity"); before, it never could.
func TestScaleOutAnchorWrittenAfterAnOutage(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	out := &outageStore{RedisStore: p.s1}
	o := gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: 5 * time.Second}, LifecycleHold: -1}
	o.Store, o.Resume.Store = out, out
	p.r1 = newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": p.up}, opts: o})
	out.down.Store(true)
	id := p.r1.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	if code := p.r2.getJSON("/admin/continuity/"+id, nil); code != http.StatusNotFound {
		t.Fatalf("an anchor written during the outage: %d", code)
	}
	out.down.Store(false)
	eventually(t, "the anchor written once the store is back", func() bool {
		return p.r2.getJSON("/admin/continuity/"+id, nil) == http.StatusOK
	})
}

// TestScaleOutLogLostWithTheStoreIsWrittenAgain: a stream whose record
// reached the store, which then lost everything (Redis restarted without
// persistence) while the stream ended, is written again whole by the
// replica that ran it: the other replica reads it completed and replays
// every event, rather than answering 404 for a response its client saw
// complete (README "Durable").
func TestScaleOutLogLostWithTheStoreIsWrittenAgain(t *testing.T) {
	p, out := newOutagePair(t)
	p.up.Enqueue(longAnswer(30 * time.Millisecond))
	src := openStream(t, context.Background(), p.r1, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	first, err := readEvents(src, 4)
	if err != nil {
		t.Fatal(err)
	}
	id := gjson.GetBytes(first[0], "response.id").Str
	eventually(t, "the running response on the other replica", func() bool {
		_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "status").Str == "in_progress"
	})
	out.down.Store(true)
	rest, err := readEvents(src, -1)
	if err != nil || len(rest) == 0 || gjson.GetBytes(rest[len(rest)-1], "type").Str != "response.completed" {
		t.Fatalf("the stream did not complete: %v", err)
	}
	o, err := redis.ParseURL(p.redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(o)
	t.Cleanup(func() { _ = raw.Close() })
	if err := raw.FlushAll(context.Background()).Err(); err != nil { // as a restart without persistence
		t.Fatal(err)
	}
	out.down.Store(false)
	eventually(t, "the completed response on the other replica", func() bool {
		_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "status").Str == "completed"
	})
	status, replay, body := p.r2.resume(clientKey, id, -1)
	if want := len(first) + len(rest); status != http.StatusOK || len(replay) != want {
		t.Fatalf("replay on the other replica: %d, %d events of %d\n%s", status, len(replay), want, body)
	}
}

// TestScaleOutLogResealedWhenTheStoreIsBack: the end of a stream's log
// that could not be written while the store was down is written as soon
// as the store says it is reachable again, not at the end of the retry's
// backoff (up to 30 s), during which the other replicas read a response
// its client saw complete as unfinished, then abandoned (README "Durable").
func TestScaleOutLogResealedWhenTheStoreIsBack(t *testing.T) {
	p, out := newOutagePair(t)
	out.down.Store(true)
	p.up.Enqueue(upstreamtest.Answer("short answer", 3))
	_, evs := p.r1.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if len(evs) == 0 || gjson.GetBytes(evs[len(evs)-1].Data, "type").Str != "response.completed" {
		t.Fatalf("the stream did not complete: %d events", len(evs))
	}
	id := gjson.GetBytes(evs[0].Data, "response.id").Str
	// Let the retry back off to seconds: once two attempts are 4 s apart,
	// the next is 8 s away.
	eventually(t, "the reseal backing off", func() bool { return out.lastRefusalGap() >= 3500*time.Millisecond })
	out.recover()
	deadline := time.Now().Add(4 * time.Second) // half the backoff's next wait
	for {
		_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		if gjson.GetBytes(b, "status").Str == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log not written once the store said it was reachable again: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
