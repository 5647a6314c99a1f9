package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// ownerWriteOutage is a shared store whose anchor writes for one owner
// fail while down (reads keep working: the store's record is the first
// owner's), and that says it is reachable again when the test says so.
type ownerWriteOutage struct {
	*store.RedisStore
	owner string
	down  atomic.Bool

	mu       sync.Mutex
	attempts map[string]int // writes for owner refused, by response id
	reach    reachableSignal
}

func (o *ownerWriteOutage) refused(responseID string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.attempts[responseID]
}

// retryRounds is how many times the background retry has been refused:
// each round stops at its first refusal, and each anchor's first write
// is not a retry.
func (o *ownerWriteOutage) retryRounds() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.attempts {
		n += c - 1
	}
	return n
}

func (o *ownerWriteOutage) refuses(a store.Anchor) error {
	if a.Upstream == o.owner && o.down.Load() {
		o.mu.Lock()
		if o.attempts == nil {
			o.attempts = map[string]int{}
		}
		o.attempts[a.ResponseID]++
		o.mu.Unlock()
		return fmt.Errorf("test outage: %w", store.ErrUnavailable)
	}
	return nil
}

func (o *ownerWriteOutage) PutAnchor(ctx context.Context, a store.Anchor) error {
	if err := o.refuses(a); err != nil {
		return err
	}
	return o.RedisStore.PutAnchor(ctx, a)
}

func (o *ownerWriteOutage) ReplaceAnchor(ctx context.Context, a store.Anchor) error {
	if err := o.refuses(a); err != nil {
		return err
	}
	return o.RedisStore.ReplaceAnchor(ctx, a)
}

// Reachable is closed by recover (the embedded RedisStore's is its own).
func (o *ownerWriteOutage) Reachable() <-chan struct{} { return o.reach.Reachable() }

// recover ends the outage and says so, as the Redis health ping does.
func (o *ownerWriteOutage) recover() {
	o.down.Store(false)
	o.reach.signal()
}

// rescuePair is two replicas on one Redis, routing m to P then B with
// continuation; r1's anchor writes for B fail while out.down.
type rescuePair struct {
	r1, r2 *harness
	p, b   *upstreamtest.Server
	out    *ownerWriteOutage
}

func newRescuePair(t *testing.T) *rescuePair {
	t.Helper()
	rd := redistest.Start(t)
	rp := &rescuePair{p: upstreamtest.NewServer(upstreamtest.Options{Name: "P"}), b: upstreamtest.NewServer(upstreamtest.Options{Name: "B"})}
	t.Cleanup(rp.p.Close)
	t.Cleanup(rp.b.Close)
	replica := func(wrap func(*store.RedisStore) store.Store) *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: rd.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		return contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": rp.p, "B": rp.b},
			opts: gateway.Options{Store: wrap(rs), Resume: gateway.ResumeOptions{Store: rs}, LifecycleHold: -1}})
	}
	rp.r1 = replica(func(rs *store.RedisStore) store.Store {
		rp.out = &ownerWriteOutage{RedisStore: rs, owner: "B"}
		return rp.out
	})
	rp.r2 = replica(func(rs *store.RedisStore) store.Store { return rs })
	return rp
}

// continuedDuringOutage streams a response on r1 that P cuts and B
// finishes while r1 cannot write B's anchor; it returns the client's id
// and the id B knows it by.
func (rp *rescuePair) continuedDuringOutage(t *testing.T) (id, bID string) {
	t.Helper()
	rp.out.down.Store(true)
	rp.p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	rp.b.Enqueue(upstreamtest.Answer(fullAnswer, 9))
	_, evs := rp.r1.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	if len(evs) == 0 || gjson.GetBytes(evs[len(evs)-1].Data, "type").Str != "response.completed" {
		t.Fatalf("the continued stream did not complete: %d events", len(evs))
	}
	id = gjson.GetBytes(evs[0].Data, "response.id").Str
	reqs := rp.b.Requests()
	if len(reqs) == 0 {
		t.Fatal("B was not asked to continue")
	}
	eventually(t, "B's anchor write refused", func() bool { return rp.out.refused(id) > 0 })
	var a struct{ Owner string }
	if code := rp.r2.getJSON("/admin/continuity/"+id, &a); code != http.StatusOK || a.Owner != "P" {
		t.Fatalf("the store's record before the retry: %d owner %q, want the first owner P", code, a.Owner)
	}
	return id, ""
}

