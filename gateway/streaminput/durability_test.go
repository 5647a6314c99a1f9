package streaminput_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/store"
)

// gate holds one kind of store write until the test releases it.
type gate struct {
	entered chan string // the session id, when a write starts waiting
	release chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{entered: make(chan string, 16), release: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) pass(ctx context.Context, id string) error {
	g.entered <- id
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) awaitWrite(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(5 * time.Second):
		t.Fatal("the store write never started")
	}
	return ""
}

// gatedInputStore holds CreateInputSession, PutChunk or UpdateInputSession
// (whichever has a gate) until the test releases it.
type gatedInputStore struct {
	store.InputSessionStore
	mu                    sync.Mutex
	create, chunk, update *gate
}

func (s *gatedInputStore) gates() (create, chunk, update *gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.create, s.chunk, s.update
}

func (s *gatedInputStore) set(create, chunk, update *gate) {
	s.mu.Lock()
	s.create, s.chunk, s.update = create, chunk, update
	s.mu.Unlock()
}

func (s *gatedInputStore) CreateInputSession(ctx context.Context, sess store.InputSession) error {
	if g, _, _ := s.gates(); g != nil {
		if err := g.pass(ctx, sess.ID); err != nil {
			return err
		}
	}
	return s.InputSessionStore.CreateInputSession(ctx, sess)
}

func (s *gatedInputStore) PutChunk(ctx context.Context, id string, seq uint64, c store.Chunk, upd store.InputSession) error {
	if _, g, _ := s.gates(); g != nil {
		if err := g.pass(ctx, id); err != nil {
			return err
		}
	}
	return s.InputSessionStore.PutChunk(ctx, id, seq, c, upd)
}

func (s *gatedInputStore) UpdateInputSession(ctx context.Context, sess store.InputSession) error {
	if _, _, g := s.gates(); g != nil {
		if err := g.pass(ctx, sess.ID); err != nil {
			return err
		}
	}
	return s.InputSessionStore.UpdateInputSession(ctx, sess)
}

// answer is an HTTP answer received in the background.
type answer struct {
	code int
	body []byte
	err  error
}

func (e *env) doAsync(method, path, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", clientKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- answer{code: resp.StatusCode, body: b, err: err}
	}()
	return ch
}

// heldFor is how long a test watches for an answer that must not come while
// the store write is held.
const heldFor = 600 * time.Millisecond

// ackedOnlyAfter checks that ch stays silent while g holds the store write,
// and answers want once g releases it.
func ackedOnlyAfter(t *testing.T, g *gate, ch <-chan answer, want int) answer {
	t.Helper()
	g.awaitWrite(t)
	select {
	case a := <-ch:
		t.Fatalf("answered %d %s while the store write was held", a.code, a.body)
	case <-time.After(heldFor):
	}
	g.open()
	select {
	case a := <-ch:
		if a.err != nil || a.code != want {
			t.Fatalf("after the write: %d %s %v, want %d", a.code, a.body, a.err, want)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the store write was released")
	}
	return answer{}
}

// TestAcksOnlyOnceDurable holds each store write a REST session makes and
// checks that the client's acknowledgement (the create's 200, a chunk's 202,
// the finish's 200) does not arrive before the write is done, and that what
// was acknowledged is in the store.
func TestAcksOnlyOnceDurable(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the env's own cleanup
	gs := &gatedInputStore{InputSessionStore: st}
	t.Cleanup(func() { // never leave a write hanging
		c, p, u := gs.gates()
		for _, g := range []*gate{c, p, u} {
			if g != nil {
				g.open()
			}
		}
	})
	e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: gs}})

	// create
	g := newGate()
	gs.set(g, nil, nil)
	a := ackedOnlyAfter(t, g, e.doAsync(http.MethodPost, streaminput.PathPrefix, sessionBody("/v1/responses", "on_end_only", respTemplate)), http.StatusOK)
	var created streaminput.SessionStatus
	mustJSON(t, a.body, &created)
	if _, err := st.GetInputSession(context.Background(), created.SessionID); err != nil {
		t.Fatalf("created session not in the store: %v", err)
	}
	id := created.SessionID

	// chunk
	g = newGate()
	gs.set(nil, g, nil)
	a = ackedOnlyAfter(t, g, e.doAsync(http.MethodPost, streaminput.PathPrefix+"/"+id+"/chunks", textChunk(0, "durable words", false)), http.StatusAccepted)
	chunks, err := st.Chunks(context.Background(), id)
	if err != nil || len(chunks) != 1 || string(chunks[0].Payload) != "durable words" {
		t.Fatalf("acknowledged chunk not in the store: %+v %v (ack %s)", chunks, err, a.body)
	}

	// finish
	g = newGate()
	gs.set(nil, nil, g)
	ackedOnlyAfter(t, g, e.doAsync(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", ""), http.StatusOK)
	gs.set(nil, nil, nil)
	if _, evs, _ := e.result(id, ""); len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("the finished session's result: %v", eventTypes(evs))
	}
}
