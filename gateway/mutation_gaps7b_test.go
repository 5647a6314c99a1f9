package gateway_test

// Limits, scrubbing, retry waits, tracing shutdown and the access log's
// reason: rules that mutation testing showed no other test pinned down. Each
// test names the behaviour a client or operator sees.
//
// Mutant left untested, as no input can tell it apart:
//   - scrub.go:194 (end < len(b) -> end <= len(b) in replaceAll): at
//     end == len(b) escapeStart can find no escape covering b[end], because
//     escapeEnd is capped at len(b) and so is never > end.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// g7bAccessLine waits for the access log's line of the request and returns it.
func g7bAccessLine(t *testing.T, h *harness) string {
	t.Helper()
	waitAccessLines(t, h, 1)
	return grepLines(h.logs.String(), "access: request")
}

// TestGaps7bRateLimitRetryAfterCountsThePartialRefill: a key over its
// requests-per-minute limit is told to come back when the bucket holds a
// whole request again, counting what refilled since the last one: at 1 rpm,
// 15 s after the last request, that is 45 s, not a full minute.
func TestGaps7bRateLimitRetryAfterCountsThePartialRefill(t *testing.T) {
	var clock atomic.Int64 // Unix nanoseconds
	clock.Store(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).UnixNano())
	lim := &gateway.LocalLimiter{Now: func() time.Time { return time.Unix(0, clock.Load()) }}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, Limiter: lim,
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 1})},
	}}})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d %s", resp.StatusCode, b)
	}
	clock.Add(int64(15 * time.Second)) // a quarter of a request refilled
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	if resp.StatusCode != http.StatusTooManyRequests || codeOf(b) != "rate_limit_exceeded" {
		t.Fatalf("second request: %d %s", resp.StatusCode, b)
	}
	if got := resp.Header.Get("Retry-After"); got != "45" {
		t.Errorf("Retry-After %q, want 45 (three quarters of a request at 1 per minute)", got)
	}
}

// g7bSeedLoop is a shared store whose rate-limit script keeps answering
// "a budget's counter needs its seed" (code 6), even once seeded.
type g7bSeedLoop struct {
	mu    sync.Mutex
	calls int
	seeds [][2]any // the day and month seeds of each call
}

func (f *g7bSeedLoop) RunScript(_ context.Context, _ *store.Script, _ []string, args ...any) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.seeds = append(f.seeds, [2]any{args[len(args)-2], args[len(args)-1]})
	if f.calls > 5 {
		return nil, errors.New("the test's bound on script calls") // never loop forever
	}
	return []any{int64(6), int64(0), int64(0), int64(0), int64(0), int64(0)}, nil
}

// TestGaps7bRedisLimiterSeedsABudgetOnce: when the shared limiter's script
// asks for a budget's seed, the limiter reads the usage totals and asks
// once more with them; a store that still asks is treated as broken: the
// request is admitted by the per-replica fallback and counted in
// sluice_limiter_fallback_total, not retried without end.
func TestGaps7bRedisLimiterSeedsABudgetOnce(t *testing.T) {
	fake := &g7bSeedLoop{}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, Limiter: &gateway.RedisLimiter{Store: fake},
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 1_000_000})},
	}}})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %d %s", resp.StatusCode, b)
	}
	fake.mu.Lock()
	calls, seeds := fake.calls, fake.seeds
	fake.mu.Unlock()
	if calls != 2 {
		t.Fatalf("the admission ran the script %d times, want 2 (then seeded); seeds %v", calls, seeds)
	}
	if seeds[0] != [2]any{int64(-1), int64(-1)} || seeds[1] != [2]any{int64(0), int64(0)} {
		t.Errorf("seeds %v, want unknown then 0 (no usage recorded)", seeds)
	}
	if m := h.metrics(); !strings.Contains(m, "sluice_limiter_fallback_total 1") {
		t.Errorf("fallbacks:\n%s", grepLines(m, "sluice_limiter_fallback_total"))
	}
}

// TestGaps7bScrubbedErrorStaysTheSameJSON: an upstream error whose message
// holds the upstream's key (here one ending in a backslash) right after an
// escaped quote reaches the client with only the key redacted: the quote
// before it stays, and the escape the key's backslash runs into is taken
// whole, so the body is still valid JSON with the same fields.
func TestGaps7bScrubbedErrorStaysTheSameJSON(t *testing.T) {
	const key = `sk-abcdefg\`
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": key}})
	body := `{"error":{"message":"the key \"sk-abcdefg\" is not valid","type":"invalid_request_error","param":null,"code":"invalid_value"}}`
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Body: []byte(body)})
	resp, raw := h.sendRaw("/v1/responses", simple, nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d %s", resp.StatusCode, raw)
	}
	if !json.Valid(raw) {
		t.Fatalf("the client got invalid JSON: %s", raw)
	}
	if msg := gjson.GetBytes(raw, "error.message").Str; msg != `the key "[redacted] is not valid` {
		t.Errorf("message %q, want the key redacted and the quote before it kept", msg)
	}
	if code := gjson.GetBytes(raw, "error.code").Str; code != "invalid_value" {
		t.Errorf("code %q: %s", code, raw)
	}
}

