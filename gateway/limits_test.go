package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A key's limits (README "Limits"): budgets count the requests in flight,
// a budget set mid-period counts what the period used before it, changing
// a key's limits keeps the buckets whose rate did not change, and each
// x-ratelimit-* family comes from one source. First the limiter on its own
// (gateway.LocalLimiter, and gateway.RedisLimiter where it shares the
// rule), on a clock the test sets; then through the gateway's HTTP surface.

// limiterStep is one step of a limiter scenario: an admission (ok, or
// refused with code), the end of an earlier admission, a change of the
// clock, or a change of the key's limits.
type limiterStep struct {
	admit    int64  // an admission estimated at admit tokens (unless done, wait or limits is set)
	wantCode string // "": admitted; else the refusal's code
	inFlight bool   // the refusal is for what is in flight: Retry-After 1s, "in flight" in the message
	done     int    // > 0: end the done-th admission (1-based) …
	used     int64  // … having used this many tokens
	wait     time.Duration
	limits   *store.KeyLimits
}

// runLimiterSteps plays steps on lim for a key of the test's own, starting
// with limits.
func runLimiterSteps(t *testing.T, lim gateway.Limiter, limits store.KeyLimits, steps []limiterStep, advance func(time.Duration)) {
	t.Helper()
	var admitted []gateway.Admission
	t.Cleanup(func() {
		for _, a := range admitted {
			a.Done(0) // a second Done is a no-op
		}
	})
	for i, s := range steps {
		switch {
		case s.limits != nil:
			limits = *s.limits
		case s.wait > 0:
			advance(s.wait)
		case s.done > 0:
			admitted[s.done-1].Done(s.used)
		default:
			adm, lerr := lim.Admit(context.Background(), t.Name(), limits, s.admit)
			if adm != nil {
				admitted = append(admitted, adm)
			}
			switch {
			case s.wantCode == "" && lerr != nil:
				t.Fatalf("step %d: refused %+v, want admitted", i, lerr)
			case s.wantCode != "" && lerr == nil:
				t.Fatalf("step %d: admitted, want %s", i, s.wantCode)
			case lerr == nil:
			case lerr.Code != s.wantCode:
				t.Fatalf("step %d: %+v, want %s", i, lerr, s.wantCode)
			case s.inFlight && (lerr.RetryAfter != time.Second || !strings.Contains(lerr.Message, "in flight")):
				t.Fatalf("step %d: %+v, want a retry after 1s for the requests in flight", i, lerr)
			case !s.inFlight && strings.Contains(lerr.Message, "in flight"):
				t.Fatalf("step %d: %+v, want a refusal for what was used", i, lerr)
			}
		}
	}
}

func keyLimits(l store.KeyLimits) *store.KeyLimits { return &l }

