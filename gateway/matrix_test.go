package gateway_test

// TestFaultMatrix: one runner over every fault case in testdata/matrix/*.txt ×
// every client surface × every upstream kind, asserting the terminal-event
// rule the way a client sees it.
//
// # Axes
//
// Client surfaces (how the request is sent and read):
//
//	sse   POST /v1/responses stream:true, read with the raw SSE reader (gateway/sse)
//	ws    GET /v1/responses upgraded (coder/websocket), one response.create, raw text frames
//	chat  POST /v1/chat/completions stream:true, read with the raw SSE reader
//
// Upstream kinds (every upstream of the case, P and B, is of the kind):
//
//	resp_http  protocol responses, transport http (SSE)
//	resp_ws    protocol responses, transport websocket
//	chat_http  protocol chat: Responses clients are translated (internal/translate)
//
// Combinations run: sse and ws × all three kinds, chat × resp_http and
// chat_http: 8 per case. Skipped: chat × resp_ws, because a Chat client's
// request always goes to the upstream's /chat/completions over HTTP (proxy.go:
// only Responses streams use an upstream WebSocket), so it would run exactly
// chat × resp_http again. Chat × chat_http is a plain proxy too, but to an
// upstream configured as Chat-only, which is what a llama.cpp user runs.
//
// # Case format
//
// Blocks of lines; '#' starts a comment line; a block starts with "case NAME".
//
//	case cut after content, rescued
//	P: cut after=3            # the script of upstream P (required)
//	B: answer deltas=3        # optional: a second upstream; P and B then form the route
//	                          # "m" → [P, B] (continuation auto, stall 300ms); without
//	                          # B the request goes to P alone, without routes
//	policy: replay-trap       # optional: a hand-assembled Wasm policy (ABI 2) in the
//	                          # real runtime whose recover or replay hook traps or loops
//	                          # (recover-trap, recover-loop, replay-trap, replay-loop);
//	                          # the runner also asserts the runtime counted the fault
//	drain                     # optional: shut the gateway down once the client has
//	                          # content (drain_grace 100ms, idle timeout raised to 2s)
//	only: sse/resp_http ws/resp_http   # optional: run only these combinations
//	responses: TERMINAL CODE reason=R text=T [rescued]   # expectation for sse and ws
//	sse: …    ws: …    chat: …                           # per surface (overrides responses:)
//	sse@chat_http: …   responses@chat_http: …            # per surface and upstream kind
//
// Expectations pin what the gateway does today. Where that contradicts the
// README, the case says so in a "# BUG (reported): …" comment above the
// pinned line, so the fix makes this test fail at that line and the line is
// then corrected.
//
// Every combination that runs needs an expectation. TERMINAL is, on Responses
// surfaces, response.completed / response.failed / response.incomplete, or
// error (a WebSocket error frame); on chat, done (a finish chunk then [DONE]),
// error (an error chunk then [DONE]) or http (no stream: an HTTP error,
// whose status the expectation names as status=S).
// CODE is what the client acts on, "-" for none: for a response.failed the
// gateway's code leading the message when the wire code is server_error (see
// gatewayCode), else the wire code; an error frame's or chunk's code; the
// error body's code for http. R is the sluice_stream_terminal_total reason
// for the surface ("-": no stream was counted). T is full (the nine-word
// answer), sent (its first three words, what P sent before failing), none,
// or a literal in double quotes. "rescued": B served (part of) the answer;
// without it, a configured B must never have been called.
//
// Scripts (P: and B:), built on upstreamtest.Answer(full, deltas) (default 9
// deltas) so that B can continue P's prefill, the same on every upstream kind:
//
//	answer                        the whole answer
//	cut after=N                   N text deltas, then the connection closed abruptly
//	stall after=N                 N deltas, then silence (held open)
//	error-field after=N code=C    N deltas, then the SSE field "error: {…}" (WS: an error frame)
//	error-event after=N code=C    N deltas, then a bare {"type":"error",…} event (chat: an error chunk)
//	failed after=N code=C         N deltas, then response.failed with C (chat: an error chunk)
//	garbage after=N count=K       N deltas, then K unparseable events, then a clean end
//	garbage-skipped               the canned answer ("Hello from P") with one unparseable event
//	oversize after=N bytes=S      N deltas, then one event of S bytes (the limit is 4096)
//	cut-before-content            response.created and in_progress (chat: the role chunk), then cut
//	quota-event                   a bare usage_limit_reached error event before anything
//	status code=S                 HTTP status S with an OpenAI error body
//
// A script is also the upstream's default, so a retry or replay on the same
// upstream meets the same fault. Timeouts are short: idle 300ms, route stall
// 300ms, max event 4096 bytes.
//
// Each combination asserts: exactly one terminal event, last (Chat: one
// [DONE], last, after one finish or one error chunk); no bare error event and
// no empty data reach a Responses SSE client; its type and code; the text;
// sequence_number contiguous from 0 on Responses surfaces; one response id
// (Chat: one completion id); a response.* terminal valid against the OpenAPI
// subset (spec_test.go; error.code outside the enum only for an upstream's
// own code); the terminal metric counted once for the surface, with the
// reason; and whether B was called.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

