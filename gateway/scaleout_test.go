package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// Two gateway replicas in this process share one Redis and the same two
// strict fake upstreams (a previous_response_id they did not create is
// previous_response_not_found). These tests need redis-server (skipped
// without it, failed in CI). The same scenarios through two processes, with
// SIGKILL and a Redis outage, are in cmd/sluice/scaleout_test.go.

type scaleOut struct {
	r1, r2   *harness
	s1, s2   *store.RedisStore
	upstream map[string]*upstreamtest.Server
}

func newScaleOut(t *testing.T, opts gateway.Options) *scaleOut {
	t.Helper()
	srv := redistest.Start(t)
	ups := map[string]*upstreamtest.Server{}
	for _, name := range []string{"A", "B"} {
		up := upstreamtest.NewServer(upstreamtest.Options{Name: name, StrictPrevious: true, PreviousShape: upstreamtest.ShapeErrorEvent})
		t.Cleanup(up.Close)
		ups[name] = up
	}
	so := &scaleOut{upstream: ups}
	replica := func() (*harness, *store.RedisStore) {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := opts
		o.Store, o.Conversations = rs, rs
		return newHarness(t, harnessConfig{servers: ups, opts: o}), rs
	}
	so.r1, so.s1 = replica()
	so.r2, so.s2 = replica()
	return so
}

// owner finds which upstream created a response id ("resp_<Name>_<n>").
func (so *scaleOut) owner(id string) string {
	for name := range so.upstream {
		if strings.HasPrefix(id, "resp_"+name+"_") {
			return name
		}
	}
	return ""
}

// lastPrevious is the previous_response_id of the last request an upstream got.
func lastPrevious(up *upstreamtest.Server) string {
	reqs := up.Requests()
	if len(reqs) == 0 {
		return ""
	}
	return reqs[len(reqs)-1].PreviousResponseID
}

func TestScaleOutFollowUpReachesItsOwnerFromTheOtherReplica(t *testing.T) {
	so := newScaleOut(t, gateway.Options{})
	hdr := map[string]string{"session_id": "sess-1"}
	prev := ""
	for turn := range 6 { // alternate the replicas, as a round-robin balancer would
		h := so.r1
		if turn%2 == 1 {
			h = so.r2
		}
		evs, id := h.turn(prev, hdr)
		if id == "" {
			t.Fatalf("turn %d: no response.completed: %+v", turn, evs)
		}
		if prev != "" {
			owner := so.owner(prev)
			if so.owner(id) != owner || lastPrevious(so.upstream[owner]) != prev {
				t.Fatalf("turn %d: the follow-up of %s (owner %s) was served by %s", turn, prev, owner, so.owner(id))
			}
		}
		prev = id
	}
}

// TestScaleOutNeverAStaleOwner: what one replica changes about an anchor
// (deleted because its owner lost it, or anchored again elsewhere) holds at
// once on the other; no replica serves an owner from memory.
func TestScaleOutNeverAStaleOwner(t *testing.T) {
	so := newScaleOut(t, gateway.Options{})
	hdr := map[string]string{"session_id": "sess-2"}
	_, id := so.r1.turn("", hdr)
	owner := so.owner(id)
	other := map[string]string{"A": "B", "B": "A"}[owner]
	// Replica 1 resolves the owner (it would cache it with Pebble).
	if _, id2 := so.r1.turn(id, hdr); so.owner(id2) != owner {
		t.Fatalf("follow-up on replica 1 served by %s, want %s", so.owner(id2), owner)
	}
	// Replica 2 re-anchors the response on the other upstream.
	a, err := so.s2.GetAnchor(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	a.Upstream = other
	if err := so.s2.PutAnchor(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	withPrev := func(up *upstreamtest.Server) (n int) {
		for _, r := range up.Requests() {
			if r.PreviousResponseID == id {
				n++
			}
		}
		return n
	}
	atOwner := withPrev(so.upstream[owner])
	so.r1.turn(id, hdr) // the new owner does not know the id (stream_incomplete), but it is where replica 1 sends it
	if withPrev(so.upstream[other]) == 0 || withPrev(so.upstream[owner]) != atOwner {
		t.Fatalf("replica 1 did not follow the anchor replica 2 changed: %s got %d follow-ups, the old owner %s %d more",
			other, withPrev(so.upstream[other]), owner, withPrev(so.upstream[owner])-atOwner)
	}
	// Replica 2 deletes it: replica 1 no longer pins the id anywhere.
	if err := so.s2.DeleteAnchor(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Owner string `json:"owner"`
	}
	if code := so.r1.getJSON("/admin/continuity/"+id, &st); code != 404 {
		t.Fatalf("admin anchor on replica 1 after delete on replica 2: %d %+v", code, st)
	}
}

// sharedHealthReplicas are two replicas sharing one redis-server (and its
// target health) in front of A then B.
func sharedHealthReplicas(t *testing.T) (r1, r2 *harness, upA, upB *upstreamtest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	upA = upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	upB = upstreamtest.NewServer(upstreamtest.Options{Name: "B"})
	t.Cleanup(upA.Close)
	t.Cleanup(upB.Close)
	route := []gateway.Route{{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}
	replica := func() *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		// SharedTimeout: a replica that cannot write or read the shared
		// health in time goes on with what it knows alone, and the default
		// (100ms) is short for Redis under the race detector on a loaded
		// machine.
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": upA, "B": upB},
			opts: gateway.Options{Store: rs, Routes: route}, pool: upstream.Options{Shared: rs, SharedTimeout: 5 * time.Second}})
	}
	return replica(), replica(), upA, upB
}

