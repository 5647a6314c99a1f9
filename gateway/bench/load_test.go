package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request bodies: a realistic Responses request (instructions, a short
// conversation), once as JSON and once as a stream. setBodySize pads the
// instructions to make them bigger (Codex requests carry tens to hundreds
// of KiB of instructions and history).
var (
	jsonBody   = requestBody(false, 0)
	streamBody = requestBody(true, 0)
)

func setBodySize(n int) {
	jsonBody, streamBody = requestBody(false, n), requestBody(true, n)
}

func requestBody(stream bool, size int) []byte {
	const sentence = "You are a concise assistant. Answer in plain text. "
	reps := 8
	if size > 0 {
		reps = max(1, size/len(sentence))
	}
	return fmt.Appendf(nil, `{"model":"`+benchModel+`","instructions":%q,"input":[`+
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"List three prime numbers."}]},`+
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"2, 3 and 5."}]},`+
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"And three more, please, with a short explanation of why each one is prime."}]}],`+
		`"store":false,"stream":%t,"reasoning":{"effort":"low"},"max_output_tokens":512}`,
		strings.Repeat(sentence, reps), stream)
}

var dataPrefix = []byte("data:")

// target is one path under test: where the load generator sends requests.
type target struct {
	name   string   // "direct", "proxy" or "sluice"
	base   string   // http://127.0.0.1:PORT
	proc   *process // the proxy process measured for RSS; nil for direct
	cpuOf  *process // the process whose CPU time is charged to this path
	client *http.Client
	tr     *http.Transport
}

// measure runs run and charges cpuOf's CPU time during it to the result.
func (t *target) measure(run func() *runStats) *runStats {
	c0 := t.cpuOf.cpuTime()
	r := run()
	r.cpu = t.cpuOf.cpuTime() - c0
	return r
}

// newLoadTransport is the load generator's client transport: keep-alive
// connections to the one host, enough of them for every worker and the
// open-loop bursts, no compression.
func newLoadTransport(idle int) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          idle,
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       5 * time.Minute,
		DisableCompression:    true,
		ResponseHeaderTimeout: 30 * time.Second,
	}
}

func newTarget(name, base string, proc, cpuOf *process) *target {
	tr := newLoadTransport(1024)
	return &target{name: name, base: base, proc: proc, cpuOf: cpuOf, tr: tr, client: &http.Client{Transport: tr}}
}

// post sends one POST /v1/responses with body.
func (t *target) post(ctx context.Context, c *http.Client, body []byte, hang bool) (*http.Response, error) {
	var extra http.Header
	if hang {
		extra = http.Header{hangHeader: {"1"}, "Accept": {"text/event-stream"}}
	}
	return t.postWith(ctx, c, body, extra)
}

// postWith sends one POST /v1/responses with body and the extra headers.
func (t *target) postWith(ctx context.Context, c *http.Client, body []byte, extra http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/v1/responses", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench-0123456789abcdef")
	for k, v := range extra {
		req.Header[k] = v
	}
	return c.Do(req)
}

// doJSON sends one non-streaming request and reads the whole answer.
func (t *target) doJSON(ctx context.Context) error {
	resp, err := t.post(ctx, t.client, jsonBody, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	case n == 0:
		return errors.New("empty body")
	}
	return nil
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// doStream sends one streaming request and reads the stream to its end. ttfe
// is the time from the call to the first "data:" line.
func (t *target) doStream(ctx context.Context) (ttfe time.Duration, err error) {
	return t.doStreamWith(ctx, streamBody, nil)
}

// doStreamWith is doStream with another body and extra headers.
func (t *target) doStreamWith(ctx context.Context, body []byte, extra http.Header) (ttfe time.Duration, err error) {
	start := time.Now()
	resp, err := t.postWith(ctx, t.client, body, extra)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	br := readers.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() { br.Reset(nil); readers.Put(br) }()
	events, completed, atStart := 0, false, true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if atStart && bytes.HasPrefix(line, dataPrefix) {
				events++
				if events == 1 {
					ttfe = time.Since(start)
				}
				completed = bytes.Contains(line, []byte(`"response.completed"`))
			}
			atStart = line[len(line)-1] == '\n'
		}
		if err == nil || err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		return 0, err
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	case events != streamEvents || !completed:
		return 0, fmt.Errorf("stream had %d events (want %d), completed=%t", events, streamEvents, completed)
	}
	return ttfe, nil
}

// checkTarget verifies the answers' shapes once before the load starts.
func (t *target) checkTarget(ctx context.Context) error {
	resp, err := t.post(ctx, t.client, jsonBody, false)
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"status":"completed"`)) {
		return fmt.Errorf("%s: JSON answer HTTP %d, err %v: %.300s", t.name, resp.StatusCode, err, body)
	}
	if _, err := t.doStream(ctx); err != nil {
		return fmt.Errorf("%s: stream: %w", t.name, err)
	}
	return nil
}