var (
	matrixSurfaces = []string{"sse", "ws", "chat"}
	matrixKinds    = []string{"resp_http", "resp_ws", "chat_http"}
)

// matrixSkip says why a combination does not run ("" → it runs).
func matrixSkip(surface, kind string) string {
	if surface == "chat" && kind == "resp_ws" {
		return "Chat requests never use an upstream WebSocket: the same as chat/resp_http"
	}
	return ""
}

// matrixCase is one block of a testdata/matrix file.
type matrixCase struct {
	file   string
	line   int
	name   string
	p, b   string // scripts; b == "" → one upstream, no route
	policy string
	drain  bool
	only   map[string]bool
	expect map[string]matrixExpect // "sse", "ws", "chat", "sse@chat_http", …
}

type matrixExpect struct {
	line     int
	terminal string
	code     string
	status   int // the HTTP status of an http terminal
	reason   string
	text     string
	rescued  bool
}

func (e matrixExpect) String() string {
	s := fmt.Sprintf("%s %s reason=%s text=%q", e.terminal, orDash(e.code), orDash(e.reason), e.text)
	if e.status != 0 {
		s += fmt.Sprintf(" status=%d", e.status)
	}
	if e.rescued {
		s += " rescued"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const (
	matrixSent = "The quick brown" // fullAnswer's first three of nine deltas
)

func parseMatrixFile(t *testing.T, path string) []*matrixCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []*matrixCase
	var c *matrixCase
	bad := func(n int, format string, args ...any) {
		t.Fatalf("%s:%d: %s", path, n, fmt.Sprintf(format, args...))
	}
	for i, raw := range strings.Split(string(b), "\n") {
		n := i + 1
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if name, ok := strings.CutPrefix(line, "case "); ok {
			c = &matrixCase{file: filepath.Base(path), line: n, name: strings.TrimSpace(name), expect: map[string]matrixExpect{}}
			cases = append(cases, c)
			continue
		}
		if c == nil {
			bad(n, "%q before the first case", line)
		}
		if line == "drain" {
			c.drain = true
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			bad(n, "want KEY: VALUE, got %q", line)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "P":
			c.p = val
		case "B":
			c.b = val
		case "policy":
			c.policy = val
		case "only":
			c.only = map[string]bool{}
			for _, f := range strings.Fields(val) {
				c.only[f] = true
			}
		default:
			surf, kind, _ := strings.Cut(key, "@")
			if surf != "responses" && surf != "sse" && surf != "ws" && surf != "chat" {
				bad(n, "unknown key %q", key)
			}
			if kind != "" && !contains(matrixKinds, kind) {
				bad(n, "unknown upstream kind %q", kind)
			}
			e, err := parseMatrixExpect(val)
			if err != nil {
				bad(n, "%v", err)
			}
			e.line = n
			targets := []string{surf}
			if surf == "responses" {
				targets = []string{"sse", "ws"}
			}
			for _, s := range targets {
				if kind != "" {
					s += "@" + kind
				}
				c.expect[s] = e
			}
		}
	}
	for _, c := range cases {
		if c.p == "" {
			t.Fatalf("%s:%d: case %q has no P: script", path, c.line, c.name)
		}
	}
	return cases
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func parseMatrixExpect(val string) (matrixExpect, error) {
	var e matrixExpect
	// text="…" may hold spaces: take it out first.
	if i := strings.Index(val, `text="`); i >= 0 {
		j := strings.Index(val[i+6:], `"`)
		if j < 0 {
			return e, fmt.Errorf("unterminated text= in %q", val)
		}
		e.text = val[i+6 : i+6+j]
		val = val[:i] + " text=" + "\x00" + val[i+6+j+1:]
	}
	f := strings.Fields(val)
	if len(f) < 2 {
		return e, fmt.Errorf("want TERMINAL CODE reason=R text=T, got %q", val)
	}
	e.terminal = f[0]
	if f[1] != "-" {
		e.code = f[1]
	}
	sawText, sawReason := false, false
	for _, a := range f[2:] {
		switch {
		case a == "rescued":
			e.rescued = true
		case strings.HasPrefix(a, "status="):
			n, err := strconv.Atoi(strings.TrimPrefix(a, "status="))
			if err != nil || n < 400 || n > 599 {
				return e, fmt.Errorf("status=%s: want an HTTP error status", strings.TrimPrefix(a, "status="))
			}
			e.status = n
		case strings.HasPrefix(a, "reason="):
			sawReason = true
			if r := strings.TrimPrefix(a, "reason="); r != "-" {
				e.reason = r
			}
		case strings.HasPrefix(a, "text="):
			sawText = true
			switch v := strings.TrimPrefix(a, "text="); v {
			case "\x00":
			case "full":
				e.text = fullAnswer
			case "sent":
				e.text = matrixSent
			case "none":
				e.text = ""
			default:
				return e, fmt.Errorf("text=%s: want full, sent, none or a quoted literal", v)
			}
		default:
			return e, fmt.Errorf("unknown field %q", a)
		}
	}
	if !sawText || !sawReason {
		return e, fmt.Errorf("reason= and text= are required: %q", val)
	}
	if (e.terminal == "http") != (e.status != 0) {
		return e, fmt.Errorf("status= is required with an http terminal, and only there: %q", val)
	}
	switch e.terminal {
	case "response.completed", "response.failed", "response.incomplete", "error", "done", "http":
	default:
		return e, fmt.Errorf("unknown terminal %q", e.terminal)
	}
	return e, nil
}

// matrixScript builds a P:/B: script.
func matrixScript(t *testing.T, spec string) upstreamtest.Script {
	t.Helper()
	f := strings.Fields(spec)
	args := map[string]string{}
	for _, a := range f[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Fatalf("script %q: argument %q is not k=v", spec, a)
		}
		args[k] = v
	}
	num := func(k string, def int) int {
		v, ok := args[k]
		if !ok {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("script %q: %s=%q", spec, k, v)
		}
		return n
	}
	code := args["code"]
	if code == "" {
		code = "server_error"
	}
	a := upstreamtest.Answer(fullAnswer, num("deltas", 9))
	stopped := func(tail, chatTail []upstreamtest.Frame) upstreamtest.Script {
		s := a
		s.StopAfterDeltas, s.End, s.Tail, s.ChatTail = num("after", 3), upstreamtest.EndNormal, tail, chatTail
		return s
	}
	errObj := fmt.Sprintf(`{"message":"The server had an error while processing your request.","type":"server_error","code":%q}`, code)
	switch f[0] {
	case "answer":
		return a
	case "cut":
		return a.CutAfterDeltas(num("after", 3))
	case "stall":
		return a.StallAfterDeltas(num("after", 3))
	case "failed":
		return a.FailAfterDeltas(num("after", 3), code)
	case "error-field":
		fr := upstreamtest.Frame{Raw: []byte("error: " + errObj + "\n\n"), WS: []byte(`{"type":"error","status":500,"error":` + errObj + `}`)}
		return stopped([]upstreamtest.Frame{fr}, []upstreamtest.Frame{fr})
	case "error-event":
		ev := upstreamtest.SSEEvent([]byte(`{"type":"error","status":500,"error":` + errObj + `}`))
		return stopped([]upstreamtest.Frame{ev}, []upstreamtest.Frame{upstreamtest.SSEData([]byte(`{"error":` + errObj + `}`)), upstreamtest.SSEData([]byte("[DONE]"))})
	case "garbage":
		g := upstreamtest.Frame{Raw: []byte("data: not json{{\n\n"), WS: []byte("not json{{")}
		var fs []upstreamtest.Frame
		for i := 0; i < num("count", 3); i++ {
			fs = append(fs, g)
		}
		return stopped(fs, fs)
	case "garbage-skipped":
		return upstreamtest.Garbage()
	case "oversize":
		fr := upstreamtest.RawFrame([]byte(`data: {"type":"response.output_text.delta","delta":"` + strings.Repeat("x", num("bytes", 8192)) + "\"}\n\n"))
		return stopped([]upstreamtest.Frame{fr}, []upstreamtest.Frame{fr})
	case "cut-before-content":
		return upstreamtest.Script{Frames: upstreamtest.CutAfter(2).Frames, ChatFrames: upstreamtest.CutAfter(1).ChatFrames, End: upstreamtest.EndCut}
	case "quota-event":
		return upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent)
	case "status":
		return upstreamtest.Status5xx(num("code", 503))
	}
	t.Fatalf("unknown script %q", spec)
	return upstreamtest.Script{}
}

