package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A response that one replica runs while a client reaches the other, both
// sharing a real Redis with durable stream logs (README "Resuming a
// stream", "Durable"; docs/ARCHITECTURE.md §3, §7).

const clientKey = "sk-client-secret"

// durablePair is two replicas sharing one Redis (stream logs included) and
// one upstream.
type durablePair struct {
	r1, r2 *harness
	s1     *store.RedisStore
	up     *upstreamtest.Server
	redis  *redistest.Server
}

func newDurablePair(t *testing.T, detachGrace time.Duration) *durablePair {
	t.Helper()
	p := &durablePair{redis: redistest.Start(t), up: upstreamtest.NewServer(upstreamtest.Options{Name: "A"})}
	t.Cleanup(p.up.Close)
	replica := func() (*harness, *store.RedisStore) {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: p.redis.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: detachGrace}, LifecycleHold: -1}
		o.Store, o.Resume.Store = rs, rs
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": p.up}, opts: o}), rs
	}
	p.r1, p.s1 = replica()
	p.r2, _ = replica()
	return p
}

// longText is streamed in 30 deltas: with a gap, long enough to act on
// the response while it runs.
var longText = strings.Repeat("word ", 30)

func longAnswer(gap time.Duration) upstreamtest.Script {
	a := upstreamtest.Answer(longText, 30)
	a.Gap = gap
	return a
}

// openStream posts a streaming request as key and returns its events as
// they come; cancel ctx to drop the connection.
func openStream(t *testing.T, ctx context.Context, h *harness, body string) *sse.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	return sse.NewReader(resp.Body, 1<<20)
}

// readEvents reads n events (n < 0: until the stream ends).
func readEvents(src *sse.Reader, n int) ([][]byte, error) {
	var out [][]byte
	for n < 0 || len(out) < n {
		ev, err := src.Next()
		if err != nil {
			if n < 0 && errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("after %d events: %w", len(out), err)
		}
		out = append(out, append([]byte(nil), ev.Data...))
	}
	return out, nil
}

// resumeStream GETs id?stream=true&starting_after=after on h and returns
// its events as they come (for a goroutine: no testing.T).
func resumeStream(ctx context.Context, h *harness, id string, after int64) (*sse.Reader, func(), error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/responses/%s?stream=true&starting_after=%d", h.url, id, after), nil)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, nil, fmt.Errorf("resume: %d %s", resp.StatusCode, b)
	}
	return sse.NewReader(resp.Body, 1<<20), func() { resp.Body.Close() }, nil
}

// eventually polls cond every 20ms for up to 15s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startBackground(t *testing.T, h *harness) string {
	t.Helper()
	status, b := h.callBody(http.MethodPost, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	id := gjson.GetBytes(b, "id").Str
	if status != http.StatusOK || id == "" {
		t.Fatalf("background create: %d %s", status, b)
	}
	return id
}

