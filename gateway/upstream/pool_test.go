package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		header  map[string]string
		message string
		want    time.Duration
		ok      bool
	}{
		{name: "seconds header", header: map[string]string{"Retry-After": "7"}, want: 7 * time.Second, ok: true},
		{name: "ms header wins", header: map[string]string{"Retry-After": "7", "Retry-After-Ms": "250"}, want: 250 * time.Millisecond, ok: true},
		{name: "http date", header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second, ok: true},
		{name: "message seconds", message: "Rate limit reached. Please try again in 2.5s. Visit …", want: 2500 * time.Millisecond, ok: true},
		{name: "message ms", message: "Please try again in 20ms.", want: 20 * time.Millisecond, ok: true},
		{name: "message compound", message: "try again in 1m30s", want: 90 * time.Second, ok: true},
		{name: "clamped", header: map[string]string{"Retry-After": "999999"}, want: MaxCooldown, ok: true},
		{name: "too large for a duration", header: map[string]string{"Retry-After": "999999999999"}, want: MaxCooldown, ok: true},
		{name: "ms too large for a duration", header: map[string]string{"Retry-After-Ms": "1e300"}, want: MaxCooldown, ok: true},
		{name: "infinite", header: map[string]string{"Retry-After": "+Inf"}, want: MaxCooldown, ok: true},
		{name: "message too large for a duration", message: "try again in 9999999999h", want: MaxCooldown, ok: true},
		{name: "none", message: "slow down", ok: false},
		{name: "garbage header falls to message", header: map[string]string{"Retry-After": "soon"}, message: "try again in 3s", want: 3 * time.Second, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, ok := RetryAfter(h, tt.message, now)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("RetryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestPool(t *testing.T, c *clock, cfgs ...Config) *Pool {
	t.Helper()
	p, err := NewPool(cfgs, Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPickPrefersLeastLoadedAndSkipsCooling(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := newTestPool(t, c, Config{Name: "a", BaseURL: "http://127.0.0.1:1/v1"}, Config{Name: "b", BaseURL: "http://127.0.0.1:2/v1"})
	a, b := p.Get("a"), p.Get("b")
	releaseA := a.Acquire()
	for i := 0; i < 5; i++ {
		if u, _ := p.Pick(nil); u != b {
			t.Fatalf("pick %d = %s, want the idle upstream b", i, u.Name())
		}
	}
	releaseA()
	releaseA() // idempotent
	if a.Inflight() != 0 {
		t.Fatalf("inflight = %d after release", a.Inflight())
	}
	p.Cooldown(b, 10*time.Second, "429")
	if u, _ := p.Pick(nil); u != a {
		t.Fatalf("picked %v while b cools down", u.Name())
	}
	if ok, why := b.Usable(c.now()); ok || why == "" {
		t.Fatalf("b usable during cooldown: %v %q", ok, why)
	}
	p.Cooldown(a, time.Second, "429")
	if _, err := p.Pick(nil); err != ErrNoUpstream {
		t.Fatalf("err = %v with everything cooling", err)
	}
	c.t = c.t.Add(11 * time.Second)
	if !p.Healthy() {
		t.Fatal("not healthy after cooldowns expire")
	}
	if u, _ := p.Pick(func(u *Upstream) bool { return u == a }); u != b {
		t.Fatalf("skip ignored: %v", u)
	}
}

func TestPickSpreadsEqualUpstreams(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := newTestPool(t, c, Config{Name: "a", BaseURL: "http://h1/v1"}, Config{Name: "b", BaseURL: "http://h2/v1"})
	seen := map[string]int{}
	for i := 0; i < 100; i++ {
		u, _ := p.Pick(nil)
		seen[u.Name()]++
	}
	if seen["a"] < 30 || seen["b"] < 30 {
		t.Fatalf("idle upstreams not shared: %v", seen)
	}
}

func TestProbe(t *testing.T) {
	var mu sync.Mutex // ProbeAll probes the upstreams concurrently
	status := http.StatusOK
	var gotPath, gotAuth string
	list := `{"object":"list","data":[{"id":"m2"},{"id":"m1"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Authorization") != "" || gotPath == "" {
			gotPath, gotAuth = r.URL.Path, r.Header.Get("Authorization")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(list))
	}))
	defer srv.Close()
	c := &clock{t: time.Unix(1000, 0)}
	p := newTestPool(t, c, Config{Name: "a", BaseURL: srv.URL + "/v1/", APIKey: "sk-a"}, Config{Name: "b", BaseURL: srv.URL + "/v1"})
	a := p.Get("a")
	ctx := context.Background()

	p.Probe(ctx, a)
	mu.Lock()
	path, auth := gotPath, gotAuth
	mu.Unlock()
	if path != "/v1/models" || auth != "Bearer sk-a" {
		t.Fatalf("probe sent %q with auth %q", path, auth)
	}
	if st := a.Status(c.now()); st.State != StateHealthy || len(st.Models) != 2 {
		t.Fatalf("status %+v", st)
	}
	p.ProbeAll(ctx)
	if got := p.Models(); len(got) != 2 || got[0] != "m1" {
		t.Fatalf("merged models %v, want de-duplicated and sorted", got)
	}

	// A list with odd entries is still an upstream that answers: the
	// entries that name a model count.
	mu.Lock()
	list = `{"object":"list","data":[{"id":5},"x",{"id":"m3"},null,{"id":""}]}`
	mu.Unlock()
	p.Probe(ctx, a)
	if st := a.Status(c.now()); st.State != StateHealthy || len(st.Models) != 1 || st.Models[0] != "m3" {
		t.Fatalf("odd model list: status %+v", st)
	}
	mu.Lock()
	list = `<html>login</html>`
	mu.Unlock()
	p.Probe(ctx, a)
	if st := a.Status(c.now()); st.State != StateDown {
		t.Fatalf("a model list that is not JSON: status %+v", st)
	}
	mu.Lock()
	list = `{"object":"list","data":[{"id":"m2"},{"id":"m1"}]}`
	mu.Unlock()

	setStatus := func(code int) { mu.Lock(); status = code; mu.Unlock() }
	setStatus(http.StatusUnauthorized)
	p.Probe(ctx, a)
	if st := a.Status(c.now()); st.State != StateFailed {
		t.Fatalf("401 probe → %s", st.State)
	}
	setStatus(http.StatusServiceUnavailable)
	p.Probe(ctx, a)
	if ok, _ := a.Usable(c.now()); ok {
		t.Fatal("usable after failed probe")
	}
	setStatus(http.StatusOK)
	p.MarkFailed(a, "HTTP 401")
	// This server lists its models to anyone, so its probe cannot lift a
	// request's credential park before its time (credpark_test.go).
	c.t = c.t.Add(credentialRetryFirst)
	p.Probe(ctx, a)
	if ok, _ := a.Usable(c.now()); !ok {
		t.Fatal("a successful probe did not clear the auth failure")
	}
}

func TestNewPoolRejectsBadConfig(t *testing.T) {
	for _, cfgs := range [][]Config{
		nil,
		{{Name: "a", BaseURL: "not a url"}},
		{{Name: "a", BaseURL: "http://x/v1"}, {Name: "a", BaseURL: "http://y/v1"}},
	} {
		if _, err := NewPool(cfgs, Options{}); err == nil {
			t.Errorf("NewPool(%v) accepted", cfgs)
		}
	}
}

// TestURLKeepsTheBaseURLsQuery: paths go before a base URL's query (Azure
// OpenAI's ?api-version=…), and a path's own query joins it.
func TestURLKeepsTheBaseURLsQuery(t *testing.T) {
	for _, tt := range []struct{ base, path, want string }{
		{"http://h/v1", "/responses", "http://h/v1/responses"},
		{"http://h/v1?", "/models", "http://h/v1/models"},
		{"https://h/openai/v1?api-version=preview", "/responses", "https://h/openai/v1/responses?api-version=preview"},
		{"https://h/openai/v1?api-version=preview", "/responses/resp_1?stream=true&starting_after=3",
			"https://h/openai/v1/responses/resp_1?api-version=preview&stream=true&starting_after=3"},
	} {
		u := &Upstream{cfg: Config{BaseURL: tt.base}}
		if got := u.URL(tt.path); got != tt.want {
			t.Errorf("URL(%q) of %q = %q, want %q", tt.path, tt.base, got, tt.want)
		}
	}
}