// matrixPolicy hand-assembles an ABI-2 policy whose recover or replay hook
// traps (unreachable) or loops forever (the runtime's call deadline stops
// it); the other hook answers nothing the gateway uses (no export).
func matrixPolicy(kind string) []byte {
	hook, how, _ := strings.Cut(kind, "-")
	i32, i64 := byte(0x7f), byte(0x7e)
	var m []byte
	m = append(m, 0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00)
	// types: 0 () → i32, 1 (i32) → i32, 2 (i32 i32) → i64
	m = wSection(m, 1, wVec(wFunctype(nil, []byte{i32}), wFunctype([]byte{i32}, []byte{i32}), wFunctype([]byte{i32, i32}, []byte{i64})))
	// functions: 0 abi_version, 1 alloc, 2 the hook
	m = wSection(m, 3, wVec([]byte{0x00}, []byte{0x01}, []byte{0x02}))
	m = wSection(m, 5, wVec([]byte{0x00, 0x02}))
	m = wSection(m, 7, wVec(
		wCat(wName("memory"), []byte{0x02, 0x00}),
		wCat(wName("sluice_abi_version"), []byte{0x00, 0x00}),
		wCat(wName("sluice_alloc"), []byte{0x00, 0x01}),
		wCat(wName("sluice_"+hook), []byte{0x00, 0x02}),
	))
	abi := wCat([]byte{0x00}, wI32(2), []byte{0x0b})
	alloc := wCat([]byte{0x00}, wI32(65536), []byte{0x0b})
	body := []byte{0x00, 0x00, 0x0b} // no locals; unreachable; end
	if how == "loop" {
		body = []byte{0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x42, 0x00, 0x0b} // loop { br 0 }; i64.const 0; end
	}
	m = wSection(m, 10, wVec(wSized(abi), wSized(alloc), wSized(body)))
	return m
}

