package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// BenchmarkScaleOutFollowUps measures streamed follow-ups (each request
// names the previous response of its chain): requests per second with
// `chains` clients at once, and the time to the first event a client reads
// (p50, p99), with one chain (latency) and eight at once (throughput). Cases: one replica on Pebble (the single-machine baseline),
// one replica on Redis, and two replicas on one Redis with every chain
// alternating between them (a round-robin balancer). Everything (gateway,
// fake upstream, Redis) shares this machine's cores; Redis runs without
// persistence. Skipped without redis-server.
//
//	go test -run '^$' -bench ScaleOutFollowUps -benchtime 2000x ./gateway/
func BenchmarkScaleOutFollowUps(b *testing.B) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("needs redis-server")
	}
	for _, tc := range []struct {
		name     string
		replicas int
		redis    bool
		chains   int
	}{
		{"pebble-1-replica/chains=1", 1, false, 1},
		{"redis-1-replica/chains=1", 1, true, 1},
		{"redis-2-replicas-alternating/chains=1", 2, true, 1},
		{"pebble-1-replica/chains=8", 1, false, 8},
		{"redis-1-replica/chains=8", 1, true, 8},
		{"redis-2-replicas-alternating/chains=8", 2, true, 8},
	} {
		chains := tc.chains
		b.Run(tc.name, func(b *testing.B) {
			up := upstreamtest.NewServer(upstreamtest.Options{Name: "A", DisableRecording: true})
			b.Cleanup(up.Close)
			var srv *redistest.Server
			if tc.redis {
				srv = redistest.Start(b)
			}
			urls := make([]string, tc.replicas)
			for i := range urls {
				var st store.Store
				if tc.redis {
					rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = rs.Close() })
					st = rs
				} else {
					ps, err := store.Open(context.Background(), store.Options{Dir: b.TempDir()})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = ps.Close() })
					st = ps
				}
				urls[i] = newHarness(b, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: gateway.Options{Store: st}}).url
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * chains}}
			var (
				mu    sync.Mutex
				ttfes []time.Duration
				wg    sync.WaitGroup
				next  = make(chan int, b.N)
				fails = make(chan error, chains)
			)
			for i := range b.N {
				next <- i
			}
			close(next)
			b.ResetTimer()
			start := time.Now()
			for c := range chains {
				wg.Add(1)
				go func() {
					defer wg.Done()
					prev, turn := "", 0
					local := make([]time.Duration, 0, b.N/chains+1)
					defer func() { mu.Lock(); ttfes = append(ttfes, local...); mu.Unlock() }()
					for range next {
						base := urls[(c+turn)%len(urls)]
						turn++
						id, ttfe, err := streamTurn(client, base, prev, fmt.Sprintf("chain-%d", c))
						if err != nil {
							fails <- err
							return
						}
						if prev != "" {
							local = append(local, ttfe)
						}
						prev = id
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(fails)
			for err := range fails {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			if len(ttfes) == 0 {
				return
			}
			slices.Sort(ttfes)
			q := func(p float64) float64 { return float64(ttfes[int(p*float64(len(ttfes)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.5), "ttfe-p50-ms")
			b.ReportMetric(q(0.99), "ttfe-p99-ms")
		})
	}
}

// streamTurn sends one streamed turn and returns the completed response id
// and the time to its first event.
func streamTurn(client *http.Client, base, prev, session string) (string, time.Duration, error) {
	body := `{"model":"gpt-fake-1","input":"hi","stream":true`
	if prev != "" {
		body += `,"previous_response_id":"` + prev + `"`
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(body+"}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	req.Header.Set("Session_id", session)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var ttfe time.Duration
	id := ""
	for {
		line, err := r.ReadString('\n')
		if ttfe == 0 && strings.HasPrefix(line, "data:") {
			ttfe = time.Since(start)
		}
		if strings.Contains(line, `"type":"response.completed"`) {
			if i := strings.Index(line, `"id":"`); i >= 0 {
				rest := line[i+6:]
				id = rest[:strings.IndexByte(rest, '"')]
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", 0, err
		}
	}
	if id == "" {
		return "", 0, fmt.Errorf("turn through %s (previous %q) did not complete", base, prev)
	}
	return id, ttfe, nil
}
