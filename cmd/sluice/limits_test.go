package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Keys' limits and budgets through the binary (README, "Keys, limits and
// usage"): with `store.backend: redis`, two `sluice serve` replicas on one
// real redis-server share every limit (skipped without redis-server, failed
// in CI, as the other scale-out tests); with Pebble, one replica holds them
// itself. No assertion depends on timing: limits are chosen so that nothing
// refills during a test (an rpm of 4 refills one request per 15 s, a tpm
// debt of ~100k tokens takes an hour and a half), and what a request's end
// settles (usage, a concurrency slot) is awaited by polling with a generous
// deadline.

// bigUsage is the fake upstream's non-streaming answer, reporting 100,000
// tokens of usage, so that one request spends a small budget or puts a tpm
// bucket deep into debt.
const bigUsage = `{"id":"{{id}}","object":"response","created_at":{{created_at}},"status":"completed","model":"{{model}}",` +
	`"output":[{"id":"{{item_id}}","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],` +
	`"usage":{"input_tokens":50000,"input_tokens_details":{"cached_tokens":0},"output_tokens":50000,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":100000}}`

// limitKeys are the keys of these tests, one per limit so that they do not
// interfere.
const limitKeys = `auth: {required: true}
keys:
  - {name: k-rpm, key: sk-limits-rpm-0123456789, limits: {rpm: 4}}
  - {name: k-tpm, key: sk-limits-tpm-0123456789, limits: {tpm: 1000}}
  - {name: k-day, key: sk-limits-day-0123456789, limits: {tokens_per_day: 1000}}
  - {name: k-conc, key: sk-limits-conc-0123456789, limits: {concurrent: 1}}
`

// limitAnswer is what a request got.
type limitAnswer struct {
	code   int
	header http.Header
	body   string
}

// errCode is the answer's error.code, or "" for none.
func (a limitAnswer) errCode() string {
	for _, c := range []string{"rate_limit_exceeded", "insufficient_quota"} {
		if strings.Contains(a.body, `"code":"`+c+`"`) {
			return c
		}
	}
	return ""
}

func (a limitAnswer) String() string {
	return fmt.Sprintf("%d %v %.300s", a.code, a.header, a.body)
}

// keyed sends one non-streaming Responses request with key.
func keyed(t *testing.T, base, key string) limitAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(`{"model":"gpt-fake-1","input":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/v1/responses: %v", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return limitAnswer{resp.StatusCode, resp.Header, string(b)}
}

// wantRefused fails t unless a is a 429 with code and a Retry-After of at
// least one second.
func wantRefused(t *testing.T, what string, a limitAnswer, code string) {
	t.Helper()
	if a.code != http.StatusTooManyRequests || a.errCode() != code {
		t.Fatalf("%s: %s; want 429 %s", what, a, code)
	}
	if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("%s: Retry-After %q, want whole seconds ≥ 1", what, a.header.Get("Retry-After"))
	}
}

// wantRateHeaders fails t unless a carries the x-ratelimit-* headers of
// kind ("requests" or "tokens") with that limit and remaining.
func wantRateHeaders(t *testing.T, what string, a limitAnswer, kind string, limit, remaining int) {
	t.Helper()
	h := a.header
	if got := h.Get("X-Ratelimit-Limit-" + kind); got != strconv.Itoa(limit) {
		t.Fatalf("%s: x-ratelimit-limit-%s %q, want %d (%s)", what, kind, got, limit, a)
	}
	if got := h.Get("X-Ratelimit-Remaining-" + kind); got != strconv.Itoa(remaining) {
		t.Fatalf("%s: x-ratelimit-remaining-%s %q, want %d (%s)", what, kind, got, remaining, a)
	}
	if h.Get("X-Ratelimit-Reset-"+kind) == "" {
		t.Fatalf("%s: no x-ratelimit-reset-%s (%s)", what, kind, a)
	}
}

// pollUntil sends requests with key to base until one gets want (a status
// and error code), within a generous deadline: what a request's end
// settles (its usage, its concurrency slot) lands just after its answer.
func pollUntil(t *testing.T, what, base, key string, code int, ecode string) limitAnswer {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := keyed(t, base, key)
		if a.code == code && a.errCode() == ecode {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after 30s, want %d %s", what, a, code, ecode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdStream opens a streaming request with key through base and returns
// once its first event has arrived (the request is admitted and in
// flight); release aborts it: the connection is reset (SO_LINGER 0), which
// the gateway notices at once. (A clean close, FIN, is noticed only when a
// write to the client fails — gateway/listener.go, requestContext — and a
// failed keepalive write does not end an attempt whose upstream is silent:
// until timeouts.idle, 300s by default.)
func holdStream(t *testing.T, base, key string) (release func()) {
	t.Helper()
	var conn *net.TCPConn
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				conn = c.(*net.TCPConn)
			}
			return c, err
		},
	}}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses",
		strings.NewReader(`{"model":"gpt-fake-1","input":"hi","stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("held stream: %v", err)
	}
	release = func() {
		_ = conn.SetLinger(0)
		_ = conn.Close()
		resp.Body.Close()
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		release()
		t.Fatalf("held stream: %d %s", resp.StatusCode, b)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event:") && !strings.HasPrefix(line, "data:") {
		release()
		t.Fatalf("held stream: first line %q, %v", line, err)
	}
	return release
}

// limitsUpstream is a fake upstream whose answers report 100k tokens.
func limitsUpstream(t *testing.T) *upstreamtest.Server {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	up.SetDefault(upstreamtest.Script{Body: []byte(bigUsage)})
	return up
}