// matrixRun is what one combination saw.
type matrixRun struct {
	terminal, code, text string
	status               int // http: the response's status
	reason               string
	rescued              bool
	events               []string // for failure messages
}

func (r matrixRun) String() string {
	s := fmt.Sprintf("%s %s reason=%s text=%q", r.terminal, orDash(r.code), orDash(r.reason), r.text)
	if r.status != 0 {
		s += fmt.Sprintf(" status=%d", r.status)
	}
	if r.rescued {
		s += " rescued"
	}
	return s
}

func TestFaultMatrix(t *testing.T) {
	files, err := filepath.Glob("testdata/matrix/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in testdata/matrix: %v", err)
	}
	spec := loadSpec(t)
	ran := 0
	for _, file := range files {
		for _, c := range parseMatrixFile(t, file) {
			for _, surface := range matrixSurfaces {
				for _, kind := range matrixKinds {
					combo := surface + "/" + kind
					if matrixSkip(surface, kind) != "" || (c.only != nil && !c.only[combo]) {
						continue
					}
					e, ok := c.expect[surface+"@"+kind]
					if !ok {
						e, ok = c.expect[surface]
					}
					if !ok {
						t.Fatalf("%s:%d: case %q has no expectation for %s", c.file, c.line, c.name, combo)
					}
					ran++
					t.Run(strings.TrimSuffix(c.file, ".txt")+"/"+c.name+"/"+combo, func(t *testing.T) {
						runMatrix(t, spec, c, surface, kind, e)
					})
				}
			}
		}
	}
	t.Logf("%d combinations", ran)
}

