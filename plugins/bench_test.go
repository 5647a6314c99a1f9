package plugins

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

var benchConfig = map[string]json.RawMessage{
	"rewrite": json.RawMessage(`{"model_aliases":{"gpt-5-codex":"gpt-5.1-codex"},"strip_tool_types":["web_search"]}`),
}

// parallel2 runs f on two goroutines through the pool (b.RunParallel with
// SetParallelism so that GOMAXPROCS×p = 2 where possible) and reports the
// per-call latency percentiles.
func parallel2(b *testing.B, f func()) {
	p := max(1, 2/runtime.GOMAXPROCS(0))
	b.SetParallelism(p)
	var mu sync.Mutex
	var all []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		lat := make([]time.Duration, 0, 1024)
		for pb.Next() {
			t0 := time.Now()
			f()
			lat = append(lat, time.Since(t0))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	pct := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

func benchRuntime(b *testing.B, emb map[string][]byte) *Runtime {
	return newRuntime(b, Options{Embedded: emb, Config: benchConfig, CallTimeout: time.Second})
}

func BenchmarkRecover(b *testing.B) {
	r := benchRuntime(b, policies.Defaults())
	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "primary", HTTPStatus: 400, EventType: "error",
		Code: "invalid_request_error", Type: "invalid_request_error", Param: "previous_response_id",
		Message: "Previous response with id 'resp_abc' not found."}
	parallel2(b, func() {
		if out := r.Recover(context.Background(), in); out.Verdict != hostabi.RecoverRecover {
			b.Error(out)
		}
	})
}

func BenchmarkReplay(b *testing.B) {
	r := benchRuntime(b, policies.Defaults())
	in := hostabi.ReplayInput{Surface: "responses_stream", Upstream: "primary", Code: "usage_limit_reached", HTTPStatus: 429}
	parallel2(b, func() {
		if out := r.Replay(context.Background(), in); out.Verdict != hostabi.ReplayOtherUpstream || out.PenaltyMillis != 30000 {
			b.Error(out)
		}
	})
}

// BenchmarkRecoverWAT is the floor: a WAT guest answering a bare verdict.
func BenchmarkRecoverWAT(b *testing.B) {
	r := benchRuntime(b, map[string][]byte{"v1.wasm": fixture(b, "recover_v1")})
	in := hostabi.RecoverInput{Surface: "responses_stream", Code: "x"}
	parallel2(b, func() {
		if out := r.Recover(context.Background(), in); out.Verdict != hostabi.RecoverRecover {
			b.Error(out)
		}
	})
}

func benchRewrite(b *testing.B, size int) {
	r := benchRuntime(b, policies.Defaults())
	body := codexBody(size)
	in := hostabi.RewriteInput{Surface: hostabi.SurfaceResponsesStream, Endpoint: "/v1/responses", Body: body,
		Headers: map[string]string{"x-codex-turn-state": "ts", "session_id": "s"}}
	b.SetBytes(int64(len(body)))
	parallel2(b, func() {
		out := r.Rewrite(context.Background(), in)
		if out.Body == nil || len(out.Body) >= len(body) {
			b.Error("not rewritten")
		}
	})
}

// BenchmarkRewrite1KiB / 1MiB: the default rewrite policy (Go guest) renames
// the model and drops the web_search tool of a Codex-shaped request.
func BenchmarkRewrite1KiB(b *testing.B) { benchRewrite(b, 1<<10) }
func BenchmarkRewrite1MiB(b *testing.B) { benchRewrite(b, 1<<20) }

// BenchmarkRewriteNative1MiB is the native part alone (hostabi.Document): the
// same two edits without Wasm.
func BenchmarkRewriteNative1MiB(b *testing.B) {
	body := codexBody(1 << 20)
	b.SetBytes(int64(len(body)))
	parallel2(b, func() {
		d := hostabi.NewDocument(body)
		_, _ = d.Get("model")
		_, _ = d.Get("stream")
		_ = d.Set("model", []byte(`"gpt-5.1-codex"`))
		_ = d.Delete(`tools.#(type=="web_search")`)
	})
}

// BenchmarkSwap measures file change → new version live with a warm cache:
// the policy file is replaced by one of three variants of the rewrite policy
// (distinct bytes, all compiled once before so the on-disk cache is warm),
// and the clock stops when Status shows the new sha256.
func BenchmarkSwap(b *testing.B) {
	base := policies.Defaults()["rewrite.wasm"]
	variants := make([][]byte, 3)
	shas := make([]string, 3)
	for i := range variants {
		variants[i] = withCustomSection(base, "sluice-bench", strconv.Itoa(i))
		shas[i] = newArtifact("", variants[i]).sha
	}
	// Warm the on-disk cache for every variant.
	emb := map[string][]byte{}
	for i, v := range variants {
		emb["v"+strconv.Itoa(i)+".wasm"] = v
	}
	warm := newRuntime(b, Options{Embedded: emb, Prewarm: 1})
	_ = warm.Close(context.Background())

	dir := b.TempDir()
	write(b, dir, "p.wasm", variants[0])
	r := newRuntime(b, Options{PolicyDir: dir, Prewarm: 1})
	var total time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		k := i % 3
		t0 := time.Now()
		writeAtomic(b, dir, "p.wasm", variants[k])
		for {
			if st, _ := statusOf(r, "p"); st.SHA256 == shas[k] {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/swap")
	b.ReportMetric(float64(r.opts.Debounce.Milliseconds()), "debounce-ms")
}

// withCustomSection appends a custom section (changing the bytes and the
// hash, not the code).
func withCustomSection(mod []byte, name, payload string) []byte {
	body := append(uleb(uint64(len(name))), name...)
	body = append(body, payload...)
	out := append([]byte(nil), mod...)
	out = append(out, 0)
	out = append(out, uleb(uint64(len(body)))...)
	return append(out, body...)
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		out = append(out, c)
		if v == 0 {
			return out
		}
	}
}

// BenchmarkColdStart measures New → Ready with the three embedded Go
// policies, without a compilation cache (a fresh directory) and with a warm
// one.
func BenchmarkColdStart(b *testing.B) {
	emb := policies.Defaults()
	b.Run("no-cache", func(b *testing.B) {
		var total time.Duration
		defer func() { b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/start") }()
		for i := 0; i < b.N; i++ {
			dir := filepath.Join(b.TempDir(), "cache")
			t0 := time.Now()
			r, err := New(context.Background(), Options{Embedded: emb, CacheDir: dir})
			if err != nil || !r.Ready() {
				b.Fatal(err)
			}
			total += time.Since(t0)
			b.StopTimer()
			_ = r.Close(context.Background())
			_ = os.RemoveAll(dir)
			b.StartTimer()
		}
	})
	b.Run("warm-cache", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		r, err := New(context.Background(), Options{Embedded: emb, CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		_ = r.Close(context.Background())
		b.ResetTimer()
		var total time.Duration
		defer func() { b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/start") }()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			r, err := New(context.Background(), Options{Embedded: emb, CacheDir: dir})
			if err != nil || !r.Ready() {
				b.Fatal(err)
			}
			total += time.Since(t0)
			b.StopTimer()
			_ = r.Close(context.Background())
			b.StartTimer()
		}
	})
}
