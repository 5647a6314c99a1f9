package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// envCases selects the cases to run, comma-separated (default: all):
//
//	overhead    BenchmarkProxyOverhead: direct / bare proxy / sluice, cases (a)–(c)
//	ws-turns    BenchmarkWebSocket: added latency per event of the Responses WebSocket mode
//	ws-idle     BenchmarkWebSocket: RSS per idle client WebSocket, sockets per GiB
//	replay      BenchmarkReplay: the time to first event a replay adds
//	continuity  BenchmarkContinuity: continuity on vs off for store:true bodies
//	stamped     BenchmarkStampedStreams: per-frame latency (arrival − emit) of
//	            64-delta streams at 64, 256 and 1,024 concurrent streams
//
// "ws" is ws-turns and ws-idle; "all" is everything.
const envCases = "SLUICE_BENCH_CASES"

// The cases.
const (
	caseOverhead   = "overhead"
	caseWSTurns    = "ws-turns"
	caseWSIdle     = "ws-idle"
	caseReplay     = "replay"
	caseContinuity = "continuity"
	caseStamped    = "stamped"
)

var allCases = []string{caseOverhead, caseWSTurns, caseWSIdle, caseReplay, caseContinuity, caseStamped}

// parseCases reads a SLUICE_BENCH_CASES value into the set of selected
// cases; empty means all of them.
func parseCases(v string) (map[string]bool, error) {
	sel := map[string]bool{}
	if strings.TrimSpace(v) == "" {
		v = "all"
	}
	for _, name := range strings.Split(v, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name == "":
		case name == "all":
			for _, c := range allCases {
				sel[c] = true
			}
		case name == "ws":
			sel[caseWSTurns], sel[caseWSIdle] = true, true
		case slices.Contains(allCases, name):
			sel[name] = true
		default:
			return nil, fmt.Errorf("%s: unknown case %q (want some of %s, ws, all)", envCases, name, strings.Join(allCases, ", "))
		}
	}
	return sel, nil
}

// startCase is the common start of the process benchmarks: each runs once,
// for minutes, so it skips itself unless run with -benchtime 1x (as `just
// bench` does), which keeps `go test -bench . ./...` (`just bench-micro`)
// micro; it also skips unless one of cases is selected. It returns the
// configuration and the selected cases.
func startCase(b *testing.B, cases ...string) (benchConfig, map[string]bool) {
	if f := flag.Lookup("test.benchtime"); f == nil || f.Value.String() != "1x" {
		b.Skip("the process benchmarks run once for minutes: run them with -benchtime 1x (just bench; add -short for a quick run)")
	}
	sel, err := parseCases(os.Getenv(envCases))
	if err != nil {
		b.Fatal(err)
	}
	if !slices.ContainsFunc(cases, func(c string) bool { return sel[c] }) {
		b.Skipf("%s does not select %s", envCases, strings.Join(cases, " or "))
	}
	cfg, err := loadConfig()
	if err != nil {
		b.Fatal(err)
	}
	if cfg.body > 0 {
		setBodySize(cfg.body)
	}
	return cfg, sel
}

// modeName is "quick" or "full".
func modeName(cfg benchConfig) string {
	if cfg.quick {
		return "quick"
	}
	return "full"
}

// The sluice binary is built once per test binary run, into a directory
// that TestMain removes.
var sluiceBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// sluiceBinary builds ./cmd/sluice (once) and returns the binary's path.
func sluiceBinary() (string, error) {
	sluiceBuild.once.Do(func() {
		sluiceBuild.dir, sluiceBuild.err = os.MkdirTemp("", "sluice-bench-")
		if sluiceBuild.err == nil {
			sluiceBuild.bin, sluiceBuild.err = buildSluice(sluiceBuild.dir)
		}
	})
	return sluiceBuild.bin, sluiceBuild.err
}

// removeSluiceBuild removes the built binary.
func removeSluiceBuild() {
	if sluiceBuild.dir != "" {
		_ = os.RemoveAll(sluiceBuild.dir)
	}
}

