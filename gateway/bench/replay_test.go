package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// quotaHeader makes the quota fake upstream (roleQuota) answer the request
// with quotaFailure. Sluice forwards it like any other client header.
const quotaHeader = "X-Bench-Quota"

// replayGap is the pause before each request of the replay case: longer than
// the 1 ms cooldown that quotaFailure's hint puts on fake upstream A.
const replayGap = 3 * time.Millisecond

// quotaFailure is upstreamtest.QuotaEvent(ShapeFailed) — usage_limit_reached
// as response.failed before response.created, a failure Sluice replays
// (README, "What it promises") — with a "try again in 1ms" hint in its message. Sluice
// takes the hint as the upstream's cooldown, and the default replay policy
// as its penalty, so the failed upstream is selectable again 1 ms later
// instead of after the quota cooldown (60 s) that would hide it.
func quotaFailure() upstreamtest.Script {
	return upstreamtest.Failure(upstreamtest.ShapeFailed, http.StatusTooManyRequests, upstreamtest.ErrorBody(
		"The usage limit has been reached for this account. Please try again in 1ms.", "invalid_request_error", "usage_limit_reached", ""))
}

// replayKind is one kind of request of the replay case.
type replayKind struct {
	name string
	t    *target
	hdr  http.Header
	res  runStats
}

