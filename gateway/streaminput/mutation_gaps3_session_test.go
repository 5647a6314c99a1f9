package streaminput_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// Sessions' byte caps at their exact boundary, a failed create's slot,
// expiry under an injected clock, what a restart does with a session whose
// answer ended (or failed in a drain), how a dispatch's end is reported,
// late chunks, and a finish under endless shared-store conflicts.
// Judged equivalent, so not tested:
//   - manager.go:165:14 != -> ==: every session in the map has its idle
//     timer (create and restoreOne set it just after adding the session;
//     only a Close racing that instant could see none), so the mutant only
//     leaves durable sessions' timers running past Close; when one fires,
//     onIdle returns at once because the Manager is closing.
//   - session.go:580:12 != -> ==: the same for a closed session's idle
//     timer: left running, it finds the session closed and returns.
//   - manager.go:264:44 <= -> <: a key's count left at zero in the map is
//     read exactly like an absent one (0 sessions), so nothing is refused.
//   - manager.go:461:60 > -> >=: the chunk that set the end is held, so the
//     in-order prefix never stops exactly at the end's sequence id.
//   - session.go:202:32 > -> >=: a chunk numbered maxSeq is already held
//     and is answered as a duplicate or conflict before this line.
//   - session.go:217:34 > -> >=: as manager.go:461: next never equals endSeq.
//   - session.go:365:36 > -> >= and 368:28 > -> >=: when equal, top is set
//     to the value it already has.
//   - session.go:368:25 + -> - and 368:28 > -> <=: gaps are only computed
//     for an unfinished input, where an end set by a chunk is the highest
//     id received (so endSeq+1 equals top) and endSeq-1 never exceeds top
//     (an end at 0 would have finished the input).
//   - session.go:671:8 >= -> >: a chunk numbered next would have advanced
//     next, so none is held there.

const sessPlainTemplate = `{"model":"gpt-fake-1","input":"Q: "}` // not streamed: the answer is one JSON body

// sessClock is an injected clock a test moves by hand.
type sessClock struct {
	mu sync.Mutex
	t  time.Time
}

func newSessClock() *sessClock { return &sessClock{t: time.Unix(1_700_000_000, 0)} }