// startFake starts a re-executed helper role (a fake upstream) and registers
// it with procs.
func startFake(b *testing.B, procs *procSet, name, role string, env ...string) *process {
	cmd, err := selfRole(role, env...)
	if err != nil {
		b.Fatal(err)
	}
	p, err := startProcess(name, cmd, true)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	procs.add(p)
	return p
}

// startSluice starts `sluice serve --config FILE` with config (YAML; the
// listen address, data and policy directories and log level come from
// flags), registers it with procs and waits until it is ready.
func startSluice(b *testing.B, procs *procSet, name, config string) *process {
	bin, err := sluiceBinary()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfgPath, policyDir := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "policies.d")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(policyDir, 0o755); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"),
		"--policy-dir", policyDir, "--log-level", "error")
	withPGO(cmd)
	p, err := startProcess(name, cmd, false)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	procs.add(p)
	collectPGO(p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitReady(ctx, p.url+"/readyz"); err != nil {
		b.Fatalf("%s: %v; stderr:\n%s", name, err, p.stderr)
	}
	return p
}

// upstreamYAML is one entry of a config's upstreams: list; base is the fake
// upstream's URL without /v1.
func upstreamYAML(name, base, transport string) string {
	return fmt.Sprintf("  - {name: %s, base_url: %q, transport: %s, protocol: responses}\n", name, base+"/v1", transport)
}

// checkAlive fails b if one of ps has died.
func checkAlive(b *testing.B, when string, ps ...*process) {
	for _, p := range ps {
		if !p.alive() {
			b.Fatalf("%s: the %s process died (%v); stderr:\n%s", when, p.name, p.waitErr, p.stderr)
		}
	}
}

// printStderrTails prints the last lines each process wrote to stderr.
func printStderrTails(out io.Writer, ps ...*process) {
	for _, p := range ps {
		if tail := lastLines(p.stderr.String(), 20); tail != "" {
			fmt.Fprintf(out, "stderr of %s (last lines):\n%s\n", p.name, tail)
		}
	}
}

// reportMetric reports v unless it is NaN or infinite; blanks in unit
// become dashes.
func reportMetric(b *testing.B, v float64, unit string) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		b.ReportMetric(v, strings.Join(strings.Fields(unit), "-"))
	}
}

// newTable is the tabwriter of every table.
func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
}

// pathRow is one path of a case's table.
type pathRow struct {
	name string
	r    *runStats
}

// tableKind is the layout of a statsTable.
type tableKind int

const (
	closedTable     tableKind = iota // throughput and its per-round range
	fixedRateTable                   // sent and achieved rate
	sequentialTable                  // one request at a time: the count
)

