package streaminput_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

const clientKey = "Bearer sk-client-one"

// env is a real gateway on loopback in front of a fake upstream, wrapped by
// a Manager over a real Pebble store, served the way cmd/sluice mounts it:
// /v1/streaming_input/… to the Manager's REST handler, everything else
// through its Mode A middleware to the gateway.
type env struct {
	t    testing.TB
	up   *upstreamtest.Server
	upIn atomic.Int64 // upstream requests in flight
	gw   *gateway.Server
	st   *store.PebbleStore
	dir  string
	mgr  *streaminput.Manager
	reg  *prometheus.Registry
	url  string
	logs *syncBuffer

	stop     func() // shuts everything down (idempotent; also run at cleanup)
	stopOnce sync.Once

	mu        sync.Mutex
	modeATE   []string // Transfer-Encoding of Mode A requests as the server saw them
	upstreams []string // paths of upstream requests that finished
}

type envConfig struct {
	dir      string // store directory; default a fresh t.TempDir()
	noStore  bool
	opts     streaminput.Options   // Store, Dispatch, Logger and Registerer are filled in
	dispatch http.Handler          // replaces the gateway as the Manager's Dispatch
	resume   gateway.ResumeOptions // the gateway's resumable streams (streams.*)
	// gated mounts Mode A inside the gateway's key gate, metrics and access
	// log, exactly as cmd/sluice does (gateway.Server.Wrap), rather than
	// around the gateway's handler.
	gated bool
	// gateway adjusts the gateway's options (its pool, logger and resume
	// options are set already).
	gateway func(*gateway.Options)
	// upstream wraps the fake upstream's handler.
	upstream func(http.Handler) http.Handler
	// replica adjusts the Manager options of replica i (replicasConfig
	// only).
	replica func(i int, o *streaminput.Options)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t, logs: &syncBuffer{}}
	logger := hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Debug})

	// The fake upstream, served on loopback behind a wrapper that counts
	// requests in flight (to prove cancellation reaches it).
	e.up = upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	var upstreamHandler http.Handler = e.up
	if cfg.upstream != nil {
		upstreamHandler = cfg.upstream(e.up)
	}
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			e.upIn.Add(1)
			defer func() {
				e.upIn.Add(-1)
				e.mu.Lock()
				e.upstreams = append(e.upstreams, r.URL.Path)
				e.mu.Unlock()
			}()
		}
		upstreamHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(upSrv.Close)
	t.Cleanup(e.up.Close)

	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: upSrv.URL + "/v1"}}, upstream.Options{Logger: logger})
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

	opts := cfg.opts
	if !cfg.noStore {
		e.dir = cfg.dir
		if e.dir == "" {
			e.dir = t.TempDir()
		}
		e.st, err = store.Open(context.Background(), store.Options{Dir: e.dir, Logger: logger.Named("store")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.st.Close() })
		opts.Store = e.st
	}
	opts.Dispatch = e.gw.Handler()
	if cfg.dispatch != nil {
		opts.Dispatch = cfg.dispatch
	}
	opts.Logger = logger.Named("streaminput")
	e.reg = prometheus.NewRegistry()
	opts.Registerer = e.reg
	e.mgr, err = streaminput.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Mounted the way cmd/sluice does: the REST routes on the gateway's
	// router, Mode A around the gateway's handler.
	for _, rt := range e.mgr.Routes() {
		e.gw.Handle(rt.Method, rt.Path, rt.Handler)
	}
	e.mgr.Start()
	modeA := e.mgr.ModeA(e.gw.Handler())
	if cfg.gated {
		e.gw.Wrap(e.mgr.ModeA)
		modeA = e.gw.Handler()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Streaming-Input") != "" {
			e.mu.Lock()
			e.modeATE = append(e.modeATE, strings.Join(r.TransferEncoding, ","))
			e.mu.Unlock()
		}
		modeA.ServeHTTP(w, r)
	}))
	e.url = srv.URL
	e.stop = func() {
		e.stopOnce.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.mgr.Close(ctx); err != nil {
				t.Errorf("Manager.Close: %v", err)
			}
			srv.Close()
			_ = e.gw.Shutdown(ctx)
			if e.st != nil {
				_ = e.st.Close()
			}
			if t.Failed() {
				t.Logf("logs:\n%s", e.logs.String())
			}
		})
	}
	t.Cleanup(e.stop)
	return e
}

// do sends a request with the client's key and returns the status and body.
func (e *env) do(method, path, body string) (int, []byte) {
	e.t.Helper()
	return e.doKey(clientKey, method, path, body)
}

func (e *env) doKey(key, method, path, body string) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// create opens a session and returns its id.
func (e *env) create(body string) string {
	e.t.Helper()
	code, b := e.do(http.MethodPost, streaminput.PathPrefix, body)
	if code != http.StatusOK {
		e.t.Fatalf("create: %d %s", code, b)
	}
	var st streaminput.SessionStatus
	mustJSON(e.t, b, &st)
	if st.SessionID == "" || st.ExpiresIn <= 0 {
		e.t.Fatalf("create: no session_id/expires_in: %s", b)
	}
	return st.SessionID
}

