package streaminput_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// Closes racing with an answer across two replicas: whichever replica a
// DELETE or a byte-limit close goes to, and whenever it lands, every reader
// of the answer, on either replica, gets the same events and one terminal
// event (README "Several replicas").

// hookStore is a replica's shared Redis store that runs a test's hook
// before an append of the answer's parts (the mirror) and before a close
// is recorded: the place where a close through another replica lands.
type hookStore struct {
	*store.RedisStore
	beforeAppend atomic.Pointer[func(store.ResultPart)]
	beforeClose  atomic.Pointer[func()]
}

func (s *hookStore) AppendResult(ctx context.Context, id string, n int64, p store.ResultPart) error {
	if h := s.beforeAppend.Load(); h != nil {
		(*h)(p)
	}
	return s.RedisStore.AppendResult(ctx, id, n, p)
}

func (s *hookStore) CloseInputSession(ctx context.Context, id string, reason []byte, ttl time.Duration) error {
	if h := s.beforeClose.Load(); h != nil {
		(*h)()
	}
	return s.RedisStore.CloseInputSession(ctx, id, reason, ttl)
}

// hookReplica is one replica (its own fake upstream) over the shared Redis
// srv, with opts (its caps), whose store runs hooks.
func hookReplica(t *testing.T, srv *redistest.Server, opts streaminput.Options) (*env, *hookStore) {
	t.Helper()
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() }) // after the replica's own cleanup
	st := &hookStore{RedisStore: rs}
	opts.Store = st
	return newEnv(t, envConfig{noStore: true, opts: opts}), st
}

// holdPart makes st's mirror stop before appending the first part match
// accepts: the returned channel is closed when it has stopped there, and
// release lets it go on.
func holdPart(st *hookStore, match func(store.ResultPart) bool) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(p store.ResultPart) {
		if match(p) {
			once.Do(func() { close(h); <-r })
		}
	}
	st.beforeAppend.Store(&hook)
	var releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(r) }) }
	return h, release
}

// deleteThrough deletes session id through replica e; it may run in
// another goroutine (it never fails the test).
func deleteThrough(e *env, id string) (int, error) {
	req, _ := http.NewRequest(http.MethodDelete, e.url+streaminput.PathPrefix+"/"+id, nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// restOf reads the named reader's stream to its end.
func restOf(t *testing.T, name string, rd *sse.Reader) []sse.Event {
	t.Helper()
	var evs []sse.Event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatalf("the %s's reader: %v after %v", name, err, eventTypes(evs))
		}
		evs = append(evs, ev.Clone())
	}
}

// sameAnswer fails unless the runner's and the other replica's readers
// got the same events, ending with one terminal event, and returns it.
func sameAnswer(t *testing.T, runner, other []sse.Event) sse.Event {
	t.Helper()
	if len(runner) != len(other) {
		t.Fatalf("the runner's reader got %v, the other replica's %v", eventTypes(runner), eventTypes(other))
	}
	for i := range runner {
		if !bytes.Equal(runner[i].Data, other[i].Data) {
			t.Fatalf("event %d: the runner's reader got %s, the other replica's %s", i, runner[i].Data, other[i].Data)
		}
	}
	terminals := 0
	for _, ev := range runner {
		if typ := eventType(ev); typ == "response.failed" || typ == "response.completed" || typ == "response.incomplete" {
			terminals++
		}
	}
	if terminals != 1 || len(runner) == 0 {
		t.Fatalf("the readers got %v: want exactly one terminal event, last", eventTypes(runner))
	}
	return runner[len(runner)-1]
}

func waitHeld(t *testing.T, held <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatalf("the runner's mirror never reached %s", what)
	}
}

// TestSharedDeleteJustBeforeTheEnd: a DELETE through the other replica
// recorded after the runner's readers got response.completed, but before
// the runner wrote it to the store, ends the answer response.completed for
// the other replica's readers too: the runner had ended it first.
func TestSharedDeleteJustBeforeTheEnd(t *testing.T) {
	deleteBeforeTheEndIsWritten(t, 0)
}