// budgetInFlightCases hold for every limiter: a budget counts the estimates
// of the requests in flight until they end, then what they really used.
var budgetInFlightCases = []struct {
	name   string
	limits store.KeyLimits
	steps  []limiterStep
}{
	{"day budget counts the requests in flight", store.KeyLimits{TokensPerDay: 100}, []limiterStep{
		{admit: 40}, {admit: 40}, {admit: 20}, // 100 reserved
		{admit: 1, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{done: 1, used: 10}, // 10 used, 60 reserved
		{admit: 29},         // 10 + 89
		{admit: 1},          // 10 + 90
		{admit: 1, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{done: 2, used: 0}, {done: 3, used: 0}, {done: 4, used: 0}, {done: 5, used: 0},
		{admit: 80}, // 10 used, nothing in flight
		{done: 6, used: 95},
		{admit: 1, wantCode: gateway.CodeInsufficientQuota}, // 105 used: until the day ends
	}},
	{"month budget counts the requests in flight", store.KeyLimits{TokensPerMonth: 100}, []limiterStep{
		{admit: 60}, {admit: 40},
		{admit: 1, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{done: 1, used: 50},
		{admit: 1}, // 50 + 40
		{done: 2, used: 50}, {done: 3, used: 0},
		{admit: 1, wantCode: gateway.CodeInsufficientQuota},
	}},
	{"a request larger than the budget passes alone", store.KeyLimits{TokensPerDay: 100}, []limiterStep{
		{admit: 500},
		{admit: 1, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{done: 1, used: 20},
		{admit: 1},
	}},
	{"a refusal reserves nothing", store.KeyLimits{TokensPerDay: 100, TokensPerMonth: 1000}, []limiterStep{
		{admit: 100},
		{admit: 50, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{admit: 50, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{done: 1, used: 0},
		{admit: 99},
	}},
	{"a request's own estimate must fit in what is left", store.KeyLimits{TokensPerDay: 30}, []limiterStep{
		{admit: 14}, {done: 1, used: 14},
		{admit: 14}, {done: 2, used: 14}, // 28 used
		{admit: 14, wantCode: gateway.CodeInsufficientQuota}, // 2 left: until the day ends
		{admit: 2}, // fits exactly
	}},
	{"a request's own estimate must fit beside the requests in flight", store.KeyLimits{TokensPerMonth: 30}, []limiterStep{
		{admit: 14}, {admit: 14}, // 28 reserved
		{admit: 14, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
		{admit: 2}, // 30 reserved
		{admit: 1, wantCode: gateway.CodeInsufficientQuota, inFlight: true},
	}},
	{"an estimate larger than the budget counts as the budget", store.KeyLimits{TokensPerDay: 100, TokensPerMonth: 100}, []limiterStep{
		{admit: 500}, {done: 1, used: 1},
		{admit: 500, wantCode: gateway.CodeInsufficientQuota}, // 99 left: until the period ends
		{admit: 99},
	}},
	{"a budget spent outright is refused until its period ends", store.KeyLimits{TokensPerDay: 105, TokensPerMonth: 100}, []limiterStep{
		{admit: 10}, {admit: 10},
		{done: 1, used: 100},
		// The day is full only with what is in flight, the month is spent
		// whatever that uses: the month's refusal, not the day's.
		{admit: 1, wantCode: gateway.CodeInsufficientQuota},
	}},
}

func TestLocalLimiterBudgetsCountRequestsInFlight(t *testing.T) {
	for _, tc := range budgetInFlightCases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
			lim := &gateway.LocalLimiter{Now: func() time.Time { return now }}
			runLimiterSteps(t, lim, tc.limits, tc.steps, func(d time.Duration) { now = now.Add(d) })
		})
	}
}

// TestLocalLimiterBudgetRefusalWaitsForThePeriodEnd: a budget spent by
// settled usage is refused until the UTC day (month) ends; one filled only
// by requests in flight, for a second.
func TestLocalLimiterBudgetRefusalWaitsForThePeriodEnd(t *testing.T) {
	now := time.Date(2026, 3, 14, 18, 0, 0, 0, time.UTC)
	lim := &gateway.LocalLimiter{Now: func() time.Time { return now }}
	for _, tc := range []struct {
		name   string
		limits store.KeyLimits
		want   time.Duration
	}{
		{"day", store.KeyLimits{TokensPerDay: 10}, 6 * time.Hour},
		{"month", store.KeyLimits{TokensPerMonth: 10}, (17*24 + 6) * time.Hour},
	} {
		key := "k-" + tc.name
		first, lerr := lim.Admit(context.Background(), key, tc.limits, 20)
		if lerr != nil {
			t.Fatalf("%s: first: %+v", tc.name, lerr)
		}
		if _, lerr := lim.Admit(context.Background(), key, tc.limits, 1); lerr == nil || lerr.RetryAfter != time.Second {
			t.Fatalf("%s: with the first in flight: %+v, want a retry after 1s", tc.name, lerr)
		}
		first.Done(10)
		_, lerr = lim.Admit(context.Background(), key, tc.limits, 1)
		if lerr == nil || lerr.Code != gateway.CodeInsufficientQuota || lerr.RetryAfter != tc.want {
			t.Fatalf("%s: spent: %+v, want %s retry after %v", tc.name, lerr, gateway.CodeInsufficientQuota, tc.want)
		}
	}
}

// TestLocalLimiterSeedsABudgetWhenItIsSet: a key seen first without a
// budget (since the last restart) and given one later counts what the
// usage store has for the period, once per period; what this process
// counted since, when larger, stands.
func TestLocalLimiterSeedsABudgetWhenItIsSet(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stored     int64 // the usage store's total for the period
		counted    int64 // what this process settled before the budget was set
		budget     store.KeyLimits
		wantSeeded string // the period asked for
	}{
		{"day", 500, 100, store.KeyLimits{TokensPerDay: 300}, "2026-03-14..2026-03-14"},
		{"month", 500, 100, store.KeyLimits{TokensPerMonth: 300}, "2026-03-01..2026-03-14"},
		{"this process counted more", 0, 400, store.KeyLimits{TokensPerDay: 300}, "2026-03-14..2026-03-14"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
			var asked []string
			lim := &gateway.LocalLimiter{Now: func() time.Time { return now },
				Seed: func(_ context.Context, key, from, to string) (int64, error) {
					asked = append(asked, from+".."+to)
					return tc.stored, nil
				}}
			adm, lerr := lim.Admit(context.Background(), "k", store.KeyLimits{}, 1)
			if lerr != nil {
				t.Fatal(lerr)
			}
			adm.Done(tc.counted)
			if len(asked) != 0 {
				t.Fatalf("seeded %q without a budget", asked)
			}
			for range 2 { // the budget is now set: spent, and read once
				if _, lerr := lim.Admit(context.Background(), "k", tc.budget, 1); lerr == nil || lerr.Code != gateway.CodeInsufficientQuota {
					t.Fatalf("with the budget set: %+v, want %s", lerr, gateway.CodeInsufficientQuota)
				}
			}
			if len(asked) != 1 || asked[0] != tc.wantSeeded {
				t.Fatalf("seeds asked %q, want [%q]", asked, tc.wantSeeded)
			}
		})
	}
}

// TestLocalLimiterLimitChangeKeepsBuckets: changing a key's limits keeps
// each bucket whose rate did not change; one whose rate changed keeps its
// level, at most the new capacity, and refills at the new rate.
func TestLocalLimiterLimitChangeKeepsBuckets(t *testing.T) {
	rpm := gateway.CodeRateLimitExceeded
	for _, tc := range []struct {
		name   string
		limits store.KeyLimits
		steps  []limiterStep
	}{
		{"rpm unchanged, another limit changed", store.KeyLimits{RPM: 3}, []limiterStep{
			{}, {}, {}, {wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{RPM: 3, Concurrent: 50})},
			{wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{RPM: 3, Concurrent: 50, TPM: 1000})},
			{wantCode: rpm},
		}},
		{"tpm unchanged, another limit changed", store.KeyLimits{TPM: 100}, []limiterStep{
			{admit: 100}, {done: 1, used: 100},
			{admit: 10, wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{TPM: 100, RPM: 50})},
			{admit: 10, wantCode: rpm},
		}},
		{"rpm raised: no fresh minute, the new rate refills", store.KeyLimits{RPM: 3}, []limiterStep{
			{}, {}, {}, {wantCode: rpm},
			{limits: keyLimits(store.KeyLimits{RPM: 6})},
			{wantCode: rpm},
			{wait: 10 * time.Second}, // one request at 6 per minute
			{}, {wantCode: rpm},
		}},
		{"rpm lowered: the level is kept, at most the new capacity", store.KeyLimits{RPM: 10}, []limiterStep{
			{}, {}, {}, {}, {}, {}, {}, {}, {}, // one left
			{limits: keyLimits(store.KeyLimits{RPM: 2})},
			{}, {wantCode: rpm},
		}},
		{"rpm lowered from nearly full: the new capacity", store.KeyLimits{RPM: 10}, []limiterStep{
			{}, // nine left
			{limits: keyLimits(store.KeyLimits{RPM: 2})},
			{}, {}, {wantCode: rpm},
		}},
		{"tpm raised: no fresh minute", store.KeyLimits{TPM: 100}, []limiterStep{
			{admit: 100}, {done: 1, used: 100},
			{limits: keyLimits(store.KeyLimits{TPM: 1000})},
			{admit: 10, wantCode: rpm},
			{wait: 3 * time.Second}, // 50 tokens at 1000 per minute
			{admit: 40}, {admit: 40, wantCode: rpm},
		}},
		{"a limit newly set starts full", store.KeyLimits{}, []limiterStep{
			{}, {},
			{limits: keyLimits(store.KeyLimits{RPM: 2})},
			{}, {}, {wantCode: rpm},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
			lim := &gateway.LocalLimiter{Now: func() time.Time { return now }}
			runLimiterSteps(t, lim, tc.limits, tc.steps, func(d time.Duration) { now = now.Add(d) })
		})
	}
}