func runMatrix(t *testing.T, spec *specSubset, c *matrixCase, surface, kind string, e matrixExpect) {
	where := fmt.Sprintf("%s:%d (expectation at line %d)", c.file, c.line, e.line)
	opts := gateway.Options{IdleTimeout: 300 * time.Millisecond, MaxEventBytes: 4096}
	var rt *plugins.Runtime
	if c.policy != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var err error
		rt, err = plugins.New(ctx, plugins.Options{Embedded: map[string][]byte{"matrix.wasm": matrixPolicy(c.policy)},
			Logger: hclog.NewNullLogger(), CacheDir: t.TempDir()})
		cancel()
		if err != nil {
			t.Fatalf("%s: loading the %s policy: %v", where, c.policy, err)
		}
		t.Cleanup(func() { _ = rt.Close(context.Background()) })
		opts.Policy = rt
	}
	if c.drain {
		opts.IdleTimeout, opts.DrainGrace = 2*time.Second, 100*time.Millisecond
	}
	hc := harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}}, transport: map[string]string{}, protocol: map[string]string{}}
	if c.b != "" {
		hc.upstreams = append(hc.upstreams, upstreamtest.Options{Name: "B"})
		opts.Routes = []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}},
			Stall: 300 * time.Millisecond, Continuation: gateway.ContinuationAuto}}
	}
	for _, u := range hc.upstreams {
		switch kind {
		case "resp_ws":
			hc.transport[u.Name] = "websocket"
		case "chat_http":
			hc.protocol[u.Name] = "chat"
		}
	}
	hc.opts = opts
	h := newHarness(t, hc)
	h.ups["P"].SetDefault(matrixScript(t, c.p))
	if c.b != "" {
		h.ups["B"].SetDefault(matrixScript(t, c.b))
	}

	var got matrixRun
	var terminal []byte // a response.* terminal event, for the spec check
	drive := func() { got, terminal = matrixDrive(t, h, surface) }
	if c.drain {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); drive() }()
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer wcancel()
		if err := h.ups["P"].WaitRequests(wctx, 1); err != nil {
			t.Fatalf("%s: P never got the request: %v", where, err)
		}
		time.Sleep(100 * time.Millisecond) // P stalls after its deltas: the client has content
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.gw.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	} else {
		drive()
	}
	if c.b != "" {
		got.rescued = h.ups["B"].RequestCount() > 0
	}
	// The terminal metric: one stream counted for the surface, with the reason.
	metricErr := ""
	label := map[string]string{"sse": "responses_stream", "ws": "websocket", "chat": "chat_stream"}[surface]
	deadline := time.Now().Add(15 * time.Second) // only a broken run waits this long
	for {
		reasons := matrixTerminals(matrixMetrics(h), label)
		got.reason = ""
		total := 0.0
		for r, v := range reasons {
			total += v
			got.reason = r
		}
		if total > 1 {
			got.reason = fmt.Sprint(reasons)
		}
		if got.reason == e.reason && (total == 1 || e.reason == "") {
			break
		}
		if time.Now().After(deadline) {
			metricErr = fmt.Sprintf("sluice_stream_terminal_total{surface=%q}: %v", label, reasons)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fail := func(what string) {
		t.Helper()
		t.Fatalf("%s: %s\n  want: %s\n  got:  %s\n  events:\n    %s", where, what, e, got, strings.Join(got.events, "\n    "))
	}
	if got.terminal != e.terminal || got.code != e.code || got.status != e.status {
		fail("terminal")
	}
	if got.text != e.text {
		fail("text")
	}
	if c.b != "" {
		if got.rescued != e.rescued {
			fail("B called")
		}
	} else if e.rescued {
		t.Fatalf("%s: rescued expected without a B", where)
	}
	if metricErr != "" {
		fail(metricErr)
	}
	if terminal != nil {
		v, codes := validateTerminal(t, spec, terminal)
		var bad []violation
		for _, x := range v {
			// usage is the upstreams' own (the fake's lacks the newest fields).
			if !strings.HasPrefix(x.path, "$.response.usage.") {
				bad = append(bad, x)
			}
		}
		wire := gjson.GetBytes(terminal, "response.error.code").Str
		if len(codes) > 0 && gatewayOwnCode(wire) {
			bad = append(bad, codes...)
		}
		if len(bad) > 0 {
			t.Fatalf("%s: the terminal event breaks the spec: %v\n%s", where, bad, terminal)
		}
	}
	// A terminal the gateway wrote (or rebuilt) holds what the client was
	// sent; an upstream's own response.failed (reason "failed") is relayed.
	if terminal != nil && got.reason != "failed" {
		if out := gjson.GetBytes(terminal, "response.output.0.content.0.text"); got.text != "" && out.Str != got.text {
			t.Fatalf("%s: terminal output holds %q; the client was sent %q:\n%s", where, out.Str, got.text, terminal)
		}
	}
	if rt != nil {
		var faults int64
		for _, ps := range rt.Status() {
			faults += ps.Faults
		}
		if faults == 0 {
			t.Fatalf("%s: the %s policy was never asked (no fault counted): the case does not reach the hook", where, c.policy)
		}
	}
}

// matrixMetrics is the /metrics page, read through the gateway's handler
// (a drained gateway no longer accepts connections).
func matrixMetrics(h *harness) string {
	rec := newRecorder()
	h.gw.Handler().ServeHTTP(rec, mustRequest(http.MethodGet, "/metrics"))
	return rec.body.String()
}

// gatewayOwnCode reports whether a wire error code is one of the gateway's
// own, which must travel as server_error (outside the spec's enum is a bug).
func gatewayOwnCode(code string) bool {
	switch code {
	case "stream_incomplete", "upstream_unavailable", "upstream_error", "payload_too_large":
		return true
	}
	return false
}

// matrixTerminals reads sluice_stream_terminal_total for one surface:
// reason → count.
func matrixTerminals(page, surface string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(l, "sluice_stream_terminal_total{")
		if !ok || !strings.Contains(rest, `surface="`+surface+`"`) {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		reason := ""
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `reason="`); ok {
				reason = strings.TrimSuffix(v, `"`)
			}
		}
		f, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if f > 0 {
			out[reason] += f
		}
	}
	return out
}

