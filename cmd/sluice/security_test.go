package main

// Security regression tests, one per finding of the hostile-client review
// ("Hardening, first"). Each runs the real binary (built by TestMain) in
// front of the fake upstream and asserts what a client, or the operator
// watching the process, observes. SECURITY.md lists the limits they pin.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// ---- harness ----

// secGateway is one sluice process started from a config file.
type secGateway struct {
	t       *testing.T
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:port
	addr    string // 127.0.0.1:port
	dataDir string
	logPath string       // the process's stderr
	client  *http.Client // its own connection pool, closed with the test
}

// startSecGateway runs `sluice serve` with cfg (YAML appended after the
// listen address and log level) and waits until it listens.
func startSecGateway(t *testing.T, logLevel, cfg string) *secGateway {
	t.Helper()
	dir := t.TempDir()
	g := &secGateway{t: t, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "stderr.log")}
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte("listen: 127.0.0.1:0\nlog: {level: "+logLevel+"}\n"+cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command(binary, "serve", "--config", cfgPath, "--data-dir", g.dataDir)
	g.cmd.Stderr = logf
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
	g.client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = g.cmd.Process.Kill()
		_ = g.cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(g.logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("sluice stderr (tail):\n%s", b)
		}
	})
	out := bufio.NewReader(stdout)
	g.base = waitListening(t, out)
	g.addr = strings.TrimPrefix(g.base, "http://")
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return g
}

// upstreamYAML is an upstreams: block with one upstream named A.
func upstreamYAML(url, apiKey string) string {
	s := "upstreams:\n  - name: A\n    base_url: " + url + "\n"
	if apiKey != "" {
		s += "    api_key: " + apiKey + "\n"
	}
	return s
}

func newFakeUpstream(t *testing.T) *upstreamtest.Server {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	return up
}

func (g *secGateway) do(method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer sk-client-key")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp, b
}

// apiErr is the OpenAI error envelope.
type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
		Param   *string `json:"param"`
	} `json:"error"`
}

func (e apiErr) code() string  { return strOf(e.Error.Code) }
func (e apiErr) param() string { return strOf(e.Error.Param) }

func strOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// wantError asserts an OpenAI-shaped error with status and code.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) apiErr {
	t.Helper()
	var e apiErr
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("%s: not an OpenAI error body (%d): %.300s", what, resp.StatusCode, body)
		return e
	}
	if resp.StatusCode != status || e.code() != code {
		t.Errorf("%s: got %d %q (%s), want %d %q", what, resp.StatusCode, e.code(), e.Error.Message, status, code)
	}
	return e
}

// healthy asserts the process is running, answers /healthz and streams a
// normal request to response.completed.
func (g *secGateway) healthy(what string) {
	g.t.Helper()
	if err := g.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		g.t.Fatalf("%s: the process is gone: %v", what, err)
	}
	resp, body := g.do(http.MethodGet, "/healthz", nil, nil)
	if resp.StatusCode != http.StatusOK {
		g.t.Fatalf("%s: /healthz %d %s", what, resp.StatusCode, body)
	}
	g.streamCompletes(what)
}

// streamCompletes runs one streaming turn and asserts it completes.
func (g *secGateway) streamCompletes(what string) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/responses", strings.NewReader(`{"model":"gpt-fake-1","input":"hi","stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-key")
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("%s: normal stream: %v", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		g.t.Fatalf("%s: normal stream got %d %s", what, resp.StatusCode, b)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	for {
		ev, err := r.Next()
		if err != nil {
			g.t.Fatalf("%s: normal stream ended without response.completed: %v", what, err)
		}
		if ev.Name == "response.completed" {
			return
		}
		if ev.Name == "response.failed" || ev.Name == "response.incomplete" {
			g.t.Fatalf("%s: normal stream ended with %s %s", what, ev.Name, ev.Data)
		}
	}
}

// noCrashInLog asserts the process never printed a Go crash.
func (g *secGateway) noCrashInLog() {
	g.t.Helper()
	b, _ := os.ReadFile(g.logPath)
	for _, bad := range []string{"fatal error:", "goroutine stack exceeds", "panic:"} {
		if bytes.Contains(b, []byte(bad)) {
			g.t.Errorf("the process log contains %q", bad)
		}
	}
}

