package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"
)

// Knobs (environment variables) of BenchmarkProxyOverhead.
const (
	// envQuick=1 (or -short) runs a few seconds in total: for development.
	envQuick = "SLUICE_BENCH_QUICK"
	// envRounds overrides the number of interleaved rounds.
	envRounds = "SLUICE_BENCH_ROUNDS"
	// envDuration overrides the length of each timed run (Go duration).
	envDuration = "SLUICE_BENCH_DURATION"
	// envWorkers overrides the closed-loop concurrency.
	envWorkers = "SLUICE_BENCH_WORKERS"
	// envRate overrides the open-loop rate (requests per second).
	envRate = "SLUICE_BENCH_RPS"
	// envIdle overrides the number of concurrent idle streams.
	envIdle = "SLUICE_BENCH_IDLE_STREAMS"
	// envSluice=gateway runs Sluice's gateway inside a re-executed test
	// binary (assembled like `sluice serve`) instead of the built binary.
	envSluice = "SLUICE_BENCH_SLUICE"
	// envProfile=DIR writes CPU profiles of the proxy and of Sluice (which
	// implies SLUICE_BENCH_SLUICE=gateway) and heap profiles taken with the
	// idle streams open, to DIR.
	envProfile = "SLUICE_BENCH_PROFILE"
)

// Targets, printed next to the numbers (not asserted).
const (
	targetThroughputRatio = 0.9                    // closed loop, sluice ÷ bare proxy, at least
	targetAddedP99        = time.Millisecond       // at the fixed rate, sluice − direct, at most
	targetAddedTTFE       = 200 * time.Microsecond // p50, sluice − direct, at most
	targetIdleKiB         = 30.0                   // RSS per idle stream at 10k streams, at most
	targetIdleStreams     = 10000
)

// benchConfig is the shape of one run.
type benchConfig struct {
	quick      bool
	rounds     int
	dur        time.Duration // each closed-loop run and each open-loop run
	warmup     time.Duration
	workers    int
	rate       int
	idle       int
	idlePar    int
	sluiceMode string // "binary" or "gateway"
	profile    string
}

func loadConfig() (benchConfig, error) {
	c := benchConfig{rounds: 5, dur: 3 * time.Second, warmup: time.Second, workers: 16, rate: 1000,
		idle: targetIdleStreams, idlePar: 64, sluiceMode: "binary"}
	if testing.Short() || os.Getenv(envQuick) == "1" {
		c = benchConfig{quick: true, rounds: 2, dur: 250 * time.Millisecond, warmup: 100 * time.Millisecond,
			workers: 16, rate: 1000, idle: 500, idlePar: 32, sluiceMode: "binary"}
	}
	var err error
	envInt := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" && err == nil {
			n, e := strconv.Atoi(v)
			if e != nil || n <= 0 {
				err = fmt.Errorf("%s=%q: want a positive integer", name, v)
			}
			*dst = n
		}
	}
	envInt(envRounds, &c.rounds)
	envInt(envWorkers, &c.workers)
	envInt(envRate, &c.rate)
	envInt(envIdle, &c.idle)
	if v := os.Getenv(envDuration); v != "" && err == nil {
		d, e := time.ParseDuration(v)
		if e != nil || d <= 0 {
			err = fmt.Errorf("%s=%q: want a positive duration", envDuration, v)
		}
		c.dur = d
	}
	if v := os.Getenv(envSluice); v != "" {
		c.sluiceMode = v
	}
	if c.profile = os.Getenv(envProfile); c.profile != "" {
		c.sluiceMode = "gateway"
	}
	if c.sluiceMode != "binary" && c.sluiceMode != "gateway" {
		err = fmt.Errorf("%s=%q: want binary or gateway", envSluice, c.sluiceMode)
	}
	return c, err
}

// pathResult is everything measured on one path.
type pathResult struct {
	json   runStats    // (a) closed loop
	rate   runStats    // (a) open loop
	stream runStats    // (b) closed loop
	idle   *idleResult // (c); nil for direct
}

