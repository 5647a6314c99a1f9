package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// benchDeltas is a typical stream's length in text deltas.
const benchDeltas = 64

// resumeBenchServer is a Server with no reachable upstream whose resume
// options are ro (Window -1: no logs).
func resumeBenchServer(t testing.TB, ro ResumeOptions) *Server {
	t.Helper()
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: "http://127.0.0.1:1/v1"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Pool: pool, Resume: ro})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// benchStream is the upstream events of a typical stream answered as id.
func benchStream(id string) [][]byte {
	return upstreamtest.ResponsesEvents(id, "m", strings.Repeat("word ", benchDeltas), benchDeltas)
}

// BenchmarkStreamLogSend: the client stream's cost per text delta with the
// resume log on (the event copied into the log) and off. The stream is
// restarted every 1024 deltas (outside the timing), so the log stays the
// size of a long answer, well under streams.resume_max_bytes.
func BenchmarkStreamLogSend(b *testing.B) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"log-off", -1}, {"log-on", 0}} {
		b.Run(c.name, func(b *testing.B) {
			s := resumeBenchServer(b, ResumeOptions{Window: c.window})
			start := benchStream("resp_1")[:4] // created, in_progress, item and part added
			data := []byte(`{"type":"response.output_text.delta","sequence_number":1000,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" the","logprobs":[]}`)
			f, _ := scanEvent(data)
			var cs *clientStream
			open := func() {
				if cs != nil {
					cs.close()
				}
				cs = s.newClientStream(context.Background(), discard{}, hookReq(), time.Now())
				feed(b, cs, start)
			}
			open()
			if (cs.rlog != nil) != (c.window >= 0) {
				b.Fatalf("log on: %v, want %v", cs.rlog != nil, c.window >= 0)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i > 0 && i%1024 == 0 {
					b.StopTimer()
					open()
					b.StartTimer()
				}
				_ = cs.sendFrom("A", "response.output_text.delta", data, &f)
			}
			b.StopTimer()
			if cs.rlog != nil && cs.rlog.next() != cs.seq {
				b.Fatalf("the log holds %d events, the client was sent %d", cs.rlog.next(), cs.seq)
			}
			cs.close()
		})
	}
}

// BenchmarkStreamLogMemory: the heap a finished 64-delta stream's log
// keeps (its events, the final Response and its bookkeeping), per log,
// with 1024 logs held at a time. ns/op is feeding and logging one stream.
func BenchmarkStreamLogMemory(b *testing.B) {
	const batch = 1024
	var s *Server
	var heap, logged uint64
	var ms runtime.MemStats
	measure := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	streams := make([][][]byte, batch) // rendered before the timing: not counted
	for i := range streams {
		streams[i] = benchStream("resp_bench_" + strconv.Itoa(i))
	}
	var before uint64
	n := 0
	end := func() {
		after := measure()
		if after > before {
			heap += after - before
		}
		logged += uint64(s.logs.bytes.Load())
		runtime.KeepAlive(s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%batch == 0 {
			b.StopTimer()
			if s != nil {
				end()
			}
			s = resumeBenchServer(b, ResumeOptions{MemoryBytes: 1 << 40})
			before = measure()
			b.StartTimer()
		}
		cs := s.newClientStream(context.Background(), discard{}, hookReq(), time.Now())
		feed(b, cs, streams[i%batch])
		cs.close()
		n++
	}
	b.StopTimer()
	end()
	runtime.KeepAlive(streams) // live on both sides of every measure
	if got := len(s.logs.logs); got != (n-1)%batch+1 {
		b.Fatalf("%d logs held, want %d", got, (n-1)%batch+1)
	}
	b.ReportMetric(float64(heap)/float64(n), "B/log")
	b.ReportMetric(float64(logged)/float64(n), "charged-B/log")
}

// BenchmarkResumeHTTP: time to resume a completed 64-delta response
// through loopback HTTP — GET /v1/responses/{id}?stream=true&starting_after=N
// read to its terminal event — from the start, the middle and near the end.
func BenchmarkResumeHTTP(b *testing.B) {
	s := resumeBenchServer(b, ResumeOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
	}()
	hdr := http.Header{"Authorization": {"Bearer sk-bench"}}
	req := hookReq()
	req.clientKeyHash = clientkey.Hash(hdr)
	cs := s.newClientStream(context.Background(), discard{}, req, time.Now())
	feed(b, cs, benchStream("resp_bench"))
	cs.close()
	total := cs.rlog.next()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	url := "http://" + ln.Addr().String() + "/v1/responses/resp_bench?stream=true&starting_after="
	for _, c := range []struct {
		name  string
		after int64
	}{{"from-start", -1}, {"from-middle", total / 2}, {"last-3", total - 4}} {
		b.Run(c.name, func(b *testing.B) {
			want := total - c.after - 1
			b.ReportAllocs()
			for b.Loop() {
				r, _ := http.NewRequest(http.MethodGet, url+strconv.FormatInt(c.after, 10), nil)
				r.Header = hdr.Clone()
				resp, err := client.Do(r)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("%d %v: %s", resp.StatusCode, err, body)
				}
				if got := int64(bytes.Count(body, []byte(`"sequence_number":`))); got != want ||
					!bytes.Contains(body, []byte(`"type":"response.completed"`)) {
					b.Fatalf("got %d events, want %d ending with response.completed: %s", got, want, body)
				}
			}
			b.ReportMetric(float64(want), "events/op")
		})
	}
}