// TestGaps7bSameTargetRetryWaits: a retry of the same target waits what the
// upstream asked for when that is within retry.max_wait (a wait of exactly
// max_wait included), and the pool's jittered backoff when it asked for
// nothing. The wait is in the "retrying the same target" log line.
func TestGaps7bSameTargetRetryWaits(t *testing.T) {
	tests := []struct {
		name string
		fail upstreamtest.Script
		want string
	}{
		{"a Retry-After of exactly max_wait", upstreamtest.Status429(300 * time.Millisecond), "after=300ms"},
		{"a 500 without Retry-After", upstreamtest.Status5xx(http.StatusInternalServerError), "after=150ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{
				pool: upstream.Options{Jitter: func() float64 { return 0.5 }}, // backoff 100ms × 1.5
				opts: gateway.Options{RetryMaxWait: 300 * time.Millisecond},
			})
			h.ups["A"].Enqueue(tt.fail)
			if resp, raw := h.sendRaw("/v1/responses", simple, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d %s", resp.StatusCode, raw)
			}
			if n := h.ups["A"].RequestCount(); n != 2 {
				t.Fatalf("the upstream saw %d requests, want the failure and its retry", n)
			}
			line := grepLines(h.logs.String(), "retrying the same target")
			if !strings.Contains(line, tt.want) {
				t.Errorf("retry line %q, want %s", line, tt.want)
			}
		})
	}
}

// g7bProvider is a tracer provider whose Shutdown returns err.
type g7bProvider struct {
	noop.TracerProvider
	err      error
	shutdown atomic.Int32
}

func (p *g7bProvider) Shutdown(context.Context) error {
	p.shutdown.Add(1)
	return p.err
}

// TestGaps7bTracingShutdownWarnsOnlyOnFailure: draining the gateway shuts
// its tracer provider down; a failure to flush is logged as a warning, and
// a clean shutdown logs nothing about it.
func TestGaps7bTracingShutdownWarnsOnlyOnFailure(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "clean", true: "failing"}[fail], func(t *testing.T) {
			tp := &g7bProvider{}
			if fail {
				tp.err = errors.New("collector unreachable")
			}
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			// One request first: it is traced, and it proves the server is
			// serving, so Shutdown below stops it.
			if resp, raw := h.sendRaw("/v1/responses", simple, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d %s", resp.StatusCode, raw)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = h.gw.Shutdown(ctx)
			if tp.shutdown.Load() == 0 {
				t.Fatal("the tracer provider was not shut down")
			}
			line := grepLines(h.logs.String(), "flushing traces failed")
			if fail && !strings.Contains(line, "collector unreachable") {
				t.Errorf("no warning with the error for a failed flush:\n%s", h.logs.String())
			}
			if !fail && line != "" {
				t.Errorf("a clean shutdown logged %q", line)
			}
		})
	}
}

// TestGaps7bAccessLogReasonOfAChatStream: a Chat stream's access line says
// how the stream ended ([DONE]), which only the client stream knows: Chat
// has no terminal event for the meter to read it from.
func TestGaps7bAccessLogReasonOfAChatStream(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	resp, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || string(evs[len(evs)-1].Data) != "[DONE]" {
		t.Fatalf("status %d, %d events", resp.StatusCode, len(evs))
	}
	if line := g7bAccessLine(t, h); !strings.Contains(line, "reason=done") {
		t.Errorf("access line %s, want reason=done", line)
	}
}

// TestGaps7bAccessLogReasonOfARefusal: a request the gateway refuses itself
// (a model the key may not use) is logged as a gateway error.
func TestGaps7bAccessLogReasonOfARefusal(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, []string{"gpt-other"}, store.KeyLimits{}))
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	if resp.StatusCode != http.StatusForbidden || codeOf(b) != "model_not_allowed" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if line := g7bAccessLine(t, h); !strings.Contains(line, "status=403") || !strings.Contains(line, "reason=gateway_error") {
		t.Errorf("access line %s, want status=403 reason=gateway_error", line)
	}
}
