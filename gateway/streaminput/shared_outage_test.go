package streaminput_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// outageStore is a replica's shared Redis store that fails its next
// refuseAppends writes of an answer (AppendResult) and its next
// refuseUpdates writes of a session's record (UpdateInputSessionIf) as an
// unreachable Redis does: an outage that outlasts a few quick retries.
type outageStore struct {
	*store.RedisStore
	refuseAppends, refuseUpdates atomic.Int64
}

func (s *outageStore) AppendResult(ctx context.Context, id string, n int64, p store.ResultPart) error {
	if s.refuseAppends.Add(-1) >= 0 {
		return fmt.Errorf("store: append result: %w", store.ErrUnavailable)
	}
	return s.RedisStore.AppendResult(ctx, id, n, p)
}

func (s *outageStore) UpdateInputSessionIf(ctx context.Context, rec store.InputSession, prev time.Time) error {
	if s.refuseUpdates.Add(-1) >= 0 {
		return fmt.Errorf("store: update input session: %w", store.ErrUnavailable)
	}
	return s.RedisStore.UpdateInputSessionIf(ctx, rec, prev)
}

// TestSharedStoreOutageWhileAnswerRuns: the store refuses the runner's
// writes of its answer and of the answer's end for longer than a few quick
// retries, the whole time the answer runs. Once it takes writes again, a
// reader on the other replica gets the whole answer and its real terminal
// event, and the record says the answer ended.
func TestSharedStoreOutageWhileAnswerRuns(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	st := &outageStore{RedisStore: rs}
	// A short idle timeout: a follower that lost the answer ends (with
	// stream_incomplete) soon rather than hang the test.
	opts := streaminput.Options{Store: st, IdleTimeout: 15 * time.Second}
	runner := newEnv(t, envConfig{noStore: true, opts: opts})
	other, _ := readReplica(t, srv)

	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	// The outage begins once the answer has started: every write of it,
	// and of its end in the record, fails for a while.
	st.refuseAppends.Store(6)
	st.refuseUpdates.Store(2)
	runner.mustChunk(id, textChunk(0, "run", true)) // starts the answer here
	_, evs, _ := runner.result(id, "")
	want := completedText(t, evs)

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	got, err := readEvents(ctx, other, id)
	if err != nil {
		t.Fatalf("the other replica's reader: %v (events %v)", err, eventTypes(got))
	}
	if text := completedText(t, got); text != want {
		t.Fatalf("the other replica's reader got %q, the runner's %q", text, want)
	}
	if len(got) != len(evs) {
		t.Fatalf("the other replica's reader got %d events, the runner's %d", len(got), len(evs))
	}
	eventually(t, 20*time.Second, "the record says the answer ended", func() bool {
		rec, err := rs.GetInputSession(context.Background(), id)
		return err == nil && strings.HasSuffix(rec.State, "+done")
	})
	code, status := other.status(id)
	if code != http.StatusOK || status.Result == nil || status.Result.Status != "completed" {
		t.Fatalf("status on the other replica: %d %+v (result %+v)", code, status, status.Result)
	}
}

// TestSharedByteLimitThroughOtherReplica: a chunk that breaks the
// session's byte limit on a replica that does not run its answer fails the
// answer for every reader with the session's error, on the runner too (not
// as if the session had been deleted).
func TestSharedByteLimitThroughOtherReplica(t *testing.T) {
	srv := redistest.Start(t)
	replica := func() *env {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		return newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: rs, MaxSessionBytes: 100}})
	}
	runner, other := replica(), replica()
	runner.up.SetDefault(upstreamHangScript())
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", false))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	readers, responseID := readersAtCreated(t, ctx, id, map[string]*env{"runner": runner, "other": other})
	code, _, ae := other.chunk(id, textChunk(1, strings.Repeat("b", 200), false))
	if code != http.StatusRequestEntityTooLarge || ae.code() != "payload_too_large" {
		t.Fatalf("chunk over the limit on the other replica: %d %+v", code, ae)
	}
	for name, rd := range readers {
		terminal := onlyTerminal(t, name, rd)
		r := responseOf(t, terminal)
		if eventType(terminal) != "response.failed" || r.Status != "failed" || r.ID != responseID || failureCode(terminal) != "payload_too_large" {
			t.Fatalf("the %s's reader ended with %s, want response.failed of %s, status failed, payload_too_large", name, terminal.Data, responseID)
		}
	}
}