// TestScaleOutSharedOpenCircuitShown: a target whose circuit opened on one
// replica is shown open, as shared, in the other replica's /admin/upstreams
// and sluice_target_circuit_state, which skips it.
func TestScaleOutSharedOpenCircuitShown(t *testing.T) {
	r1, r2, upA, _ := sharedHealthReplicas(t)
	for range 10 {
		upA.Enqueue(upstreamtest.Status5xx(500))
	}
	for i := 0; ; i++ {
		if tgt, _ := r1.target("A", "gpt-fake-1"); tgt.Circuit == "open" {
			break
		}
		if i == 5 {
			t.Fatal("A's circuit did not open on replica 1")
		}
		if _, id := r1.turn("", nil); !strings.HasPrefix(id, "resp_B_") {
			t.Fatalf("replica 1 with A failing: %s, want B", id)
		}
	}
	nA := len(upA.Requests())
	if _, id := r2.turn("", nil); !strings.HasPrefix(id, "resp_B_") || len(upA.Requests()) != nA {
		t.Fatalf("replica 2 with A's circuit open on replica 1: %s, A called %d more times", id, len(upA.Requests())-nA)
	}
	if tgt, ok := r2.target("A", "gpt-fake-1"); !ok || tgt.Circuit != "open" || tgt.OpenFor == "" || !tgt.Shared {
		t.Errorf("replica 2's /admin/upstreams: %+v (listed: %v), want A open, shared", tgt, ok)
	}
	if v := metricValue(r2.metrics(), `sluice_target_circuit_state{model="gpt-fake-1",upstream="A"}`); v != 1 {
		t.Errorf("replica 2's sluice_target_circuit_state for A: %v, want 1 (open)", v)
	}
}

// TestScaleOutSharedCooldown: a target one replica saw answer 429 with
// Retry-After is skipped by the other replica too.
func TestScaleOutSharedCooldown(t *testing.T) {
	r1, r2, upA, _ := sharedHealthReplicas(t)
	upA.Enqueue(upstreamtest.Status429(30 * time.Second))
	if _, id := r1.turn("", nil); !strings.HasPrefix(id, "resp_B_") {
		t.Fatalf("replica 1 after A's 429: %s, want B", id)
	}
	nA := len(upA.Requests())
	for i := range 3 {
		if _, id := r2.turn("", nil); !strings.HasPrefix(id, "resp_B_") {
			t.Fatalf("replica 2 request %d went to %s while A cools down", i, id)
		}
	}
	if len(upA.Requests()) != nA {
		t.Fatal("replica 2 sent a request to the target replica 1 cooled down")
	}
	// Replica 2 shows the cooldown it skips A for, as learnt from replica 1.
	if tgt, ok := r2.target("A", "gpt-fake-1"); !ok || tgt.CoolingFor == "" || !tgt.Shared {
		t.Errorf("replica 2's /admin/upstreams does not show A's shared cooldown: %+v (listed: %v)", tgt, ok)
	}
	var tgt adminTarget
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ok bool
		if tgt, ok = r1.target("A", "gpt-fake-1"); ok && tgt.CoolingFor != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tgt.CoolingFor == "" {
		t.Errorf("replica 1 does not show A cooling down: %+v", tgt)
	}
}

// TestScaleOutSharedRateLimitAnswers429: while every target cools down for
// an upstream's 429, the replica that learnt the cooldowns from the other
// one answers as that one does (README "Failover and replay", "Scale-out
// with Redis": the same semantics): 429 rate_limit_exceeded with the
// upstream's error type and the wait, to a Responses stream too (no
// upstream is tried, so nothing was sent), never 503 upstream_unavailable,
// and without calling the upstreams.
func TestScaleOutSharedRateLimitAnswers429(t *testing.T) {
	r1, r2, upA, upB := sharedHealthReplicas(t)
	upA.Enqueue(upstreamtest.Status429(30 * time.Second))
	upB.Enqueue(upstreamtest.Status429(30 * time.Second))
	const body = `{"model":"gpt-fake-1","input":"hi"}`
	first := postForRetry(t, r1, "/v1/responses", body)
	if first.status != http.StatusTooManyRequests || first.code != "rate_limit_exceeded" {
		t.Fatalf("replica 1 with A and B answering 429: got %d %s", first.status, first.body)
	}
	nA, nB := upA.RequestCount(), upB.RequestCount()

	a := postForRetry(t, r2, "/v1/responses", body)
	if a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" || gjson.Get(a.body, "error.type").Str != "requests" {
		t.Fatalf("replica 2 while A and B cool down on replica 1's word: got %d %s, want 429 rate_limit_exceeded of type requests", a.status, a.body)
	}
	checkRetryAfter(t, "replica 2 while A and B cool down", a, 1, 30)

	// No upstream is tried, so nothing was sent: a Responses stream gets the
	// status too.
	s := postForRetry(t, r2, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if s.status != http.StatusTooManyRequests || s.code != "rate_limit_exceeded" || gjson.Get(s.body, "error.type").Str != "requests" {
		t.Fatalf("replica 2's stream while A and B cool down: got %d %s, want 429 rate_limit_exceeded of type requests", s.status, s.body)
	}
	checkRetryAfter(t, "replica 2's stream while A and B cool down", s, 1, 30)
	if upA.RequestCount() != nA || upB.RequestCount() != nB {
		t.Fatalf("replica 2 called the upstreams replica 1 cooled down (A %d, B %d more)", upA.RequestCount()-nA, upB.RequestCount()-nB)
	}
}
