package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"
)

// The Responses WebSocket mode (README, "What it promises"): GET /v1/responses upgraded,
// flat {"type":"response.create",…} frames in, one JSON text frame per event
// out. Both the fake upstream and Sluice serve it.

// wsCreateFrame is a streaming request body as a response.create frame: the
// same fields with "type" first and without "stream" (a WebSocket turn
// always streams).
func wsCreateFrame(body []byte) []byte {
	b := bytes.Replace(body, []byte(`"stream":true,`), nil, 1)
	return append([]byte(`{"type":"response.create",`), bytes.TrimPrefix(b, []byte("{"))...)
}

// wsURL is the Responses WebSocket endpoint of base (http://host:port).
func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/v1/responses" }

// wsClient is one client WebSocket. It is not safe for concurrent use.
type wsClient struct {
	url  string
	conn *websocket.Conn // nil after a failed turn: dial again
	buf  bytes.Buffer
}

// dial opens the socket with the headers Codex sends (a client key and the
// beta header).
func (c *wsClient) dial(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hdr := http.Header{"Authorization": {"Bearer sk-bench-0123456789abcdef"}, "OpenAI-Beta": {"responses_websockets=2026-02-06"}}
	conn, resp, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		if resp != nil {
			return fmt.Errorf("dial: HTTP %d: %w", resp.StatusCode, err)
		}
		return fmt.Errorf("dial: %w", err)
	}
	conn.SetReadLimit(64 << 20)
	c.conn = conn
	return nil
}

// close closes the socket without a close handshake.
func (c *wsClient) close() {
	if c.conn != nil {
		_ = c.conn.CloseNow()
		c.conn = nil
	}
}

// turn sends frame and reads the answer up to its terminal event, which
// must be the streamEvents-th frame and response.completed. ttff is the time
// from the send to the first frame. After an error the socket is closed.
func (c *wsClient) turn(ctx context.Context, frame []byte) (ttff time.Duration, err error) {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return 0, err
		}
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	for n := 1; ; n++ {
		_, r, err := c.conn.Reader(ctx)
		if err != nil {
			return 0, fmt.Errorf("after %d frames: %w", n-1, err)
		}
		if n == 1 {
			ttff = time.Since(start)
		}
		c.buf.Reset()
		if _, err := c.buf.ReadFrom(r); err != nil {
			return 0, fmt.Errorf("frame %d: %w", n, err)
		}
		switch typ := gjson.GetBytes(c.buf.Bytes(), "type").Str; typ {
		case "response.completed":
			if n != streamEvents {
				return 0, fmt.Errorf("response.completed after %d frames, want %d", n, streamEvents)
			}
			return ttff, nil
		case "response.failed", "response.incomplete", "error":
			return 0, fmt.Errorf("frame %d is %s: %.300s", n, typ, c.buf.Bytes())
		}
		if n >= streamEvents {
			return 0, fmt.Errorf("no response.completed in %d frames", n)
		}
	}
}

// wsPath is one path of the ws-turns case: where the client sockets go, the
// process measured and charged (target.cpuOf), and the open sockets.
type wsPath struct {
	*target
	url    string
	single chan *wsClient // the one socket of (w1)
	multi  chan *wsClient // the sockets of (w2), one per worker
}

func newWSPath(name, base string, proc, cpuOf *process) *wsPath {
	return &wsPath{target: newTarget(name, base, proc, cpuOf), url: wsURL(base)}
}

// open dials the sockets of both sub-cases and checks a turn on each.
func (p *wsPath) open(ctx context.Context, workers int, frame []byte) error {
	p.single, p.multi = make(chan *wsClient, 1), make(chan *wsClient, workers)
	for i := range workers + 1 {
		c := &wsClient{url: p.url}
		if _, err := c.turn(ctx, frame); err != nil {
			return fmt.Errorf("%s: socket %d: %w", p.name, i, err)
		}
		if i == 0 {
			p.single <- c
		} else {
			p.multi <- c
		}
	}
	return nil
}

// close closes every socket.
func (p *wsPath) close() {
	for _, ch := range []chan *wsClient{p.single, p.multi} {
		for len(ch) > 0 {
			(<-ch).close()
		}
	}
}

// turnOp runs one turn on a socket taken from pool (a closed loop has as
// many workers as pool has sockets, so one is always free).
func turnOp(pool chan *wsClient, frame []byte) op {
	return func(ctx context.Context) (time.Duration, error) {
		c := <-pool
		defer func() { pool <- c }()
		return c.turn(ctx, frame)
	}
}

