package streaminput_test

// Equivalent mutants (no input tells them apart from the real code):
//
//   - modea.go:351:19 > -> >=: when len(p) equals c.left, p[:c.left] is p
//     itself, so the read is the same.
//   - shared.go:463:23 > -> >=: time.Since(last) is a monotonic reading in
//     nanoseconds; it equals IdleTimeout exactly only by coincidence, and
//     the next turn of the loop decides the same way a moment later.
//   - shared.go:450:46 * -> /: the first back-off of a follower whose very
//     first read fails (judged equivalent before; not tested here).

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// shrStore is a replica's shared Redis store, instrumented: it counts the
// chunk reloads, records the follower's long-poll reads, and injects
// failures into the answer's mirror and the follower's reads.
type shrStore struct {
	*store.RedisStore

	chunkReads   atomic.Int64
	failAppends  atomic.Int32 // the next n AppendResult calls fail
	conflictNext atomic.Bool  // the next conditional record update conflicts
	slowArmed    atomic.Bool  // the next session read takes slowGet
	slowGet      time.Duration

	mu         sync.Mutex
	polls      []shrPoll     // every ReadResult call
	failWindow time.Duration // once a read returned parts, reads fail for this long
	armed      bool
	failStart  time.Time
	failures   int
	recovered  bool // a read succeeded after the failure window
}

// shrPoll is one ReadResult call: its long-poll wait, and how much longer
// than that wait its context allows.
type shrPoll struct {
	wait, slack time.Duration
}

func (s *shrStore) Chunks(ctx context.Context, id string) ([]store.Chunk, error) {
	s.chunkReads.Add(1)
	return s.RedisStore.Chunks(ctx, id)
}

func (s *shrStore) UpdateInputSessionIf(ctx context.Context, sess store.InputSession, prev time.Time) error {
	if s.conflictNext.CompareAndSwap(true, false) {
		s.slowArmed.Store(true)
		return store.ErrConflict
	}
	return s.RedisStore.UpdateInputSessionIf(ctx, sess, prev)
}

func (s *shrStore) GetInputSession(ctx context.Context, id string) (store.InputSession, error) {
	if s.slowArmed.CompareAndSwap(true, false) {
		select {
		case <-time.After(s.slowGet):
		case <-ctx.Done():
			return store.InputSession{}, ctx.Err()
		}
	}
	return s.RedisStore.GetInputSession(ctx, id)
}

func (s *shrStore) AppendResult(ctx context.Context, id string, off int64, p store.ResultPart) error {
	if s.failAppends.Add(-1) >= 0 {
		return errors.New("redis: connection reset by peer")
	}
	return s.RedisStore.AppendResult(ctx, id, off, p)
}

func (s *shrStore) ReadResult(ctx context.Context, id, cursor string, wait time.Duration) ([]store.ResultPart, string, error) {
	s.mu.Lock()
	p := shrPoll{wait: wait}
	if dl, ok := ctx.Deadline(); ok {
		p.slack = time.Until(dl) - wait
	}
	s.polls = append(s.polls, p)
	if s.armed && s.failWindow > 0 && !s.recovered {
		if s.failStart.IsZero() {
			s.failStart = time.Now()
		}
		if time.Since(s.failStart) < s.failWindow {
			s.failures++
			s.mu.Unlock()
			return nil, cursor, errors.New("redis: i/o timeout")
		}
		s.recovered = true
	}
	s.mu.Unlock()
	parts, next, err := s.RedisStore.ReadResult(ctx, id, cursor, wait)
	if err == nil && len(parts) > 0 {
		s.mu.Lock()
		s.armed = true
		s.mu.Unlock()
	}
	return parts, next, err
}

// shrReplica is one gateway replica (its own fake upstream) over the
// shared Redis srv, with opts.
func shrReplica(t *testing.T, srv *redistest.Server, opts streaminput.Options) (*env, *shrStore) {
	t.Helper()
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() }) // after the replica's own cleanup
	st := &shrStore{RedisStore: rs}
	opts.Store = st
	return newEnv(t, envConfig{noStore: true, opts: opts}), st
}

// shrClosed reads sluice_streaming_input_sessions_closed_total for reason.
func shrClosed(t *testing.T, e *env, reason string) float64 {
	t.Helper()
	return metricValue(t, e, "sluice_streaming_input_sessions_closed_total", reason)
}

