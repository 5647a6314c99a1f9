package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/redistest"
)

// caseAuth is BenchmarkAuth: what a Sluice key and its limits cost a
// request (SLUICE_BENCH_CASES=auth; also part of "all").
const caseAuth = "auth"

func init() { allCases = append(allCases, caseAuth) }

// benchKeyYAML makes the load generator's credential (postWith's
// "Bearer sk-bench-0123456789abcdef") a Sluice key with every limit set
// but out of reach: each request is identified, checked against rpm, tpm,
// concurrent and both budgets, and settled with its usage.
const benchKeyYAML = `auth: {required: true}
keys:
  - name: bench
    key: sk-bench-0123456789abcdef
    limits: {rpm: 1000000000, tpm: 1000000000000, concurrent: 1000000, tokens_per_day: 1000000000000000, tokens_per_month: 1000000000000000}
`

// BenchmarkAuth measures the latency a key check plus a limit check adds to
// a request, and the throughput with auth on against off: non-streaming
// JSON requests in closed loops (one client at a time, then cfg.workers
// clients) through Sluice with auth off, with auth required and the key's
// limits held locally (Pebble store), and — when redis-server is installed
// — with the limits and usage shared through Redis (store.backend: redis,
// one Lua script per admission and one per settlement). Interleaved in
// rounds; the fake upstream and Redis share the machine with Sluice and the
// load generator.
func BenchmarkAuth(b *testing.B) {
	cfg, _ := startCase(b, caseAuth)
	out := os.Stdout
	ctx := context.Background()
	b.ReportMetric(0, "ns/op") // one iteration of minutes: meaningless
	procs := &procSet{}
	b.Cleanup(procs.stopAll)
	up := startFake(b, procs, "fake upstream", roleUpstream)
	upstreams := "upstreams:\n" + upstreamYAML("fake", up.url, "http")
	off := startSluice(b, procs, "auth-off", upstreams)
	local := startSluice(b, procs, "auth-local", benchKeyYAML+upstreams)
	paths := []*target{newTarget("auth-off", off.url, off, off), newTarget("auth-local", local.url, local, local)}
	alive := []*process{up, off, local}
	redisNote := "auth-redis: skipped, redis-server is not installed"
	if bin, err := exec.LookPath("redis-server"); err == nil {
		rs, err := redistest.Launch(bin, b.TempDir(), redistest.Options{})
		if err != nil {
			b.Fatalf("redis-server: %v", err)
		}
		b.Cleanup(rs.Stop)
		red := startSluice(b, procs, "auth-redis", benchKeyYAML+upstreams+
			fmt.Sprintf("store:\n  backend: redis\n  redis: {url: %q, key_prefix: \"bench:\", timeout: 1s}\n", rs.URL))
		paths = append(paths, newTarget("auth-redis", red.url, red, red))
		alive = append(alive, red)
		redisNote = fmt.Sprintf("auth-redis: limits and usage on Redis at %s (no persistence), pid %d", rs.Addr, red.pid())
	}
	for _, p := range paths {
		if err := p.doJSON(ctx); err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
	}
	fmt.Fprintf(out, "\nSluice auth benchmark (%s mode): %d rounds × %v per path and load, non-streaming JSON bodies of %d bytes; fake upstream pid %d, auth-off pid %d, auth-local pid %d (auth required, one key with every limit set out of reach, Pebble)\n%s\n",
		modeName(cfg), cfg.rounds, cfg.dur, len(jsonBody), up.pid(), off.pid(), local.pid(), redisNote)

	loads := []struct {
		key, title string
		workers    int
	}{
		{"c1", "(l1) one client at a time: the latency a request pays", 1},
		{fmt.Sprintf("c%d", cfg.workers), fmt.Sprintf("(l2) %d clients back to back: throughput", cfg.workers), cfg.workers},
	}
	for _, p := range paths {
		for _, l := range loads {
			closedLoop(ctx, l.workers, cfg.warmup, jsonOp(p))
		}
	}
	res := make([]map[string]*runStats, len(loads))
	for i := range loads {
		res[i] = map[string]*runStats{}
		for _, p := range paths {
			res[i][p.name] = &runStats{}
		}
	}
	for round := range cfg.rounds {
		line := fmt.Sprintf("round %d/%d:", round+1, cfg.rounds)
		for i, l := range loads {
			for _, p := range rotated(paths, round) {
				r := p.measure(func() *runStats { return closedLoop(ctx, l.workers, cfg.dur, jsonOp(p)) })
				res[i][p.name].add(r)
				line += fmt.Sprintf(" %s %s p50 %s %.0f/s;", p.name, l.key, ms(r.lat.percentile(50)), r.throughput())
			}
		}
		fmt.Fprintln(out, strings.TrimSuffix(line, ";"))
		checkAlive(b, fmt.Sprintf("round %d", round+1), alive...)
	}

	type sum struct {
		name, load string
		lat        diff
		tput, cpu  float64
	}
	var sums []sum
	for i, l := range loads {
		fmt.Fprintf(out, "\n%s: %d rounds × %v per path\n", l.title, cfg.rounds, cfg.dur)
		var rows []pathRow
		for _, p := range paths {
			rows = append(rows, pathRow{p.name, res[i][p.name]})
		}
		statsTable(b, out, "auth-"+l.key, "req/s", "", closedTable, rows)
		base := res[i]["auth-off"]
		for _, p := range paths[1:] {
			r := res[i][p.name]
			s := sum{p.name, l.key, latDiff(r, base), pairedRatio(r, base), ratio(float64(r.cpuPerOp()), float64(base.cpuPerOp()))}
			sums = append(sums, s)
			fmt.Fprintf(out, "%s − auth-off: latency %s\n", p.name, s.lat)
			fmt.Fprintf(out, "%s ÷ auth-off: throughput %.3f (median of rounds; pooled %.3f), CPU per request %.2f\n",
				p.name, s.tput, ratio(r.throughput(), base.throughput()), s.cpu)
			s.lat.report(b, p.name+"-"+l.key+"-added-latency")
			reportMetric(b, s.tput, p.name+"-"+l.key+"-throughput-ratio")
		}
		for _, p := range paths {
			failOnErrors(b, p.name+" "+l.title, res[i][p.name])
		}
	}

	fmt.Fprintf(out, "\nsummary (against auth-off, pooled over all rounds; throughput: median of per-round ratios)\n")
	w := newTable(out)
	fmt.Fprintln(w, "path\tload\tlatency p50\tlatency p99\tthroughput ×\tCPU/req ×\t")
	for _, s := range sums {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.3f\t%.2f\t\n", s.name, s.load, signedMS(s.lat.p50), signedMS(s.lat.p99), s.tput, s.cpu)
	}
	_ = w.Flush()
	fmt.Fprintln(out)
	printStderrTails(out, alive...)
}