// TestLimitsAcrossReplicasOnRedis: two replicas on one Redis share rpm
// (429 rate_limit_exceeded on either replica once N requests alternating
// between them were admitted, with Retry-After and x-ratelimit-*), a
// tokens_per_day budget (spent through one replica, insufficient_quota on
// the other) and concurrent (a stream held through replica 1 makes replica
// 2 refuse; released, replica 2 admits again).
func TestLimitsAcrossReplicasOnRedis(t *testing.T) {
	up := limitsUpstream(t)
	e := &scaleOutEnv{t: t, redis: redistest.Start(t), ups: map[string]*upstreamtest.Server{"A": up}}
	e.cfg = filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log: {level: warn}
timeouts: {drain_grace: 1s}
store:
  backend: redis
  redis: {url: %q, key_prefix: "sluice:", timeout: 2s}
upstreams:
  - {name: A, base_url: %q}
%s`, e.redis.URL, up.URL, limitKeys)
	if err := os.WriteFile(e.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r1, r2 := e.start(), e.start()
	replicas := []*replica{r1, r2}

	t.Run("rpm", func(t *testing.T) {
		const key, n = "sk-limits-rpm-0123456789", 4
		for i := range n {
			r := replicas[i%2]
			a := keyed(t, r.base, key)
			if a.code != http.StatusOK {
				t.Fatalf("request %d of %d through replica %d: %s", i+1, n, i%2+1, a)
			}
			wantRateHeaders(t, fmt.Sprintf("request %d", i+1), a, "Requests", n, n-1-i)
		}
		for i, r := range replicas {
			a := keyed(t, r.base, key)
			wantRefused(t, fmt.Sprintf("request %d through replica %d", n+1+i, i+1), a, "rate_limit_exceeded")
			wantRateHeaders(t, "refused", a, "Requests", n, 0)
		}
	})

	t.Run("tokens_per_day", func(t *testing.T) {
		const key = "sk-limits-day-0123456789"
		if a := keyed(t, r1.base, key); a.code != http.StatusOK {
			t.Fatalf("the first request, within the budget: %s", a)
		}
		a := pollUntil(t, "replica 2 after the budget was spent through replica 1", r2.base, key, http.StatusTooManyRequests, "insufficient_quota")
		wantRefused(t, "replica 2", a, "insufficient_quota")
		wantRefused(t, "replica 1", keyed(t, r1.base, key), "insufficient_quota")
	})

	t.Run("concurrent", func(t *testing.T) {
		const key = "sk-limits-conc-0123456789"
		// The held stream stalls until its client leaves.
		up.Enqueue(upstreamtest.HangAfter(2))
		release := holdStream(t, r1.base, key)
		released := false
		defer func() {
			if !released {
				release()
			}
		}()
		wantRefused(t, "replica 2 while replica 1 holds the key's one slot", keyed(t, r2.base, key), "rate_limit_exceeded")
		wantRefused(t, "replica 1 while it holds the key's one slot", keyed(t, r1.base, key), "rate_limit_exceeded")
		release()
		released = true
		pollUntil(t, "replica 2 once the held stream was released", r2.base, key, http.StatusOK, "")
	})

	for _, r := range replicas {
		if s := r.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "shared rate limits unavailable") {
			t.Fatalf("replica %s:\n%s", r.base, s)
		}
	}
}

// TestLimitsOnPebble: one replica with the default store (Pebble) holds
// rpm and tpm itself: the request beyond rpm, and the request after one
// whose usage put the tpm bucket in debt, get 429 rate_limit_exceeded
// with Retry-After and x-ratelimit-* headers.
func TestLimitsOnPebble(t *testing.T) {
	up := limitsUpstream(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	yaml := fmt.Sprintf("listen: 127.0.0.1:0\nlog: {level: warn}\ntimeouts: {drain_grace: 1s}\nupstreams:\n  - {name: A, base_url: %q}\n%s", up.URL, limitKeys)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out, stderr := startProcess(t, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	base := waitListening(t, out)
	go func() { _, _ = io.Copy(io.Discard, out) }()

	t.Run("rpm", func(t *testing.T) {
		const key, n = "sk-limits-rpm-0123456789", 4
		for i := range n {
			a := keyed(t, base, key)
			if a.code != http.StatusOK {
				t.Fatalf("request %d of %d: %s", i+1, n, a)
			}
			wantRateHeaders(t, fmt.Sprintf("request %d", i+1), a, "Requests", n, n-1-i)
		}
		a := keyed(t, base, key)
		wantRefused(t, "the request beyond rpm", a, "rate_limit_exceeded")
		wantRateHeaders(t, "refused", a, "Requests", n, 0)
	})

	t.Run("tpm", func(t *testing.T) {
		const key = "sk-limits-tpm-0123456789"
		a := keyed(t, base, key)
		if a.code != http.StatusOK {
			t.Fatalf("the first request, within tpm: %s", a)
		}
		if a.header.Get("X-Ratelimit-Limit-Tokens") != "1000" {
			t.Fatalf("x-ratelimit-limit-tokens on a success: %s", a)
		}
		// Its 100k tokens of usage, settled after it, leave the bucket
		// ~99k tokens in debt: the next request is refused.
		a = pollUntil(t, "the request after 100k tokens", base, key, http.StatusTooManyRequests, "rate_limit_exceeded")
		wantRefused(t, "tpm", a, "rate_limit_exceeded")
		wantRateHeaders(t, "tpm refused", a, "Tokens", 1000, 0)
	})

	if s := stderr.String(); strings.Contains(s, "panic") {
		t.Fatalf("sluice panicked:\n%s", s)
	}
}
