package streaminput_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// benchTemplate is a realistic template: instructions, a short history and
// tools, about 1 KiB.
var benchTemplate = `{"model":"gpt-fake-1","stream":true,"store":false,"instructions":"You are a careful assistant. Answer briefly.",` +
	`"tools":[{"type":"function","name":"lookup","description":"Look a term up","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}],` +
	`"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"` + strings.Repeat("Stay on topic. ", 20) + `"}]},` +
	`{"type":"message","role":"user","content":[{"type":"input_text","text":"Transcript follows: "}]}]}`

func percentile(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

// BenchmarkChunkAck measures the latency of an acknowledged (synced to
// Pebble) chunk over loopback HTTP, one client at a time and with 8
// sessions appending concurrently (their fsyncs are grouped).
func BenchmarkChunkAck(b *testing.B) {
	payload := strings.Repeat("word ", 50) // 250 bytes
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", par), func(b *testing.B) {
			e := newEnv(b, envConfig{opts: streaminput.Options{MaxSessionsPerKey: 64}})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var mu sync.Mutex
			var lat []time.Duration
			per := (b.N + par - 1) / par
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := 0; w < par; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := e.create(sessionBody(streaminput.EndpointResponses, "", benchTemplate))
					mine := make([]time.Duration, 0, per)
					for i := 0; i < per; i++ {
						if i > 0 && i%1000 == 0 { // stay under the byte cap
							id = e.create(sessionBody(streaminput.EndpointResponses, "", benchTemplate))
						}
						body := fmt.Sprintf(`{"sequence_id":%d,"payload":%q}`, i%1000, payload)
						req, _ := http.NewRequest(http.MethodPost, e.url+streaminput.PathPrefix+"/"+id+"/chunks", strings.NewReader(body))
						req.Header.Set("Authorization", clientKey)
						start := time.Now()
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mine = append(mine, time.Since(start))
						if resp.StatusCode != http.StatusAccepted {
							b.Errorf("status %d", resp.StatusCode)
							return
						}
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			if len(lat) > 0 {
				b.ReportMetric(float64(percentile(lat, 0.50).Microseconds()), "p50-µs")
				b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
			}
		})
	}
}

// BenchmarkSessionMemory measures the heap held per open session (a 1 KiB
// template, typical client headers, 4 acknowledged chunks of 250 bytes whose
// payloads live in the store, not in memory).
func BenchmarkSessionMemory(b *testing.B) {
	const sessions = 2000
	for i := 0; i < b.N; i++ {
		e := newEnv(b, envConfig{opts: streaminput.Options{MaxSessionsPerKey: sessions + 100}})
		create := sessionBody(streaminput.EndpointResponses, "", benchTemplate)
		chunk := func(id string, seq int) {
			e.mustChunk(id, fmt.Sprintf(`{"sequence_id":%d,"payload":%q}`, seq, strings.Repeat("x", 250)))
		}
		// Warm up the connection pool, Pebble and the code paths first.
		for j := 0; j < 50; j++ {
			id := e.create(create)
			chunk(id, 0)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for j := 0; j < sessions; j++ {
			id := e.create(create)
			for seq := 0; seq < 4; seq++ {
				chunk(id, seq)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(after.HeapAlloc-before.HeapAlloc) / sessions
		b.ReportMetric(per, "heap-B/session")
		b.ReportMetric(float64(1<<30)/per, "sessions/GiB")
		e.stop()
	}
}

// BenchmarkTimeToFirstToken compares on_first_chunk with on_end_only when
// the upstream takes 300 ms to its first byte and the client sends 10
// chunks 50 ms apart: it reports the time from the end of the input (the
// last chunk's acknowledgement) to the first output_text.delta the result
// reader sees. Negative: the first token was there before the input ended.
func BenchmarkTimeToFirstToken(b *testing.B) {
	const (
		chunks  = 10
		gap     = 50 * time.Millisecond
		latency = 300 * time.Millisecond
	)
	for _, policy := range []string{"on_end_only", "on_first_chunk"} {
		b.Run(policy, func(b *testing.B) {
			e := newEnv(b, envConfig{})
			e.up.SetDefault(upstreamtest.Script{Latency: latency})
			var afterEnd, fromFirst []time.Duration
			for i := 0; i < b.N; i++ {
				id := e.create(sessionBody(streaminput.EndpointResponses, policy, benchTemplate))
				firstToken := make(chan time.Time, 1)
				go func() {
					req, _ := http.NewRequest(http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result", nil)
					req.Header.Set("Authorization", clientKey)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						b.Error(err)
						firstToken <- time.Time{}
						return
					}
					defer resp.Body.Close()
					r := sse.NewReader(resp.Body, 1<<20)
					sent := false
					for {
						ev, err := r.Next()
						if err != nil {
							if !sent {
								firstToken <- time.Time{}
							}
							return
						}
						if !sent && bytes.Contains(ev.Data, []byte(`"response.output_text.delta"`)) {
							firstToken <- time.Now()
							sent = true
						}
					}
				}()
				var first, end time.Time
				for c := 0; c < chunks; c++ {
					if c > 0 {
						time.Sleep(gap)
					}
					e.mustChunk(id, fmt.Sprintf(`{"sequence_id":%d,"payload":"piece %d of the transcript. ","end_of_input":%t}`, c, c, c == chunks-1))
					if c == 0 {
						first = time.Now()
					}
				}
				end = time.Now()
				tok := <-firstToken
				if tok.IsZero() {
					b.Fatal("no first token")
				}
				afterEnd = append(afterEnd, tok.Sub(end))
				fromFirst = append(fromFirst, tok.Sub(first))
			}
			b.ReportMetric(float64(percentile(afterEnd, 0.5).Milliseconds()), "ttft-after-input-end-ms")
			b.ReportMetric(float64(percentile(fromFirst, 0.5).Milliseconds()), "ttft-after-first-chunk-ms")
		})
	}
}
