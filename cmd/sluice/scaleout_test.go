package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Scale-out through the binary: two `sluice serve` processes share one real
// redis-server (started by the test on a free loopback port, with
// appendfsync always) and two strict fake upstreams (a previous_response_id
// they did not create is previous_response_not_found, so a misrouted
// follow-up shows). These tests need redis-server: they are skipped without
// it, and fail in CI (CI=true), which installs it.

// scaleOutEnv is one Redis, two upstreams and the config both replicas use.
type scaleOutEnv struct {
	t     *testing.T
	redis *redistest.Server
	ups   map[string]*upstreamtest.Server
	cfg   string
}

func newScaleOutEnv(t *testing.T) *scaleOutEnv {
	t.Helper()
	e := &scaleOutEnv{t: t, redis: redistest.Start(t, redistest.Options{AppendFsyncAlways: true}), ups: map[string]*upstreamtest.Server{}}
	var ups strings.Builder
	for _, name := range []string{"A", "B"} {
		up := upstreamtest.NewServer(upstreamtest.Options{Name: name, StrictPrevious: true})
		t.Cleanup(up.Close)
		e.ups[name] = up
		fmt.Fprintf(&ups, "  - {name: %s, base_url: %q}\n", name, up.URL)
	}
	e.cfg = filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log: {level: warn}
timeouts: {drain_grace: 1s}
store:
  backend: redis
  redis: {url: %q, key_prefix: "sluice:", timeout: 500ms}
upstreams:
%s`, e.redis.URL, ups.String())
	if err := os.WriteFile(e.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// replica is one running sluice process.
type replica struct {
	cmd    *exec.Cmd
	base   string
	stderr *lockedBuilder
}

func (e *scaleOutEnv) start() *replica {
	e.t.Helper()
	cmd, out, stderr := startProcess(e.t, "serve", "--config", e.cfg, "--data-dir", e.t.TempDir())
	base := waitListening(e.t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &replica{cmd: cmd, base: base, stderr: stderr}
}

// owner is the upstream that created a response id ("resp_<Name>_<n>").
func owner(id string) string {
	if len(id) > 6 && strings.HasPrefix(id, "resp_") {
		return id[5:6]
	}
	return ""
}

// respond sends a non-streaming Responses request and returns the status
// and the decoded body (id, or error code).
func respond(t *testing.T, base, prev string) (int, string, string) {
	t.Helper()
	body := `{"model":"gpt-fake-1","input":"hi"`
	if prev != "" {
		body += `,"previous_response_id":"` + prev + `"`
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(body+"}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client")
	req.Header.Set("Session_id", "scale-out")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/v1/responses: %v", base, err)
	}
	defer resp.Body.Close()
	var v struct {
		ID    string `json:"id"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &v)
	return resp.StatusCode, v.ID, v.Error.Code
}

// followUp sends a follow-up that must reach the owner of prev, and
// returns the new response id.
func (e *scaleOutEnv) followUp(base, prev string) string {
	e.t.Helper()
	code, id, ecode := respond(e.t, base, prev)
	if code != http.StatusOK || owner(id) != owner(prev) {
		e.t.Fatalf("follow-up of %s through %s: %d %q %s; want an answer from its owner %s", prev, base, code, id, ecode, owner(prev))
	}
	reqs := e.ups[owner(prev)].Requests()
	if last := reqs[len(reqs)-1]; last.PreviousResponseID != prev {
		e.t.Fatalf("the owner's last request chains on %q, want %q", last.PreviousResponseID, prev)
	}
	return id
}

func TestScaleOutFollowUpsAcrossReplicasAndAfterSIGKILL(t *testing.T) {
	e := newScaleOutEnv(t)
	r1, r2 := e.start(), e.start()

	// Created through replica 1, continued through replica 2, and so on.
	code, id, ecode := respond(t, r1.base, "")
	if code != http.StatusOK || id == "" {
		t.Fatalf("first turn: %d %s", code, ecode)
	}
	id = e.followUp(r2.base, id)
	id = e.followUp(r1.base, id)
	fromR1 := id

	// Replica 1 dies without a word: what it acknowledged is in Redis.
	if err := r1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = r1.cmd.Wait()
	id = e.followUp(r2.base, fromR1)
	e.followUp(r2.base, id)

	// A fresh replica takes over where the dead one was.
	r3 := e.start()
	e.followUp(r3.base, fromR1)
	for _, r := range []*replica{r2, r3} {
		if strings.Contains(r.stderr.String(), "panic") {
			t.Fatalf("a replica panicked:\n%s", r.stderr.String())
		}
	}
}