// runStats accumulates the outcome of one or more load runs on one path.
type runStats struct {
	ok, errs int
	firstErr error
	sent     int           // open loop: requests scheduled
	elapsed  time.Duration // wall time of the runs
	lat      samples       // full request (or stream) latency
	ttfe     samples       // streams: time to first event
	rounds   []roundSummary
	// cpu is the CPU time the path's own process used during the runs (the
	// fake upstream's for direct, the proxy's otherwise).
	cpu time.Duration
}

// roundSummary is one run's numbers, for per-round (paired) comparisons
// that a single stall in one round cannot dominate.
type roundSummary struct {
	throughput     float64
	p50, p99       time.Duration
	ttfe50, ttfe99 time.Duration
}

// summary sums up r as one run.
func (r *runStats) summary() roundSummary {
	return roundSummary{throughput: r.throughput(), p50: r.lat.percentile(50), p99: r.lat.percentile(99),
		ttfe50: r.ttfe.percentile(50), ttfe99: r.ttfe.percentile(99)}
}

func (r *runStats) fail(err error) {
	r.errs++
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// add merges o into r.
func (r *runStats) add(o *runStats) {
	r.ok += o.ok
	r.errs += o.errs
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	r.sent += o.sent
	r.elapsed += o.elapsed
	r.lat.merge(&o.lat)
	r.ttfe.merge(&o.ttfe)
	r.rounds = append(r.rounds, o.rounds...)
	r.cpu += o.cpu
}

// cpuPerOp is the CPU time per successful operation.
func (r *runStats) cpuPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.ok)
}

// throughput is successful operations per second of wall time.
func (r *runStats) throughput() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

// errRate is the fraction of operations that failed.
func (r *runStats) errRate() float64 {
	if r.ok+r.errs == 0 {
		return 0
	}
	return float64(r.errs) / float64(r.ok+r.errs)
}

// op is one request of a load run; ttfe is 0 for non-streaming ones.
type op func(ctx context.Context) (ttfe time.Duration, err error)

func jsonOp(t *target) op {
	return func(ctx context.Context) (time.Duration, error) { return 0, t.doJSON(ctx) }
}

func streamOp(t *target) op { return t.doStream }

// closedLoop runs workers loops of back-to-back requests for dur.
func closedLoop(ctx context.Context, workers int, dur time.Duration, do op) *runStats {
	per := make([]runStats, workers)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for i := range per {
		r := &per[i]
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				ttfe, err := do(ctx)
				if err != nil {
					r.fail(err)
					continue
				}
				r.lat.add(time.Since(t0))
				if ttfe > 0 {
					r.ttfe.add(ttfe)
				}
				r.ok++
			}
		})
	}
	wg.Wait()
	total := &runStats{elapsed: time.Since(start)}
	for i := range per {
		per[i].elapsed = 0
		total.add(&per[i])
	}
	total.rounds = []roundSummary{total.summary()}
	return total
}

// maxOpenInflight bounds the open loop's outstanding requests; a request
// that would exceed it is counted as an error instead of being sent.
const maxOpenInflight = 4096