// BenchmarkReplay measures the time to first event that a replay adds.
//
// Sluice has two upstreams, fake A (roleQuota) and fake B. A request
// carrying quotaHeader gets usage_limit_reached as response.failed before
// response.created from A, and Sluice replays it on B; a request without it
// is served by A. To make A the first pick of every request, the benchmark
// first holds one stream open on B (Sluice picks the upstream with the
// fewest requests in flight; the held stream carries quotaHeader too, so it
// ends on B whichever upstream is tried first). A's failure carries a
// "try again in 1ms" hint, which Sluice applies as A's cooldown; requests
// are sent one at a time, each after a pause of replayGap, so every one
// finds A selectable again. Sluice's metrics then confirm that every replay
// request was replayed and every normal one was served by A.
//
// Three kinds of request, interleaved: direct (client → fake A, no
// gateway), sluice normal (client → Sluice → A) and sluice replay (client →
// Sluice → A fails → Sluice → B). Replay − normal is what a replay adds.
func BenchmarkReplay(b *testing.B) {
	cfg, _ := startCase(b, caseReplay)
	out := os.Stdout
	ctx := context.Background()
	b.ReportMetric(0, "ns/op") // one iteration of minutes: meaningless
	procs := &procSet{}
	b.Cleanup(procs.stopAll)
	upA := startFake(b, procs, "fake upstream A (quota)", roleQuota)
	upB := startFake(b, procs, "fake upstream B", roleUpstream)
	sl := startSluice(b, procs, "sluice", "timeouts: {idle: 1h}\nupstreams:\n"+
		upstreamYAML("A", upA.url, "http")+upstreamYAML("B", upB.url, "http"))
	st := newTarget("sluice", sl.url, sl, sl)

	// Hold one stream on B.
	held, err := openHeld(ctx, st)
	if err != nil {
		b.Fatalf("holding a stream on B: %v", err)
	}
	defer held.Body.Close()
	inflight, err := upstreamsInflight(ctx, sl.url)
	if err != nil {
		b.Fatal(err)
	}
	if inflight["A"] != 0 || inflight["B"] != 1 {
		b.Fatalf("want the held stream on B alone, in flight: %v", inflight)
	}

	kinds := []*replayKind{
		{name: "direct", t: newTarget("direct", upA.url, nil, upA)},
		{name: "sluice-normal", t: st},
		{name: "sluice-replay", t: st, hdr: http.Header{quotaHeader: {"1"}}},
	}
	// run sends n requests of each kind, one at a time after replayGap,
	// rotating the kinds' order, into fresh stats per kind.
	run := func(n int) map[*replayKind]*runStats {
		res := map[*replayKind]*runStats{}
		for _, k := range kinds {
			res[k] = &runStats{}
		}
		start := time.Now()
		for i := range n {
			for _, k := range rotated(kinds, i) {
				time.Sleep(replayGap)
				r := res[k]
				t0 := time.Now()
				ttfe, err := k.t.doStreamWith(ctx, streamBody, k.hdr)
				if err != nil {
					r.fail(err)
					continue
				}
				r.ok++
				r.lat.add(time.Since(t0))
				r.ttfe.add(ttfe)
			}
		}
		for _, r := range res {
			r.elapsed = time.Since(start)
			r.rounds = []roundSummary{r.summary()}
		}
		return res
	}
	warm := run(20)
	for _, k := range kinds {
		if r := warm[k]; r.errs > 0 {
			b.Fatalf("%s: %d of %d failed in the warm-up (first: %v)", k.name, r.errs, r.ok+r.errs, r.firstErr)
		}
	}

	count := func(upstream, outcome string) float64 {
		v, err := scrapeMetric(ctx, sl.url, "sluice_upstream_attempts_total", `upstream="`+upstream+`"`, `outcome="`+outcome+`"`)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	replayed0, okA0, okB0 := count("A", "replayed"), count("A", "ok"), count("B", "ok")
	fmt.Fprintf(out, "\nSluice replay benchmark (%s mode): %d rounds × %d requests per kind, one at a time, %v apart; fake upstreams A pid %d (fails requests carrying %s), B pid %d; sluice pid %d\n",
		modeName(cfg), cfg.rounds, cfg.replayN, replayGap, upA.pid(), quotaHeader, upB.pid(), sl.pid())
	for round := range cfg.rounds {
		res := run(cfg.replayN)
		line := fmt.Sprintf("round %d/%d:", round+1, cfg.rounds)
		for _, k := range kinds {
			k.res.add(res[k])
			line += fmt.Sprintf(" %s TTFE p50 %s;", k.name, ms(res[k].ttfe.percentile(50)))
		}
		fmt.Fprintln(out, line[:len(line)-1])
		checkAlive(b, fmt.Sprintf("round %d", round+1), upA, upB, sl)
	}
	replayed, okA, okB := count("A", "replayed")-replayed0, count("A", "ok")-okA0, count("B", "ok")-okB0
	norm, rep, dir := &kinds[1].res, &kinds[2].res, &kinds[0].res

	fmt.Fprintf(out, "\n(replay) %d-event streams: usage_limit_reached as response.failed before response.created on A, replayed on B, vs the same request served by A\n", streamEvents)
	var rows []pathRow
	for _, k := range kinds {
		rows = append(rows, pathRow{k.name, &k.res})
	}
	statsTable(b, out, "replay", "", "TTFE", sequentialTable, rows)
	fmt.Fprintf(out, "sluice's counts: %.0f replayed from A (%d replay requests), %.0f served by A (%d normal requests), %.0f served by B\n",
		replayed, rep.ok+rep.errs, okA, norm.ok+norm.errs, okB)
	addTTFE, addLat := ttfeDiff(rep, norm), latDiff(rep, norm)
	fmt.Fprintf(out, "added by a replay (replay − normal): TTFE %s\n", addTTFE)
	fmt.Fprintf(out, "                                     stream latency %s\n", addLat)
	fmt.Fprintf(out, "sluice-normal − direct: TTFE %s\n", ttfeDiff(norm, dir))
	addTTFE.report(b, "replay-added-ttfe")
	addLat.report(b, "replay-added-latency")
	ttfeDiff(norm, dir).report(b, "sluice-normal-added-ttfe")

	for _, k := range kinds {
		failOnErrors(b, k.name, &k.res)
	}
	if int(replayed) != rep.ok+rep.errs || int(okA) != norm.ok+norm.errs {
		b.Errorf("the requests did not take the intended paths: %.0f replayed for %d replay requests, %.0f served by A for %d normal requests",
			replayed, rep.ok+rep.errs, okA, norm.ok+norm.errs)
	}
	fmt.Fprintln(out)
	printStderrTails(out, upA, upB, sl)
}

// openHeld opens through t a stream that ends up held open on fake upstream
// B (it carries quotaHeader and hangHeader) and reads its first event.
func openHeld(ctx context.Context, t *target) (*http.Response, error) {
	resp, err := t.postWith(ctx, t.client, streamBody, http.Header{quotaHeader: {"1"}, hangHeader: {"1"}, "Accept": {"text/event-stream"}})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	timer := time.AfterFunc(30*time.Second, func() { _ = resp.Body.Close() })
	defer timer.Stop()
	br := bufio.NewReader(resp.Body)
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

// upstreamsInflight is the number of requests in flight per upstream, from
// Sluice's GET /admin/upstreams.
func upstreamsInflight(ctx context.Context, base string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/upstreams", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Upstreams []struct {
			Name     string
			Inflight int64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, fmt.Errorf("GET /admin/upstreams: %w", err)
	}
	out := map[string]int64{}
	for _, u := range v.Upstreams {
		out[u.Name] = u.Inflight
	}
	return out, nil
}