func TestScaleOutStreamingInputAcrossReplicas(t *testing.T) {
	e := newScaleOutEnv(t)
	r1, r2 := e.start(), e.start()
	call := func(method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-client")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := call(http.MethodPost, r1.base+"/v1/streaming_input/sessions",
		`{"endpoint":"/v1/responses","start_policy":"on_end_only","template":{"model":"gpt-fake-1","stream":true,"input":"Say: "},"chunk":{"sequence_id":0,"payload":"one "}}`)
	var sess struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal([]byte(body), &sess)
	if code != http.StatusOK || sess.SessionID == "" {
		t.Fatalf("create on replica 1: %d %s", code, body)
	}
	path := "/v1/streaming_input/sessions/" + sess.SessionID
	if code, body := call(http.MethodPost, r2.base+path+"/chunks", `{"sequence_id":1,"payload":"two"}`); code != http.StatusAccepted {
		t.Fatalf("chunk on replica 2: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, r2.base+path+"/finish", `{}`); code != http.StatusOK {
		t.Fatalf("finish on replica 2: %d %s", code, body)
	}
	for _, r := range []*replica{r1, r2} {
		code, body := call(http.MethodGet, r.base+path+"/result", "")
		if code != http.StatusOK || !strings.Contains(body, "response.completed") || !strings.Contains(body, "Hello") {
			t.Fatalf("result from %s: %d %s", r.base, code, body)
		}
	}
	var upstreamInputs []string
	for _, up := range e.ups {
		for _, r := range up.Requests() {
			upstreamInputs = append(upstreamInputs, string(r.Body))
		}
	}
	if len(upstreamInputs) != 1 || !strings.Contains(upstreamInputs[0], `"Say: one two"`) {
		t.Fatalf("the upstreams got %q, want one request with the whole input", upstreamInputs)
	}
}

// TestScaleOutRedisOutage stops Redis (SIGKILL) under two replicas in the
// middle of traffic: follow-ups fail closed with upstream_unavailable
// without calling an upstream, requests without previous_response_id still
// flow, streaming-input calls get a 503, /readyz and the metric show the
// store down, nothing panics; when Redis is back (its AOF, appendfsync
// always) every acknowledged anchor and chunk is there and both replicas
// recover by themselves.
func TestScaleOutRedisOutage(t *testing.T) {
	e := newScaleOutEnv(t)
	r1, r2 := e.start(), e.start()
	var acked []string
	for i := range 10 {
		r := r1
		if i%2 == 1 {
			r = r2
		}
		code, id, ecode := respond(t, r.base, "")
		if code != http.StatusOK {
			t.Fatalf("turn %d: %d %s", i, code, ecode)
		}
		acked = append(acked, id)
	}
	sessionPath := createSessionWithChunk(t, r1.base, "kept ")

	e.redis.Kill()
	before := e.ups["A"].RequestCount() + e.ups["B"].RequestCount()
	for _, r := range []*replica{r1, r2} {
		code, _, ecode := respond(t, r.base, acked[0])
		if code != http.StatusServiceUnavailable || ecode != "upstream_unavailable" {
			t.Fatalf("follow-up with Redis down through %s: %d %q, want 503 upstream_unavailable", r.base, code, ecode)
		}
	}
	if after := e.ups["A"].RequestCount() + e.ups["B"].RequestCount(); after != before {
		t.Fatalf("a follow-up that failed closed reached an upstream (%d requests)", after-before)
	}
	for _, r := range []*replica{r1, r2} {
		if code, id, ecode := respond(t, r.base, ""); code != http.StatusOK || id == "" {
			t.Fatalf("a request without previous_response_id with Redis down: %d %s", code, ecode)
		}
		code, body := postJSON(t, r.base+sessionPath+"/chunks", `{"sequence_id":1,"payload":"lost?"}`)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store_unavailable") {
			t.Fatalf("streaming-input chunk with Redis down: %d %s", code, body)
		}
		code, body = getBody(t, r.base+"/readyz")
		if code != http.StatusOK || !strings.Contains(body, `"store":"unavailable"`) {
			t.Fatalf("/readyz with Redis down: %d %s", code, body)
		}
		if _, m := getBody(t, r.base+"/metrics"); !strings.Contains(m, `sluice_store_up{backend="redis"} 0`) {
			t.Fatalf("metrics with Redis down lack sluice_store_up 0")
		}
	}

	e.redis.Restart()
	for _, r := range []*replica{r1, r2} {
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, body := getBody(t, r.base+"/readyz")
			if strings.Contains(body, `"store":"ok"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not recover: %s", r.base, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, id := range acked { // every acknowledged anchor survived, whichever replica asks
		r := []*replica{r2, r1}[i%2]
		e.followUp(r.base, id)
	}
	if code, body := postJSON(t, r2.base+sessionPath+"/chunks", `{"sequence_id":1,"payload":"back","end_of_input":true}`); code != http.StatusAccepted {
		t.Fatalf("chunk after recovery: %d %s", code, body)
	}
	if code, body := getBody(t, r1.base+sessionPath+"/result"); code != http.StatusOK || !strings.Contains(body, "Hello") {
		t.Fatalf("result after recovery: %d %s", code, body)
	}
	found := false
	for _, up := range e.ups {
		for _, r := range up.Requests() {
			found = found || strings.Contains(string(r.Body), `"Say: kept back"`)
		}
	}
	if !found {
		t.Fatal("no upstream request carried the chunk acknowledged before the outage")
	}
	for _, r := range []*replica{r1, r2} {
		if err := r.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("a replica died: %v", err)
		}
		if strings.Contains(r.stderr.String(), "panic") {
			t.Fatalf("a replica panicked:\n%s", r.stderr.String())
		}
	}
}

func createSessionWithChunk(t *testing.T, base, payload string) string {
	t.Helper()
	code, body := postJSON(t, base+"/v1/streaming_input/sessions", fmt.Sprintf(
		`{"endpoint":"/v1/responses","start_policy":"on_end_only","template":{"model":"gpt-fake-1","input":"Say: "},"chunk":{"sequence_id":0,"payload":%q}}`, payload))
	var sess struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal([]byte(body), &sess)
	if code != http.StatusOK || sess.SessionID == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	return "/v1/streaming_input/sessions/" + sess.SessionID
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-client")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer sk-client")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(bufio.NewReader(resp.Body))
	return resp.StatusCode, string(b)
}