// ---- WebSocket helpers ----

func (g *secGateway) dialWS(t *testing.T) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+g.addr+"/v1/responses", &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer sk-client-key"}, "OpenAI-Beta": {"responses_websockets=2026-02-06"}}})
	if err != nil {
		t.Fatalf("websocket dial: %v", err)
	}
	conn.SetReadLimit(16 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

func wsWrite(t *testing.T, c *websocket.Conn, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, data); err != nil {
		t.Fatalf("websocket write: %v", err)
	}
}

// wsFrame is the part of a server frame the tests look at.
type wsFrame struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Error  struct {
		Code  *string `json:"code"`
		Param *string `json:"param"`
	} `json:"error"`
}

// wsReadUntilEnd reads frames until a terminal event or an error frame and
// returns the last one.
func wsReadUntilEnd(t *testing.T, c *websocket.Conn) wsFrame {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, data, err := c.Read(ctx)
		cancel()
		if err != nil {
			t.Fatalf("websocket read: %v", err)
		}
		var f wsFrame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("websocket frame is not JSON: %.200s", data)
		}
		switch f.Type {
		case "error", "response.completed", "response.failed", "response.incomplete":
			return f
		}
	}
}

const wsNormalTurn = `{"type":"response.create","model":"gpt-fake-1","input":"hi"}`

// ---- /proc ----

func requireProc(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
}

// procStatusKiB reads a "Vm…" line of /proc/PID/status, in KiB.
func procStatusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s line %q: %v", field, line, err)
			}
			return v
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ is 100 on every
// Linux architecture Go supports.
const userHZ = 100

// procCPU is the process's user+system CPU time so far (/proc/PID/stat
// fields 14 and 15).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("reading /proc/%d/stat: %v", pid, err)
	}
	// The command name (field 2) may hold spaces; fields after it follow ")".
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * time.Second / userHZ
}

// ---- finding 1: a 202-byte zstd body of 6,000,000 '[' crashed the process ----

// The exact crash body, over HTTP on both endpoints, is a 400
// nesting_too_deep; so are the same brackets plain and gzip-compressed, and
// a valid document nested just past the limit. No upstream is called and the
// process keeps serving.
func TestSecurityDeepNestingIsRefusedAndTheProcessSurvives(t *testing.T) {
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, ""))
	crash, err := os.ReadFile("testdata/deep-6m-brackets.zst")
	if err != nil {
		t.Fatal(err)
	}
	plain := bytes.Repeat([]byte("["), 6_000_000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(plain)
	_ = zw.Close()
	nestedValid := []byte(`{"model":"gpt-fake-1","input":` + strings.Repeat("[", 200) + `"hi"` + strings.Repeat("]", 200) + `}`)

	cases := []struct {
		name, path, encoding string
		body                 []byte
	}{
		{"zstd crash body /v1/responses", "/v1/responses", "zstd", crash},
		{"zstd crash body /v1/chat/completions", "/v1/chat/completions", "zstd", crash},
		{"gzip brackets /v1/responses", "/v1/responses", "gzip", gz.Bytes()},
		{"plain brackets /v1/chat/completions", "/v1/chat/completions", "", plain},
		{"valid JSON 200 levels deep", "/v1/responses", "", nestedValid},
	}
	for _, tc := range cases {
		hdr := map[string]string{}
		if tc.encoding != "" {
			hdr["Content-Encoding"] = tc.encoding
		}
		resp, body := g.do(http.MethodPost, tc.path, tc.body, hdr)
		wantError(t, tc.name, resp, body, http.StatusBadRequest, "nesting_too_deep")
		g.healthy("after " + tc.name)
	}
	// healthy ran one normal stream per case; nothing else reached the upstream.
	if n := up.RequestCount(); n != len(cases) {
		t.Errorf("the upstream got %d requests, want only the %d normal ones", n, len(cases))
	}
	g.noCrashInLog()
}