// BenchmarkProxyOverhead measures, in one run and interleaved in rounds,
// client → fake upstream (direct), client → bare httputil.ReverseProxy →
// fake upstream (proxy) and client → Sluice → fake upstream (sluice):
// (a) non-streaming requests in a closed loop and at a fixed rate,
// (b) 10-event streams in a closed loop, (c) the RSS of many idle streams.
// It prints a table per case with the ratios and targets, and reports every
// number with b.ReportMetric. Run it with -benchtime 1x (see `just bench`);
// -short or SLUICE_BENCH_QUICK=1 makes it a few seconds long.
func BenchmarkProxyOverhead(b *testing.B) {
	cfg, err := loadConfig()
	if err != nil {
		b.Fatal(err)
	}
	out := os.Stdout
	ctx := context.Background()

	// File descriptors: a proxy holding n idle streams needs 2n, the client
	// and the fake upstream n each.
	soft, hard := raiseNoFile(uint64(2*cfg.idle + 1024))
	idleN := cfg.idle
	capNote := ""
	if maxN := (int(soft) - 200) / 2; idleN > maxN {
		idleN = max(maxN, 1)
		capNote = fmt.Sprintf("capped from %d by RLIMIT_NOFILE (soft %d, hard %d, not raisable here): a proxy needs 2 fds per stream", cfg.idle, soft, hard)
	}

	procs := &procSet{}
	b.Cleanup(procs.stopAll)
	start := func(name string, cmd func() (*process, error)) *process {
		p, err := cmd()
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		procs.add(p)
		return p
	}
	upCmd, err := selfRole(roleUpstream)
	if err != nil {
		b.Fatal(err)
	}
	up := start("fake upstream", func() (*process, error) { return startProcess("upstream", upCmd, true) })
	proxyCmd, _ := selfRole(roleProxy, envUpstream+"="+up.url)
	proxy := start("bare proxy", func() (*process, error) { return startProcess("proxy", proxyCmd, true) })

	var sl *process
	if cfg.sluiceMode == "gateway" {
		gwCmd, _ := selfRole(roleGateway, envUpstream+"="+up.url)
		sl = start("sluice (in-process gateway)", func() (*process, error) { return startProcess("sluice", gwCmd, true) })
	} else {
		bin, err := buildSluice(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		dataDir := b.TempDir()
		sl = start("sluice", func() (*process, error) {
			return startProcess("sluice", exec.Command(bin, "serve", "--upstream", up.url+"/v1", "--listen", "127.0.0.1:0",
				"--data-dir", dataDir, "--log-level", "error"), false)
		})
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = waitReady(rctx, sl.url+"/readyz")
	cancel()
	if err != nil {
		b.Fatalf("%v; sluice stderr:\n%s", err, sl.stderr)
	}

	targets := []*target{newTarget("direct", up.url, nil), newTarget("proxy", proxy.url, proxy), newTarget("sluice", sl.url, sl)}
	alive := func(when string) {
		for _, p := range []*process{up, proxy, sl} {
			if !p.alive() {
				b.Fatalf("%s: the %s process died (%v); stderr:\n%s", when, p.name, p.waitErr, p.stderr)
			}
		}
	}
	for _, t := range targets {
		if err := t.checkTarget(ctx); err != nil {
			b.Fatal(err)
		}
	}

	mode := "full"
	if cfg.quick {
		mode = "quick"
	}
	fmt.Fprintf(out, "\nSluice proxy-overhead benchmark (%s mode): %d rounds, %v per run, %d closed-loop workers, %d RPS fixed rate, GOMAXPROCS of each process = its default, %d CPUs\n",
		mode, cfg.rounds, cfg.dur, cfg.workers, cfg.rate, runtime.NumCPU())
	fmt.Fprintf(out, "processes: fake upstream pid %d, bare proxy pid %d, sluice (%s) pid %d\n", up.pid(), proxy.pid(), cfg.sluiceMode, sl.pid())

	// Warm up every path (connections, heaps) before measuring.
	for _, t := range targets {
		closedLoop(ctx, cfg.workers, cfg.warmup, jsonOp(t))
		closedLoop(ctx, cfg.workers, cfg.warmup, streamOp(t))
	}

	res := map[string]*pathResult{}
	for _, t := range targets {
		res[t.name] = &pathResult{}
	}
	for round := range cfg.rounds {
		// Rotate the order each round so no path always runs first.
		order := make([]*target, len(targets))
		for i := range targets {
			order[i] = targets[(i+round)%len(targets)]
		}
		line := fmt.Sprintf("round %d/%d:", round+1, cfg.rounds)
		for _, t := range order {
			r := closedLoop(ctx, cfg.workers, cfg.dur, jsonOp(t))
			res[t.name].json.add(r)
			line += fmt.Sprintf(" %s %.0f req/s;", t.name, r.throughput())
		}
		for _, t := range order {
			res[t.name].rate.add(openLoop(ctx, cfg.rate, cfg.dur, jsonOp(t)))
		}
		for _, t := range order {
			r := closedLoop(ctx, cfg.workers, cfg.dur, streamOp(t))
			res[t.name].stream.add(r)
			line += fmt.Sprintf(" %s %.0f streams/s;", t.name, r.throughput())
		}
		fmt.Fprintln(out, strings.TrimSuffix(line, ";"))
		alive(fmt.Sprintf("round %d", round+1))
	}

	// (c) idle streams, one proxy at a time.
	for _, t := range targets {
		t.tr.CloseIdleConnections()
	}
	upBase := up.fds()
	for _, t := range targets[1:] {
		time.Sleep(500 * time.Millisecond) // let closed connections settle
		r := measureIdle(b, t, up, idleN, cfg)
		res[t.name].idle = r
		fmt.Fprintf(out, "idle streams via %s: %d/%d open in %v, RSS %d → %d → %d KiB, %.1f KiB/stream (marginal %.1f)\n",
			t.name, r.opened, r.want, r.openTime.Round(time.Millisecond), r.rssBefore, r.rssMid, r.rssAfter, r.kibPerStream(), r.marginalKiB())
		// Wait for the fake upstream to see every stream end.
		deadline := time.Now().Add(60 * time.Second)
		for up.fds() > upBase+64 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		alive("idle streams via " + t.name)
	}

	report(b, out, cfg, res, idleN, capNote)
	for _, p := range []*process{up, proxy, sl} {
		if tail := lastLines(p.stderr.String(), 20); tail != "" {
			fmt.Fprintf(out, "stderr of %s (last lines):\n%s\n", p.name, tail)
		}
	}
}

// lastLines returns the last n lines of s, without trailing blank lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// measureIdle opens n idle streams through t and measures its process:
// RSS before, with a fifth of the streams open and with all of them.
func measureIdle(b *testing.B, t *target, up *process, n int, cfg benchConfig) *idleResult {
	r := &idleResult{want: n}
	var err error
	if r.rssBefore, err = t.proc.rssKiB(); err != nil {
		b.Fatal(err)
	}
	r.fdsBefore = t.proc.fds()
	const maxErrs = 50
	streams := newIdleStreams(t)
	defer streams.close()
	streams.open(r, n/5, cfg.idlePar, maxErrs)
	time.Sleep(300 * time.Millisecond)
	r.midOpened = r.opened
	if r.rssMid, err = t.proc.rssKiB(); err != nil {
		b.Fatal(err)
	}
	streams.open(r, n-n/5, cfg.idlePar, maxErrs)
	time.Sleep(time.Second) // let the processes settle
	if r.rssAfter, err = t.proc.rssKiB(); err != nil {
		b.Fatal(err)
	}
	r.fdsAfter, r.upstreamFds = t.proc.fds(), up.fds()
	if cfg.profile != "" {
		_ = t.proc.signal(syscall.SIGUSR1) // heap profile with the streams open
		time.Sleep(3 * time.Second)
	}
	return r
}

// report prints the tables and reports the metrics.
func report(b *testing.B, out io.Writer, cfg benchConfig, res map[string]*pathResult, idleN int, capNote string) {
	d, p, s := res["direct"], res["proxy"], res["sluice"]
	paths := []string{"direct", "proxy", "sluice"}
	metric := func(v float64, unit string) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			b.ReportMetric(v, unit)
		}
	}
	b.ReportMetric(0, "ns/op") // one iteration of minutes: meaningless
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	check := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "MISSED"
	}
	perRound := func(r *runStats) string {
		if len(r.rounds) < 2 {
			return ""
		}
		lo, hi := r.rounds[0], r.rounds[0]
		for _, v := range r.rounds {
			lo, hi = min(lo, v), max(hi, v)
		}
		return fmt.Sprintf("%.0f–%.0f", lo, hi)
	}
	// Per-round ratios pair runs that shared the machine's state.
	roundRatio := func(a, c *runStats) float64 {
		var rs []float64
		for i := range min(len(a.rounds), len(c.rounds)) {
			rs = append(rs, ratio(a.rounds[i], c.rounds[i]))
		}
		return median(rs)
	}
	errCol := func(r *runStats) string {
		if r.errs == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%.2f%%: %v)", r.errs, 100*r.errRate(), r.firstErr)
	}
	tw := func() *tabwriter.Writer {
		return tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	}

	// (a) closed loop.
	fmt.Fprintf(out, "\n(a1) non-stream POST /v1/responses, closed loop: %d workers, %d × %v per path\n", cfg.workers, cfg.rounds, cfg.dur)
	w := tw()
	fmt.Fprintln(w, "path\treq/s\tper round\tp50\tp99\terrors\t")
	for _, n := range paths {
		r := &res[n].json
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%s\t%s\t\n", n, r.throughput(), perRound(r), ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), errCol(r))
		metric(r.throughput(), n+"-json-req/s")
		metric(us(r.lat.percentile(50)), n+"-json-p50-µs")
		metric(us(r.lat.percentile(99)), n+"-json-p99-µs")
	}
	_ = w.Flush()
	jsonVsProxy, jsonVsDirect := ratio(s.json.throughput(), p.json.throughput()), ratio(s.json.throughput(), d.json.throughput())
	fmt.Fprintf(out, "sluice ÷ proxy throughput  %.3f (median of rounds %.3f)   target ≥ %.2f: %s\n",
		jsonVsProxy, roundRatio(&s.json, &p.json), targetThroughputRatio, check(jsonVsProxy >= targetThroughputRatio))
	fmt.Fprintf(out, "sluice ÷ direct throughput %.3f   (proxy ÷ direct %.3f)\n", jsonVsDirect, ratio(p.json.throughput(), d.json.throughput()))
	fmt.Fprintf(out, "added latency sluice − direct: p50 %s, p99 %s   (proxy − direct: p50 %s, p99 %s)\n",
		signedMS(s.json.lat.percentile(50)-d.json.lat.percentile(50)), signedMS(s.json.lat.percentile(99)-d.json.lat.percentile(99)),
		signedMS(p.json.lat.percentile(50)-d.json.lat.percentile(50)), signedMS(p.json.lat.percentile(99)-d.json.lat.percentile(99)))
	metric(jsonVsProxy, "sluice/proxy-json-ratio")
	metric(jsonVsDirect, "sluice/direct-json-ratio")

	// (a) fixed rate.
	fmt.Fprintf(out, "\n(a2) non-stream POST /v1/responses, open loop at %d RPS (latency from the scheduled start): %d × %v per path\n", cfg.rate, cfg.rounds, cfg.dur)
	w = tw()
	fmt.Fprintln(w, "path\tsent\tachieved req/s\tp50\tp99\tp99.9\terrors\t")
	for _, n := range paths {
		r := &res[n].rate
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", n, r.sent, r.throughput(), ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), ms(r.lat.percentile(99.9)), errCol(r))
		metric(us(r.lat.percentile(50)), n+"-rate-p50-µs")
		metric(us(r.lat.percentile(99)), n+"-rate-p99-µs")
	}
	_ = w.Flush()
	addP50, addP99 := s.rate.lat.percentile(50)-d.rate.lat.percentile(50), s.rate.lat.percentile(99)-d.rate.lat.percentile(99)
	fmt.Fprintf(out, "added latency sluice − direct: p50 %s, p99 %s   target p99 ≤ +%s: %s   (proxy − direct: p50 %s, p99 %s)\n",
		signedMS(addP50), signedMS(addP99), ms(targetAddedP99), check(addP99 <= targetAddedP99),
		signedMS(p.rate.lat.percentile(50)-d.rate.lat.percentile(50)), signedMS(p.rate.lat.percentile(99)-d.rate.lat.percentile(99)))
	metric(us(addP50), "sluice-added-rate-p50-µs")
	metric(us(addP99), "sluice-added-rate-p99-µs")

	// (b) streams.
	fmt.Fprintf(out, "\n(b) %d-event Responses streams, closed loop: %d workers, %d × %v per path\n", streamEvents, cfg.workers, cfg.rounds, cfg.dur)
	w = tw()
	fmt.Fprintln(w, "path\tstreams/s\tper round\tp50\tp99\tTTFE p50\tTTFE p99\terrors\t")
	for _, n := range paths {
		r := &res[n].stream
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, r.throughput(), perRound(r), ms(r.lat.percentile(50)), ms(r.lat.percentile(99)),
			ms(r.ttfe.percentile(50)), ms(r.ttfe.percentile(99)), errCol(r))
		metric(r.throughput(), n+"-stream-streams/s")
		metric(us(r.lat.percentile(50)), n+"-stream-p50-µs")
		metric(us(r.lat.percentile(99)), n+"-stream-p99-µs")
		metric(us(r.ttfe.percentile(50)), n+"-ttfe-p50-µs")
		metric(us(r.ttfe.percentile(99)), n+"-ttfe-p99-µs")
	}
	_ = w.Flush()
	stVsProxy, stVsDirect := ratio(s.stream.throughput(), p.stream.throughput()), ratio(s.stream.throughput(), d.stream.throughput())
	addTTFE50, addTTFE99 := s.stream.ttfe.percentile(50)-d.stream.ttfe.percentile(50), s.stream.ttfe.percentile(99)-d.stream.ttfe.percentile(99)
	fmt.Fprintf(out, "sluice ÷ proxy throughput  %.3f (median of rounds %.3f)   (informational; the target is on (a1))\n", stVsProxy, roundRatio(&s.stream, &p.stream))
	fmt.Fprintf(out, "sluice ÷ direct throughput %.3f   (proxy ÷ direct %.3f)\n", stVsDirect, ratio(p.stream.throughput(), d.stream.throughput()))
	fmt.Fprintf(out, "added latency sluice − direct: stream p50 %s, p99 %s; TTFE p50 %s   target ≤ +%s: %s; TTFE p99 %s   (proxy − direct TTFE: p50 %s, p99 %s)\n",
		signedMS(s.stream.lat.percentile(50)-d.stream.lat.percentile(50)), signedMS(s.stream.lat.percentile(99)-d.stream.lat.percentile(99)),
		signedMS(addTTFE50), ms(targetAddedTTFE), check(addTTFE50 <= targetAddedTTFE), signedMS(addTTFE99),
		signedMS(p.stream.ttfe.percentile(50)-d.stream.ttfe.percentile(50)), signedMS(p.stream.ttfe.percentile(99)-d.stream.ttfe.percentile(99)))
	metric(stVsProxy, "sluice/proxy-stream-ratio")
	metric(stVsDirect, "sluice/direct-stream-ratio")
	metric(us(addTTFE50), "sluice-added-ttfe-p50-µs")
	metric(us(addTTFE99), "sluice-added-ttfe-p99-µs")

	// (c) idle streams.
	fmt.Fprintf(out, "\n(c) concurrent idle streams (one event, then held open by the fake upstream): N = %d\n", idleN)
	if capNote != "" {
		fmt.Fprintf(out, "N %s\n", capNote)
	}
	w = tw()
	fmt.Fprintln(w, "path\topen\tRSS before\tRSS with streams\tKiB/stream\tmarginal KiB/stream\tfds before → after\tupstream fds\topen time\terrors\t")
	fmt.Fprintln(w, "direct\t-\t-\t-\t-\t-\t-\t-\t-\t(no proxy process)\t")
	for _, n := range paths[1:] {
		r := res[n].idle
		errs := "0"
		if r.errs > 0 {
			errs = fmt.Sprintf("%d (%v)", r.errs, r.firstErr)
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%.1f MiB\t%.1f MiB\t%.1f\t%.1f\t%d → %d\t%d\t%v\t%s\t\n", n, r.opened, r.want, float64(r.rssBefore)/1024, float64(r.rssAfter)/1024,
			r.kibPerStream(), r.marginalKiB(), r.fdsBefore, r.fdsAfter, r.upstreamFds, r.openTime.Round(time.Millisecond), errs)
		metric(r.kibPerStream(), n+"-idle-KiB/stream")
		metric(r.marginalKiB(), n+"-idle-marginal-KiB/stream")
	}
	_ = w.Flush()
	idleKiB := s.idle.kibPerStream()
	atTarget := ""
	if s.idle.opened < targetIdleStreams {
		atTarget = fmt.Sprintf(" (measured at %d streams, not %d)", s.idle.opened, targetIdleStreams)
	}
	fmt.Fprintf(out, "sluice %.1f KiB/stream (marginal %.1f), %.2f × the bare proxy   target ≤ %.0f KiB at %d streams%s: %s\n",
		idleKiB, s.idle.marginalKiB(), ratio(idleKiB, p.idle.kibPerStream()), targetIdleKiB, targetIdleStreams, atTarget, check(idleKiB <= targetIdleKiB))
	metric(ratio(idleKiB, p.idle.kibPerStream()), "sluice/proxy-idle-ratio")

	// Summary.
	fmt.Fprintf(out, "\nsummary\n")
	w = tw()
	fmt.Fprintln(w, "path\tjson req/s\tjson p50\tjson p99\t@rate p50\t@rate p99\tstreams/s\tstream p99\tTTFE p50\tTTFE p99\tidle KiB/stream\t")
	for _, n := range paths {
		r := res[n]
		idle := "-"
		if r.idle != nil {
			idle = fmt.Sprintf("%.1f", r.idle.kibPerStream())
		}
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", n, r.json.throughput(), ms(r.json.lat.percentile(50)), ms(r.json.lat.percentile(99)),
			ms(r.rate.lat.percentile(50)), ms(r.rate.lat.percentile(99)), r.stream.throughput(), ms(r.stream.lat.percentile(99)),
			ms(r.stream.ttfe.percentile(50)), ms(r.stream.ttfe.percentile(99)), idle)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "targets: throughput sluice ÷ proxy %.3f ≥ %.2f %s | added p99 @%d RPS %s ≤ +%s %s | added TTFE p50 %s ≤ +%s %s | idle %.1f KiB/stream ≤ %.0f %s\n\n",
		jsonVsProxy, targetThroughputRatio, check(jsonVsProxy >= targetThroughputRatio),
		cfg.rate, signedMS(addP99), ms(targetAddedP99), check(addP99 <= targetAddedP99),
		signedMS(addTTFE50), ms(targetAddedTTFE), check(addTTFE50 <= targetAddedTTFE),
		idleKiB, targetIdleKiB, check(idleKiB <= targetIdleKiB))

	// Errors make the numbers suspect: fail on more than 1% on any path.
	for _, n := range paths {
		for name, r := range map[string]*runStats{"closed-loop JSON": &res[n].json, "fixed-rate JSON": &res[n].rate, "streams": &res[n].stream} {
			if r.ok == 0 || r.errRate() > 0.01 {
				b.Errorf("%s %s: %d ok, %d errors (first: %v)", n, name, r.ok, r.errs, r.firstErr)
			}
		}
		if ir := res[n].idle; ir != nil && ir.opened == 0 {
			b.Errorf("%s idle streams: none opened (first error: %v)", n, ir.firstErr)
		}
	}
}