func sessionBody(endpoint, policy, template string) string {
	return fmt.Sprintf(`{"endpoint":%q,"start_policy":%q,"template":%s}`, endpoint, policy, template)
}

const respTemplate = `{"model":"gpt-fake-1","stream":true,"input":"Q: "}`

func textChunk(seq int, text string, end bool) string {
	return fmt.Sprintf(`{"sequence_id":%d,"modality":"text","payload":%q,"end_of_input":%t}`, seq, text, end)
}

// chunk posts a chunk and returns the status and the decoded ack (or error).
func (e *env) chunk(id string, body string) (int, streaminput.ChunkAck, apiError) {
	e.t.Helper()
	code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/chunks", body)
	var a streaminput.ChunkAck
	var ae apiError
	if code == http.StatusAccepted {
		mustJSON(e.t, b, &a)
	} else {
		ae = decodeError(e.t, b)
	}
	return code, a, ae
}

// mustChunk posts a chunk that must be acknowledged.
func (e *env) mustChunk(id string, body string) streaminput.ChunkAck {
	e.t.Helper()
	code, a, ae := e.chunk(id, body)
	if code != http.StatusAccepted {
		e.t.Fatalf("chunk %s: %d %+v", body, code, ae)
	}
	return a
}

func (e *env) status(id string) (int, streaminput.SessionStatus) {
	e.t.Helper()
	code, b := e.do(http.MethodGet, streaminput.PathPrefix+"/"+id, "")
	var st streaminput.SessionStatus
	if code == http.StatusOK {
		mustJSON(e.t, b, &st)
	}
	return code, st
}

// result reads GET …/result to the end: the response and its SSE events
// (or its body when it is not SSE).
func (e *env) result(id, query string) (*http.Response, []sse.Event, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result"+query, nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAnswer(e.t, resp)
}

func readAnswer(t testing.TB, resp *http.Response) (*http.Response, []sse.Event, []byte) {
	t.Helper()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp, nil, b
	}
	r := sse.NewReader(resp.Body, 64<<20)
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("reading the answer: %v (after %d events)", err, len(evs))
			}
			return resp, evs, nil
		}
		evs = append(evs, ev.Clone())
	}
}

// lastUpstreamBody is the body of the n-th (0-based) request the upstream received.
func (e *env) upstreamRequest(n int) upstreamtest.Request {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.up.WaitRequests(ctx, n+1); err != nil {
		e.t.Fatalf("waiting for upstream request %d: %v", n, err)
	}
	return e.up.Requests()[n]
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
		Param   *string `json:"param"`
	} `json:"error"`
}

func (a apiError) code() string {
	if a.Error.Code == nil {
		return ""
	}
	return *a.Error.Code
}

func (a apiError) param() string {
	if a.Error.Param == nil {
		return ""
	}
	return *a.Error.Param
}

func decodeError(t testing.TB, b []byte) apiError {
	t.Helper()
	var a apiError
	if err := json.Unmarshal(b, &a); err != nil || a.Error.Message == "" || a.Error.Type == "" {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	return a
}

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

func eventType(ev sse.Event) string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(ev.Data, &v)
	return v.Type
}

func eventTypes(evs []sse.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = eventType(ev)
	}
	return out
}

// failureCode is the code a response.failed reports. Codes outside the
// spec's enum travel as server_error (the gateway's own) or invalid_prompt
// (a client's error) with the code leading the message (README, "What it
// promises"): for those it is the leading code.
func failureCode(ev sse.Event) string {
	var v struct {
		Response struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"response"`
	}
	_ = json.Unmarshal(ev.Data, &v)
	if code, _, ok := strings.Cut(v.Response.Error.Message, ": "); ok && (v.Response.Error.Code == "server_error" || v.Response.Error.Code == "invalid_prompt") &&
		strings.Trim(code, "abcdefghijklmnopqrstuvwxyz_") == "" {
		return code
	}
	return v.Response.Error.Code
}

// inputOf decodes a Responses request body's input as a string.
func inputOf(t testing.TB, body []byte) string {
	t.Helper()
	var v struct {
		Input json.RawMessage `json:"input"`
	}
	mustJSON(t, body, &v)
	var s string
	if err := json.Unmarshal(v.Input, &s); err != nil {
		t.Fatalf("input is not a string: %s", v.Input)
	}
	return s
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func upstreamHangScript() upstreamtest.Script { return upstreamtest.HangAfter(1) }

// metricValue reads the sample of the metric name whose first label is
// label (a counter's or a gauge's value; 0 when there is none).
func metricValue(t testing.TB, e *env, name, label string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if ls := m.GetLabel(); len(ls) > 0 && ls[0].GetValue() == label {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