// statsTable prints one table (latency percentiles, optionally TTFE with
// the header ttfeName, CPU per op, errors) and reports each row's numbers
// as metrics named "<path>-<key>-…". unit names the throughput of a closed
// table ("turns/s").
func statsTable(b *testing.B, out io.Writer, key, unit, ttfeName string, kind tableKind, rows []pathRow) {
	w := newTable(out)
	head := "path\tsent\tachieved/s\t"
	switch kind {
	case closedTable:
		head = "path\t" + unit + "\tper round\t"
	case sequentialTable:
		head = "path\trequests\t"
	}
	head += "p50\tp99\tp99.9\t"
	if ttfeName != "" {
		head += ttfeName + " p50\t" + ttfeName + " p99\t"
	}
	if kind != sequentialTable {
		head += "CPU/op\t"
	}
	fmt.Fprintln(w, head+"errors\t")
	for _, row := range rows {
		n, r := row.name, row.r
		switch kind {
		case closedTable:
			fmt.Fprintf(w, "%s\t%.0f\t%s\t", n, r.throughput(), perRound(r))
			reportMetric(b, r.throughput(), n+"-"+key+"-"+unit)
		case fixedRateTable:
			fmt.Fprintf(w, "%s\t%d\t%.0f\t", n, r.sent, r.throughput())
		case sequentialTable:
			fmt.Fprintf(w, "%s\t%d\t", n, r.ok+r.errs)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t", ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), ms(r.lat.percentile(99.9)))
		reportMetric(b, us(r.lat.percentile(50)), n+"-"+key+"-p50-us")
		reportMetric(b, us(r.lat.percentile(99)), n+"-"+key+"-p99-us")
		if ttfeName != "" {
			fmt.Fprintf(w, "%s\t%s\t", ms(r.ttfe.percentile(50)), ms(r.ttfe.percentile(99)))
			reportMetric(b, us(r.ttfe.percentile(50)), n+"-"+key+"-ttfe-p50-us")
			reportMetric(b, us(r.ttfe.percentile(99)), n+"-"+key+"-ttfe-p99-us")
		}
		if kind != sequentialTable {
			fmt.Fprintf(w, "%s\t", usStr(r.cpuPerOp()))
			reportMetric(b, us(r.cpuPerOp()), n+"-"+key+"-cpu-us/op")
		}
		fmt.Fprintf(w, "%s\t\n", errCol(r))
	}
	_ = w.Flush()
}

// diff is a − b for the p50 and p99 of one distribution, pooled over all
// rounds and as the median of the per-round differences.
type diff struct {
	p50, p99           time.Duration // pooled
	roundP50, roundP99 time.Duration // median of rounds
}

func latDiff(a, b *runStats) diff {
	return diff{a.lat.percentile(50) - b.lat.percentile(50), a.lat.percentile(99) - b.lat.percentile(99),
		pairedDiff(a, b, func(r roundSummary) time.Duration { return r.p50 }),
		pairedDiff(a, b, func(r roundSummary) time.Duration { return r.p99 })}
}

func ttfeDiff(a, b *runStats) diff {
	return diff{a.ttfe.percentile(50) - b.ttfe.percentile(50), a.ttfe.percentile(99) - b.ttfe.percentile(99),
		pairedDiff(a, b, func(r roundSummary) time.Duration { return r.ttfe50 }),
		pairedDiff(a, b, func(r roundSummary) time.Duration { return r.ttfe99 })}
}

// div divides every difference by n (per event).
func (d diff) div(n int) diff {
	k := time.Duration(n)
	return diff{d.p50 / k, d.p99 / k, d.roundP50 / k, d.roundP99 / k}
}

// String renders "p50 +0.123ms (median of rounds +0.120ms), p99 +0.456ms (…)".
func (d diff) String() string {
	return fmt.Sprintf("p50 %s (median of rounds %s), p99 %s (median of rounds %s)",
		signedMS(d.p50), signedMS(d.roundP50), signedMS(d.p99), signedMS(d.roundP99))
}

// micros renders the difference in microseconds, for per-event numbers.
func (d diff) micros() string {
	return fmt.Sprintf("p50 %+.1fµs (median of rounds %+.1fµs), p99 %+.1fµs (median of rounds %+.1fµs)",
		us(d.p50), us(d.roundP50), us(d.p99), us(d.roundP99))
}

// report reports the pooled p50 and p99 as "<prefix>-p50-us" and "-p99-us".
func (d diff) report(b *testing.B, prefix string) {
	reportMetric(b, us(d.p50), prefix+"-p50-us")
	reportMetric(b, us(d.p99), prefix+"-p99-us")
}

// failOnErrors fails b when a run had no successes or more than 1% errors:
// the numbers would be suspect.
func failOnErrors(b *testing.B, what string, r *runStats) {
	if r.ok == 0 || r.errRate() > 0.01 {
		b.Errorf("%s: %d ok, %d errors (first: %v)", what, r.ok, r.errs, r.firstErr)
	}
}

// rotated is ps rotated left by k, so that no path always runs first.
func rotated[T any](ps []T, k int) []T {
	out := make([]T, len(ps))
	for i := range ps {
		out[i] = ps[(i+k)%len(ps)]
	}
	return out
}

// scrapeMetric sums the values of the Prometheus samples of family on
// base's /metrics whose labels contain every one of labels (`k="v"`).
func scrapeMetric(ctx context.Context, base, family string, labels ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+"{") && !strings.HasPrefix(line, family+" ") {
			continue
		}
		if !allContained(line, labels) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

func allContained(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
