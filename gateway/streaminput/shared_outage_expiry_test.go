package streaminput_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// blindStore is a replica's shared Redis store that, once blind, cannot
// read an answer or a session's record, as during a Redis outage seen from
// that replica only.
type blindStore struct {
	*store.RedisStore
	blind atomic.Bool
}

func (s *blindStore) ReadResult(ctx context.Context, id, after string, wait time.Duration) ([]store.ResultPart, string, error) {
	if s.blind.Load() {
		return nil, after, fmt.Errorf("store: read result: %w", store.ErrUnavailable)
	}
	return s.RedisStore.ReadResult(ctx, id, after, wait)
}

func (s *blindStore) GetInputSession(ctx context.Context, id string) (store.InputSession, error) {
	if s.blind.Load() {
		return store.InputSession{}, fmt.Errorf("store: get input session: %w", store.ErrUnavailable)
	}
	return s.RedisStore.GetInputSession(ctx, id)
}

// openRedisStore is a new client of the Redis srv, closed with the test.
func openRedisStore(t *testing.T, srv *redistest.Server) *store.RedisStore {
	t.Helper()
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

// startedReader opens GET …/result on e and reads the answer's first event.
func startedReader(t *testing.T, ctx context.Context, e *env, id string) *sse.Reader {
	t.Helper()
	rd := shrOpenResult(t, ctx, e, id)
	if ev, err := rd.Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event on %s: %s %v", e.url, ev.Data, err)
	}
	return rd
}

// readHangingAnswer has runner start a session's answer that hangs after
// its first event, and returns the session's id and a reader of the answer
// on reader, past its response.created.
func readHangingAnswer(t *testing.T, runner, reader *env) (id string, rd *sse.Reader) {
	t.Helper()
	runner.up.SetDefault(upstreamHangScript())
	id = runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return id, startedReader(t, ctx, reader, id)
}

// failedWith reads rd to its end and returns the message of its terminal
// response.failed, failing unless it is stream_incomplete.
func failedWith(t *testing.T, name string, rd *sse.Reader) string {
	t.Helper()
	evs := restOf(t, name, rd)
	if len(evs) == 0 {
		t.Fatalf("the %s's reader got no terminal event", name)
	}
	last := evs[len(evs)-1]
	if eventType(last) != "response.failed" || failureCode(last) != "stream_incomplete" {
		t.Fatalf("the %s's reader ended with %s, want response.failed stream_incomplete", name, last.Data)
	}
	return string(responseOf(t, last).Error)
}

// TestSharedFollowerCannotReadTheStore: the replica following an answer
// cannot read Redis for longer than the session's idle timeout, while the
// replica running the answer is alive and keeps the session alive. Its
// reader ends with stream_incomplete saying the store could not be read,
// not that the running replica stopped sending the answer.
func TestSharedFollowerCannotReadTheStore(t *testing.T) {
	srv := redistest.Start(t)
	opts := streaminput.Options{IdleTimeout: 3 * time.Second}
	runnerOpts := opts
	runnerOpts.Store = openRedisStore(t, srv)
	runner := newEnv(t, envConfig{noStore: true, opts: runnerOpts})
	blind := &blindStore{RedisStore: openRedisStore(t, srv)}
	otherOpts := opts
	otherOpts.Store = blind
	other := newEnv(t, envConfig{noStore: true, opts: otherOpts})

	_, rd := readHangingAnswer(t, runner, other)
	blind.blind.Store(true)
	msg := failedWith(t, "other replica", rd)
	if !strings.Contains(msg, "could not read") || strings.Contains(msg, "stopped sending") {
		t.Fatalf("the other replica's reader was told %s; want the store could not be read", msg)
	}
}

// TestSharedRecordExpiredDuringOutage: the replica running an answer
// cannot write Redis for longer than the session's idle timeout, so the
// session's record, which it refreshes while the answer runs, expires
// there. Once Redis takes writes again, the runner's next refresh finds the
// record gone: its reader ends with stream_incomplete saying the session
// could not be kept in the store during an outage, not that the store lost
// it (a Redis restart without persistence, FLUSHALL, an eviction).
func TestSharedRecordExpiredDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	rs := openRedisStore(t, srv)
	st := &outageStore{RedisStore: rs}
	runner := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: st, IdleTimeout: 3 * time.Second}})
	id, rd := readHangingAnswer(t, runner, runner)

	st.refuseUpdates.Store(1 << 40)
	eventually(t, 20*time.Second, "the record expires in Redis", func() bool {
		_, err := rs.GetInputSession(context.Background(), id)
		return errors.Is(err, store.ErrNotFound)
	})
	st.refuseUpdates.Store(0)
	msg := failedWith(t, "runner", rd)
	if !strings.Contains(msg, "during an outage") || strings.Contains(msg, "lost") {
		t.Fatalf("the runner's reader was told %s; want the session could not be kept in the store during an outage", msg)
	}
}