// callBody is call with a JSON body.
func (h *harness) callBody(method, path, body string) (int, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestScaleOutResumerKeepsADetachedStreamAlive: a client that left a
// stream on one replica and resumed it on the other gets the real rest of
// the answer: following it through the store renews the stream's
// detach_grace on the replica running it, as a resumer there would.
func TestScaleOutResumerKeepsADetachedStreamAlive(t *testing.T) {
	p := newDurablePair(t, 500*time.Millisecond)
	p.up.Enqueue(longAnswer(100 * time.Millisecond)) // about 3s: several graces
	ctx, drop := context.WithCancel(context.Background())
	defer drop()
	src := openStream(t, ctx, p.r1, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	first, err := readEvents(src, 5)
	if err != nil {
		t.Fatal(err)
	}
	id := gjson.GetBytes(first[0], "response.id").Str
	last := gjson.GetBytes(first[len(first)-1], "sequence_number").Int()

	type result struct {
		evs [][]byte
		err error
	}
	following := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		rest, closeBody, err := resumeStream(context.Background(), p.r2, id, last)
		if err != nil {
			close(following)
			done <- result{err: err}
			return
		}
		defer closeBody()
		one, err := readEvents(rest, 1) // the resumer follows: the client may go
		close(following)
		if err != nil {
			done <- result{err: err}
			return
		}
		more, err := readEvents(rest, -1)
		done <- result{evs: append(one, more...), err: err}
	}()
	<-following
	drop() // the client leaves the replica running the stream

	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed stream did not end within 30s")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	o := checkResponsesEvents(t, append(first, res.evs...))
	if o.terminal != "response.completed" || o.text != longText {
		t.Fatalf("resumed on the other replica: %s %q (%s), want the whole answer", o.terminal, o.text, o.code)
	}
}

// TestScaleOutDeleteOnAnotherReplica: DELETE through the replica that does
// not run the response forgets it everywhere: a running stream is
// cancelled where it runs (its client gets the terminal event), a running
// background response too, and neither is written back; a completed one
// is no longer served from the memory of the replica that ran it.
func TestScaleOutDeleteOnAnotherReplica(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	deleted := func(t *testing.T, id string) {
		t.Helper()
		status, b := p.r2.call(http.MethodDelete, "/v1/responses/"+id, clientKey)
		if status != http.StatusOK || gjson.GetBytes(b, "deleted").Type != gjson.True {
			t.Fatalf("DELETE on the other replica: %d %s", status, b)
		}
	}
	gone := func(t *testing.T, id string) {
		t.Helper()
		for _, h := range []*harness{p.r1, p.r2} {
			if status, b := h.call(http.MethodGet, "/v1/responses/"+id, clientKey); status != http.StatusNotFound {
				t.Fatalf("GET after the delete: %d %s", status, b)
			}
			if status, _, _ := h.resume(clientKey, id, -1); status != http.StatusNotFound {
				t.Fatalf("resume after the delete: %d", status)
			}
		}
		if _, err := p.s1.GetStreamLog(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the deleted log is back in the store: %v", err)
		}
	}
	inStore := func(id string) bool {
		status, _ := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return status == http.StatusOK
	}
	cancelled := func(t *testing.T, what string, evs [][]byte) {
		t.Helper()
		end := gjson.ParseBytes(evs[len(evs)-1])
		if end.Get("type").Str != "response.failed" || end.Get("response.status").Str != "cancelled" {
			t.Fatalf("%s ended with %s %s, want it cancelled", what, end.Get("type").Str, end.Get("response.status").Str)
		}
	}

	t.Run("a running stream", func(t *testing.T) {
		p.up.Enqueue(longAnswer(100 * time.Millisecond))
		src := openStream(t, context.Background(), p.r1, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		first, err := readEvents(src, 5)
		if err != nil {
			t.Fatal(err)
		}
		id := gjson.GetBytes(first[0], "response.id").Str
		eventually(t, "the record in the store", func() bool { return inStore(id) })
		deleted(t, id)
		rest, err := readEvents(src, -1)
		if err != nil {
			t.Fatal(err)
		}
		cancelled(t, "the client's stream", rest)
		gone(t, id)
	})

	t.Run("a running background response", func(t *testing.T) {
		p.up.Enqueue(longAnswer(100 * time.Millisecond))
		id := startBackground(t, p.r1)
		follow, closeBody, err := resumeStream(context.Background(), p.r1, id, -1) // on the replica running it
		if err != nil {
			t.Fatal(err)
		}
		defer closeBody()
		if _, err := readEvents(follow, 1); err != nil {
			t.Fatal(err)
		}
		deleted(t, id)
		rest, err := readEvents(follow, -1)
		if err != nil {
			t.Fatal(err)
		}
		cancelled(t, "the background response", rest)
		gone(t, id)
	})

	t.Run("a completed response", func(t *testing.T) {
		p.up.Enqueue(upstreamtest.Answer("short", 2))
		_, evs := p.r1.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		id := gjson.GetBytes(evs[0].Data, "response.id").Str
		eventually(t, "the ended record in the store", func() bool {
			_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
			return gjson.GetBytes(b, "status").Str == "completed"
		})
		deleted(t, id)
		gone(t, id)
	})
}

// TestScaleOutCancelOnAnotherReplicaAnswersTheEnd: a cancel sent to the
// replica that does not run a background response answers the response
// as it ended (cancelled, with the output the replica running it had
// then), the same as a later GET, never an older snapshot.
func TestScaleOutCancelOnAnotherReplicaAnswersTheEnd(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(longAnswer(100 * time.Millisecond))
	id := startBackground(t, p.r1)
	eventually(t, "output on the other replica", func() bool {
		_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "output.0.content.0.text").Str != ""
	})
	status, answer := p.r2.call(http.MethodPost, "/v1/responses/"+id+"/cancel", clientKey)
	if status != http.StatusOK || gjson.GetBytes(answer, "status").Str != "cancelled" {
		t.Fatalf("cancel on the other replica: %d %s", status, answer)
	}
	text := gjson.GetBytes(answer, "output.0.content.0.text").Str
	if text == longText {
		t.Fatalf("cancelled, yet it ran to its end: %s", answer)
	}
	for name, h := range map[string]*harness{"the replica that ran it": p.r1, "the other replica": p.r2} {
		_, got := h.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		if gjson.GetBytes(got, "status").Str != "cancelled" || gjson.GetBytes(got, "output.0.content.0.text").Str != text {
			t.Fatalf("GET on %s after the cancel: %s; the cancel answered %q", name, got, text)
		}
	}
}

// TestScaleOutOrphanedBackgroundResponse: a background response whose
// replica died (its record stopped changing long ago) is reported failed
// by GET and by a cancel, as a resume of it ends with stream_incomplete,
// instead of in_progress for ever.
func TestScaleOutOrphanedBackgroundResponse(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	dead := deadReplicaStore(t, p)
	ctx := context.Background()
	const id = "resp_orphan"
	owner := clientkey.Hash(http.Header{"Authorization": {"Bearer " + clientKey}})
	if err := dead.PutStreamLog(ctx, store.StreamLog{ResponseID: id, Owner: owner, Background: true, Status: "in_progress",
		Response:  []byte(`{"id":"resp_orphan","object":"response","status":"in_progress","output":[]}`),
		ExpiresAt: time.Now().Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := dead.AppendStreamEvents(ctx, id, 0, []store.StreamEvent{{Name: "response.created",
		Data: []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_orphan","status":"in_progress"}}`)}}); err != nil {
		t.Fatal(err)
	}
	failed := func(what string, status int, b []byte) {
		t.Helper()
		if status != http.StatusOK || gjson.GetBytes(b, "status").Str != "failed" ||
			gatewayCode(gjson.GetBytes(b, "error.code").Str, gjson.GetBytes(b, "error.message").Str) != "stream_incomplete" {
			t.Fatalf("%s: %d %s, want it failed (stream_incomplete)", what, status, b)
		}
	}
	status, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
	failed("GET", status, b)
	status, b = p.r2.call(http.MethodPost, "/v1/responses/"+id+"/cancel", clientKey)
	failed("cancel", status, b)
	status, b = p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
	failed("GET after the cancel", status, b)
	_, evs, _ := p.r2.resume(clientKey, id, -1)
	if len(evs) != 2 || gjson.GetBytes(evs[1], "type").Str != "error" || gjson.GetBytes(evs[1], "code").Str != "stream_incomplete" {
		t.Fatalf("resume: %q", evs)
	}
}

// TestScaleOutResumeOfALogWithAHole: a log the store lost events of
// (FLUSHALL, a restart without persistence, eviction) is never replayed
// with a hole: the resume ends with stream_incomplete where the hole
// starts, and one from after the hole is whole.
func TestScaleOutResumeOfALogWithAHole(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(upstreamtest.Answer(resumeText, 12))
	_, all := p.r1.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	id := gjson.GetBytes(all[0].Data, "response.id").Str
	eventually(t, "the ended record in the store", func() bool {
		_, b := p.r2.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "status").Str == "completed"
	})
	o, err := redis.ParseURL(p.redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(o)
	t.Cleanup(func() { _ = raw.Close() })
	lose := func(from, to int) {
		t.Helper()
		if err := raw.ZRemRangeByScore(context.Background(), "sluice:e:"+id, fmt.Sprint(from), fmt.Sprint(to)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	endsAt := func(what string, evs [][]byte, seq int64) {
		t.Helper()
		end := gjson.ParseBytes(evs[len(evs)-1])
		if int64(len(evs)) != seq+1 || end.Get("type").Str != "error" || end.Get("code").Str != "stream_incomplete" ||
			end.Get("sequence_number").Int() != seq {
			t.Fatalf("%s: %s, want the events before %d, then stream_incomplete", what, summary(evs), seq)
		}
	}

	lose(5, 6)
	_, evs, _ := p.r2.resume(clientKey, id, -1)
	endsAt("a hole in the middle", evs, 5)
	_, evs, _ = p.r2.resume(clientKey, id, 6)
	if got := append([][]byte(nil), evs...); len(got) != len(all)-7 || gjson.GetBytes(got[len(got)-1], "type").Str != "response.completed" {
		t.Fatalf("resume after the hole: %s", summary(evs))
	}
	lose(0, 0)
	_, evs, _ = p.r2.resume(clientKey, id, -1)
	endsAt("the first event lost", evs, 0)
}

// summary lists events as sequence_number:type.
func summary(evs [][]byte) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d:%s ", gjson.GetBytes(ev, "sequence_number").Int(), gjson.GetBytes(ev, "type").Str)
	}
	return b.String()
}

// TestScaleOutContinuationThroughFailingTargetsIsNotAbandoned: a stream
// cut after content on one replica is continued through three targets
// that each fail before adding anything (a 503 after 1.5s),
// longer together than timeouts.idle (2s), before a fourth completes it.
// No event reaches the store meanwhile, but the response runs: the other
// replica never reports it failed (a replica that stopped), and reports it
// completed at the end. The continuation rewrites the log's record as each
// attempt begins (streamLog.touch).
func TestScaleOutContinuationThroughFailingTargetsIsNotAbandoned(t *testing.T) {
	rd := redistest.Start(t)
	ups := map[string]*upstreamtest.Server{}
	var targets []gateway.RouteTarget
	for _, n := range []string{"P", "B", "C", "E", "D"} {
		up := upstreamtest.NewServer(upstreamtest.Options{Name: n})
		t.Cleanup(up.Close)
		ups[n] = up
		targets = append(targets, gateway.RouteTarget{Upstream: n})
	}
	replica := func() *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: rd.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := gateway.Options{LifecycleHold: -1, IdleTimeout: 2 * time.Second, Routes: []gateway.Route{{Models: []string{"m"},
			Targets: targets, Continuation: gateway.ContinuationAuto}}}
		o.Store, o.Resume.Store = rs, rs
		return newHarness(t, harnessConfig{servers: ups, opts: o})
	}
	r1, r2 := replica(), replica()
	ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	for _, n := range []string{"B", "C", "E"} {
		slow := upstreamtest.Status5xx(http.StatusServiceUnavailable)
		slow.Latency = 1500 * time.Millisecond
		ups[n].Enqueue(slow)
	}
	ups["D"].Enqueue(upstreamtest.Answer(fullAnswer, 3))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := openStream(t, ctx, r1, `{"model":"m","input":"hi","stream":true}`)
	first, err := readEvents(src, 1)
	id := gjson.GetBytes(first[0], "response.id").Str
	if err != nil || id == "" {
		t.Fatalf("first event: %v %s", err, first)
	}
	rest := make(chan [][]byte, 1)
	go func() {
		evs, _ := readEvents(src, -1) // to the end of the stream
		rest <- evs
	}()
	var evs [][]byte
	for evs == nil {
		select {
		case evs = <-rest:
		case <-time.After(100 * time.Millisecond):
			status, b := r2.callBody(http.MethodGet, "/v1/responses/"+id, "")
			if st := gjson.GetBytes(b, "status").Str; status == http.StatusOK && st == "failed" {
				t.Fatalf("the other replica reports the running response failed: %s", b)
			}
		}
	}
	if len(evs) == 0 || gjson.GetBytes(evs[len(evs)-1], "type").Str != "response.completed" {
		t.Fatalf("the stream did not complete on D: %s\n%s", summary(evs), r1.logs.String())
	}
	eventually(t, "the other replica reports it completed", func() bool {
		_, b := r2.callBody(http.MethodGet, "/v1/responses/"+id, "")
		return gjson.GetBytes(b, "status").Str == "completed"
	})
}

// deadReplicaStore is a client of p's Redis whose clock is an hour behind:
// what it writes is a dead replica's last write, long ago.
func deadReplicaStore(t *testing.T, p *durablePair) *store.RedisStore {
	t.Helper()
	dead, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: p.redis.URL,
		Options: store.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	return dead
}
