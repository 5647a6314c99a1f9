package gateway_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// gatedLogStore is a stream log store whose writes of a log's end (an
// append holding its terminal event, its ended record) do not start until
// the test releases them: what clients get while a log's end is not yet
// durable becomes observable, every time.
type gatedLogStore struct {
	store.StreamLogStore
	entered chan struct{} // one per held write, when it starts waiting
	release chan struct{} // closed by the test
	once    sync.Once
}

func newGatedLogStore(st store.StreamLogStore) *gatedLogStore {
	return &gatedLogStore{StreamLogStore: st, entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gatedLogStore) hold(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedLogStore) AppendStreamEvents(ctx context.Context, id string, first int64, events []store.StreamEvent) error {
	for _, ev := range events {
		if isTerminal(gjson.GetBytes(ev.Data, "type").Str) {
			if err := g.hold(ctx); err != nil {
				return err
			}
			break
		}
	}
	return g.StreamLogStore.AppendStreamEvents(ctx, id, first, events)
}

func (g *gatedLogStore) PutStreamLog(ctx context.Context, l store.StreamLog) error {
	if l.Ended {
		if err := g.hold(ctx); err != nil {
			return err
		}
	}
	return g.StreamLogStore.PutStreamLog(ctx, l)
}

func (g *gatedLogStore) open() { g.once.Do(func() { close(g.release) }) }

// awaitWrite waits until the gateway has started writing a log's end.
func (g *gatedLogStore) awaitWrite(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never wrote the end of the stream's log")
	}
}

// TestDurableLogEndBeforeTerminal: with streams.durable, a stream's
// terminal event reaches neither its client nor a resumer following it
// while the write of the log's end is held, and once they have it, the
// store holds that same event and the record ended (README "Durable": a
// kill right after the client read the terminal event must not turn the
// response failed after the restart). Both for an upstream's terminal
// event and for the gateway's own (the upstream cut the stream).
func TestDurableLogEndBeforeTerminal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   func() upstreamtest.Script
		terminal string
		status   string
	}{
		{"upstream completed", slowAnswer, "response.completed", "completed"},
		{"gateway failed", func() upstreamtest.Script {
			s := slowAnswer()
			s.StopAfterDeltas, s.End = 6, upstreamtest.EndCut
			return s
		}, "response.failed", "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			g := newGatedLogStore(st)
			opts := resumeOpts()
			opts.Resume.Store = g
			h := newHarness(t, harnessConfig{opts: opts})
			t.Cleanup(g.open) // before the gateway's shutdown: never leave a write hanging
			h.ups["A"].Enqueue(tc.script())

			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
			defer resp.Body.Close()
			client := readFrames(resp.Body)
			id := gjson.GetBytes(until(t, client, "response.created", 5*time.Second).data, "response.id").Str

			req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/responses/"+id+"?stream=true", nil)
			req.Header.Set("Authorization", "Bearer sk-client-secret")
			rresp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer rresp.Body.Close()
			if rresp.StatusCode != http.StatusOK {
				t.Fatalf("resume: %d", rresp.StatusCode)
			}
			resumer := readFrames(rresp.Body)

			g.awaitWrite(t)
			noTerminalFor(t, client, blockedFor, "the write of the log's end is held")
			noTerminalFor(t, resumer, blockedFor/4, "the write of the log's end is held")
			g.open()

			for who, frames := range map[string]<-chan frame{"client": client, "resumer": resumer} {
				got := until(t, frames, tc.terminal, 5*time.Second)
				seq := gjson.GetBytes(got.data, "sequence_number").Int()
				ctx := context.Background()
				evs, err := st.StreamEvents(ctx, id, seq-1, 2)
				if err != nil || len(evs) != 1 || string(evs[0].Data) != string(got.data) {
					t.Fatalf("the %s got %s, but the store holds %+v (%v)", who, got.data, evs, err)
				}
				rec, err := st.GetStreamLog(ctx, id)
				if err != nil || !rec.Ended || rec.Status != tc.status {
					t.Fatalf("the %s got %s, but the stored record is %+v (%v)", who, tc.terminal, rec, err)
				}
			}
		})
	}
}