// openLoop sends rate requests per second for dur on a fixed schedule,
// whatever the answers' latency, and measures each latency (and time to
// first event) from its scheduled start, so a stall delays and counts
// against every request scheduled during it: no coordinated omission.
func openLoop(ctx context.Context, rate int, dur time.Duration, do op) *runStats {
	interval := time.Second / time.Duration(rate)
	n := int(dur / interval)
	res := &runStats{sent: n}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var inflight atomic.Int64
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sched := start.Add(time.Duration(i) * interval)
		if d := time.Until(sched); d > 0 {
			time.Sleep(d)
		}
		if inflight.Add(1) > maxOpenInflight {
			inflight.Add(-1)
			mu.Lock()
			res.fail(errors.New("open loop: too many requests outstanding"))
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer inflight.Add(-1)
			t0 := time.Now()
			ttfe, err := do(ctx)
			lat := time.Since(sched)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.fail(err)
				return
			}
			res.ok++
			res.lat.add(lat)
			if ttfe > 0 {
				res.ttfe.add(t0.Sub(sched) + ttfe)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.rounds = []roundSummary{res.summary()}
	return res
}

// idleResult is the outcome of holding idle streams open through a proxy.
type idleResult struct {
	want, opened int
	errs         int
	firstErr     error
	openTime     time.Duration
	rssBefore    int64 // KiB, proxy process, before opening
	rssMid       int64 // KiB, with the first fifth of the streams open
	midOpened    int   // streams open at rssMid
	rssAfter     int64 // KiB, with every stream open
	fdsBefore    int
	fdsAfter     int
	upstreamFds  int // the fake upstream's fds with every stream open
}

// kibPerStream is the RSS growth per open stream.
func (r *idleResult) kibPerStream() float64 {
	if r == nil || r.opened == 0 {
		return 0
	}
	return float64(r.rssAfter-r.rssBefore) / float64(r.opened)
}

// marginalKiB is the RSS growth per stream over the last four fifths of
// the streams: heap the process had freed but kept before the test (which
// the first streams reuse without growing RSS) drops out of it.
func (r *idleResult) marginalKiB() float64 {
	if r == nil || r.opened <= r.midOpened {
		return 0
	}
	return float64(r.rssAfter-r.rssMid) / float64(r.opened-r.midOpened)
}

// idleStreams is a set of open streams; close ends them all.
type idleStreams struct {
	ctx    context.Context
	cancel context.CancelFunc
	t      *target
	c      *http.Client
	tr     *http.Transport
	mu     sync.Mutex
	resps  []*http.Response
}

func (s *idleStreams) close() {
	s.cancel()
	s.mu.Lock()
	for _, r := range s.resps {
		_ = r.Body.Close()
	}
	s.resps = nil
	s.mu.Unlock()
	s.tr.CloseIdleConnections()
}

// newIdleStreams prepares a set of idle streams through t.
func newIdleStreams(t *target) *idleStreams {
	ctx, cancel := context.WithCancel(context.Background())
	tr := newLoadTransport(1)
	return &idleStreams{ctx: ctx, cancel: cancel, tr: tr, c: &http.Client{Transport: tr}, t: t}
}

// open opens n more streams, par at once, and returns once each has
// delivered its first event (the fake upstream then holds it open) or
// failed; it gives up after maxErrs failures in all. It records into res.
func (s *idleStreams) open(res *idleResult, n, par, maxErrs int) {
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
				resp, err := openOne(s.ctx, s.t, s.c)
				s.mu.Lock()
				if err != nil {
					res.errs++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					res.opened++
					s.resps = append(s.resps, resp)
				}
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.openTime += time.Since(start)
}

// openOne opens one hanging stream and reads up to its first event.
func openOne(ctx context.Context, t *target, c *http.Client) (*http.Response, error) {
	resp, err := t.post(ctx, c, streamBody, true)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	timer := time.AfterFunc(30*time.Second, func() { _ = resp.Body.Close() })
	defer timer.Stop()
	br := bufio.NewReaderSize(resp.Body, 1024)
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, dataPrefix) {
			return resp, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			_ = resp.Body.Close()
			return nil, fmt.Errorf("before the first event: %w", err)
		}
	}
}