// shrAwaitDone waits until the session's record says its answer ended.
func shrAwaitDone(t *testing.T, st *shrStore, id string) {
	t.Helper()
	eventually(t, 10*time.Second, "the record of the ended answer", func() bool {
		rec, err := st.GetInputSession(context.Background(), id)
		return err == nil && strings.HasSuffix(rec.State, "+done")
	})
}

// shrAnswerText reads the session's answer on e to its end and returns its
// text (it must complete).
func shrAnswerText(t *testing.T, e *env, id string) string {
	t.Helper()
	_, evs, _ := e.result(id, "")
	return completedText(t, evs)
}

// shrOpenResult starts reading GET …/result on e, bounded by ctx, and
// returns the event reader.
func shrOpenResult(t *testing.T, ctx context.Context, e *env, id string) *sse.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result", nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("result on %s: %d %v", e.url, resp.StatusCode, resp.Header)
	}
	return sse.NewReader(resp.Body, 1<<20)
}

// TestShrReadTimeoutBoundsOnlyTheBody: ReadTimeout bounds the arrival of a
// REST body, not the work after it: a finish without a body that has to
// read the session again (another replica wrote it) from a store slower
// than ReadTimeout still succeeds, rather than being cut as if the client
// had left.
func TestShrReadTimeoutBoundsOnlyTheBody(t *testing.T) {
	srv := redistest.Start(t)
	e, st := shrReplica(t, srv, streaminput.Options{ReadTimeout: 100 * time.Millisecond})
	st.slowGet = 600 * time.Millisecond
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e.mustChunk(id, textChunk(0, "one", false))
	st.conflictNext.Store(true)
	if code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", ""); code != http.StatusOK {
		t.Fatalf("finish: %d %s", code, b)
	}
	if st.conflictNext.Load() || st.slowArmed.Load() {
		t.Fatal("the finish did not go through the conflict and the slow read")
	}
	shrAnswerText(t, e, id)
}

// TestShrFollowerKeepsWhatTheUpstreamSaw: a replica following an answer
// another replica ran keeps reporting what that upstream request was built
// from (its chunk count and start time) after it reloads the session for a
// late chunk written elsewhere, the same as the running replica reports.
func TestShrFollowerKeepsWhatTheUpstreamSaw(t *testing.T) {
	srv := redistest.Start(t)
	r1, st1 := shrReplica(t, srv, streaminput.Options{})
	r2, _ := shrReplica(t, srv, streaminput.Options{})
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	if a := r1.mustChunk(id, textChunk(0, "one ", false)); !a.Started {
		t.Fatalf("chunk 0 did not start the request: %+v", a)
	}
	shrAnswerText(t, r1, id)
	shrAwaitDone(t, st1, id)
	shrAnswerText(t, r2, id)                      // replica 2 follows it
	r1.mustChunk(id, textChunk(1, "late", false)) // replica 2's copy is now behind
	_, want := r1.status(id)
	code, got := r2.status(id)
	if want.UpstreamSaw == nil || want.UpstreamSaw.Chunks != 1 || want.UpstreamSaw.StartedAt == 0 {
		t.Fatalf("the running replica's status: %+v", want.UpstreamSaw)
	}
	if code != http.StatusOK || got.ReceivedChunks != 2 || got.UpstreamSaw == nil || *got.UpstreamSaw != *want.UpstreamSaw {
		t.Fatalf("the following replica after reloading: %d %+v (upstream_saw %+v), want upstream_saw %+v", code, got, got.UpstreamSaw, *want.UpstreamSaw)
	}
}

