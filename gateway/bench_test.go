package gateway_test

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// BenchmarkContinuity measures what continuity adds to a streamed
// Responses request through the gateway: off, on for a first turn (anchor
// recorded and made durable before response.completed), and on for a
// follow-up (owner resolved from memory, then recorded).
func BenchmarkContinuity(b *testing.B) {
	for _, mode := range []string{"off", "on-first-turn", "on-follow-up"} {
		b.Run(mode, func(b *testing.B) {
			opts := gateway.Options{}
			if mode != "off" {
				st := openStore(b, b.TempDir())
				opts.Store = st
			}
			h := newHarness(b, harnessConfig{opts: opts, upstreams: []upstreamtest.Options{{Name: "A", DisableRecording: true}}})
			prev := ""
			if mode == "on-follow-up" {
				_, prev = h.turn("", nil)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			body := `{"model":"gpt-fake-1","input":"hi","stream":true}`
			if prev != "" {
				body = `{"model":"gpt-fake-1","input":"hi","stream":true,"previous_response_id":"` + prev + `"}`
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				resp, err := client.Post(h.url+"/v1/responses", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