// The same brackets as one WebSocket text frame get an error frame; the
// socket stays open and serves the next response.create.
func TestSecurityDeepNestingOverWebSocketKeepsTheSocket(t *testing.T) {
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, ""))
	c := g.dialWS(t)
	for _, frame := range [][]byte{
		bytes.Repeat([]byte("["), 6_000_000),
		[]byte(`{"type":"response.create","model":"gpt-fake-1","input":` + strings.Repeat("[", 200) + `"hi"` + strings.Repeat("]", 200) + `}`),
	} {
		wsWrite(t, c, frame)
		f := wsReadUntilEnd(t, c)
		if f.Type != "error" || f.Status != http.StatusBadRequest || strOf(f.Error.Code) != "nesting_too_deep" {
			t.Fatalf("deep frame (%d bytes): got %+v, want an error frame 400 nesting_too_deep", len(frame), f)
		}
		wsWrite(t, c, []byte(wsNormalTurn))
		if f := wsReadUntilEnd(t, c); f.Type != "response.completed" {
			t.Fatalf("normal turn after a deep frame: %+v", f)
		}
	}
	g.healthy("after deep WebSocket frames")
	g.noCrashInLog()
}

// ---- finding 2: a few KB on the wire pinned GBs ----

// stallResult is what one stalled upload's client saw.
type stallResult struct {
	status     int
	code       string
	retryAfter string
	elapsed    time.Duration
	err        error
}

// stallUpload opens a connection, sends a POST /v1/responses with
// Content-Length of the whole wire body but only prefix of it, keeps the
// connection open and waits up to wait for an answer. sent is called once
// the prefix is written (or the attempt failed).
func stallUpload(addr string, header string, prefix []byte, wait time.Duration, sent func()) stallResult {
	var once sync.Once
	defer once.Do(sent)
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return stallResult{err: err}
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(wait))
	if _, err := c.Write(append([]byte(header), prefix...)); err != nil {
		return stallResult{err: fmt.Errorf("writing: %w", err)}
	}
	once.Do(sent)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return stallResult{err: err, elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e apiErr
	_ = json.Unmarshal(b, &e)
	return stallResult{status: resp.StatusCode, code: e.code(), retryAfter: resp.Header.Get("Retry-After"), elapsed: time.Since(start)}
}

// errorKind names a client-side failure without addresses, for counting.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "still waiting at the client's deadline"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed without an answer"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	return "other error"
}

// rssSampler records the largest VmRSS of pid until stopped.
type rssSampler struct {
	max  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
						if v > s.max.Load() {
							s.max.Store(v)
						}
					}
				}
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) finish() int64 { close(s.stop); <-s.done; return s.max.Load() }

// bigRequestBody is {"model":"gpt-fake-1","input":"aaa…"} of about n bytes.
func bigRequestBody(n int) []byte {
	head, tail := `{"model":"gpt-fake-1","input":"`, `"}`
	b := make([]byte, 0, n)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte("a"), n-len(head)-len(tail))...)
	return append(b, tail...)
}