// TestShrReloadRearmsTheIdleTimer: when a replica reloads a session
// another replica changed, its idle timer follows the reloaded expiry (on
// the replica's own clock): a copy whose expiry has passed there is let go
// of as idle at once, not an IdleTimeout later.
func TestShrReloadRearmsTheIdleTimer(t *testing.T) {
	srv := redistest.Start(t)
	clk1, clk2 := newSessClock(), newSessClock()
	now := time.Now()
	clk1.Set(now)
	clk2.Set(now)
	opts := func(c *sessClock) streaminput.Options {
		return streaminput.Options{IdleTimeout: time.Hour, Now: c.Now}
	}
	r1, _ := shrReplica(t, srv, opts(clk1))
	r2, _ := shrReplica(t, srv, opts(clk2))
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	if code, _ := r2.status(id); code != http.StatusOK { // replica 2 loads it
		t.Fatalf("status on replica 2: %d", code)
	}
	clk1.Set(now.Add(time.Second))
	r1.mustChunk(id, textChunk(0, "one", false)) // expires an hour later
	clk2.Set(now.Add(2 * time.Hour))             // past that, on replica 2's clock
	if code, st := r2.status(id); code != http.StatusOK || st.NextSequenceID != 1 {
		t.Fatalf("status on replica 2 after the chunk on replica 1: %d %+v", code, st)
	}
	eventually(t, 10*time.Second, "replica 2 lets go of the expired copy", func() bool {
		return shrClosed(t, r2, "idle") == 1
	})
	if code, st := r1.status(id); code != http.StatusOK || st.NextSequenceID != 1 {
		t.Fatalf("replica 1 lost the session: %d %+v", code, st)
	}
}

// TestShrTotalBytesAfterReload: a replica that reloads a session another
// replica added chunks to counts exactly the reloaded bytes against its
// MaxTotalBytes: a chunk the real total leaves no room for is refused
// (503 server_overloaded), one that fits is accepted.
func TestShrTotalBytesAfterReload(t *testing.T) {
	const total = 1_000_000
	srv := redistest.Start(t)
	r1, _ := shrReplica(t, srv, streaminput.Options{})
	r2, _ := shrReplica(t, srv, streaminput.Options{MaxTotalBytes: total})
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r1.mustChunk(id, textChunk(0, strings.Repeat("a", 200_000), false))
	if code, _ := r2.status(id); code != http.StatusOK { // replica 2 holds 200 000 bytes and the template
		t.Fatalf("status on replica 2: %d", code)
	}
	r1.mustChunk(id, textChunk(1, strings.Repeat("b", 100_000), false)) // replica 2 reloads: 300 000 bytes
	for _, tt := range []struct {
		size int
		fits bool
	}{
		{750_000, false}, // 1 050 000 and more: over
		{650_000, true},  // 950 000 and the template: within
	} {
		code, b := r2.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/chunks", textChunk(2, strings.Repeat("c", tt.size), false))
		if tt.fits {
			if code != http.StatusAccepted {
				t.Fatalf("a %d-byte chunk on replica 2: %d %.300s, want it accepted", tt.size, code, b)
			}
			continue
		}
		wantError(t, "a chunk past MaxTotalBytes", code, b, http.StatusServiceUnavailable, "server_overloaded")
	}
}

// TestShrMirrorEndsDuringClose: a replica shutting down still writes the
// end of the answer it was running to the shared store, so a reader
// following it on another replica gets the same terminal event
// (upstream_unavailable: the gateway is shutting down) right away, not
// stream_incomplete after its idle timeout.
func TestShrMirrorEndsDuringClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r1, r2, id := shrRunningOnFirst(t, ctx, 3*time.Second)
	rd := shrOpenResult(t, ctx, r2, id) // following the answer from the store
	if ev, err := rd.Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event on replica 2: %s %v", ev.Data, err)
	}
	if err := r1.mgr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := rd.Next()
		if err != nil {
			t.Fatalf("replica 2's reader ended without a terminal event: %v", err)
		}
		if typ := eventType(ev); typ == "response.failed" {
			if code := failureCode(ev); code != "upstream_unavailable" {
				t.Fatalf("replica 2's reader got %s, want the shutdown's upstream_unavailable", ev.Data)
			}
			return
		}
	}
}

// TestShrMirrorRetriesAFailedAppend: a store write of the answer that
// fails once (a dropped connection) is retried, so the reader following
// the answer on another replica still gets all of it.
func TestShrMirrorRetriesAFailedAppend(t *testing.T) {
	srv := redistest.Start(t)
	r1, st1 := shrReplica(t, srv, streaminput.Options{})
	r2, _ := shrReplica(t, srv, streaminput.Options{IdleTimeout: 3 * time.Second})
	st1.failAppends.Store(1)
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r1.mustChunk(id, textChunk(0, "one", true))
	want := shrAnswerText(t, r1, id)
	if got := shrAnswerText(t, r2, id); got != want {
		t.Fatalf("replica 2 relayed %q, replica 1 %q", got, want)
	}
}

