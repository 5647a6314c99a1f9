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
	"github.com/sluice-gw/sluice/internal/jsonx"
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
	in := hostabi.ReplayInput{Surface: "responses_stream", Upstream: "primary", Code: "usage_limit_reached", HTTPStatus: 429, RetryAfterMillis: 2500}
	parallel2(b, func() {
		if out := r.Replay(context.Background(), in); out.Verdict != hostabi.ReplayOtherUpstream || out.PenaltyMillis != 2500 {
			b.Error(out)
		}
	})
}

// BenchmarkGuestCallCost is the per-call cost of the same hook and input
// through the runtime (one goroutine, a warm instance) for the three guest
// languages: Go (the embedded policies and gofixture, built with the Go
// SDK), AssemblyScript (the example and asfixture, built with
// sdk/assemblyscript) and hand-written WAT. stream_event is the per-event
// hook (a delta that is redacted). The call deadline is raised to a second
// so that a loaded machine's pauses do not count as faults. The README's
// "Policies" section has the numbers.
func BenchmarkGuestCallCost(b *testing.B) {
	emb := policies.Defaults()
	recIn := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "primary", HTTPStatus: 400, EventType: "error",
		Code: "upstream_context_lost", Type: "invalid_request_error", Message: "context lost"}
	repIn := hostabi.ReplayInput{Surface: "responses_stream", Upstream: "primary", Code: "server_is_overloaded", HTTPStatus: 503,
		Phase: hostabi.PhaseBeforeContent, FailureClass: hostabi.FailureOverloaded, TargetCount: 2, HasNextTarget: true,
		MaxWaitMillis: 5000, Continuation: "auto"}
	evIn := streamDelta("the secret plan")
	guests := []struct {
		name          string
		rec, rep, evt []byte
	}{
		{"go", emb["recover.wasm"], emb["replay.wasm"], fixture(b, "gofixture")},
		{"assemblyscript", asExample(b), asExample(b), fixture(b, "asfixture")},
		{"wat", fixture(b, "recover_v1"), fixture(b, "replay_v2"), fixture(b, "stream_redact")},
	}
	ctx := context.Background()
	for _, g := range guests {
		b.Run("recover/"+g.name, func(b *testing.B) {
			r := newRuntime(b, Options{Embedded: map[string][]byte{"p.wasm": g.rec}, PoolSize: 1, CallTimeout: time.Second})
			b.ReportAllocs()
			for b.Loop() {
				if _, tr := r.RecoverTrace(ctx, recIn); tr.Outcome != "decided" {
					b.Fatal(tr)
				}
			}
		})
		b.Run("replay/"+g.name, func(b *testing.B) {
			r := newRuntime(b, Options{Embedded: map[string][]byte{"p.wasm": g.rep}, PoolSize: 1, CallTimeout: time.Second})
			b.ReportAllocs()
			for b.Loop() {
				if out, tr := r.ReplayTrace(ctx, repIn); tr.Outcome != "decided" || out.Verdict != hostabi.ReplayOtherUpstream {
					b.Fatal(out, tr)
				}
			}
		})
		b.Run("stream_event/"+g.name, func(b *testing.B) {
			r := newRuntime(b, Options{Embedded: map[string][]byte{"p.wasm": g.evt}, PoolSize: 1, CallTimeout: time.Second})
			b.ReportAllocs()
			for b.Loop() {
				if out := r.StreamEvent(ctx, evIn); out.Verdict != hostabi.StreamReplace {
					b.Fatal(out)
				}
			}
		})
	}
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

// BenchmarkRewriteNative1MiB is the native part alone (jsonx.Document): the
// same two edits without Wasm.
func BenchmarkRewriteNative1MiB(b *testing.B) {
	body := codexBody(1 << 20)
	b.SetBytes(int64(len(body)))
	parallel2(b, func() {
		d := jsonx.NewDocument(body)
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
