package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// storeBody is a streaming request body without "store":false: Sluice
// records an anchor (owner upstream, scope) for each response of such a
// request and makes it durable before the client sees response.completed.
// The other cases' bodies carry "store":false, as Codex's do over HTTP, for
// which Sluice writes none.
func storeBody(body []byte) []byte {
	return bytes.Replace(body, []byte(`"store":false`), []byte(`"store":true`), 1)
}

// followUpBody is storeBody naming prev as its previous_response_id: Sluice
// resolves its owner (pinning the request to it) and records a new anchor.
func followUpBody(body []byte, prev string) []byte {
	return bytes.Replace(storeBody(body), []byte(`"store":true`), fmt.Appendf(nil, `"previous_response_id":%q,"store":true`, prev), 1)
}

// continuityPrevious is the number of earlier responses each path's
// follow-ups cycle through.
const continuityPrevious = 64

// responseID sends one streaming request with body through t and returns
// the response id of its response.completed event.
func responseID(ctx context.Context, t *target, body []byte) (string, error) {
	resp, err := t.postWith(ctx, t.client, body, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	id := ""
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), dataPrefix)
		if ok && gjson.GetBytes(data, "type").Str == "response.completed" {
			id = gjson.GetBytes(data, "response.id").Str
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("no response.completed with a response id")
	}
	return id, nil
}

// continuityPath is one path of the continuity case.
type continuityPath struct {
	*target
	follow [][]byte // follow-up bodies, each naming an earlier response of this path
	next   atomic.Uint64
}

// firstOp streams a store:true first turn.
func (p *continuityPath) firstOp(body []byte) op {
	return func(ctx context.Context) (time.Duration, error) { return p.doStreamWith(ctx, body, nil) }
}

// followOp streams a follow-up, cycling through the earlier responses.
func (p *continuityPath) followOp() op {
	return func(ctx context.Context) (time.Duration, error) {
		body := p.follow[p.next.Add(1)%uint64(len(p.follow))]
		return p.doStreamWith(ctx, body, nil)
	}
}