// BenchmarkWebSocket measures Sluice's Responses WebSocket mode against the
// fake upstream, with one Sluice process per upstream transport:
// sluice-ws (transport: websocket: client socket → Sluice → upstream socket)
// and sluice-sse (transport: http: client socket → Sluice → SSE upstream),
// next to direct (client socket → the fake upstream's own endpoint).
//
// ws-idle: N idle client sockets, each after one completed turn (so through
// sluice-ws each also holds its upstream socket), per transport on a fresh
// Sluice process: RSS per socket and sockets per GiB.
//
// ws-turns: sequential response.create turns of a streamEvents-event
// response, interleaved in rounds: (w1) on one socket, (w2) on one socket
// per closed-loop worker. It reports turns/s, turn latency, time to first
// frame (TTFF), and Sluice's added latency per event: (turn latency −
// direct's) ÷ streamEvents.
func BenchmarkWebSocket(b *testing.B) {
	cfg, sel := startCase(b, caseWSTurns, caseWSIdle)
	out := os.Stdout
	b.ReportMetric(0, "ns/op") // one iteration of minutes: meaningless
	procs := &procSet{}
	b.Cleanup(procs.stopAll)
	// The fake upstream holds a socket per idle client socket too.
	raiseNoFile(uint64(2*cfg.wsIdle + 1024))
	up := startFake(b, procs, "fake upstream", roleUpstream)
	frame := wsCreateFrame(streamBody)
	fmt.Fprintf(out, "\nSluice Responses WebSocket benchmark (%s mode): response.create frame %d bytes, %d events per response, %d CPUs (shared by all processes); fake upstream pid %d\n",
		modeName(cfg), len(frame), streamEvents, runtime.NumCPU(), up.pid())
	if sel[caseWSIdle] {
		wsIdleCase(b, out, cfg, procs, up, frame)
	}
	if sel[caseWSTurns] {
		wsTurnsCase(b, out, cfg, procs, up, frame)
	}
	printStderrTails(out, procs.procs...)
}

