package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
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
	// envStreamRate overrides the fixed rate of case (b2) (streams per second).
	envStreamRate = "SLUICE_BENCH_STREAM_RPS"
	// envIdle overrides the number of concurrent idle streams.
	envIdle = "SLUICE_BENCH_IDLE_STREAMS"
	// envBody pads the request bodies to about this many bytes (default
	// about 1.2 KB).
	envBody = "SLUICE_BENCH_BODY_BYTES"
	// envSluice=gateway runs Sluice's gateway inside a re-executed test
	// binary instead of the built binary: the request pipeline with the
	// built-in policy and without the continuity store (no Wasm, no Pebble),
	// for profiling the pipeline itself.
	envSluice = "SLUICE_BENCH_SLUICE"
	// envSluiceArgs adds arguments to `sluice serve` (split on spaces), e.g.
	// "--config nocontinuity.yaml" for an A/B run.
	envSluiceArgs = "SLUICE_BENCH_SLUICE_ARGS"
	// envSluiceEnv adds environment variables (NAME=value, split on spaces)
	// to the measured Sluice only, e.g. "GOGC=400" or "GODEBUG=gctrace=1",
	// so that a runtime setting is tried without changing the other paths.
	envSluiceEnv = "SLUICE_BENCH_SLUICE_ENV"
	// envWSIdle overrides the number of idle client WebSockets (ws-idle).
	envWSIdle = "SLUICE_BENCH_WS_IDLE"
	// envReplayN overrides the requests per kind and round of the replay
	// case.
	envReplayN = "SLUICE_BENCH_REPLAY_N"
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
	rate       int // (a2) requests per second
	streamRate int // (b2) streams per second
	idle       int
	body       int // request body size; 0 is the default body
	idlePar    int
	wsIdle     int    // ws-idle: idle client WebSockets
	replayN    int    // replay: requests per kind and round
	sluiceMode string // "binary" or "gateway"
	profile    string
}

