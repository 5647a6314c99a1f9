package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The stamped-delta streams (case "stamped"): the fake upstream writes each
// text delta's emit time (Unix nanoseconds) into the delta
// (upstreamtest.StampedDeltas); the client takes arrival − emit per frame.
// All processes share the host's clock, so the difference is the time the
// frame spent between the upstream's write and the client's read: through
// the kernel (direct), or through a proxy as well.
const (
	// stampedHeader routes a request to the fake upstream's stamped stream.
	stampedHeader = "X-Bench-Stamped"
	stampedDeltas = 64
	stampedGap    = 20 * time.Millisecond
	// envStampedLevels overrides the concurrency levels (comma-separated).
	envStampedLevels = "SLUICE_BENCH_STAMPED_LEVELS"
	// stampedRamp spreads the starts of one level's streams, so the level
	// measures frames of many concurrent streams, not a connection storm.
	stampedRamp = 500 * time.Millisecond
)

// stampedLevels are the concurrency levels: 64, 256 and 1,024 (quick mode:
// 64 and 256), or SLUICE_BENCH_STAMPED_LEVELS.
func stampedLevels(cfg benchConfig) ([]int, error) {
	levels := []int{64, 256, 1024}
	if cfg.quick {
		levels = levels[:2]
	}
	v := os.Getenv(envStampedLevels)
	if v == "" {
		return levels, nil
	}
	levels = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s=%q: want positive integers, comma-separated", envStampedLevels, v)
		}
		levels = append(levels, n)
	}
	return levels, nil
}

// stampedBody is the streaming request without "store": the gateway's
// default (store true: Sluice records an anchor per response).
var stampedBody = bytes.Replace(streamBody, []byte(`"store":false,`), nil, 1)

// stampedRun is one level's outcome on one path, over all rounds.
type stampedRun struct {
	frames    samples // arrival − emit of each delta
	want, ok  int     // streams started, streams completed with every delta
	errs      int
	firstErr  error
	roundP99  []time.Duration
	cpu       time.Duration  // the path's own process
	kernel    kernelCounters // the path's own process
	badStamps int            // deltas without a parseable stamp
}

// stampedStream runs one stamped stream through t and records its frames.
func stampedStream(ctx context.Context, t *target, frames *samples) (bad int, err error) {
	resp, err := t.postWith(ctx, t.client, stampedBody, http.Header{stampedHeader: {"1"}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	deltas, completed := 0, false
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, dataPrefix) {
			now := time.Now().UnixNano()
			if i := bytes.Index(line, []byte(`"type":"response.output_text.delta"`)); i >= 0 {
				deltas++
				if j := bytes.Index(line, []byte(`"delta":"`)); j >= 0 && len(line) >= j+9+19 {
					if stamp, perr := strconv.ParseInt(string(line[j+9:j+9+19]), 10, 64); perr == nil {
						frames.add(time.Duration(now - stamp))
					} else {
						bad++
					}
				} else {
					bad++
				}
			} else if bytes.Contains(line, []byte(`"type":"response.completed"`)) {
				completed = true
			}
		}
		if err == nil || err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		return bad, err
	}
	if deltas != stampedDeltas || !completed {
		return bad, fmt.Errorf("stream had %d deltas (want %d), completed=%t", deltas, stampedDeltas, completed)
	}
	return bad, nil
}

// stampedLevel runs n concurrent stamped streams through t, their starts
// spread over stampedRamp, and returns when all have ended.
func stampedLevel(ctx context.Context, t *target, n int) *stampedRun {
	r := &stampedRun{want: n}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(stampedRamp * time.Duration(i) / time.Duration(n))))
			var local samples
			bad, err := stampedStream(ctx, t, &local)
			mu.Lock()
			defer mu.Unlock()
			r.frames.merge(&local)
			r.badStamps += bad
			if err != nil {
				r.errs++
				if r.firstErr == nil {
					r.firstErr = err
				}
				return
			}
			r.ok++
		})
	}
	wg.Wait()
	r.roundP99 = []time.Duration{r.frames.percentile(99)}
	return r
}

func (r *stampedRun) add(o *stampedRun) {
	r.frames.merge(&o.frames)
	r.want += o.want
	r.ok += o.ok
	r.errs += o.errs
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	r.roundP99 = append(r.roundP99, o.roundP99...)
	r.cpu += o.cpu
	r.kernel = r.kernel.add(o.kernel)
	r.badStamps += o.badStamps
}