// wsTurnsCase is ws-turns.
func wsTurnsCase(b *testing.B, out io.Writer, cfg benchConfig, procs *procSet, up *process, frame []byte) {
	ctx := context.Background()
	slWS := startSluice(b, procs, "sluice-ws", "upstreams:\n"+upstreamYAML("fake", up.url, "websocket"))
	slSSE := startSluice(b, procs, "sluice-sse", "upstreams:\n"+upstreamYAML("fake", up.url, "http"))
	paths := []*wsPath{newWSPath("direct", up.url, nil, up), newWSPath("sluice-ws", slWS.url, slWS, slWS), newWSPath("sluice-sse", slSSE.url, slSSE, slSSE)}
	fmt.Fprintf(out, "\n(ws-turns) %d rounds × %v per path and sub-case; processes: sluice-ws pid %d (transport: websocket), sluice-sse pid %d (transport: http, SSE)\n",
		cfg.rounds, cfg.dur, slWS.pid(), slSSE.pid())
	upFds := up.fds()
	for _, p := range paths {
		if err := p.open(ctx, cfg.workers, frame); err != nil {
			b.Fatal(err)
		}
		defer p.close()
		if p.name == "sluice-ws" {
			// Each client socket has its own session scope (a minted turn
			// state), hence its own upstream socket.
			fmt.Fprintf(out, "sluice-ws opened %d upstream sockets for %d client sockets (fake upstream fds %d → %d)\n",
				up.fds()-upFds, cfg.workers+1, upFds, up.fds())
		}
		upFds = up.fds()
	}
	for _, p := range paths {
		closedLoop(ctx, 1, cfg.warmup, turnOp(p.single, frame))
		closedLoop(ctx, cfg.workers, cfg.warmup, turnOp(p.multi, frame))
	}
	one, many := map[string]*runStats{}, map[string]*runStats{}
	for _, p := range paths {
		one[p.name], many[p.name] = &runStats{}, &runStats{}
	}
	for round := range cfg.rounds {
		order := rotated(paths, round)
		line := fmt.Sprintf("round %d/%d:", round+1, cfg.rounds)
		for _, p := range order {
			r := p.measure(func() *runStats { return closedLoop(ctx, 1, cfg.dur, turnOp(p.single, frame)) })
			one[p.name].add(r)
			line += fmt.Sprintf(" %s %.0f turns/s (1 socket);", p.name, r.throughput())
		}
		for _, p := range order {
			r := p.measure(func() *runStats { return closedLoop(ctx, cfg.workers, cfg.dur, turnOp(p.multi, frame)) })
			many[p.name].add(r)
			line += fmt.Sprintf(" %s %.0f turns/s (%d sockets);", p.name, r.throughput(), cfg.workers)
		}
		fmt.Fprintln(out, strings.TrimSuffix(line, ";"))
		checkAlive(b, fmt.Sprintf("round %d", round+1), up, slWS, slSSE)
	}

	names := []string{"direct", "sluice-ws", "sluice-sse"}
	rows := func(res map[string]*runStats) []pathRow {
		var rs []pathRow
		for _, n := range names {
			rs = append(rs, pathRow{n, res[n]})
		}
		return rs
	}
	type added struct{ perEvent, ttff diff }
	adds := map[string]added{}
	subcase := func(key, title string, res map[string]*runStats) {
		fmt.Fprintf(out, "\n%s: %d rounds × %v per path\n", title, cfg.rounds, cfg.dur)
		statsTable(b, out, key, "turns/s", "TTFF", closedTable, rows(res))
		d := res["direct"]
		for _, n := range names[1:] {
			r := res[n]
			lat, ttff := latDiff(r, d), ttfeDiff(r, d)
			per := lat.div(streamEvents)
			fmt.Fprintf(out, "%s − direct: turn latency %s\n", n, lat)
			fmt.Fprintf(out, "    added per event (÷ %d): %s\n", streamEvents, per.micros())
			fmt.Fprintf(out, "    added time to first frame: %s\n", ttff)
			fmt.Fprintf(out, "    turns/s ÷ direct %.3f (median of rounds %.3f)\n", ratio(r.throughput(), d.throughput()), pairedRatio(r, d))
			per.report(b, n+"-"+key+"-added-per-event")
			ttff.report(b, n+"-"+key+"-added-ttff")
			reportMetric(b, ratio(r.throughput(), d.throughput()), n+"/direct-"+key+"-ratio")
			adds[key+n] = added{per, ttff}
		}
		ws, sse := res["sluice-ws"], res["sluice-sse"]
		fmt.Fprintf(out, "sluice-ws − sluice-sse (upstream socket vs SSE): per event %s; first frame %s\n",
			latDiff(ws, sse).div(streamEvents).micros(), ttfeDiff(ws, sse))
		for _, n := range names {
			failOnErrors(b, n+" "+title, res[n])
		}
	}
	subcase("ws1", "(w1) one client WebSocket, sequential turns", one)
	subcase("wsN", fmt.Sprintf("(w2) %d client WebSockets, sequential turns on each (closed loop, saturated: latencies include queueing)", cfg.workers), many)

	fmt.Fprintf(out, "\nsummary (ws-turns, pooled over all rounds; added = path − direct, per event = ÷ %d)\n", streamEvents)
	w := newTable(out)
	fmt.Fprintln(w, "path\tw1 turns/s\tw1 p50\tw1 p99\tw1 TTFF p50\tw1 TTFF p99\tadded/event p50\tadded/event p99\tadded TTFF p50\tadded TTFF p99\tw2 turns/s\tw2 p50\tw2 p99\tw2 added/event p50\t")
	for _, n := range names {
		o, m := one[n], many[n]
		a1, a2 := adds["ws1"+n], adds["wsN"+n]
		cell := func(d time.Duration, micros bool) string {
			if n == "direct" {
				return "-"
			}
			if micros {
				return fmt.Sprintf("%+.1fµs", us(d))
			}
			return signedMS(d)
		}
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t\n", n, o.throughput(), ms(o.lat.percentile(50)), ms(o.lat.percentile(99)),
			ms(o.ttfe.percentile(50)), ms(o.ttfe.percentile(99)), cell(a1.perEvent.p50, true), cell(a1.perEvent.p99, true), cell(a1.ttff.p50, false), cell(a1.ttff.p99, false),
			m.throughput(), ms(m.lat.percentile(50)), ms(m.lat.percentile(99)), cell(a2.perEvent.p50, true))
	}
	_ = w.Flush()
}

// wsIdleResult is the outcome of holding idle client sockets on a Sluice.
type wsIdleResult struct {
	idleResult
	upBefore, upMid, upAfter int // the fake upstream's fds
	leftFds, leftUp          int // Sluice's and the fake upstream's fds once the clients have gone
}