// 80 concurrent uploads, each a few KB on the wire standing for a ~31 MiB
// body, stall before their last bytes with their connections open. With
// limits.body_memory_bytes at 64 MiB the process's RSS stays under baseline
// + budget + margin, every stalled client gets 503 server_overloaded (with
// Retry-After) or, after timeouts.read_body, 408 request_timeout, and normal
// requests are served during and after the storm. The zstd uploads use the
// largest window the gateway accepts (8 MiB), so each decoder is as big as
// it may be; the plain ones announce the body in Content-Length.
func TestSecurityStalledUploadsStayWithinTheBodyBudget(t *testing.T) {
	requireProc(t)
	const (
		budget   = 64 << 20
		readBody = 5 * time.Second
		uploads  = 80
		withheld = 64
		// margin is what the process may hold beyond the budget: the Go
		// heap's headroom (GOGC=100 lets the heap reach twice the live
		// bytes before a collection, and buffers of uploads that ended are
		// garbage until then), freed spans not yet returned to the OS, and
		// the decoders. Measured peaks were +152..+300 MiB over baseline on a
		// loaded 2-core machine (the test suite running beside it); the bound
		// is set well above that noise and far below the failure it guards
		// against: before the budget, the same storm reached 4.2 GB.
		margin = 7 * budget
	)
	up := newFakeUpstream(t)
	body := bigRequestBody(31 << 20)

	var zbuf bytes.Buffer
	zw, err := zstd.NewWriter(&zbuf, zstd.WithWindowSize(8<<20), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write(body)
	_ = zw.Close()
	zst := zbuf.Bytes()
	t.Logf("the %d-byte body is %d bytes of zstd; each upload sends all but the last %d", len(body), len(zst), withheld)

	storms := []struct {
		name   string
		header string
		prefix []byte
	}{
		{"zstd", fmt.Sprintf("POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Encoding: zstd\r\nContent-Length: %d\r\n\r\n", len(zst)),
			zst[:len(zst)-withheld]},
		// Plain: the body's first 4 KiB, announcing the whole 31 MiB.
		{"plain", fmt.Sprintf("POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)),
			body[:4<<10]},
	}
	for _, storm := range storms {
		t.Run(storm.name, func(t *testing.T) {
			// A fresh process per storm, so each baseline is an idle gateway's.
			g := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"limits: {body_memory_bytes: 67108864}\ntimeouts: {read_body: 5s}\n")
			pid := g.cmd.Process.Pid
			normal := func(what string) {
				t.Helper()
				resp, b := g.do(http.MethodPost, "/v1/responses", []byte(`{"model":"gpt-fake-1","input":"hi"}`), nil)
				if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("Hello from A")) {
					t.Errorf("%s: a normal request got %d %.300s", what, resp.StatusCode, b)
				}
			}
			normal("before the storm")
			time.Sleep(500 * time.Millisecond)
			baseline := procStatusKiB(t, pid, "VmRSS")
			sampler := sampleRSS(pid)

			results := make([]stallResult, uploads)
			var sent, done sync.WaitGroup
			sent.Add(uploads)
			done.Add(uploads)
			for i := range uploads {
				go func() {
					defer done.Done()
					results[i] = stallUpload(g.addr, storm.header, storm.prefix, readBody+15*time.Second, sent.Done)
				}()
			}
			sent.Wait()
			time.Sleep(time.Second) // the storm is on: uploads stall, their budget is held
			normal("during the storm")
			during := procStatusKiB(t, pid, "VmRSS")
			done.Wait()
			normal("after the storm")
			peak := sampler.finish()
			hwm := procStatusKiB(t, pid, "VmHWM")
			t.Logf("%s: VmRSS baseline %d MiB, during %d MiB, sampled peak %d MiB (+%d MiB); VmHWM %d MiB; bound baseline+%d+%d MiB",
				storm.name, baseline>>10, during>>10, peak>>10, (peak-baseline)>>10, hwm>>10, budget>>20, margin>>20)
			if limit := baseline + (budget+margin)>>10; peak > limit {
				t.Errorf("%s: peak RSS %d MiB is over baseline %d MiB + budget %d MiB + margin %d MiB", storm.name, peak>>10, baseline>>10, budget>>20, margin>>20)
			}

			var overloaded, timedOut, unanswered int
			other := map[string]int{}
			for _, r := range results {
				switch {
				case r.err != nil:
					unanswered++
					other["no answer: "+errorKind(r.err)]++
				case r.status == http.StatusServiceUnavailable && r.code == "server_overloaded" && r.retryAfter != "":
					overloaded++
				case r.status == http.StatusRequestTimeout && r.code == "request_timeout" && r.elapsed >= readBody-250*time.Millisecond:
					timedOut++
				default:
					other[fmt.Sprintf("%d %q Retry-After %q after %s", r.status, r.code, r.retryAfter, r.elapsed.Round(100*time.Millisecond))]++
				}
			}
			t.Logf("%s: %d stalled uploads: %d got 503 server_overloaded, %d got 408 request_timeout, others %v", storm.name, uploads, overloaded, timedOut, other)
			if overloaded+timedOut != uploads {
				t.Errorf("%s: %d of %d stalled uploads did not get 503 server_overloaded with Retry-After or 408 request_timeout after read_body (%d got no answer within %s): %v",
					storm.name, uploads-overloaded-timedOut, uploads, unanswered, readBody+15*time.Second, other)
			}
			g.noCrashInLog()
		})
	}
}