// heldUpstream is a fake upstream whose model requests wait at a gate:
// each is announced on arrived, then answered once release is closed, so
// that a test knows every admitted request is in flight before any ends.
type heldUpstream struct {
	*upstreamtest.Server
	arrived chan struct{}
	release func()
}

func newHeldUpstream(t *testing.T, capacity int) *heldUpstream {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	gate := make(chan struct{})
	var once sync.Once
	hu := &heldUpstream{Server: up, arrived: make(chan struct{}, capacity), release: func() { once.Do(func() { close(gate) }) }}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			hu.arrived <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		up.Handler().ServeHTTP(w, r)
	}))
	up.URL = front.URL + "/v1"
	t.Cleanup(front.Close)
	t.Cleanup(up.Close)
	t.Cleanup(hu.release) // first: nothing stays held
	return hu
}

// sizedBody is a Responses request body of exactly n bytes: estimated at
// n/4 tokens (README "Limits").
func sizedBody(t *testing.T, n int, stream bool) string {
	t.Helper()
	head, tail := `{"model":"gpt-fake-1","stream":`+strconv.FormatBool(stream)+`,"input":"`, `"}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("a body of %d bytes is too small", n)
	}
	return head + strings.Repeat("x", pad) + tail
}

type raceResult struct {
	status int
	header http.Header
	body   []byte
}

// sendAllAtOnce sends n copies of body with cred, in turn to each of hs,
// all at once, through up. It waits until each request is either refused
// or held at the upstream, then lets the upstream answer, and returns how
// many reached it and every answer. A refused request is answered at once;
// an admitted one not before every other was decided, so no admission sees
// an earlier one settled.
func sendAllAtOnce(t *testing.T, hs []*harness, up *heldUpstream, n int, cred, body string) (reached int, results []raceResult) {
	t.Helper()
	// A client of its own: the connections it dials for the burst and
	// does not use are closed at the end, not left for the gateway's
	// shutdown to wait out.
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	answers := make(chan raceResult, n)
	for i := range n {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, hs[i%len(hs)].url+"/v1/responses", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+cred)
			resp, err := client.Do(req)
			if err != nil {
				answers <- raceResult{body: []byte(err.Error())}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- raceResult{status: resp.StatusCode, header: resp.Header, body: b}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for reached+len(results) < n {
		select {
		case <-up.arrived:
			reached++
		case r := <-answers:
			results = append(results, r)
		case <-ctx.Done():
			t.Fatalf("after 30s, %d requests reached the upstream and %d were answered, of %d", reached, len(results), n)
		}
	}
	up.release()
	for len(results) < n {
		select {
		case r := <-answers:
			results = append(results, r)
		case <-ctx.Done():
			t.Fatalf("after 30s, %d of %d requests were answered", len(results), n)
		}
	}
	return reached, results
}

// checkBudgetRace asserts that of results exactly want were admitted (200)
// and the rest refused with 429 insufficient_quota and a Retry-After.
func checkBudgetRace(t *testing.T, reached int, results []raceResult, want int) {
	t.Helper()
	var ok, refused int
	for _, r := range results {
		switch {
		case r.status == http.StatusOK:
			ok++
		case r.status == http.StatusTooManyRequests && codeOf(r.body) == gateway.CodeInsufficientQuota && r.header.Get("Retry-After") != "":
			refused++
		default:
			t.Errorf("answer %d %s, want 200 or 429 insufficient_quota with Retry-After", r.status, r.body)
		}
	}
	if reached != want || ok != want || refused != len(results)-want {
		t.Fatalf("%d reached the upstream, %d × 200, %d × 429: want %d, %d, %d", reached, ok, refused, want, want, len(results)-want)
	}
}

// TestBudgetHoldsUnderConcurrentRequests: requests arriving together count
// each other's estimates against the key's budget. Each body is 4000 bytes
// (1000 tokens estimated), the budget 5000 tokens: of 20 requests at once,
// 5 are admitted, the others refused, before any of them has ended.
func TestBudgetHoldsUnderConcurrentRequests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits store.KeyLimits
		stream bool
	}{
		{"day, JSON", store.KeyLimits{TokensPerDay: 5000}, false},
		{"day, SSE", store.KeyLimits{TokensPerDay: 5000}, true},
		{"month, JSON", store.KeyLimits{TokensPerMonth: 5000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20
			up := newHeldUpstream(t, n)
			st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up.Server}, opts: gateway.Options{Accounts: gateway.AccountsOptions{
				Required: true, KeyStore: st, Usage: st, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, tc.limits)},
			}}})
			reached, results := sendAllAtOnce(t, []*harness{h}, up, n, teamAKey, sizedBody(t, 4000, tc.stream))
			checkBudgetRace(t, reached, results, 5)
			// Settled with their real (few) tokens, they leave the budget room.
			if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
				t.Fatalf("after they ended: %d %s", resp.StatusCode, b)
			}
		})
	}
}

// TestBudgetSetLaterCountsTheTokensUsedBefore: a run-time key without a
// budget, used today before a restart (the usage in the store) and once
// since, is given a budget by PATCH: the budget counts the day's (month's)
// tokens from the store, not only the one request since.
func TestBudgetSetLaterCountsTheTokensUsedBefore(t *testing.T) {
	for _, tc := range []struct{ name, patch string }{
		{"day", `{"limits":{"tokens_per_day":500}}`},
		{"month", `{"limits":{"tokens_per_month":500}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := store.Open(ctx, store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			// Before the restart: the key exists and used 2,000 tokens today.
			if err := st.CreateKey(ctx, keyRec("late", teamAKey, nil, store.KeyLimits{})); err != nil {
				t.Fatal(err)
			}
			if err := st.AddUsage(ctx, store.UsageRecord{Day: time.Now().UTC().Format(time.DateOnly), Key: "late", Route: "-", Target: "A", Model: "gpt-fake-1",
				Requests: 2, InputTokens: 1000, OutputTokens: 1000}); err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, KeyStore: st, Usage: st}}})
			if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
				t.Fatalf("without a budget: %d %s", resp.StatusCode, b)
			}
			if resp, b := send(t, h, http.MethodPatch, "/admin/keys/late", "", tc.patch); resp.StatusCode != http.StatusOK {
				t.Fatalf("PATCH: %d %s", resp.StatusCode, b)
			}
			resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
			limit(t, resp, b, gateway.CodeInsufficientQuota)
		})
	}
}