// TestSharedRunnerDiedEndsReadersAlike: the replica running a session's
// answer stops writing to the store mid-answer (as one that died does). A
// replica that first sees the session when it takes the session's last
// chunk, and a reader there, end the answer with stream_incomplete (README
// "Several replicas"), not as a session that received nothing.
func TestSharedRunnerDiedEndsReadersAlike(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	dead := &outageStore{RedisStore: rs}
	opts := streaminput.Options{Store: dead, IdleTimeout: 3 * time.Second}
	runner := newEnv(t, envConfig{noStore: true, opts: opts})
	rs2, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs2.Close() })
	other := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: rs2, IdleTimeout: 3 * time.Second}})

	runner.up.SetDefault(upstreamHangScript())
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run ", false))
	eventually(t, 10*time.Second, "the runner shares the start of its answer", func() bool {
		parts, _, _ := rs.ReadResult(context.Background(), id, "", 0)
		for _, p := range parts {
			if p.Kind == store.ResultData {
				return true
			}
		}
		return false
	})
	// From here on the runner writes nothing more: neither its answer nor
	// the record that keeps the session alive while the answer runs.
	dead.refuseAppends.Store(1 << 40)
	dead.refuseUpdates.Store(1 << 40)

	other.mustChunk(id, textChunk(1, "late", true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := readEvents(ctx, other, id)
	if err != nil {
		t.Fatalf("the reader on the other replica: %v (events %v)", err, eventTypes(evs))
	}
	if len(evs) == 0 || eventType(evs[0]) != "response.created" {
		t.Fatalf("the reader on the other replica got %v", eventTypes(evs))
	}
	last := evs[len(evs)-1]
	if eventType(last) != "response.failed" || failureCode(last) != "stream_incomplete" {
		t.Fatalf("the reader on the other replica ended with %s, want response.failed stream_incomplete", last.Data)
	}
}

// TestSharedRedisRestartWhileAnswerRuns: Redis is killed while a session's
// answer runs and started again (with its AOF) once the answer has ended on
// the replica running it. The reader on the other replica, attached before
// the outage, gets the rest of the answer and its real terminal event.
func TestSharedRedisRestartWhileAnswerRuns(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsyncAlways: true})
	openReplica := func() *env {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		return newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: rs, IdleTimeout: 20 * time.Second}})
	}
	runner, other := openReplica(), openReplica()
	runner.up.SetDefault(upstreamtest.Script{Text: "one two three four five six seven eight nine ten", Deltas: 10, Gap: 200 * time.Millisecond})
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", true))

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	readers := map[string]*sse.Reader{"runner": shrOpenResult(t, ctx, runner, id), "other": shrOpenResult(t, ctx, other, id)}
	texts := map[string]string{}
	read := func(name string) {
		var evs []sse.Event
		for {
			ev, err := readers[name].Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("the %s's reader: %v (events %v)", name, err, eventTypes(evs))
			}
			evs = append(evs, ev.Clone())
		}
		texts[name] = completedText(t, evs)
	}
	if ev, err := readers["other"].Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event on the other replica: %s %v", ev.Data, err)
	}
	srv.Kill()
	read("runner") // the answer ends while Redis is down
	srv.Restart()
	read("other")
	if texts["other"] == "" || !strings.HasSuffix(texts["runner"], texts["other"]) {
		t.Fatalf("the other replica's reader got %q after response.created, the runner's %q", texts["other"], texts["runner"])
	}
}