// ---- finding 3: no timeout reading a body ----

// A POST whose body stops arriving gets 408 request_timeout once
// timeouts.read_body has passed, whether it is chunked or announces a
// Content-Length, and the connection does not stay open.
func TestSecurityStalledBodyGets408(t *testing.T) {
	const readBody = 2 * time.Second
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"timeouts: {read_body: 2s}\n")
	cases := []struct{ name, request string }{
		{"chunked", "POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"10\r\n{\"model\":\"gpt-fa\r\n"},
		{"content-length", "POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n" +
			`{"model":"gpt-fa`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(start.Add(readBody + 10*time.Second))
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer %s after sending part of the body (read_body is %s): %v", time.Since(start).Round(time.Millisecond), readBody, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			elapsed := time.Since(start)
			wantError(t, tc.name, resp, b, http.StatusRequestTimeout, "request_timeout")
			if elapsed < readBody-250*time.Millisecond {
				t.Errorf("408 after %s, before read_body (%s)", elapsed, readBody)
			}
			t.Logf("408 after %s", elapsed.Round(time.Millisecond))
			// The gateway closes the connection (the rest of the body never came).
			if _, err := br.ReadByte(); err == nil {
				t.Errorf("the connection carried more bytes after the 408")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("the connection is still open %s after the 408", time.Since(start)-elapsed)
			}
		})
	}
	if n := up.RequestCount(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	g.healthy("after stalled bodies")
}

// ---- finding 4: quadratic duplicate-key check ----

// A body with 100,000 distinct top-level keys (and a model and input) is
// answered (forwarded, or refused with a 4xx), and one whose last key repeats
// its first gets 400 duplicate_key, each for under 2 s of the process's CPU
// time (before the fix: 13.7 s).
func TestSecurityManyTopLevelKeysCostLinearCPU(t *testing.T) {
	requireProc(t)
	const keys = 100_000
	const maxCPU = 2 * time.Second
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, ""))
	pid := g.cmd.Process.Pid
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-fake-1","input":"hi"`)
	for i := range keys {
		fmt.Fprintf(&b, `,"k%06d":0`, i)
	}
	distinct := append(bytes.Clone(b.Bytes()), '}')
	dup := append(bytes.Clone(b.Bytes()), `,"k000000":1}`...)
	g.healthy("warm-up")

	cpu0 := procCPU(t, pid)
	resp, body := g.do(http.MethodPost, "/v1/responses", distinct, nil)
	cpu1 := procCPU(t, pid)
	t.Logf("%d distinct keys (%d bytes): %d, %s of CPU", keys, len(distinct), resp.StatusCode, cpu1-cpu0)
	// Whatever the gateway decides (today unknown fields pass through), the
	// client gets an answer: the upstream's, or an OpenAI-shaped 4xx.
	switch {
	case resp.StatusCode == http.StatusOK:
		if !bytes.Contains(body, []byte("Hello from A")) {
			t.Errorf("%d distinct keys: 200 without the upstream's answer: %.300s", keys, body)
		}
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		var e apiErr
		if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
			t.Errorf("%d distinct keys: %d without an OpenAI error body: %.300s", keys, resp.StatusCode, body)
		}
	default:
		t.Errorf("%d distinct keys: got %d %.300s, want the upstream's answer or a 4xx", keys, resp.StatusCode, body)
	}
	if cpu1-cpu0 > maxCPU {
		t.Errorf("%d distinct keys cost %s of CPU, over %s", keys, cpu1-cpu0, maxCPU)
	}

	resp, body = g.do(http.MethodPost, "/v1/responses", dup, nil)
	cpu2 := procCPU(t, pid)
	t.Logf("%d keys, last repeating the first: %d, %s of CPU", keys+1, resp.StatusCode, cpu2-cpu1)
	if e := wantError(t, "repeated key", resp, body, http.StatusBadRequest, "duplicate_key"); e.param() != "k000000" {
		t.Errorf("duplicate_key names param %q, want k000000", e.param())
	}
	if cpu2-cpu1 > maxCPU {
		t.Errorf("%d keys with a repeat cost %s of CPU, over %s", keys+1, cpu2-cpu1, maxCPU)
	}
}