// TestLimitsPatchKeepsTheBuckets: a PATCH of a run-time key's limits keeps
// a spent rpm bucket spent, whether rpm is left as it was or raised (then
// it refills at the new rate, not at once).
func TestLimitsPatchKeepsTheBuckets(t *testing.T) {
	var clock atomic.Int64 // Unix nanoseconds
	clock.Store(time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixNano())
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, KeyStore: st, Usage: st,
		Limiter: &gateway.LocalLimiter{Now: func() time.Time { return time.Unix(0, clock.Load()) }}}}})
	resp, b := send(t, h, http.MethodPost, "/admin/keys", "", `{"name":"ci","limits":{"rpm":3}}`)
	var created struct{ Key string }
	if err := json.Unmarshal(b, &created); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	request := func() (*http.Response, []byte) {
		return send(t, h, http.MethodPost, "/v1/responses", created.Key, simple)
	}
	for i := range 3 {
		if resp, b := request(); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b = request()
	limit(t, resp, b, gateway.CodeRateLimitExceeded)
	for _, patch := range []string{`{"limits":{"rpm":3,"concurrent":50}}`, `{"limits":{"tpm":100000}}`, `{"limits":{"rpm":6}}`} {
		if resp, b := send(t, h, http.MethodPatch, "/admin/keys/ci", "", patch); resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH %s: %d %s", patch, resp.StatusCode, b)
		}
		resp, b := request()
		limit(t, resp, b, gateway.CodeRateLimitExceeded)
	}
	clock.Add(int64(10 * time.Second)) // one request at 6 per minute
	if resp, b := request(); resp.StatusCode != http.StatusOK {
		t.Fatalf("10s later at 6 rpm: %d %s", resp.StatusCode, b)
	}
	resp, b = request()
	limit(t, resp, b, gateway.CodeRateLimitExceeded)
}

