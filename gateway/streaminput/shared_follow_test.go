package streaminput_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/store"
)

// readStore is a replica's shared Redis store that counts the session
// record reads that have completed.
type readStore struct {
	*store.RedisStore
	reads atomic.Int64
}

func (s *readStore) GetInputSession(ctx context.Context, id string) (store.InputSession, error) {
	rec, err := s.RedisStore.GetInputSession(ctx, id)
	s.reads.Add(1)
	return rec, err
}

// readReplica is one replica (its own fake upstream) over the shared Redis
// srv, whose store counts record reads.
func readReplica(t *testing.T, srv *redistest.Server) (*env, *readStore) {
	t.Helper()
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() }) // after the replica's own cleanup
	st := &readStore{RedisStore: rs}
	return newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: st}}), st
}

// readEvents reads the answer of GET …/result on e to its end, bounded by
// ctx; it reports the events it got and why it stopped (nil at the end of
// the body). It may run in another goroutine: it never fails the test.
func readEvents(ctx context.Context, e *env, id string) ([]sse.Event, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result", nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, errors.New("result: " + resp.Status + " " + string(b))
	}
	rd := sse.NewReader(resp.Body, 1<<20)
	var evs []sse.Event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev.Clone())
	}
}

// TestSharedReaderWaitingBeforeAStartElsewhere: a result reader attached on
// replica 1 before the answer starts gets the whole answer live when
// another replica's finish starts it, with no other request to replica 1.
func TestSharedReaderWaitingBeforeAStartElsewhere(t *testing.T) {
	srv := redistest.Start(t)
	r1, st1 := readReplica(t, srv)
	r2, _ := readReplica(t, srv)
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r1.mustChunk(id, textChunk(0, "zero ", false))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := st1.reads.Load()
	type answer struct {
		evs []sse.Event
		err error
	}
	got := make(chan answer, 1)
	go func() {
		evs, err := readEvents(ctx, r1, id)
		got <- answer{evs, err}
	}()
	// The reader's own lookup has read the record: it saw the answer not
	// started, so it waits on replica 1.
	eventually(t, 10*time.Second, "replica 1's reader reads the session", func() bool { return st1.reads.Load() > before })
	if code, b := r2.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", "{}"); code != http.StatusOK {
		t.Fatalf("finish on replica 2: %d %s", code, b)
	}
	a := <-got
	if a.err != nil {
		t.Fatalf("replica 1's early reader: %v after %v", a.err, eventTypes(a.evs))
	}
	if text, want := completedText(t, a.evs), shrAnswerText(t, r2, id); text != want || text == "" {
		t.Fatalf("replica 1's early reader got %q, replica 2 answered %q", text, want)
	}
}

// TestSharedDeleteEndsAFollower: deleting a session whose answer runs on
// replica 1 (its upstream silent after response.created) ends both the
// runner's reader and the reader following it on replica 2 with the same
// response.failed (status cancelled), whichever replica the delete went to.
func TestSharedDeleteEndsAFollower(t *testing.T) {
	for _, deleter := range []string{"runner", "third"} {
		t.Run(deleter, func(t *testing.T) {
			srv := redistest.Start(t)
			r1, _ := readReplica(t, srv)
			r2, _ := readReplica(t, srv)
			r3, _ := readReplica(t, srv)
			r1.up.SetDefault(upstreamHangScript())
			id := r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
			r1.mustChunk(id, textChunk(0, "run", false))

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			readers, responseID := readersAtCreated(t, ctx, id, map[string]*env{"runner": r1, "follower": r2})
			del := r1
			if deleter == "third" {
				del = r3
			}
			if code, b := del.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK {
				t.Fatalf("delete: %d %s", code, b)
			}
			for name, rd := range readers {
				terminal := onlyTerminal(t, name, rd)
				if r := responseOf(t, terminal); eventType(terminal) != "response.failed" || r.Status != "cancelled" || string(r.Error) != "null" || r.ID != responseID {
					t.Fatalf("the %s's reader ended with %s, want response.failed of %s with status cancelled", name, terminal.Data, responseID)
				}
			}
		})
	}
}

type eventResponse struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Error  json.RawMessage `json:"error"`
}

// responseOf is the response a Responses event carries.
func responseOf(t *testing.T, ev sse.Event) eventResponse {
	t.Helper()
	var v struct {
		Response eventResponse `json:"response"`
	}
	mustJSON(t, ev.Data, &v)
	return v.Response
}

// onlyTerminal reads the named reader's stream to its end and returns its
// terminal event, failing unless there is exactly one.
func onlyTerminal(t *testing.T, name string, rd *sse.Reader) sse.Event {
	t.Helper()
	var terminal []sse.Event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the %s's reader: %v (terminal events %d)", name, err, len(terminal))
		}
		if typ := eventType(ev); typ == "response.failed" || typ == "response.completed" || typ == "response.incomplete" {
			terminal = append(terminal, ev.Clone())
		}
	}
	if len(terminal) != 1 {
		t.Fatalf("the %s's reader got %d terminal events, want 1", name, len(terminal))
	}
	return terminal[0]
}

// readersAtCreated opens a reader of session id's answer on each replica
// named, reads its first event, which must be response.created, and
// returns the readers and the response id they were shown.
func readersAtCreated(t *testing.T, ctx context.Context, id string, replicas map[string]*env) (map[string]*sse.Reader, string) {
	t.Helper()
	readers := make(map[string]*sse.Reader, len(replicas))
	var responseID string
	for name, e := range replicas {
		readers[name] = shrOpenResult(t, ctx, e, id)
		first, err := readers[name].Next()
		if err != nil || eventType(first) != "response.created" {
			t.Fatalf("first event of the %s's reader: %s %v", name, first.Data, err)
		}
		responseID = responseOf(t, first).ID
	}
	return readers, responseID
}