// ---- finding 7: over-long ids ----

// A previous_response_id of 1,100 bytes is a 400 naming previous_response_id
// (it was a 502), over HTTP and WebSocket, and no upstream is called;
// /admin/continuity/<1,100 chars> is a 400 (it was a 503 quoting the store's
// internal error).
func TestSecurityOverlongIDsAre400s(t *testing.T) {
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"admin_token: adm-token-for-tests\n")
	long := "resp_" + strings.Repeat("x", 1095)
	for _, stream := range []string{"false", "true"} {
		resp, body := g.do(http.MethodPost, "/v1/responses", []byte(`{"model":"gpt-fake-1","input":"hi","stream":`+stream+`,"previous_response_id":"`+long+`"}`), nil)
		if e := wantError(t, "previous_response_id stream:"+stream, resp, body, http.StatusBadRequest, "invalid_value"); e.param() != "previous_response_id" {
			t.Errorf("stream:%s: param %q, want previous_response_id", stream, e.param())
		}
	}
	c := g.dialWS(t)
	wsWrite(t, c, []byte(`{"type":"response.create","model":"gpt-fake-1","input":"hi","previous_response_id":"`+long+`"}`))
	if f := wsReadUntilEnd(t, c); f.Type != "error" || f.Status != http.StatusBadRequest || strOf(f.Error.Param) != "previous_response_id" {
		t.Errorf("WebSocket: got %+v, want an error frame 400 naming previous_response_id", f)
	}
	if n := up.RequestCount(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}

	admin := map[string]string{"Authorization": "Bearer adm-token-for-tests"}
	resp, body := g.do(http.MethodGet, "/admin/continuity/"+long, nil, admin)
	if e := wantError(t, "admin anchor of a 1,100-byte id", resp, body, http.StatusBadRequest, "invalid_value"); e.param() != "response_id" {
		t.Errorf("admin: param %q, want response_id", e.param())
	}
	lower := strings.ToLower(string(body))
	for _, internal := range []string{"pebble", strings.ToLower(g.dataDir), "store/", ".sst", "key too", "see the gateway log"} {
		if strings.Contains(lower, internal) {
			t.Errorf("admin answer reveals %q: %s", internal, body)
		}
	}
	resp, body = g.do(http.MethodGet, "/admin/continuity/resp_unknown", nil, admin)
	wantError(t, "admin anchor of an unknown id", resp, body, http.StatusNotFound, "not_found")
	g.healthy("after over-long ids")
}

// ---- finding 7: a half-closed request ----

// A client that sends a whole request and then shuts its write side
// (CloseWrite) receives the complete answer (it got 200 with an empty body
// although the upstream had been called).
func TestSecurityHalfClosedRequestIsAnswered(t *testing.T) {
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, ""))
	for _, tc := range []struct{ name, body, want string }{
		{"json", `{"model":"gpt-fake-1","input":"hi"}`, `"Hello from A"`},
		{"stream", `{"model":"gpt-fake-1","input":"hi","stream":true}`, "event: response.completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-client-key\r\nContent-Length: %d\r\n\r\n%s",
				len(tc.body), tc.body)
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a half-closed request: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("the answer was cut after %d bytes: %v", len(b), err)
			}
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tc.want) {
				t.Fatalf("half-closed request: %d %q, want 200 with %s", resp.StatusCode, b, tc.want)
			}
		})
	}
	if n := up.RequestCount(); n != 2 {
		t.Errorf("the upstream got %d requests, want 2", n)
	}
}

// ---- finding 7: WebSocket hygiene ----