// TestShrFollowerPollsTheStore: a replica following an answer long-polls
// the shared store (each read waits for the next part, with a deadline
// beyond that wait, so an empty wait is not an error), and after reads
// that succeeded it retries a failing store with the initial back-off, not
// in a tight loop.
func TestShrFollowerPollsTheStore(t *testing.T) {
	srv := redistest.Start(t)
	r1, _ := shrReplica(t, srv, streaminput.Options{})
	r2, st2 := shrReplica(t, srv, streaminput.Options{})
	st2.mu.Lock()
	st2.failWindow = 250 * time.Millisecond
	st2.mu.Unlock()
	r1.up.SetDefault(upstreamHangScript())
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	r1.mustChunk(id, textChunk(0, "run", false))
	if code, st := r2.status(id); code != http.StatusOK || !st.Started { // replica 2 follows the answer
		t.Fatalf("status on replica 2: %d %+v", code, st)
	}
	eventually(t, 15*time.Second, "the follower reads again after the failures", func() bool {
		st2.mu.Lock()
		defer st2.mu.Unlock()
		return st2.recovered
	})
	st2.mu.Lock()
	polls, failures := append([]shrPoll(nil), st2.polls...), st2.failures
	st2.mu.Unlock()
	// Failing from 0 for 250ms, reads 100ms then 200ms apart fail at most twice.
	if failures < 1 || failures > 3 {
		t.Errorf("%d failed reads within the failure window, want 1-3 (back-off from 100ms)", failures)
	}
	for i, p := range polls {
		if p.wait <= 0 {
			t.Fatalf("read %d does not wait for a part (wait %v): the follower would spin", i, p.wait)
		}
		if p.slack < time.Second {
			t.Fatalf("read %d may run %v past its %v wait, want its deadline well beyond the wait", i, p.slack, p.wait)
		}
	}
}

// TestShrFollowerGivesUpOnASilentRunner: a reader following an answer on
// another replica ends with a terminal stream_incomplete once it has heard
// nothing of the runner for IdleTimeout (the follower's): here its replica
// can no longer read the store at all, so neither the answer's parts nor
// the session's record (the runner's sign of life) reach it. A quiet
// runner whose record is kept alive is not given up (shared_liveness_test.go).
func TestShrFollowerGivesUpOnASilentRunner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	srv := redistest.Start(t)
	r1, _ := shrReplica(t, srv, streaminput.Options{})
	r2, st2 := shrReplica(t, srv, streaminput.Options{IdleTimeout: 500 * time.Millisecond})
	st2.mu.Lock()
	st2.failWindow = time.Hour // once the follower has read a part, its reads fail
	st2.mu.Unlock()
	r1.up.SetDefault(upstreamHangScript())
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	r1.mustChunk(id, textChunk(0, "run", false))
	if ev, err := shrOpenResult(t, ctx, r1, id).Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event on replica 1: %s %v", ev.Data, err)
	}
	rd := shrOpenResult(t, ctx, r2, id)
	var types []string
	for {
		ev, err := rd.Next()
		if err != nil {
			t.Fatalf("replica 2's reader ended without a terminal event after %v: %v", types, err)
		}
		types = append(types, eventType(ev))
		if eventType(ev) == "response.failed" {
			if code := failureCode(ev); code != "stream_incomplete" {
				t.Fatalf("terminal event %s, want stream_incomplete", ev.Data)
			}
			return
		}
	}
}

// shrRunningOnFirst starts two replicas over one Redis (the second with
// idle timeout idle) and a session whose answer replica 1 runs and holds
// open after its response.created, read there once.
func shrRunningOnFirst(t *testing.T, ctx context.Context, idle time.Duration) (r1, r2 *env, id string) {
	t.Helper()
	srv := redistest.Start(t)
	r1, _ = shrReplica(t, srv, streaminput.Options{})
	r2, _ = shrReplica(t, srv, streaminput.Options{IdleTimeout: idle})
	r1.up.SetDefault(upstreamHangScript())
	id = r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	r1.mustChunk(id, textChunk(0, "run", false))
	if ev, err := shrOpenResult(t, ctx, r1, id).Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event on replica 1: %s %v", ev.Data, err)
	}
	return r1, r2, id
}