// firstFifthKiB is the RSS growth per socket over the first fifth.
func (r *wsIdleResult) firstFifthKiB() float64 {
	if r.midOpened == 0 {
		return 0
	}
	return float64(r.rssMid-r.rssBefore) / float64(r.midOpened)
}

// perGiB is how many sockets a GiB of RSS holds at kib KiB per socket.
func perGiB(kib float64) float64 {
	if kib <= 0 {
		return math.NaN()
	}
	return float64(1<<20) / kib
}

// wsIdleCase is ws-idle: per transport, a fresh Sluice, N idle sockets.
func wsIdleCase(b *testing.B, out io.Writer, cfg benchConfig, procs *procSet, up *process, frame []byte) {
	ctx := context.Background()
	soft, hard := raiseNoFile(uint64(2*cfg.wsIdle + 1024))
	n, capNote := cfg.wsIdle, ""
	if maxN := (int(soft) - 200) / 2; n > maxN {
		n = max(maxN, 1)
		capNote = fmt.Sprintf("capped from %d by RLIMIT_NOFILE (soft %d, hard %d, not raisable here): Sluice needs 2 fds per socket with a WebSocket upstream", cfg.wsIdle, soft, hard)
	}
	paths := []struct{ name, transport string }{{"sluice-ws", "websocket"}, {"sluice-sse", "http"}}
	res := map[string]*wsIdleResult{}
	for _, p := range paths {
		upBase := up.fds()
		sl := startSluice(b, procs, p.name+" (ws-idle)", "upstreams:\n"+upstreamYAML("fake", up.url, p.transport))
		// Warm up: a few sockets, a few turns each, closed again.
		var wg sync.WaitGroup
		var warmErr atomic.Value
		for range 4 {
			wg.Go(func() {
				c := &wsClient{url: wsURL(sl.url)}
				defer c.close()
				for range 5 {
					if _, err := c.turn(ctx, frame); err != nil {
						warmErr.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := warmErr.Load().(error); err != nil {
			b.Fatalf("%s warm-up: %v", p.name, err)
		}
		time.Sleep(500 * time.Millisecond)
		r := measureWSIdle(b, sl, up, wsURL(sl.url), frame, n, cfg.idlePar)
		res[p.name] = r
		fmt.Fprintf(out, "idle client sockets via %s: %d/%d open in %v, RSS %d → %d → %d KiB, %.1f KiB/socket (marginal %.1f)\n",
			p.name, r.opened, r.want, r.openTime.Round(time.Millisecond), r.rssBefore, r.rssMid, r.rssAfter, r.kibPerStream(), r.marginalKiB())
		checkAlive(b, "idle sockets via "+p.name, up, sl)
		sl.stop()
		deadline := time.Now().Add(60 * time.Second)
		for up.fds() > upBase+64 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}

	fmt.Fprintf(out, "\n(ws-idle) idle client WebSockets on Sluice, each after one completed %d-event turn, on a fresh process per transport: N = %d\n", streamEvents, n)
	if capNote != "" {
		fmt.Fprintf(out, "N %s\n", capNote)
	}
	w := newTable(out)
	fmt.Fprintln(w, "path\topen\tRSS before\tRSS with sockets\tKiB/socket\tfirst fifth KiB/socket\tmarginal KiB/socket\tsockets/GiB\tmarginal sockets/GiB\tfds before → after\tupstream sockets held at N/5, N\topen time\terrors\t")
	for _, p := range paths {
		r := res[p.name]
		errs := "0"
		if r.errs > 0 {
			errs = fmt.Sprintf("%d (%v)", r.errs, r.firstErr)
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%.1f MiB\t%.1f MiB\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%d → %d\t%d, %d\t%v\t%s\t\n", p.name, r.opened, r.want,
			float64(r.rssBefore)/1024, float64(r.rssAfter)/1024, r.kibPerStream(), r.firstFifthKiB(), r.marginalKiB(), perGiB(r.kibPerStream()), perGiB(r.marginalKiB()),
			r.fdsBefore, r.fdsAfter, r.upMid-r.upBefore, r.upAfter-r.upBefore, r.openTime.Round(time.Millisecond), errs)
		reportMetric(b, r.kibPerStream(), p.name+"-ws-idle-KiB/socket")
		reportMetric(b, r.marginalKiB(), p.name+"-ws-idle-marginal-KiB/socket")
		reportMetric(b, perGiB(r.kibPerStream()), p.name+"-ws-idle-sockets/GiB")
		if r.opened == 0 {
			b.Errorf("%s idle sockets: none opened (first error: %v)", p.name, r.firstErr)
		}
	}
	_ = w.Flush()
	fmt.Fprintln(out, "first fifth: RSS growth per socket over the first N/5 sockets; upstream sockets held: the fake upstream's fds − before (sluice-sse: pooled HTTP connections)")
	ws, sse := res["sluice-ws"], res["sluice-sse"]
	if held := ws.upAfter - ws.upBefore; held < ws.opened-16 {
		fmt.Fprintf(out, "note: sluice-ws held only %d upstream sockets for %d client sockets: the gateway keeps at most gateway.Options.UpstreamSockets (default 1024; `sluice serve` has no key for it) and a new session evicts another's idle upstream socket\n",
			held, ws.opened)
		fmt.Fprintf(out, "      the first fifth (%d client sockets, %d upstream sockets) is the cost of a client socket with its upstream socket: %.1f KiB, %.0f per GiB\n",
			ws.midOpened, ws.upMid-ws.upBefore, ws.firstFifthKiB(), perGiB(ws.firstFifthKiB()))
	}
	fmt.Fprintf(out, "sluice-ws ÷ sluice-sse RSS per socket: %.2f (marginal %.2f)\n", ratio(ws.kibPerStream(), sse.kibPerStream()), ratio(ws.marginalKiB(), sse.marginalKiB()))
	for _, p := range paths {
		r := res[p.name]
		fmt.Fprintf(out, "2 s after the clients closed their sockets: %s fds %d (before %d), fake upstream fds %+d over before\n",
			p.name, r.leftFds, r.fdsBefore, r.leftUp-r.upBefore)
	}
	if left := ws.leftUp - ws.upBefore; left > 16 {
		fmt.Fprintf(out, "note: sluice-ws keeps a closed client session's upstream socket open until it has been idle for 5m (gateway.Options.UpstreamSocketIdle): %d were still open\n", left)
	}
}

// measureWSIdle opens n idle client sockets on sl, each after one turn, and
// measures sl: RSS before, with a fifth of the sockets open and with all of
// them; then closes them and counts what is left open.
func measureWSIdle(b *testing.B, sl, up *process, url string, frame []byte, n, par int) *wsIdleResult {
	r := &wsIdleResult{}
	r.want = n
	var err error
	if r.rssBefore, err = sl.rssKiB(); err != nil {
		b.Fatal(err)
	}
	r.fdsBefore, r.upBefore = sl.fds(), up.fds()
	set := &wsIdleSet{url: url, frame: frame}
	defer set.close()
	const maxErrs = 50
	set.open(&r.idleResult, n/5, par, maxErrs)
	time.Sleep(300 * time.Millisecond)
	r.midOpened, r.upMid = r.opened, up.fds()
	if r.rssMid, err = sl.rssKiB(); err != nil {
		b.Fatal(err)
	}
	set.open(&r.idleResult, n-n/5, par, maxErrs)
	time.Sleep(time.Second) // let the processes settle
	if r.rssAfter, err = sl.rssKiB(); err != nil {
		b.Fatal(err)
	}
	r.fdsAfter, r.upAfter = sl.fds(), up.fds()
	r.upstreamFds = r.upAfter
	set.close()
	time.Sleep(2 * time.Second)
	r.leftFds, r.leftUp = sl.fds(), up.fds()
	return r
}

// wsIdleSet is a set of open client sockets.
type wsIdleSet struct {
	url   string
	frame []byte
	mu    sync.Mutex
	conns []*wsClient
}

// open opens n more sockets, par at once, each with one completed turn; it
// gives up after maxErrs failures in all. It records into res.
func (s *wsIdleSet) open(res *idleResult, n, par, maxErrs int) {
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				s.mu.Lock()
				stop := res.errs >= maxErrs
				s.mu.Unlock()
				if stop {
					return
				}
				c := &wsClient{url: s.url}
				_, err := c.turn(context.Background(), s.frame)
				s.mu.Lock()
				if err != nil {
					res.errs++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					res.opened++
					s.conns = append(s.conns, c)
				}
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.openTime += time.Since(start)
}

// close closes every socket.
func (s *wsIdleSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.close()
	}
	s.conns = nil
}