// TestRateLimitHeadersComeAsWholeFamilies: of each x-ratelimit-* family
// (requests; tokens), the client gets the upstream's set when the upstream
// sends any of it, else Sluice's: never a limit from one and a reset from
// the other. On JSON, SSE and Chat answers alike.
func TestRateLimitHeadersComeAsWholeFamilies(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 50, TPM: 100000}))
	requestsOnly := http.Header{"X-Ratelimit-Limit-Requests": {"999"}, "X-Ratelimit-Remaining-Requests": {"998"}}
	tokensWhole := http.Header{"X-Ratelimit-Limit-Tokens": {"777"}, "X-Ratelimit-Remaining-Tokens": {"776"}, "X-Ratelimit-Reset-Tokens": {"9ms"}}
	ours := func(family string) map[string]string { // Sluice's: limit from the key, the rest present
		if family == "Requests" {
			return map[string]string{"Limit-Requests": "50", "Remaining-Requests": "*", "Reset-Requests": "*"}
		}
		return map[string]string{"Limit-Tokens": "100000", "Remaining-Tokens": "*", "Reset-Tokens": "*"}
	}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		upstream http.Header
		want     map[string]string // header suffix after X-Ratelimit- → value ("*": any, "": absent)
	}{
		{"the upstream sends part of requests", requestsOnly, merge(ours("Tokens"),
			map[string]string{"Limit-Requests": "999", "Remaining-Requests": "998", "Reset-Requests": ""})},
		{"the upstream sends all of tokens", tokensWhole, merge(ours("Requests"),
			map[string]string{"Limit-Tokens": "777", "Remaining-Tokens": "776", "Reset-Tokens": "9ms"})},
		{"the upstream sends none", nil, merge(ours("Requests"), ours("Tokens"))},
	} {
		for _, surface := range []struct{ name, path, body string }{
			{"JSON", "/v1/responses", simple},
			{"SSE", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`},
			{"Chat", "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`},
		} {
			h.ups["A"].Enqueue(upstreamtest.Script{Header: tc.upstream})
			resp, b := send(t, h, http.MethodPost, surface.path, teamAKey, surface.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s, %s: %d %s", tc.name, surface.name, resp.StatusCode, b)
			}
			for suffix, want := range tc.want {
				got := resp.Header.Values("X-Ratelimit-" + suffix)
				switch {
				case want == "" && len(got) != 0:
					t.Errorf("%s, %s: x-ratelimit-%s %q, want none", tc.name, surface.name, suffix, got)
				case want == "*" && len(got) != 1:
					t.Errorf("%s, %s: x-ratelimit-%s %q, want one", tc.name, surface.name, suffix, got)
				case want != "" && want != "*" && (len(got) != 1 || got[0] != want):
					t.Errorf("%s, %s: x-ratelimit-%s %q, want %q", tc.name, surface.name, suffix, got, want)
				}
			}
		}
	}
}