func loadConfig() (benchConfig, error) {
	c := benchConfig{rounds: 5, dur: 3 * time.Second, warmup: time.Second, workers: 16, rate: 1000, streamRate: 200,
		idle: targetIdleStreams, idlePar: 64, wsIdle: 5000, replayN: 400, sluiceMode: "binary"}
	if testing.Short() || os.Getenv(envQuick) == "1" {
		c = benchConfig{quick: true, rounds: 2, dur: 250 * time.Millisecond, warmup: 100 * time.Millisecond,
			workers: 16, rate: 1000, streamRate: 200, idle: 500, idlePar: 32, wsIdle: 300, replayN: 100, sluiceMode: "binary"}
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
	envInt(envStreamRate, &c.streamRate)
	envInt(envIdle, &c.idle)
	envInt(envBody, &c.body)
	envInt(envWSIdle, &c.wsIdle)
	envInt(envReplayN, &c.replayN)
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

// sluiceCommand is the Sluice the benchmark measures: `sluice serve` with
// its defaults (plus SLUICE_BENCH_SLUICE_ARGS, and SLUICE_BENCH_SLUICE_ENV
// in its environment), or, with
// SLUICE_BENCH_SLUICE=gateway or SLUICE_BENCH_PROFILE, the gateway role of
// this test binary. routed: the fake upstream is two upstreams behind a
// route with the rescue machinery armed (routedYAML) instead of
// `--upstream`. graceful: stop it with SIGTERM, so that the role writes its
// profile.
func sluiceCommand(cfg benchConfig, upstreamURL, dir string, routed bool) (cmd *exec.Cmd, graceful bool, err error) {
	extraEnv := strings.Fields(os.Getenv(envSluiceEnv))
	if cfg.sluiceMode == "gateway" {
		env := []string{envUpstream + "=" + upstreamURL}
		if routed {
			env = append(env, envRouted+"=1")
		}
		cmd, err = selfRole(roleGateway, append(env, extraEnv...)...)
		return cmd, true, err
	}
	bin, err := sluiceBinary()
	if err != nil {
		return nil, false, err
	}
	args := []string{"serve", "--upstream", upstreamURL + "/v1"}
	if routed {
		path := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(path, []byte(routedYAML(upstreamURL)), 0o644); err != nil {
			return nil, false, err
		}
		args = []string{"serve", "--config", path}
	}
	args = append(args, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--log-level", "error")
	args = append(args, strings.Fields(os.Getenv(envSluiceArgs))...)
	cmd = exec.Command(bin, args...)
	if len(extraEnv) > 0 {
		cmd.Env = append(os.Environ(), extraEnv...)
	}
	withPGO(cmd)
	return cmd, false, nil
}

// benchModel is the model every benchmark request names.
const benchModel = "gpt-fake-1"

// routedStall is the routed Sluice's stall bound: far above the stamped
// stream's 20 ms gaps, so it never fires, but it is counted on every event.
const routedStall = 30 * time.Second

// routedYAML is the config of a routed Sluice: the fake upstream as a
// primary and a backup, and a route for the bench's model with a stall
// bound and continuation on, so every stream runs with its continuation
// armed (what was sent is tracked for a splice) and its stall counted, as
// an operator's rescue setup would.
func routedYAML(upstreamURL string) string {
	return fmt.Sprintf("upstreams:\n"+
		"  - {name: primary, base_url: %[1]q}\n"+
		"  - {name: backup, base_url: %[1]q}\n"+
		"routes:\n"+
		"  - models: [%[2]q]\n"+
		"    targets: [{upstream: primary}, {upstream: backup}]\n"+
		"    timeouts: {stall: %[3]s}\n"+
		"    continuation: auto\n", upstreamURL+"/v1", benchModel, routedStall)
}

// pathResult is everything measured on one path.
type pathResult struct {
	json       runStats    // (a1) closed loop
	rate       runStats    // (a2) fixed rate
	stream     runStats    // (b1) closed loop
	streamRate runStats    // (b2) fixed rate
	idle       *idleResult // (c); nil for direct
}

// BenchmarkProxyOverhead measures, in one run and interleaved in rounds,
// client → fake upstream (direct), client → bare httputil.ReverseProxy →
// fake upstream (proxy) and client → Sluice → fake upstream (sluice):
// (a) non-streaming requests in a closed loop and at a fixed rate,
// (b) 10-event streams in a closed loop and at a fixed rate, (c) the RSS
// of many idle streams.
// It prints a table per case with the ratios and targets, and reports every
// number with b.ReportMetric. It runs everything once, for minutes, so it
// skips itself unless run with -benchtime 1x (as `just bench` does), which
// keeps `go test -bench . ./...` (`just bench-micro`) micro; -short or
// SLUICE_BENCH_QUICK=1 makes it about ten seconds long.
func BenchmarkProxyOverhead(b *testing.B) {
	cfg, _ := startCase(b, caseOverhead)
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

	slCmd, graceful, err := sluiceCommand(cfg, up.url, b.TempDir(), false)
	if err != nil {
		b.Fatal(err)
	}
	sl := start("sluice", func() (*process, error) { return startProcess("sluice", slCmd, graceful) })
	collectPGO(sl)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = waitReady(rctx, sl.url+"/readyz")
	cancel()
	if err != nil {
		b.Fatalf("%v; sluice stderr:\n%s", err, sl.stderr)
	}

	targets := []*target{newTarget("direct", up.url, nil, up), newTarget("proxy", proxy.url, proxy, proxy), newTarget("sluice", sl.url, sl, sl)}
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
	fmt.Fprintf(out, "\nSluice proxy-overhead benchmark (%s mode): %d rounds, %v per run, %d closed-loop workers, fixed rates %d req/s and %d streams/s, request body %d bytes, %d CPUs (shared by all processes)\n",
		mode, cfg.rounds, cfg.dur, cfg.workers, cfg.rate, cfg.streamRate, len(jsonBody), runtime.NumCPU())
	fmt.Fprintf(out, "processes: fake upstream pid %d, bare proxy pid %d, sluice (%s) pid %d %s\n", up.pid(), proxy.pid(), cfg.sluiceMode, sl.pid(),
		strings.Join(sl.cmd.Args[1:], " "))

	// Warm up every path (connections, heaps) before measuring.
	for _, t := range targets {
		closedLoop(ctx, cfg.workers, cfg.warmup, jsonOp(t))
		closedLoop(ctx, cfg.workers, cfg.warmup, streamOp(t))
	}
	fmt.Fprintf(out, "RSS after warm-up: fake upstream %.1f MiB, bare proxy %.1f MiB, sluice %.1f MiB\n", rssMiB(up), rssMiB(proxy), rssMiB(sl))
	res := map[string]*pathResult{}
	for _, t := range targets {
		res[t.name] = &pathResult{}
	}

	// (c) first, on processes that have served only the warm-up: after the
	// load cases their heaps hold freed memory that the streams would
	// reuse without growing RSS.
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

	for _, t := range targets {
		closedLoop(ctx, cfg.workers, cfg.warmup, jsonOp(t)) // reconnect
	}

	for round := range cfg.rounds {
		// Rotate the order each round so no path always runs first.
		order := make([]*target, len(targets))
		for i := range targets {
			order[i] = targets[(i+round)%len(targets)]
		}
		line := fmt.Sprintf("round %d/%d:", round+1, cfg.rounds)
		for _, t := range order {
			r := t.measure(func() *runStats { return closedLoop(ctx, cfg.workers, cfg.dur, jsonOp(t)) })
			res[t.name].json.add(r)
			line += fmt.Sprintf(" %s %.0f req/s;", t.name, r.throughput())
		}
		for _, t := range order {
			res[t.name].rate.add(t.measure(func() *runStats { return openLoop(ctx, cfg.rate, cfg.dur, jsonOp(t)) }))
		}
		for _, t := range order {
			r := t.measure(func() *runStats { return closedLoop(ctx, cfg.workers, cfg.dur, streamOp(t)) })
			res[t.name].stream.add(r)
			line += fmt.Sprintf(" %s %.0f streams/s;", t.name, r.throughput())
		}
		for _, t := range order {
			res[t.name].streamRate.add(t.measure(func() *runStats { return openLoop(ctx, cfg.streamRate, cfg.dur, streamOp(t)) }))
		}
		fmt.Fprintln(out, strings.TrimSuffix(line, ";"))
		alive(fmt.Sprintf("round %d", round+1))
	}

	report(b, out, cfg, res, idleN, capNote)
	for _, p := range []*process{up, proxy, sl} {
		if tail := lastLines(p.stderr.String(), 20); tail != "" {
			fmt.Fprintf(out, "stderr of %s (last lines):\n%s\n", p.name, tail)
		}
	}
}

// rssMiB is p's RSS in MiB, NaN when unreadable.
func rssMiB(p *process) float64 {
	kib, err := p.rssKiB()
	if err != nil {
		return math.NaN()
	}
	return float64(kib) / 1024
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
	b.ReportMetric(0, "ns/op") // one iteration of minutes: meaningless
	metric := func(v float64, unit string) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			b.ReportMetric(v, unit)
		}
	}
	tw := func() *tabwriter.Writer {
		return tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	}
	rounds := fmt.Sprintf("%d rounds × %v per path", cfg.rounds, cfg.dur)

	// table prints one case: closed (throughput, per-round range) or fixed
	// rate (sent, achieved), optionally with TTFE, and reports its metrics.
	table := func(key, unit string, get func(*pathResult) *runStats, closed, ttfe bool) {
		w := tw()
		head := "path\tsent\tachieved/s\tp50\tp99\tp99.9\t"
		if closed {
			head = "path\t" + unit + "\tper round\tp50\tp99\tp99.9\t"
		}
		if ttfe {
			head += "TTFE p50\tTTFE p99\t"
		}
		fmt.Fprintln(w, head+"CPU/op\terrors\t")
		for _, n := range pathNames {
			r := get(res[n])
			if closed {
				fmt.Fprintf(w, "%s\t%.0f\t%s\t", n, r.throughput(), perRound(r))
				metric(r.throughput(), n+"-"+key+"-"+unit)
			} else {
				fmt.Fprintf(w, "%s\t%d\t%.0f\t", n, r.sent, r.throughput())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t", ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), ms(r.lat.percentile(99.9)))
			metric(us(r.lat.percentile(50)), n+"-"+key+"-p50-us")
			metric(us(r.lat.percentile(99)), n+"-"+key+"-p99-us")
			if ttfe {
				fmt.Fprintf(w, "%s\t%s\t", ms(r.ttfe.percentile(50)), ms(r.ttfe.percentile(99)))
				metric(us(r.ttfe.percentile(50)), n+"-"+key+"-ttfe-p50-us")
				metric(us(r.ttfe.percentile(99)), n+"-"+key+"-ttfe-p99-us")
			}
			fmt.Fprintf(w, "%s\t%s\t\n", usStr(r.cpuPerOp()), errCol(r))
			metric(us(r.cpuPerOp()), n+"-"+key+"-cpu-us/op")
		}
		_ = w.Flush()
		sr, pr := get(s), get(p)
		fmt.Fprintf(out, "CPU per op (the path's own process: fake upstream for direct, else the proxy): sluice ÷ proxy %.2f\n",
			ratio(float64(sr.cpuPerOp()), float64(pr.cpuPerOp())))
		metric(ratio(float64(sr.cpuPerOp()), float64(pr.cpuPerOp())), "sluice/proxy-"+key+"-cpu-ratio")
	}
	// ratios prints and reports the throughput ratios of a closed-loop case.
	ratios := func(key string, get func(*pathResult) *runStats, target bool) float64 {
		sr, pr, dr := get(s), get(p), get(d)
		vsProxy, vsDirect := ratio(sr.throughput(), pr.throughput()), ratio(sr.throughput(), dr.throughput())
		goal := "(informational)"
		if target {
			goal = fmt.Sprintf("target ≥ %.2f: %s", targetThroughputRatio, check(vsProxy >= targetThroughputRatio))
		}
		fmt.Fprintf(out, "throughput sluice ÷ proxy  %.3f (median of rounds %.3f)   %s\n", vsProxy, pairedRatio(sr, pr), goal)
		fmt.Fprintf(out, "throughput sluice ÷ direct %.3f (median of rounds %.3f)   proxy ÷ direct %.3f\n",
			vsDirect, pairedRatio(sr, dr), ratio(pr.throughput(), dr.throughput()))
		metric(vsProxy, "sluice/proxy-"+key+"-ratio")
		metric(vsDirect, "sluice/direct-"+key+"-ratio")
		return vsProxy
	}
	// added prints and reports sluice − direct (and proxy − direct) for
	// the p50 and p99 of one distribution.
	added := func(key, what string, get func(*pathResult) *runStats, dist func(*runStats) *samples,
		p50, p99 func(roundSummary) time.Duration, targetQ float64, target time.Duration) time.Duration {
		sr, pr, dr := get(s), get(p), get(d)
		a50 := dist(sr).percentile(50) - dist(dr).percentile(50)
		a99 := dist(sr).percentile(99) - dist(dr).percentile(99)
		fmt.Fprintf(out, "added %s sluice − direct: p50 %s (median of rounds %s), p99 %s (median of rounds %s)",
			what, signedMS(a50), signedMS(pairedDiff(sr, dr, p50)), signedMS(a99), signedMS(pairedDiff(sr, dr, p99)))
		var got time.Duration
		if target > 0 {
			got = a50
			if targetQ == 99 {
				got = a99
			}
			fmt.Fprintf(out, "   target p%.0f ≤ +%s: %s", targetQ, ms(target), check(got <= target))
		}
		fmt.Fprintf(out, "\n      proxy − direct: p50 %s, p99 %s\n",
			signedMS(dist(pr).percentile(50)-dist(dr).percentile(50)), signedMS(dist(pr).percentile(99)-dist(dr).percentile(99)))
		metric(us(a50), "sluice-added-"+key+"-p50-us")
		metric(us(a99), "sluice-added-"+key+"-p99-us")
		return got
	}
	latOf := func(r *runStats) *samples { return &r.lat }
	ttfeOf := func(r *runStats) *samples { return &r.ttfe }
	p50Of := func(r roundSummary) time.Duration { return r.p50 }
	p99Of := func(r roundSummary) time.Duration { return r.p99 }
	ttfe50Of := func(r roundSummary) time.Duration { return r.ttfe50 }
	ttfe99Of := func(r roundSummary) time.Duration { return r.ttfe99 }
	jsonOf := func(r *pathResult) *runStats { return &r.json }
	rateOf := func(r *pathResult) *runStats { return &r.rate }
	streamOf := func(r *pathResult) *runStats { return &r.stream }
	streamRateOf := func(r *pathResult) *runStats { return &r.streamRate }

	fmt.Fprintf(out, "\n(a1) non-stream POST /v1/responses, closed loop, %d workers: %s\n", cfg.workers, rounds)
	table("json", "req/s", jsonOf, true, false)
	jsonVsProxy := ratios("json", jsonOf, true)
	added("json", "latency", jsonOf, latOf, p50Of, p99Of, 0, 0)

	fmt.Fprintf(out, "\n(a2) non-stream POST /v1/responses at a fixed %d req/s (latency from the scheduled start): %s\n", cfg.rate, rounds)
	table("rate", "", rateOf, false, false)
	addP99 := added("rate", "latency", rateOf, latOf, p50Of, p99Of, 99, targetAddedP99)

	fmt.Fprintf(out, "\n(b1) %d-event Responses streams, closed loop, %d workers (saturated: latencies include queueing): %s\n", streamEvents, cfg.workers, rounds)
	table("stream", "streams/s", streamOf, true, true)
	ratios("stream", streamOf, false)
	added("stream", "stream latency", streamOf, latOf, p50Of, p99Of, 0, 0)
	addTTFEClosed := added("stream-ttfe", "TTFE", streamOf, ttfeOf, ttfe50Of, ttfe99Of, 50, targetAddedTTFE)

	fmt.Fprintf(out, "\n(b2) %d-event Responses streams at a fixed %d streams/s (unsaturated; from the scheduled start): %s\n", streamEvents, cfg.streamRate, rounds)
	table("stream-rate", "", streamRateOf, false, true)
	added("stream-rate", "stream latency", streamRateOf, latOf, p50Of, p99Of, 0, 0)
	addTTFE := added("stream-rate-ttfe", "TTFE", streamRateOf, ttfeOf, ttfe50Of, ttfe99Of, 50, targetAddedTTFE)

	fmt.Fprintf(out, "\n(c) concurrent idle streams (one event, then held open by the fake upstream): N = %d\n", idleN)
	if capNote != "" {
		fmt.Fprintf(out, "N %s\n", capNote)
	}
	w := tw()
	fmt.Fprintln(w, "path\topen\tRSS before\tRSS with streams\tKiB/stream\tmarginal KiB/stream\tfds before → after\tupstream fds\topen time\terrors\t")
	fmt.Fprintln(w, "direct\t-\t-\t-\t-\t-\t-\t-\t-\t(no proxy process)\t")
	for _, n := range pathNames[1:] {
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

	fmt.Fprintf(out, "\nsummary (pooled over all rounds)\n")
	w = tw()
	fmt.Fprintln(w, "path\tjson req/s\tjson p50\tjson p99\t@rate p50\t@rate p99\tstreams/s\tstream p99\tTTFE p50\tTTFE p99\t@rate TTFE p50\t@rate TTFE p99\tidle KiB/stream\t")
	for _, n := range pathNames {
		r := res[n]
		idle := "-"
		if r.idle != nil {
			idle = fmt.Sprintf("%.1f", r.idle.kibPerStream())
		}
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, r.json.throughput(), ms(r.json.lat.percentile(50)), ms(r.json.lat.percentile(99)),
			ms(r.rate.lat.percentile(50)), ms(r.rate.lat.percentile(99)), r.stream.throughput(), ms(r.stream.lat.percentile(99)),
			ms(r.stream.ttfe.percentile(50)), ms(r.stream.ttfe.percentile(99)), ms(r.streamRate.ttfe.percentile(50)), ms(r.streamRate.ttfe.percentile(99)), idle)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "targets (printed, not asserted)\n")
	w = tw()
	fmt.Fprintln(w, "target\tmeasured\tgoal\tstatus\t")
	fmt.Fprintf(w, "closed-loop throughput sluice ÷ bare proxy (a1)\t%.3f\t≥ %.2f\t%s\t\n", jsonVsProxy, targetThroughputRatio, check(jsonVsProxy >= targetThroughputRatio))
	fmt.Fprintf(w, "added p99 over direct at %d req/s (a2)\t%s\t≤ +%s\t%s\t\n", cfg.rate, signedMS(addP99), ms(targetAddedP99), check(addP99 <= targetAddedP99))
	fmt.Fprintf(w, "added TTFE p50 over direct at %d streams/s (b2)\t%s\t≤ +%s\t%s\t\n", cfg.streamRate, signedMS(addTTFE), ms(targetAddedTTFE), check(addTTFE <= targetAddedTTFE))
	fmt.Fprintf(w, "added TTFE p50 over direct, closed loop (b1)\t%s\t≤ +%s\t%s\t\n", signedMS(addTTFEClosed), ms(targetAddedTTFE), check(addTTFEClosed <= targetAddedTTFE))
	fmt.Fprintf(w, "RSS per idle stream at %d streams (c)\t%.1f KiB\t≤ %.0f KiB\t%s\t\n", s.idle.opened, idleKiB, targetIdleKiB, check(idleKiB <= targetIdleKiB))
	_ = w.Flush()
	fmt.Fprintln(out)

	// Errors make the numbers suspect: fail on more than 1% on any path.
	for _, n := range pathNames {
		for name, r := range map[string]*runStats{"closed-loop JSON": &res[n].json, "fixed-rate JSON": &res[n].rate,
			"closed-loop streams": &res[n].stream, "fixed-rate streams": &res[n].streamRate} {
			if r.ok == 0 || r.errRate() > 0.01 {
				b.Errorf("%s %s: %d ok, %d errors (first: %v)", n, name, r.ok, r.errs, r.firstErr)
			}
		}
		if ir := res[n].idle; ir != nil && ir.opened == 0 {
			b.Errorf("%s idle streams: none opened (first error: %v)", n, ir.firstErr)
		}
	}
}

// usStr renders a CPU time in microseconds ("123µs"); "-" for none.
func usStr(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", us(d))
}

// pathNames are the paths in table order.
var pathNames = []string{"direct", "proxy", "sluice"}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func check(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}

// perRound is the range of a closed-loop case's per-round throughput.
func perRound(r *runStats) string {
	if len(r.rounds) < 2 {
		return "-"
	}
	lo, hi := r.rounds[0].throughput, r.rounds[0].throughput
	for _, v := range r.rounds {
		lo, hi = min(lo, v.throughput), max(hi, v.throughput)
	}
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
}

// pairedRatio is the median over rounds of a's throughput ÷ b's: runs of
// the same round shared the machine's state.
func pairedRatio(a, b *runStats) float64 {
	var rs []float64
	for i := range min(len(a.rounds), len(b.rounds)) {
		rs = append(rs, ratio(a.rounds[i].throughput, b.rounds[i].throughput))
	}
	return median(rs)
}

// pairedDiff is the median over rounds of f(a) − f(b).
func pairedDiff(a, b *runStats, f func(roundSummary) time.Duration) time.Duration {
	var ds []float64
	for i := range min(len(a.rounds), len(b.rounds)) {
		ds = append(ds, float64(f(a.rounds[i])-f(b.rounds[i])))
	}
	if len(ds) == 0 {
		return 0
	}
	return time.Duration(median(ds))
}

func errCol(r *runStats) string {
	if r.errs == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.2f%%: %v)", r.errs, 100*r.errRate(), r.firstErr)
}