// followUp sends a follow-up naming id to h and returns its status and
// the upstream that got it ("" for none).
func (rp *rescuePair) followUp(t *testing.T, h *harness, id string) (int, string) {
	t.Helper()
	np, nb := len(rp.p.Requests()), len(rp.b.Requests())
	resp := h.post("/v1/responses", `{"model":"m","input":"more","previous_response_id":"`+id+`"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case len(rp.p.Requests()) > np:
		return resp.StatusCode, "P"
	case len(rp.b.Requests()) > nb:
		return resp.StatusCode, "B"
	}
	t.Logf("follow-up: %d %s", resp.StatusCode, b)
	return resp.StatusCode, ""
}

// TestScaleOutContinuedAnchorWaitingOwnsFollowUps: a continued response
// that completed while its replica could not write its anchor is owned by
// the target that finished it, on that replica at once (the anchor waiting
// to be written wins over the store's first-owner record), and on every
// replica as soon as the store says it is reachable again, rather than
// after the retry's backoff (up to 30 s) during which follow-ups went to
// the first target's truncated copy (README "Continuation", "Scale-out
// with Redis").
func TestScaleOutContinuedAnchorWaitingOwnsFollowUps(t *testing.T) {
	rp := newRescuePair(t)
	id, _ := rp.continuedDuringOutage(t)
	if code, to := rp.followUp(t, rp.r1, id); code != http.StatusOK || to != "B" {
		t.Fatalf("follow-up on the replica holding B's anchor: %d sent to %q, want B", code, to)
	}
	// Let the retry back off to seconds: after 5 refused rounds the next
	// one is 8 s away.
	eventually(t, "the retry backing off", func() bool { return rp.out.retryRounds() >= 5 })
	rp.out.recover()
	deadline := time.Now().Add(4 * time.Second) // half the backoff's next wait
	for {
		var a struct{ Owner string }
		if rp.r2.getJSON("/admin/continuity/"+id, &a) == http.StatusOK && a.Owner == "B" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's anchor not written once the store said it was reachable again: owner %q", a.Owner)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, to := rp.followUp(t, rp.r2, id); code != http.StatusOK || to != "B" {
		t.Fatalf("follow-up on the other replica after the outage: %d sent to %q, want B", code, to)
	}
}

// TestScaleOutDeleteDuringAnchorRetryStaysDeleted: a continued response
// deleted through another replica while its replica still waits to write
// its anchor stays deleted: the waiting write only replaces the anchor,
// and finds none (README "Privacy": DELETE removes it for every replica).
func TestScaleOutDeleteDuringAnchorRetryStaysDeleted(t *testing.T) {
	rp := newRescuePair(t)
	id, _ := rp.continuedDuringOutage(t)
	if status, b := rp.r2.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusOK {
		t.Fatalf("DELETE on the other replica: %d %s", status, b)
	}
	rp.out.recover()
	eventually(t, "the waiting anchor settled", func() bool {
		return strings.Contains(rp.r1.metrics(), "continuity_anchors_waiting 0")
	})
	if code := rp.r2.getJSON("/admin/continuity/"+id, nil); code != http.StatusNotFound {
		t.Fatalf("the deleted response's anchor after the retry: %d, want 404", code)
	}
	// Without Sluice keys an id without an anchor goes to the route's
	// first target, whose own copy was deleted; B's must not be reached.
	for _, h := range []*harness{rp.r1, rp.r2} {
		if code, to := rp.followUp(t, h, id); to == "B" {
			t.Fatalf("follow-up to the deleted response: %d sent to B", code)
		}
	}
}

// anchorReadOutage is a store whose anchors cannot be read (Redis down).
type anchorReadOutage struct{ store.Store }

func (anchorReadOutage) GetAnchor(context.Context, string) (store.Anchor, error) {
	return store.Anchor{}, fmt.Errorf("test outage: %w", store.ErrUnavailable)
}

// TestStreamFollowUpDuringStoreOutageGetsTheStatus: a streaming follow-up
// whose owner cannot be looked up is answered before anything was sent,
// so it gets 503 upstream_unavailable with Retry-After as an HTTP status,
// as a non-streaming one does, not a 200 stream ending in response.failed
// that SDKs do not wait out (README "Scale-out with Redis").
func TestStreamFollowUpDuringStoreOutageGetsTheStatus(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: anchorReadOutage{openStore(t, t.TempDir())}}})
	for _, stream := range []string{"true", "false"} {
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"resp_1","stream":`+stream+`}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" ||
			gjson.GetBytes(b, "error.code").Str != "upstream_unavailable" {
			t.Fatalf("stream:%s follow-up during the outage: %d Retry-After %q %s", stream, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	if n := h.upstreamRequests(); n != 0 {
		t.Fatalf("%d requests reached an upstream", n)
	}
}

// TestScaleOutDeleteOnTheWaitingReplicaReachesTheFinisher: a DELETE of a
// continued response, on the replica still waiting to write its anchor,
// asks the target that finished it to delete its copy, not only the first
// target, whose copy (up to the cut) is deleted too (README "The resource
// API").
func TestScaleOutDeleteOnTheWaitingReplicaReachesTheFinisher(t *testing.T) {
	rp := newRescuePair(t)
	id, _ := rp.continuedDuringOutage(t)
	if status, b := rp.r1.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	if p, b := deletesOf(rp.p), deletesOf(rp.b); len(b) != 1 || len(p) != 1 || p[0] != "/v1/responses/"+id {
		t.Fatalf("DELETE reached P at %v and B at %v, want each once (P under %s)", p, b, id)
	}
}
