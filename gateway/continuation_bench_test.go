package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// deltaTimes posts a streaming Responses request and returns when each
// output_text delta reached the client.
func deltaTimes(b *testing.B, client *http.Client, h *harness, body string) []time.Time {
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var at []time.Time
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return at
		}
		if err != nil {
			b.Fatal(err)
		}
		if gjson.GetBytes(ev.Data, "type").Str == "response.output_text.delta" {
			at = append(at, time.Now())
		}
	}
}

// BenchmarkRescue: the time from the failure of P after three deltas (a cut,
// or a stall past the route's 50ms stall) to the first continued delta the
// client reads, B continuing by prefill. rescue-µs is that time, less the
// stall bound for a stall; the cut is taken to happen when the client reads
// P's last delta (the fake upstream cuts right after writing it).
func BenchmarkRescue(b *testing.B) {
	const stall = 50 * time.Millisecond
	for _, tc := range []struct {
		name   string
		script upstreamtest.Script
		less   time.Duration
	}{
		{"cut", upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3), 0},
		{"stall", upstreamtest.Answer(fullAnswer, 9).StallAfterDeltas(3), stall},
	} {
		b.Run(tc.name, func(b *testing.B) {
			// P fails every time: keep its circuit closed.
			h := contHarnessStall(b, gateway.ContinuationAuto, stall, harnessConfig{pool: upstream.Options{CircuitFailures: 1 << 30}})
			client := &http.Client{}
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.ups["P"].Enqueue(tc.script)
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
				at := deltaTimes(b, client, h, `{"model":"m","input":"hi","stream":true}`)
				if len(at) != 6 {
					b.Fatalf("%d deltas", len(at))
				}
				total += at[3].Sub(at[2]) - tc.less
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "rescue-µs")
		})
	}
}

// BenchmarkContinuationOverhead: what arming the continuation costs per
// event on a healthy stream. Two gateways, one whose route continues
// (continuation: auto, stall 60s: the pump keeps its stall timer and hands
// failures back) and one with continuation: off, stream the same 2000-delta
// answer, interleaved request by request so the machine's load falls on
// both alike; ns/event is the client's time per event.
func BenchmarkContinuationOverhead(b *testing.B) {
	long := strings.TrimSpace(strings.Repeat("word ", 2000))
	armed := contHarnessStall(b, gateway.ContinuationAuto, 60*time.Second, harnessConfig{})
	off := contHarnessStall(b, gateway.ContinuationOff, 0, harnessConfig{})
	for _, h := range []*harness{armed, off} {
		h.ups["P"].SetDefault(upstreamtest.Answer(long, 2000))
	}
	client := &http.Client{}
	run := func(h *harness) time.Duration {
		start := time.Now()
		if n := len(deltaTimes(b, client, h, `{"model":"m","input":"hi","stream":true}`)); n != 2000 {
			b.Fatalf("%d deltas", n)
		}
		return time.Since(start)
	}
	var tArmed, tOff time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tArmed += run(armed)
			tOff += run(off)
		} else {
			tOff += run(off)
			tArmed += run(armed)
		}
	}
	events := float64(b.N) * 2008 // 2000 deltas and 8 other events
	b.ReportMetric(float64(tArmed.Nanoseconds())/events, "armed-ns/event")
	b.ReportMetric(float64(tOff.Nanoseconds())/events, "off-ns/event")
	b.ReportMetric(float64(tArmed)/float64(tOff), "armed/off")
}
