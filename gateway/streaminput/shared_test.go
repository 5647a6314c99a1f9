package streaminput_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// Two replicas (a gateway and a Manager each, as cmd/sluice mounts them)
// share one Redis and one fake upstream. These tests need redis-server
// (skipped without it, failed in CI).

// replicas builds n replicas over one Redis; the returned envs share the
// fake upstream (so their upstreamRequest helpers agree).
func replicas(t *testing.T, n int, srv *redistest.Server) []*env {
	t.Helper()
	return replicasWith(t, n, srv, gateway.ResumeOptions{})
}

// replicasWith is replicas whose gateways resume streams as resume says.
func replicasWith(t *testing.T, n int, srv *redistest.Server, resume gateway.ResumeOptions) []*env {
	t.Helper()
	return replicasOpts(t, n, srv, resume, streaminput.Options{})
}

// replicasOpts is replicasWith whose Managers also take opts (their caps;
// the store, dispatch, logger and registry are the replica's own).
func replicasOpts(t *testing.T, n int, srv *redistest.Server, resume gateway.ResumeOptions, opts streaminput.Options) []*env {
	t.Helper()
	return replicasConfig(t, n, srv, envConfig{resume: resume, opts: opts})
}

// replicasConfig is replicas set up as cfg says: its resume, opts,
// gateway, upstream and replica (the other fields are newEnv's only).
func replicasConfig(t *testing.T, n int, srv *redistest.Server, cfg envConfig) []*env {
	t.Helper()
	var up *upstreamtest.Server
	upURL := ""
	if cfg.upstream == nil {
		up = upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
		upURL = up.URL
	} else {
		up = upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
		upSrv := httptest.NewServer(cfg.upstream(up))
		t.Cleanup(upSrv.Close)
		upURL = upSrv.URL + "/v1"
	}
	t.Cleanup(up.Close)
	out := make([]*env, n)
	for i := range out {
		e := &env{t: t, up: up, logs: &syncBuffer{}}
		logger := hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Debug, Name: fmt.Sprintf("replica-%d", i+1)})
		pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: upURL}}, upstream.Options{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		pool.ProbeAll(context.Background())
		gwOpts := gateway.Options{Pool: pool, Logger: logger.Named("gateway"), Resume: cfg.resume}
		if cfg.gateway != nil {
			cfg.gateway(&gwOpts)
		}
		e.gw, err = gateway.New(gwOpts)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL, Options: store.Options{Logger: logger.Named("store")}})
		if err != nil {
			t.Fatal(err)
		}
		e.reg = prometheus.NewRegistry()
		o := cfg.opts
		if cfg.replica != nil {
			cfg.replica(i, &o)
		}
		o.Store, o.Dispatch, o.Logger, o.Registerer = rs, e.gw.Handler(), logger.Named("streaminput"), e.reg
		e.mgr, err = streaminput.New(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range e.mgr.Routes() {
			e.gw.Handle(rt.Method, rt.Path, rt.Handler)
		}
		e.mgr.Start()
		hs := httptest.NewServer(e.mgr.ModeA(e.gw.Handler()))
		e.url = hs.URL
		e.stop = func() {
			e.stopOnce.Do(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := e.mgr.Close(ctx); err != nil {
					t.Errorf("Manager.Close: %v", err)
				}
				hs.Close()
				_ = e.gw.Shutdown(ctx)
				_ = rs.Close()
				if t.Failed() {
					t.Logf("replica logs:\n%s", e.logs.String())
				}
			})
		}
		t.Cleanup(e.stop)
		out[i] = e
	}
	return out
}

func completedText(t *testing.T, evs []sse.Event) string {
	t.Helper()
	if len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("answer does not end with response.completed: %v", eventTypes(evs))
	}
	var b strings.Builder
	for _, ev := range evs {
		if eventType(ev) == "response.output_text.delta" {
			var v struct {
				Delta string `json:"delta"`
			}
			mustJSON(t, ev.Data, &v)
			b.WriteString(v.Delta)
		}
	}
	return b.String()
}