func (r *stampedRun) medianRoundP99() time.Duration {
	vs := make([]float64, len(r.roundP99))
	for i, d := range r.roundP99 {
		vs[i] = float64(d)
	}
	return time.Duration(median(vs))
}

// BenchmarkStampedStreams (case "stamped") measures the per-frame latency
// a proxy adds to many concurrent slow streams: each of n streams carries
// stampedDeltas text deltas stampedGap apart, stamped by the fake upstream
// with their emit time; the client records arrival − emit per delta.
// Levels 64, 256 and 1,024 concurrent streams; direct, bare
// httputil.ReverseProxy and `sluice serve` (store on, the embedded
// policies, anchors in Pebble, and the rescue machinery armed: routedYAML),
// interleaved in rounds. Targets
// (printed, not asserted): Sluice's per-frame p99 at most the bare
// proxy's at every level, and at least as many completed streams.
func BenchmarkStampedStreams(b *testing.B) {
	cfg, _ := startCase(b, caseStamped)
	levels, err := stampedLevels(cfg)
	if err != nil {
		b.Fatal(err)
	}
	maxLevel := 0
	for _, n := range levels {
		maxLevel = max(maxLevel, n)
	}
	// The client and the fake upstream need a socket per stream, a proxy
	// two; children inherit the raised limit.
	soft, hard := raiseNoFile(uint64(2*maxLevel + 1024))
	if int(soft) < 2*maxLevel+256 {
		b.Fatalf("RLIMIT_NOFILE soft %d (hard %d) is too low for %d streams; raise the hard limit or set %s", soft, hard, maxLevel, envStampedLevels)
	}
	rounds := cfg.rounds
	if v := os.Getenv(envRounds); v == "" && !cfg.quick {
		rounds = 3 // each round of one level is about 2 s per path
	}
	out := os.Stdout
	ctx := context.Background()
	b.ReportMetric(0, "ns/op")
	procs := &procSet{}
	b.Cleanup(procs.stopAll)
	up := startFake(b, procs, "fake upstream", roleUpstream)
	proxyCmd, _ := selfRole(roleProxy, envUpstream+"="+up.url)
	proxy, err := startProcess("proxy", proxyCmd, true)
	if err != nil {
		b.Fatal(err)
	}
	procs.add(proxy)
	slCmd, graceful, err := sluiceCommand(cfg, up.url, b.TempDir(), true)
	if err != nil {
		b.Fatal(err)
	}
	sl, err := startProcess("sluice", slCmd, graceful)
	if err != nil {
		b.Fatal(err)
	}
	procs.add(sl)
	collectPGO(sl)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = waitReady(rctx, sl.url+"/readyz")
	cancel()
	if err != nil {
		b.Fatalf("%v; sluice stderr:\n%s", err, sl.stderr)
	}
	targets := []*target{newTarget("direct", up.url, nil, up), newTarget("proxy", proxy.url, proxy, proxy), newTarget("sluice", sl.url, sl, sl)}
	for _, t := range targets {
		t.tr.MaxIdleConnsPerHost, t.tr.MaxIdleConns = maxLevel, maxLevel
		if _, err := stampedStream(ctx, t, &samples{}); err != nil {
			b.Fatalf("%s: stamped stream: %v", t.name, err)
		}
	}
	fmt.Fprintf(out, "\nSluice stamped-delta streams benchmark (%s mode): levels %v concurrent streams, %d deltas %v apart per stream, starts spread over %v, %d rounds per level, interleaved; fake upstream pid %d, bare proxy pid %d, sluice pid %d (%s); RLIMIT_NOFILE %d\n",
		modeName(cfg), levels, stampedDeltas, stampedGap, stampedRamp, rounds, up.pid(), proxy.pid(), sl.pid(), strings.Join(slCmd.Args, " "), soft)
	fmt.Fprintf(out, "RSS at start: bare proxy %.1f MiB, sluice %.1f MiB\n", rssMiB(proxy), rssMiB(sl))

	for _, n := range levels {
		res := map[string]*stampedRun{}
		for _, t := range targets {
			res[t.name] = &stampedRun{}
		}
		for round := range rounds {
			line := fmt.Sprintf("level %d, round %d/%d:", n, round+1, rounds)
			for _, t := range rotated(targets, round) {
				c0, k0 := t.cpuOf.cpuTime(), t.cpuOf.counters()
				r := stampedLevel(ctx, t, n)
				r.cpu, r.kernel = t.cpuOf.cpuTime()-c0, t.cpuOf.counters().sub(k0)
				res[t.name].add(r)
				line += fmt.Sprintf(" %s p99 %s %d/%d;", t.name, ms(r.frames.percentile(99)), r.ok, r.want)
				time.Sleep(200 * time.Millisecond) // let the streams' connections settle
			}
			fmt.Fprintln(out, strings.TrimSuffix(line, ";"))
			checkAlive(b, fmt.Sprintf("level %d round %d", n, round+1), up, proxy, sl)
		}
		fmt.Fprintf(out, "\n%d concurrent streams × %d deltas (%d rounds): per-frame latency, arrival − emit\n", n, stampedDeltas, rounds)
		w := newTable(out)
		fmt.Fprintln(w, "path\tstreams ok\tframes\tp50\tp99\tp99.9\tmax\tp99 median of rounds\tCPU/stream\terrors\t")
		for _, name := range pathNames {
			r := res[name]
			cpu := time.Duration(0)
			if r.ok > 0 {
				cpu = r.cpu / time.Duration(r.ok)
			}
			errs := "0"
			if r.errs > 0 {
				errs = fmt.Sprintf("%d (%v)", r.errs, r.firstErr)
			}
			fmt.Fprintf(w, "%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, r.ok, r.want, r.frames.count(),
				ms(r.frames.percentile(50)), ms(r.frames.percentile(99)), ms(r.frames.percentile(99.9)), ms(r.frames.percentile(100)),
				ms(r.medianRoundP99()), usStr(cpu), errs)
			key := fmt.Sprintf("%s-stamped%d", name, n)
			reportMetric(b, us(r.frames.percentile(50)), key+"-p50-us")
			reportMetric(b, us(r.frames.percentile(99)), key+"-p99-us")
			reportMetric(b, float64(r.ok), key+"-streams-ok")
			reportMetric(b, us(cpu), key+"-cpu-us/stream")
			if r.badStamps > 0 {
				b.Errorf("%s level %d: %d deltas without a parseable stamp", name, n, r.badStamps)
			}
		}
		_ = w.Flush()
		fmt.Fprintf(out, "per completed stream, in the path's own process (direct: the fake upstream):\n")
		w = newTable(out)
		fmt.Fprintln(w, "path\tuser\tsystem\tread calls\twrite calls\tcontext switches (voluntary)\t")
		for _, name := range pathNames {
			r := res[name]
			if r.ok == 0 {
				continue
			}
			k, n := r.kernel, int64(r.ok)
			fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%.1f\t%.1f (%.1f)\t\n", name, usStr(k.user/time.Duration(n)), usStr(k.sys/time.Duration(n)),
				float64(k.reads)/float64(n), float64(k.writes)/float64(n), float64(k.voluntary+k.inv)/float64(n), float64(k.voluntary)/float64(n))
		}
		_ = w.Flush()
		d, p, s := res["direct"], res["proxy"], res["sluice"]
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "NOT met"
		}
		fmt.Fprintf(out, "over direct, p99: proxy %s, sluice %s (medians of rounds: proxy %s, sluice %s)\n",
			signedMS(p.frames.percentile(99)-d.frames.percentile(99)), signedMS(s.frames.percentile(99)-d.frames.percentile(99)),
			signedMS(p.medianRoundP99()-d.medianRoundP99()), signedMS(s.medianRoundP99()-d.medianRoundP99()))
		fmt.Fprintf(out, "target sluice p99 ≤ proxy p99: %s (sluice − proxy %s pooled, %s median of rounds); completed streams sluice %d ≥ proxy %d: %s\n",
			verdict(s.frames.percentile(99) <= p.frames.percentile(99)), signedMS(s.frames.percentile(99)-p.frames.percentile(99)),
			signedMS(s.medianRoundP99()-p.medianRoundP99()), s.ok, p.ok, verdict(s.ok >= p.ok))
		reportMetric(b, us(s.frames.percentile(99)-p.frames.percentile(99)), fmt.Sprintf("sluice-proxy-stamped%d-p99-us", n))
	}
	fmt.Fprintf(out, "RSS at the end: bare proxy %.1f MiB, sluice %.1f MiB\n\n", rssMiB(proxy), rssMiB(sl))
	printStderrTails(out, up, proxy, sl)
}