// BenchmarkContinuity measures what continuity costs a store:true stream
// (README, "What it promises"): the same 10-event stream at a fixed rate through Sluice with
// continuity on (the default: anchors in Pebble) and with
// `continuity: {disabled: true}`, next to direct (the fake upstream), for a
// first turn and for a follow-up naming an earlier response of the same
// path in previous_response_id (owner resolved and the request pinned; a
// new anchor recorded). Interleaved in rounds; latencies and TTFE from the
// scheduled start.
func BenchmarkContinuity(b *testing.B) {
	cfg, _ := startCase(b, caseContinuity)
	out := os.Stdout
	ctx := context.Background()
	b.ReportMetric(0, "ns/op") // one iteration of minutes: meaningless
	procs := &procSet{}
	b.Cleanup(procs.stopAll)
	up := startFake(b, procs, "fake upstream", roleUpstream)
	upstreams := "upstreams:\n" + upstreamYAML("fake", up.url, "http")
	on := startSluice(b, procs, "sluice-on", upstreams)
	off := startSluice(b, procs, "sluice-off", "continuity: {disabled: true}\n"+upstreams)
	paths := []*continuityPath{
		{target: newTarget("direct", up.url, nil, up)},
		{target: newTarget("sluice-off", off.url, off, off)},
		{target: newTarget("sluice-on", on.url, on, on)},
	}
	first := storeBody(streamBody)
	for _, p := range paths {
		for range continuityPrevious {
			id, err := responseID(ctx, p.target, first)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			p.follow = append(p.follow, followUpBody(streamBody, id))
		}
		if _, err := p.followOp()(ctx); err != nil {
			b.Fatalf("%s: follow-up: %v", p.name, err)
		}
	}
	fmt.Fprintf(out, "\nSluice continuity benchmark (%s mode): %d rounds × %v per path and variant at a fixed %d streams/s, store:true bodies of %d bytes; fake upstream pid %d, sluice-on pid %d, sluice-off pid %d (continuity: {disabled: true})\n",
		modeName(cfg), cfg.rounds, cfg.dur, cfg.streamRate, len(first), up.pid(), on.pid(), off.pid())
	for _, p := range paths {
		closedLoop(ctx, cfg.workers, cfg.warmup, p.firstOp(first))
		closedLoop(ctx, cfg.workers, cfg.warmup, p.followOp())
	}
	resolutions := func(labels ...string) float64 {
		v, err := scrapeMetric(ctx, on.url, "continuity_owner_resolution_total", labels...)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	resolved0, hits0 := resolutions(), resolutions(`outcome="hit"`)
	firstRes, followRes := map[string]*runStats{}, map[string]*runStats{}
	for _, p := range paths {
		firstRes[p.name], followRes[p.name] = &runStats{}, &runStats{}
	}
	for round := range cfg.rounds {
		order := rotated(paths, round)
		line := fmt.Sprintf("round %d/%d:", round+1, cfg.rounds)
		for _, p := range order {
			r := p.measure(func() *runStats { return openLoop(ctx, cfg.streamRate, cfg.dur, p.firstOp(first)) })
			firstRes[p.name].add(r)
			line += fmt.Sprintf(" %s first p50 %s;", p.name, ms(r.lat.percentile(50)))
		}
		for _, p := range order {
			r := p.measure(func() *runStats { return openLoop(ctx, cfg.streamRate, cfg.dur, p.followOp()) })
			followRes[p.name].add(r)
			line += fmt.Sprintf(" %s follow-up p50 %s;", p.name, ms(r.lat.percentile(50)))
		}
		fmt.Fprintln(out, strings.TrimSuffix(line, ";"))
		checkAlive(b, fmt.Sprintf("round %d", round+1), up, on, off)
	}
	resolved, hits := resolutions()-resolved0, resolutions(`outcome="hit"`)-hits0

	names := []string{"direct", "sluice-off", "sluice-on"}
	variant := func(key, title string, res map[string]*runStats) (lat, ttfe diff) {
		fmt.Fprintf(out, "\n%s at a fixed %d streams/s (from the scheduled start): %d rounds × %v per path\n", title, cfg.streamRate, cfg.rounds, cfg.dur)
		var rows []pathRow
		for _, n := range names {
			rows = append(rows, pathRow{n, res[n]})
		}
		statsTable(b, out, key, "", "TTFE", fixedRateTable, rows)
		on, off, d := res["sluice-on"], res["sluice-off"], res["direct"]
		lat, ttfe = latDiff(on, off), ttfeDiff(on, off)
		fmt.Fprintf(out, "added by continuity (on − off): stream latency %s\n", lat)
		fmt.Fprintf(out, "                                TTFE %s\n", ttfe)
		fmt.Fprintf(out, "sluice-off − direct: stream latency %s\n", latDiff(off, d))
		fmt.Fprintf(out, "CPU per stream: sluice-on ÷ sluice-off %.2f\n", ratio(float64(on.cpuPerOp()), float64(off.cpuPerOp())))
		lat.report(b, "continuity-"+key+"-added-latency")
		ttfe.report(b, "continuity-"+key+"-added-ttfe")
		for _, n := range names {
			failOnErrors(b, n+" "+title, res[n])
		}
		return lat, ttfe
	}
	l1, t1 := variant("first", "(k1) store:true first turns", firstRes)
	l2, t2 := variant("follow-up", "(k2) store:true follow-ups with previous_response_id of an earlier response", followRes)
	fr := followRes["sluice-on"]
	fmt.Fprintf(out, "sluice-on resolved %.0f previous_response_id owners during the rounds, %.0f found (%d follow-ups sent)\n", resolved, hits, fr.ok+fr.errs)
	if int(hits) < fr.ok {
		b.Errorf("sluice-on found the owner of %.0f follow-ups, fewer than the %d that succeeded", hits, fr.ok)
	}

	fmt.Fprintf(out, "\nsummary (continuity on − off, pooled over all rounds)\n")
	w := newTable(out)
	fmt.Fprintln(w, "variant\tlatency p50\tlatency p99\tTTFE p50\tTTFE p99\t")
	fmt.Fprintf(w, "first turn\t%s\t%s\t%s\t%s\t\n", signedMS(l1.p50), signedMS(l1.p99), signedMS(t1.p50), signedMS(t1.p99))
	fmt.Fprintf(w, "follow-up\t%s\t%s\t%s\t%s\t\n", signedMS(l2.p50), signedMS(l2.p99), signedMS(t2.p50), signedMS(t2.p99))
	_ = w.Flush()
	fmt.Fprintln(out)
	printStderrTails(out, up, on, off)
}