// TestSharedSessionAcrossReplicas: a session opened on replica 1 takes its
// chunks alternately on both replicas, finishes on replica 2 (which sends
// it upstream), and its answer is attachable from either.
func TestSharedSessionAcrossReplicas(t *testing.T) {
	r := replicas(t, 2, redistest.Start(t))
	r1, r2 := r[0], r[1]

	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r1.mustChunk(id, textChunk(0, "one ", false))
	if a := r2.mustChunk(id, textChunk(1, "two ", false)); a.NextSequenceID != 2 || a.Duplicate {
		t.Fatalf("chunk 1 on replica 2: %+v", a)
	}
	// Replica 1's copy is behind: it must see chunk 1 (a retransmission
	// of it is a duplicate there too), then take chunk 2.
	if a := r1.mustChunk(id, textChunk(1, "two ", false)); !a.Duplicate {
		t.Fatalf("chunk 1 again on replica 1 is not a duplicate: %+v", a)
	}
	if code, _, ae := r1.chunk(id, textChunk(1, "TWO ", false)); code != http.StatusConflict || ae.code() != streaminput.CodeSequenceConflict {
		t.Fatalf("chunk 1 with another payload on replica 1: %d %+v", code, ae)
	}
	r1.mustChunk(id, textChunk(2, "three", false))
	if code, b := r2.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", ""); code != http.StatusOK {
		t.Fatalf("finish on replica 2: %d %s", code, b)
	}
	if got := inputOf(t, r2.upstreamRequest(0).Body); !strings.HasSuffix(got, "one two three") {
		t.Fatalf("the upstream got input %q", got)
	}

	// The answer, from the replica that ran it and from the other one.
	resp2, evs2, _ := r2.result(id, "")
	resp1, evs1, _ := r1.result(id, "")
	text2, text1 := completedText(t, evs2), completedText(t, evs1)
	if text1 != text2 || text1 == "" {
		t.Fatalf("answers differ: replica 1 %q, replica 2 %q", text1, text2)
	}
	if len(evs1) != len(evs2) {
		t.Errorf("replica 1 relayed %d events, replica 2 %d", len(evs1), len(evs2))
	}
	for _, resp := range []*http.Response{resp1, resp2} {
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Streaming-Input-Chunks") != "3" || resp.Header.Get("X-Streaming-Input-Complete") != "true" {
			t.Errorf("result headers: %d %v", resp.StatusCode, resp.Header)
		}
	}
	// Resuming after a sequence number works on the follower too.
	_, evs, _ := r1.result(id, "?starting_after=3")
	if len(evs) != len(evs1)-4 {
		t.Errorf("starting_after=3 on replica 1: %d events, want %d", len(evs), len(evs1)-4)
	}
	for _, e := range r {
		code, st := e.status(id)
		if code != http.StatusOK || !st.Started || st.State != "finished" || st.NextSequenceID != 3 || st.Result == nil || st.Result.Status != "completed" {
			t.Fatalf("status: %d %+v (result %+v)", code, st, st.Result)
		}
	}
	if n := len(r1.up.Requests()); n != 1 {
		t.Fatalf("the upstream got %d requests, want 1", n)
	}

	// Deleting through replica 1 removes it for replica 2.
	if code, _ := r1.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := r2.status(id); code != http.StatusNotFound {
		t.Fatalf("status on replica 2 after delete on replica 1: %d", code)
	}
	// Another client's key never sees a session, on either replica.
	id2 := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	if code, _ := r2.doKey("Bearer sk-other", http.MethodGet, streaminput.PathPrefix+"/"+id2, ""); code != http.StatusNotFound {
		t.Fatalf("another key's status on replica 2: %d", code)
	}
}

// TestSharedSessionConcurrentChunks sends chunks of one session to two
// replicas at once: every chunk is accepted exactly once, the upstream
// request starts once (on_first_chunk: the first chunk's replica) and the
// stored input holds every chunk.
func TestSharedSessionConcurrentChunks(t *testing.T) {
	r := replicas(t, 2, redistest.Start(t))
	for _, policy := range []string{"on_end_only", "on_first_chunk"} {
		t.Run(policy, func(t *testing.T) {
			before := len(r[0].up.Requests())
			id := r[0].create(sessionBody(streaminput.EndpointResponses, policy, respTemplate))
			const n = 24
			var wg sync.WaitGroup
			errs := make(chan string, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Both replicas get every chunk (a client retrying on the other one).
					for _, e := range []*env{r[i%2], r[(i+1)%2]} {
						code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/chunks", textChunk(i, fmt.Sprintf("c%02d ", i), false))
						if code != http.StatusAccepted {
							errs <- fmt.Sprintf("chunk %d: %d %s", i, code, b)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			if code, b := r[1].do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", ""); code != http.StatusOK {
				t.Fatalf("finish: %d %s", code, b)
			}
			code, st := r[0].status(id)
			if code != http.StatusOK || st.NextSequenceID != n || st.ReceivedChunks != n || !st.Started {
				t.Fatalf("status: %d %+v", code, st)
			}
			_, evs, _ := r[0].result(id, "")
			completedText(t, evs)
			_, evs, _ = r[1].result(id, "")
			completedText(t, evs)
			if got := len(r[0].up.Requests()) - before; got != 1 {
				t.Fatalf("the upstream got %d requests for one session", got)
			}
			if policy == "on_end_only" {
				want := "Q: "
				for i := range n {
					want += fmt.Sprintf("c%02d ", i)
				}
				if got := inputOf(t, r[0].up.Requests()[before].Body); got != want {
					t.Fatalf("input %q, want %q", got, want)
				}
			}
		})
	}
}

// TestSharedSessionStoreDown: with Redis down, streaming-input calls get a
// clear, retryable 503, and work again when it is back.
func TestSharedSessionStoreDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsyncAlways: true})
	r := replicas(t, 2, srv)
	id := r[0].create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r[0].mustChunk(id, textChunk(0, "kept ", false))
	srv.Kill()
	for _, e := range r {
		code, _, ae := e.chunk(id, textChunk(1, "x", false))
		if code != http.StatusServiceUnavailable || ae.code() != "store_unavailable" {
			t.Fatalf("chunk with Redis down: %d %+v", code, ae)
		}
		code, hdr, b := e.postRaw(streaminput.PathPrefix, strings.NewReader(sessionBody(streaminput.EndpointResponses, "", respTemplate)), nil)
		if code != http.StatusServiceUnavailable {
			t.Fatalf("create with Redis down: %d %s", code, b)
		}
		// The store's own outage, for the moment: the client is told when
		// to retry, as a follow-up whose owner cannot be read is.
		if hdr.Get("Retry-After") != "2" {
			t.Fatalf("create with Redis down: Retry-After %q, want 2", hdr.Get("Retry-After"))
		}
	}
	srv.Restart()
	eventually(t, 10*time.Second, "the replicas use Redis again", func() bool {
		code, _, _ := r[1].chunk(id, textChunk(1, "after", true))
		return code == http.StatusAccepted
	})
	eventually(t, 10*time.Second, "replica 1 uses Redis again", func() bool {
		code, _ := r[0].status(id)
		return code == http.StatusOK
	})
	_, evs, _ := r[0].result(id, "")
	completedText(t, evs)
	if got := inputOf(t, r[0].upstreamRequest(0).Body); got != "Q: kept after" {
		t.Fatalf("input %q: an acknowledged chunk was lost", got)
	}
}