// A text frame that is not UTF-8 closes the socket with 1007, before any
// upstream is called.
func TestSecurityWebSocketInvalidUTF8Closes1007(t *testing.T) {
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, ""))
	c := g.dialWS(t)
	wsWrite(t, c, []byte("{\"type\":\"response.create\",\"model\":\"gpt-fake-1\",\"input\":\"\xff\xfe\xc0\"}"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			if got := websocket.CloseStatus(err); got != websocket.StatusInvalidFramePayloadData {
				t.Fatalf("closed with %v (%v), want 1007", got, err)
			}
			break
		}
		t.Logf("frame before the close: %.200s", data)
	}
	if n := up.RequestCount(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	g.healthy("after an invalid UTF-8 frame")
}

// A socket that stays active across several ws_idle periods stays open; once
// it sends nothing for ws_idle, the gateway closes it normally, and not
// before.
func TestSecurityIdleWebSocketIsClosed(t *testing.T) {
	const wsIdle = time.Second
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"timeouts: {ws_idle: 1s}\n")
	c := g.dialWS(t)
	for range 6 { // 2.4 s of turns 400 ms apart: longer than ws_idle
		wsWrite(t, c, []byte(wsNormalTurn))
		if f := wsReadUntilEnd(t, c); f.Type != "response.completed" {
			t.Fatalf("turn on an active socket: %+v", f)
		}
		time.Sleep(wsIdle * 2 / 5)
	}
	last := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, data, err := c.Read(ctx)
	idle := time.Since(last)
	if err == nil {
		t.Fatalf("an idle socket got a frame: %.200s", data)
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusNormalClosure {
		t.Fatalf("the idle socket ended with %v (%v) after %s, want a normal close after ws_idle", got, err, idle)
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		t.Logf("closed after %s idle: %d %q", idle.Round(time.Millisecond), ce.Code, ce.Reason)
	}
	if idle < wsIdle-(wsIdle*2/5)-100*time.Millisecond {
		t.Errorf("closed %s after the last frame, before ws_idle (%s)", idle, wsIdle)
	}
}

// ---- finding 7: /metrics ----

// With admin_token set, /metrics needs the token like /admin/*; with
// metrics_public: true it is open, and /admin/* still is not.
func TestSecurityMetricsNeedTheAdminToken(t *testing.T) {
	up := newFakeUpstream(t)
	const token = "adm-token-for-tests"
	admin := map[string]string{"Authorization": "Bearer " + token}
	wrong := map[string]string{"Authorization": "Bearer sk-client-key"}

	g := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"admin_token: "+token+"\n")
	resp, body := g.do(http.MethodGet, "/metrics", nil, map[string]string{"Authorization": ""})
	wantError(t, "/metrics without a token", resp, body, http.StatusUnauthorized, "invalid_admin_token")
	resp, body = g.do(http.MethodGet, "/metrics", nil, wrong)
	wantError(t, "/metrics with a client key", resp, body, http.StatusUnauthorized, "invalid_admin_token")
	resp, body = g.do(http.MethodGet, "/metrics", nil, admin)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("sluice_")) {
		t.Errorf("/metrics with the token: %d %.200s", resp.StatusCode, body)
	}

	g2 := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"admin_token: "+token+"\nmetrics_public: true\n")
	resp, body = g2.do(http.MethodGet, "/metrics", nil, map[string]string{"Authorization": ""})
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("sluice_")) {
		t.Errorf("metrics_public: /metrics without a token: %d %.200s", resp.StatusCode, body)
	}
	resp, body = g2.do(http.MethodGet, "/admin/upstreams", nil, map[string]string{"Authorization": ""})
	wantError(t, "metrics_public: /admin/upstreams without a token", resp, body, http.StatusUnauthorized, "invalid_admin_token")
}

// ---- max_connections ----