// TestSharedByteLimitCloseElsewhereWhileRunning: a chunk over the byte
// limit sent to the replica that does not run the answer, while the
// runner's store writes lag behind its readers, fails the answer with the
// same events (every delta, and response.failed numbered alike) for the
// readers of both replicas.
func TestSharedByteLimitCloseElsewhereWhileRunning(t *testing.T) {
	srv := redistest.Start(t)
	opts := streaminput.Options{MaxSessionBytes: 64}
	runner, rst := hookReplica(t, srv, opts)
	other, _ := hookReplica(t, srv, opts)
	runner.up.SetDefault(upstreamtest.Answer("one two three four", 4).StallAfterDeltas(2))
	held, release := holdPart(rst, func(p store.ResultPart) bool { return p.Kind == store.ResultData })
	defer release()
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", false))
	waitHeld(t, held, "the answer's first bytes")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runnerRd, otherRd := shrOpenResult(t, ctx, runner, id), shrOpenResult(t, ctx, other, id)
	// The runner's readers have had the answer's deltas before the close.
	for {
		ev, err := runnerRd.Next()
		if err != nil {
			t.Fatalf("the runner's reader: %v", err)
		}
		if eventType(ev) == "response.output_text.delta" {
			break
		}
	}
	if code, _, e := other.chunk(id, textChunk(1, strings.Repeat("x", 100), false)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunk over the limit through the other replica: %d %+v", code, e)
	}
	release()
	otherEvs := restOf(t, "other replica", otherRd)
	// The runner's reader already read up to its first delta: compare from there.
	runnerEvs := restOf(t, "runner", runnerRd)
	if len(otherEvs) < len(runnerEvs) {
		t.Fatalf("the other replica's reader got %v, the runner's %v after its first delta", eventTypes(otherEvs), eventTypes(runnerEvs))
	}
	terminal := sameAnswer(t, runnerEvs, otherEvs[len(otherEvs)-len(runnerEvs):])
	if r := responseOf(t, terminal); eventType(terminal) != "response.failed" || !strings.Contains(string(r.Error), "payload_too_large") {
		t.Fatalf("the answer ended with %s, want response.failed with payload_too_large", terminal.Data)
	}
	if n := len(otherEvs) - len(runnerEvs); n < 1 || eventType(otherEvs[n-1]) != "response.output_text.delta" {
		t.Fatalf("the other replica's reader got %v before the runner's reader's remaining events", eventTypes(otherEvs[:n]))
	}
}

// TestSharedDeleteAndByteLimitCloseRace: a chunk over the byte limit sent
// to the runner and a DELETE through the other replica, both accepted; the
// DELETE is recorded first, so every reader's answer ends cancelled, not
// failed on one replica and cancelled on the other.
func TestSharedDeleteAndByteLimitCloseRace(t *testing.T) {
	srv := redistest.Start(t)
	opts := streaminput.Options{MaxSessionBytes: 64}
	runner, rst := hookReplica(t, srv, opts)
	other, _ := hookReplica(t, srv, opts)
	runner.up.SetDefault(upstreamHangScript())
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", false))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	readers := map[string]*sse.Reader{"runner": shrOpenResult(t, ctx, runner, id), "other replica": shrOpenResult(t, ctx, other, id)}
	for name, rd := range readers {
		if first, err := rd.Next(); err != nil || eventType(first) != "response.created" {
			t.Fatalf("first event of the %s's reader: %s %v", name, first.Data, err)
		}
	}
	// The DELETE lands between the runner's decision to close and its
	// record of that close.
	deleted := make(chan error, 1)
	var once sync.Once
	hook := func() {
		once.Do(func() {
			code, err := deleteThrough(other, id)
			if err == nil && code != http.StatusOK {
				err = errors.New("delete through the other replica: " + http.StatusText(code))
			}
			deleted <- err
		})
	}
	rst.beforeClose.Store(&hook)
	if code, _, e := runner.chunk(id, textChunk(1, strings.Repeat("x", 100), false)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunk over the limit through the runner: %d %+v", code, e)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	terminal := sameAnswer(t, restOf(t, "runner", readers["runner"]), restOf(t, "other replica", readers["other replica"]))
	if r := responseOf(t, terminal); eventType(terminal) != "response.failed" || r.Status != "cancelled" {
		t.Fatalf("the answer ended with %s, want response.failed with status cancelled (the DELETE was recorded first)", terminal.Data)
	}
}

// TestSharedDeleteWhileTheRunnerCannotWrite: the runner cannot reach the
// store (its write of the answer's end hangs, as in a partition) for longer
// than it takes the other replica to notice the DELETE made through it. The
// other replica's readers wait for the runner's end rather than make up
// their own: once the runner writes it, every reader gets the same
// response.completed its own readers got before it heard of the DELETE.
func TestSharedDeleteWhileTheRunnerCannotWrite(t *testing.T) {
	// Longer than the runner's quiet check (mirrorWatch) and any short
	// grace the other replica could give it: the runner is still cut off.
	deleteBeforeTheEndIsWritten(t, 11*time.Second)
}

// deleteBeforeTheEndIsWritten holds the runner's write of the part holding
// response.completed (its readers have it), deletes the session through
// the other replica, waits cutOff, lets the write go, and checks that every
// reader on both replicas gets the same events ending in that
// response.completed.
func deleteBeforeTheEndIsWritten(t *testing.T, cutOff time.Duration) {
	srv := redistest.Start(t)
	runner, rst := hookReplica(t, srv, streaminput.Options{})
	other, _ := hookReplica(t, srv, streaminput.Options{})
	held, release := holdPart(rst, func(p store.ResultPart) bool {
		return p.Kind == store.ResultData && bytes.Contains(p.Data, []byte("response.completed"))
	})
	defer release()
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", false))
	waitHeld(t, held, "response.completed")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+cutOff)
	defer cancel()
	runnerRd, otherRd := shrOpenResult(t, ctx, runner, id), shrOpenResult(t, ctx, other, id)
	if code, err := deleteThrough(other, id); code != http.StatusOK {
		t.Fatalf("delete through the other replica: %d %v", code, err)
	}
	time.Sleep(cutOff)
	release()
	terminal := sameAnswer(t, restOf(t, "runner", runnerRd), restOf(t, "other replica", otherRd))
	if eventType(terminal) != "response.completed" {
		t.Fatalf("the answer ended with %s, want the response.completed the runner's readers got first", terminal.Data)
	}
}