func (c *sessClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *sessClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// sessGauge reads sluice_streaming_input_sessions for one state.
func sessGauge(t *testing.T, e *env, state string) float64 {
	t.Helper()
	return metricValue(t, e, "sluice_streaming_input_sessions", state)
}

// sessHeldDispatch answers a dispatched request only when the test says
// with which status (or when the request is cancelled).
type sessHeldDispatch struct {
	entered chan struct{}
	release chan int
}

func newSessHeldDispatch() *sessHeldDispatch {
	return &sessHeldDispatch{entered: make(chan struct{}, 4), release: make(chan int, 1)}
}

func (d *sessHeldDispatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.entered <- struct{}{}
	select {
	case code := <-d.release:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"id":"resp_1","object":"response","status":"completed","output":[]}`))
	case <-r.Context().Done():
	}
}

func (d *sessHeldDispatch) awaitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-d.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not dispatched")
	}
}

func sessOpenPebble(t *testing.T) *store.PebbleStore {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the env's own cleanup
	return st
}

// sessFlakyStore fails the next failCreate session creations.
type sessFlakyStore struct {
	store.InputSessionStore
	failCreate atomic.Int32
}

func (s *sessFlakyStore) CreateInputSession(ctx context.Context, sess store.InputSession) error {
	if s.failCreate.Add(-1) >= 0 {
		return errors.New("disk on fire")
	}
	return s.InputSessionStore.CreateInputSession(ctx, sess)
}

// sessGatedChunks holds the next Chunks read, once armed, until released.
type sessGatedChunks struct {
	store.InputSessionStore
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *sessGatedChunks) Chunks(ctx context.Context, id string) ([]store.Chunk, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.entered <- struct{}{}
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.InputSessionStore.Chunks(ctx, id)
}

// sessConflictStore is a shared store where every conditional record
// update finds the session changed by another replica.
type sessConflictStore struct {
	*store.RedisStore
}

func (s sessConflictStore) UpdateInputSessionIf(context.Context, store.InputSession, time.Time) error {
	return store.ErrConflict
}

// TestSess3TotalBytesCapExactBoundary: the sessions may hold exactly
// MaxTotalBytes together (template plus payload); one byte more is refused
// as overloaded and the session stays open for a retry.
func TestSess3TotalBytesCapExactBoundary(t *testing.T) {
	const room = 10
	e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{MaxTotalBytes: int64(len(respTemplate)) + room}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	for _, tt := range []struct {
		name     string
		chunk    string
		wantCode int
	}{
		{"one byte over", textChunk(0, strings.Repeat("y", room+1), false), http.StatusServiceUnavailable},
		{"exactly the cap", textChunk(0, strings.Repeat("x", room), false), http.StatusAccepted},
		{"over a full cap", textChunk(1, "z", false), http.StatusServiceUnavailable},
	} {
		code, _, ae := e.chunk(id, tt.chunk)
		if code != tt.wantCode {
			t.Fatalf("%s: %d %+v, want %d", tt.name, code, ae, tt.wantCode)
		}
		if code == http.StatusServiceUnavailable && ae.code() != streaminput.CodeServerOverloaded {
			t.Fatalf("%s: code %q", tt.name, ae.code())
		}
	}
	if code, st := e.status(id); code != http.StatusOK || st.ReceivedBytes != room {
		t.Fatalf("the session after the refusals: %d %+v", code, st)
	}
}

// TestSess3FailedCreateFreesItsSlot: a create the store refuses gives back
// its place under MaxSessions, so the next create gets it.
func TestSess3FailedCreateFreesItsSlot(t *testing.T) {
	fs := &sessFlakyStore{InputSessionStore: sessOpenPebble(t)}
	e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: fs, MaxSessions: 1, MaxSessionsPerKey: 1}})
	fs.failCreate.Store(2)
	for range 2 {
		code, b := e.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", respTemplate))
		wantError(t, "a create the store refuses", code, b, http.StatusServiceUnavailable, "store_unavailable")
	}
	e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
}

// TestSess3RestoreWithGapBeforeEnd: a session that received its end chunk
// with a gap before it is still open after a restart: the missing chunk
// is accepted and completes (and starts) it.
func TestSess3RestoreWithGapBeforeEnd(t *testing.T) {
	dir := t.TempDir()
	e1 := newEnv(t, envConfig{dir: dir})
	id := e1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e1.mustChunk(id, textChunk(0, "a ", false))
	e1.mustChunk(id, textChunk(2, "c", true))
	e1.stop()

	e2 := newEnv(t, envConfig{dir: dir})
	if code, st := e2.status(id); code != http.StatusOK || st.State != "open" || st.Started || st.NextSequenceID != 1 {
		t.Fatalf("restored status: %d %+v", code, st)
	}
	if a := e2.mustChunk(id, textChunk(1, "b ", false)); !a.Started || a.State != "finished" || a.NextSequenceID != 3 {
		t.Fatalf("the missing chunk after a restart: %+v", a)
	}
	if got := inputOf(t, e2.upstreamRequest(0).Body); got != "Q: a b c" {
		t.Fatalf("upstream input %q", got)
	}
}

// TestSess3AnswerEndAndRestart: how an answer ended decides what a restart
// does with its session. An answer that ended on its own (also during a
// drain, when it completed) is recorded as done: after a restart it is not
// sent again and reads as lost. One that failed during the drain (the
// gateway shutting down under it) keeps its started state and is sent
// again by the next process.
func TestSess3AnswerEndAndRestart(t *testing.T) {
	for _, tt := range []struct {
		name       string
		drain      bool
		status     int
		wantResent bool
	}{
		{"completed", false, http.StatusOK, false},
		{"failed", false, http.StatusBadGateway, false},
		{"completed during a drain", true, http.StatusOK, false},
		{"failed during a drain", true, http.StatusServiceUnavailable, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d := newSessHeldDispatch()
			e1 := newEnv(t, envConfig{dir: dir, dispatch: d})
			id := e1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", sessPlainTemplate))
			e1.mustChunk(id, textChunk(0, "x", true))
			d.awaitEntered(t)
			if tt.drain {
				e1.mgr.Drain()
			}
			d.release <- tt.status
			eventually(t, 10*time.Second, "the answer is recorded as ended", func() bool { return sessGauge(t, e1, "completed") == 1 })
			if logs := e1.logs.String(); strings.Contains(logs, "could not record the end of the answer") {
				t.Fatalf("recording the end of the answer was logged as failed:\n%s", logs)
			}
			e1.stop()

			e2 := newEnv(t, envConfig{dir: dir})
			if tt.wantResent {
				if got := inputOf(t, e2.upstreamRequest(0).Body); got != "Q: x" {
					t.Fatalf("re-sent input %q", got)
				}
				eventually(t, 10*time.Second, "the re-sent answer completes", func() bool {
					_, st := e2.status(id)
					return st.Result != nil && st.Result.Status == "completed"
				})
				return
			}
			if code, st := e2.status(id); code != http.StatusOK || st.Result == nil || st.Result.Status != "unavailable" {
				t.Fatalf("status after the restart: %d %+v", code, st)
			}
			resp, _, b := e2.result(id, "")
			if resp.StatusCode != http.StatusGone || decodeError(t, b).code() != streaminput.CodeResultGone {
				t.Fatalf("result after the restart: %d %s", resp.StatusCode, b)
			}
		})
	}
}

// TestSess3DispatchEndings: a dispatch that panics ends the answer with a
// 500 internal error, one that returns without answering with a 502
// stream_incomplete; only the first is logged as a panic.
func TestSess3DispatchEndings(t *testing.T) {
	for _, tt := range []struct {
		name     string
		dispatch http.HandlerFunc
		want     int
		panicLog bool
	}{
		{"panics", func(http.ResponseWriter, *http.Request) { panic("boom") }, http.StatusInternalServerError, true},
		{"returns silently", func(http.ResponseWriter, *http.Request) {}, http.StatusBadGateway, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envConfig{noStore: true, dispatch: tt.dispatch})
			id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", sessPlainTemplate))
			e.mustChunk(id, textChunk(0, "x", true))
			resp, _, b := e.result(id, "")
			if resp.StatusCode != tt.want || decodeError(t, b).code() != "stream_incomplete" {
				t.Fatalf("answer: %d %s, want %d", resp.StatusCode, b, tt.want)
			}
			if got := strings.Contains(e.logs.String(), "dispatch panicked"); got != tt.panicLog {
				t.Fatalf("panic logged: %v, want %v", got, tt.panicLog)
			}
		})
	}
}

// TestSess3LateChunkNotInRequest: a chunk accepted after the upstream
// request started, while the request is still being assembled from the
// store, is kept (counted late) but not sent: the request holds exactly
// the chunks it started with.
func TestSess3LateChunkNotInRequest(t *testing.T) {
	gs := &sessGatedChunks{InputSessionStore: sessOpenPebble(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: gs}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	gs.armed.Store(true)
	if a := e.mustChunk(id, textChunk(0, "c0", false)); !a.Started {
		t.Fatalf("chunk 0: %+v", a)
	}
	select {
	case <-gs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never read its chunks")
	}
	e.mustChunk(id, textChunk(1, "c1", false))
	close(gs.release)
	_, evs, _ := e.result(id, "")
	if len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("result: %v", eventTypes(evs))
	}
	if got := inputOf(t, e.upstreamRequest(0).Body); got != "Q: c0" {
		t.Fatalf("upstream input %q", got)
	}
	if _, st := e.status(id); st.LateChunks != 1 || st.UpstreamSaw == nil || st.UpstreamSaw.Chunks != 1 {
		t.Fatalf("status: %+v", st)
	}
}

// TestSess3IdleExpiryWithInjectedClock: a session closes when the clock
// reaches its expiry exactly, and a session whose answer ran past the idle
// timeout is kept alive while it runs and closes an idle timeout after the
// answer ended.
func TestSess3IdleExpiryWithInjectedClock(t *testing.T) {
	const idle = 50 * time.Millisecond
	t.Run("at expiry exactly", func(t *testing.T) {
		clk := newSessClock()
		t0 := clk.Now()
		e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{IdleTimeout: idle, Now: clk.Now}})
		id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
		clk.Set(t0.Add(idle))
		eventually(t, 5*time.Second, "the session closes at its expiry", func() bool {
			code, _ := e.status(id)
			return code == http.StatusNotFound
		})
	})
	t.Run("after a long answer", func(t *testing.T) {
		clk := newSessClock()
		t0 := clk.Now()
		d := newSessHeldDispatch()
		e := newEnv(t, envConfig{noStore: true, dispatch: d, opts: streaminput.Options{IdleTimeout: idle, Now: clk.Now}})
		id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", sessPlainTemplate))
		e.mustChunk(id, textChunk(0, "x", false))
		d.awaitEntered(t)
		later := t0.Add(time.Hour)
		clk.Set(later)
		eventually(t, 5*time.Second, "the running session is kept alive", func() bool {
			_, st := e.status(id)
			return st.ExpiresAt == later.Add(idle).Unix()
		})
		d.release <- http.StatusOK
		eventually(t, 5*time.Second, "the answer ends", func() bool { return sessGauge(t, e, "completed") == 1 })
		if code, _ := e.status(id); code != http.StatusOK {
			t.Fatalf("the session closed before its clock moved on: %d", code)
		}
		clk.Set(later.Add(time.Hour))
		eventually(t, 5*time.Second, "the session closes after its answer", func() bool {
			code, _ := e.status(id)
			return code == http.StatusNotFound
		})
	})
}

// TestSess3FinishGivesUpOnEndlessConflicts: with a shared store where
// every finish write finds the session changed by another replica, the
// finish reads the session again a bounded number of times, then answers
// 503 store_unavailable (the client may retry).
func TestSess3FinishGivesUpOnEndlessConflicts(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: sessConflictStore{rs}}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e.mustChunk(id, textChunk(0, "x", false))
	code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", "")
	wantError(t, "a finish that always conflicts", code, b, http.StatusServiceUnavailable, "store_unavailable")
	if logs := e.logs.String(); !strings.Contains(logs, "changed by other replicas on every try") || !strings.Contains(logs, "tries=16") {
		t.Fatalf("the give-up is not logged with its tries:\n%s", logs)
	}
	if code, st := e.status(id); code != http.StatusOK || st.State != "open" || st.Started {
		t.Fatalf("status after the failed finish: %d %+v", code, st)
	}
}