// matrixDrive sends the case's request on surface and checks the stream's
// shape; it returns what the client saw and the response.* terminal event.
func matrixDrive(t *testing.T, h *harness, surface string) (matrixRun, []byte) {
	t.Helper()
	switch surface {
	case "sse":
		status, body, evs := matrixPost(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`)
		if status != http.StatusOK {
			return matrixRun{terminal: "http", code: gjson.Get(body, "error.code").Str, status: status, events: []string{body}}, nil
		}
		var datas [][]byte
		for _, ev := range evs {
			if strings.TrimSpace(string(ev.Data)) == "" {
				t.Fatalf("an empty data event reached the client")
			}
			if eventType(ev) == "error" || ev.Name == "error" {
				t.Fatalf("a bare error event reached a Responses SSE client: %s", ev.Data)
			}
			datas = append(datas, ev.Data)
		}
		return matrixResponses(t, datas, false)
	case "ws":
		c := h.dialWS(nil)
		defer c.conn.CloseNow()
		var datas [][]byte
		for _, ev := range c.turn(`{"type":"response.create","model":"m","input":"hi"}`) {
			datas = append(datas, ev.data)
		}
		return matrixResponses(t, datas, true)
	default:
		status, body, evs := matrixPost(t, h, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		if status != http.StatusOK {
			return matrixRun{terminal: "http", code: gjson.Get(body, "error.code").Str, status: status, events: []string{body}}, nil
		}
		return matrixChat(t, evs), nil
	}
}

// matrixPost posts body and reads the SSE stream (or the error body).
func matrixPost(t *testing.T, h *harness, path, body string) (int, string, []sse.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var sb strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			sb.WriteString(sc.Text())
		}
		return resp.StatusCode, sb.String(), nil
	}
	r := sse.NewReader(resp.Body, 64<<20)
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("POST %s: the stream did not end within 15s (%d events)", path, len(evs))
			}
			return resp.StatusCode, "", evs
		}
		evs = append(evs, ev.Clone())
	}
}

// matrixResponses checks a Responses stream (SSE data or WebSocket frames):
// one terminal (or, on a WebSocket, one error frame), last; sequence_number
// from 0 without a gap; one response id.
func matrixResponses(t *testing.T, evs [][]byte, ws bool) (matrixRun, []byte) {
	t.Helper()
	var r matrixRun
	ids := map[string]bool{}
	terminals := 0
	for i, data := range evs {
		ev := gjson.ParseBytes(data)
		typ := ev.Get("type").Str
		r.events = append(r.events, matrixShort(data))
		if typ == "error" && ws {
			terminals++
			r.terminal, r.code = "error", ev.Get("error.code").Str
			continue
		}
		if seq := ev.Get("sequence_number"); !seq.Exists() || seq.Int() != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %s, want %d:\n%s", i, typ, seq.Raw, i, data)
		}
		if id := ev.Get("response.id"); id.Exists() {
			ids[id.Str] = true
		}
		if typ == "response.output_text.delta" {
			r.text += ev.Get("delta").Str
		}
		if isTerminal(typ) {
			terminals++
			r.terminal = typ
			r.code = gatewayCode(ev.Get("response.error.code").Str, ev.Get("response.error.message").Str)
		}
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if terminals != 1 || r.terminal == "" || !(isTerminal(gjson.GetBytes(evs[len(evs)-1], "type").Str) || (ws && r.terminal == "error")) {
		t.Fatalf("want exactly one terminal event, last; got %d:\n  %s", terminals, strings.Join(r.events, "\n  "))
	}
	if len(ids) > 1 {
		t.Fatalf("the client saw %d response ids %v; want one", len(ids), ids)
	}
	if r.terminal == "error" {
		return r, nil
	}
	return r, evs[len(evs)-1]
}

// matrixChat checks a Chat stream: one [DONE], last, right after either
// the one error chunk or a stream with exactly one finish chunk and no
// error; one completion id.
func matrixChat(t *testing.T, evs []sse.Event) matrixRun {
	t.Helper()
	var r matrixRun
	ids := map[string]bool{}
	dones, finishes, errs := 0, 0, 0
	for i, ev := range evs {
		if ev.Done {
			dones++
			r.events = append(r.events, "[DONE]")
			continue
		}
		r.events = append(r.events, matrixShort(ev.Data))
		c := gjson.ParseBytes(ev.Data)
		if e := c.Get("error"); e.Exists() {
			errs++
			r.code = e.Get("code").Str
			if i != len(evs)-2 {
				t.Fatalf("error chunk at %d of %d", i, len(evs))
			}
			continue
		}
		if id := c.Get("id").Str; id != "" {
			ids[id] = true
		}
		r.text += c.Get("choices.0.delta.content").Str
		if c.Get("choices.0.finish_reason").Str != "" {
			finishes++
		}
	}
	if len(evs) == 0 || dones != 1 || !evs[len(evs)-1].Done {
		t.Fatalf("want exactly one [DONE], last; got %d:\n  %s", dones, strings.Join(r.events, "\n  "))
	}
	switch {
	case errs == 1 && finishes == 0:
		r.terminal = "error"
	case errs == 0 && finishes == 1:
		r.terminal = "done"
	default:
		t.Fatalf("%d error chunks and %d finish chunks; want one of them:\n  %s", errs, finishes, strings.Join(r.events, "\n  "))
	}
	if len(ids) > 1 {
		t.Fatalf("the client saw %d completion ids %v; want one", len(ids), ids)
	}
	return r
}

func matrixShort(data []byte) string {
	s := string(data)
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}