// With max_connections: 4, four connections each with a request in flight
// (an upload not yet finished) make a fifth client wait; it is answered
// once one of the four closes. Four idle keep-alive connections do not: the
// gateway closes the one idle longest for the fifth (SECURITY.md "Limits").
func TestSecurityMaxConnectionsQueuesTheNextClient(t *testing.T) {
	up := newFakeUpstream(t)
	g := startSecGateway(t, "warn", upstreamYAML(up.URL, "")+"limits: {max_connections: 4}\n")
	g.client.Transport.(*http.Transport).CloseIdleConnections() // waitListening used none, but be sure

	get := func(c net.Conn, br *bufio.Reader) (int, error) {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", g.addr) // the kernel's accept queue takes it
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		return c
	}

	// Four idle keep-alive connections: one request each proves the
	// gateway accepted it; it then idles. A fifth client is answered.
	var idle []net.Conn
	for i := range 4 {
		c := dial()
		if code, err := get(c, bufio.NewReader(c)); err != nil || code != http.StatusOK {
			t.Fatalf("idle connection %d: %d %v", i, code, err)
		}
		idle = append(idle, c)
	}
	first := dial()
	if code, err := get(first, bufio.NewReader(first)); err != nil || code != http.StatusOK {
		t.Fatalf("a fifth client while four idle keep-alive connections were open: %d %v; want it answered", code, err)
	}
	_ = first.Close()
	for _, c := range idle {
		_ = c.Close()
	}

	// Four uploads in flight: a slot each, none of them idle. (A slot an
	// idle connection above still holds is taken from it.)
	var held []net.Conn
	for range 4 {
		c := dial()
		if _, err := io.WriteString(c, "POST /v1/responses HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"+
			`{"model":"gpt-fa`); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}

	fifth := dial()
	type result struct {
		code int
		err  error
	}
	answered := make(chan result, 1)
	go func() {
		code, err := get(fifth, bufio.NewReader(fifth))
		answered <- result{code, err}
	}()
	select {
	case r := <-answered:
		t.Fatalf("the fifth client was served (%d %v) while four requests were in flight", r.code, r.err)
	case <-time.After(1500 * time.Millisecond):
	}
	held[0].Close()
	select {
	case r := <-answered:
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("the fifth client after a slot freed: %d %v", r.code, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the fifth client was not served after one of the four connections closed")
	}
}

// ---- finding 5: the operator's upstream key echoed back ----

// An upstream error quoting "Bearer <the configured api_key>" (in its body
// and a header) reaches the client with the key replaced by [redacted], on
// JSON and streaming requests; the key is in no log line either.
func TestSecurityUpstreamKeyIsRedactedFromErrors(t *testing.T) {
	if _, err := os.Stat("../../gateway/scrub.go"); err != nil {
		t.Skip("gateway/scrub.go is not there yet")
	}
	const key = "sk-operator-secret-0123456789abcdef"
	up := newFakeUpstream(t)
	g := startSecGateway(t, "debug", upstreamYAML(up.URL, key))
	echo := upstreamtest.Script{
		Status: http.StatusBadRequest,
		Header: http.Header{"X-Echo-Authorization": {"Bearer " + key}},
		Body: upstreamtest.ErrorBody("Invalid request: the header you sent was Authorization: Bearer "+key+" (key "+key+")",
			"invalid_request_error", "invalid_request", ""),
	}
	for _, stream := range []string{"false", "true"} {
		up.Enqueue(echo)
		resp, body := g.do(http.MethodPost, "/v1/responses", []byte(`{"model":"gpt-fake-1","input":"hi","stream":`+stream+`}`), nil)
		seen := string(body)
		for k, vs := range resp.Header {
			seen += "\n" + k + ": " + strings.Join(vs, ", ")
		}
		if strings.Contains(seen, key) || strings.Contains(seen, key[len(key)-12:]) {
			t.Errorf("stream:%s: the client saw the upstream key: %s", stream, seen)
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Authorization: [redacted] (key [redacted])") {
			t.Errorf("stream:%s: got %d %s, want the upstream's 400 with the key replaced by [redacted]", stream, resp.StatusCode, body)
		}
	}
	reqs := up.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Authorization") != "Bearer "+key {
		t.Fatalf("the upstream did not receive the operator's key (%d requests)", len(reqs))
	}
	if b, _ := os.ReadFile(g.logPath); bytes.Contains(b, []byte(key[len(key)-12:])) {
		t.Errorf("the gateway log holds the upstream key")
	}
}