// A budget's first read of the usage store happens outside the limiter's
// lock: a slow store holds that key's admission, not every other key's.
func TestLocalLimiterSeedsOutsideItsLock(t *testing.T) {
	release := make(chan struct{})
	reading := make(chan struct{})
	l := &gateway.LocalLimiter{Seed: func(ctx context.Context, key, from, to string) (int64, error) {
		if key == "slow" {
			close(reading)
			<-release
		}
		return 0, nil
	}}
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		if adm, lerr := l.Admit(context.Background(), "slow", store.KeyLimits{TokensPerDay: 1000}, 10); lerr == nil {
			adm.Done(0)
		}
	}()
	<-reading
	fast := make(chan *gateway.LimitError, 1)
	go func() {
		adm, lerr := l.Admit(context.Background(), "fast", store.KeyLimits{RPM: 10}, 10)
		if lerr == nil {
			adm.Done(0)
		}
		fast <- lerr
	}()
	select {
	case lerr := <-fast:
		if lerr != nil {
			t.Fatalf("fast key refused: %v", lerr)
		}
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("another key's admission waited for a budget's store read")
	}
	close(release)
	<-slowDone
}

// TestLocalLimiterRetriesAFailedSeed: a read of the usage store that fails
// does not count as the period's total; the next admission reads again,
// and a budget the store shows spent is refused from then on.
func TestLocalLimiterRetriesAFailedSeed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget store.KeyLimits
	}{
		{"day", store.KeyLimits{TokensPerDay: 300}},
		{"month", store.KeyLimits{TokensPerMonth: 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeDown, reads := true, 0
			now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
			lim := &gateway.LocalLimiter{Now: func() time.Time { return now }, Seed: func(context.Context, string, string, string) (int64, error) {
				reads++
				if storeDown {
					return 0, errors.New("store unavailable")
				}
				return 500, nil
			}}
			adm, lerr := lim.Admit(context.Background(), "k", tc.budget, 1)
			if lerr != nil {
				t.Fatalf("with the store down: %+v, want admitted (fail open)", lerr)
			}
			adm.Done(1)
			// While reads fail, the next admissions do not each wait for one.
			adm, lerr = lim.Admit(context.Background(), "k", tc.budget, 1)
			if lerr != nil || reads != 1 {
				t.Fatalf("right after a failed read: %+v, %d reads, want admitted without another read", lerr, reads)
			}
			adm.Done(1)
			storeDown = false
			now = now.Add(10 * time.Second)
			if _, lerr := lim.Admit(context.Background(), "k", tc.budget, 1); lerr == nil || lerr.Code != gateway.CodeInsufficientQuota {
				t.Fatalf("with the store back: %+v, want %s", lerr, gateway.CodeInsufficientQuota)
			}
		})
	}
}
