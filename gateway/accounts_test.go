package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/hashicorp/go-hclog"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

const (
	teamAKey = "sk-team-a-0123456789abcdef"
	teamBKey = "sk-team-b-0123456789abcdef"
)

// keyedHarness runs the gateway with auth required, the keys given and a
// Pebble store for run-time keys and usage.
func keyedHarness(t *testing.T, keys ...store.KeyRecord) (*harness, *store.PebbleStore) {
	t.Helper()
	return storeHarness(t, gateway.AccountsOptions{Required: true, Keys: keys,
		Pricing: map[string]gateway.Price{"gpt-fake-1": {Input: 1, Output: 2}}})
}

// storeHarness runs the gateway with the accounts acc and a Pebble store
// for run-time keys and usage.
func storeHarness(t *testing.T, acc gateway.AccountsOptions) (*harness, *store.PebbleStore) {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	acc.KeyStore, acc.Usage = st, st
	return newHarness(t, harnessConfig{opts: gateway.Options{Accounts: acc}}), st
}

func keyRec(name, secret string, models []string, l store.KeyLimits) store.KeyRecord {
	return store.KeyRecord{Name: name, SHA256: gateway.HashKey(secret), Models: models, Limits: l}
}

// send posts body to path with the credential (none when "").
func send(t *testing.T, h *harness, method, path, cred, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func codeOf(b []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Code
}

const simple = `{"model":"gpt-fake-1","input":"hi"}`

func TestKeysUnknownOrMissingKeyIs401OnEverySurface(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	for _, cred := range []string{"", "sk-not-a-sluice-key-000000"} {
		for _, path := range []string{"/v1/responses", "/v1/chat/completions"} {
			resp, b := send(t, h, http.MethodPost, path, cred, simple)
			if resp.StatusCode != 401 || codeOf(b) != "invalid_api_key" {
				t.Fatalf("%s with %q: %d %s", path, cred, resp.StatusCode, b)
			}
		}
		resp, b := send(t, h, http.MethodGet, "/v1/models", cred, "")
		if resp.StatusCode != 401 {
			t.Fatalf("models: %d %s", resp.StatusCode, b)
		}
	}
	// The WebSocket upgrade is refused before it happens.
	hdr := http.Header{"Authorization": {"Bearer sk-wrong-0000000000000"}}
	_, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(h.url, "http")+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("websocket upgrade without a key: %v %v", err, resp)
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the upstream saw %d requests", n)
	}
	// The right key passes.
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("valid key: %d %s", resp.StatusCode, b)
	}
}

func TestKeysModelNotAllowedIs403OverHTTPAndPerWebSocketFrame(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, []string{"gpt-fake-*"}, store.KeyLimits{}))
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-other","input":"hi","stream":true}`)
	if resp.StatusCode != 403 || codeOf(b) != "model_not_allowed" {
		t.Fatalf("HTTP: %d %s", resp.StatusCode, b)
	}
	hdr := http.Header{"Authorization": {"Bearer " + teamAKey}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create","model":"gpt-other","input":"hi"}`))
	_, frame, err := c.Read(ctx)
	if err != nil || !bytes.Contains(frame, []byte(`"status":403`)) || !bytes.Contains(frame, []byte("model_not_allowed")) {
		t.Fatalf("frame: %s %v", frame, err)
	}
	// The same socket still serves an allowed model.
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create","model":"gpt-fake-1","input":"hi"}`))
	for {
		_, frame, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(frame, []byte(`"response.completed"`)) {
			break
		}
	}
	if n := h.ups["A"].RequestCount(); n != 1 {
		t.Fatalf("the upstream saw %d requests, want 1", n)
	}
}

func TestSluiceKeyIsNeverForwarded(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	keyed := upstreamtest.NewServer(upstreamtest.Options{Name: "K", APIKey: "sk-upstream-own-key-123"})
	t.Cleanup(keyed.Close)
	for name, srv := range map[string]*upstreamtest.Server{"A": up, "K": keyed} {
		h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{name: srv}, keys: map[string]string{"K": "sk-upstream-own-key-123"},
			opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}}}})
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, b)
		}
		got := srv.Requests()[0].Header.Get("Authorization")
		switch name {
		case "A":
			if got != "" {
				t.Fatalf("an upstream without api_key got Authorization %q", got)
			}
		case "K":
			if got != "Bearer sk-upstream-own-key-123" {
				t.Fatalf("a keyed upstream got Authorization %q", got)
			}
		}
		if strings.Contains(h.logs.String(), teamAKey) {
			t.Fatal("the Sluice key is in the logs")
		}
	}
}

// limit asserts a 429 with code and the rate-limit headers.
func limit(t *testing.T, resp *http.Response, b []byte, code string) {
	t.Helper()
	if resp.StatusCode != 429 || codeOf(b) != code {
		t.Fatalf("want 429 %s, got %d %s", code, resp.StatusCode, b)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

func TestLimitRequestsPerMinute(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 2}), keyRec("team-b", teamBKey, nil, store.KeyLimits{}))
	for i := range 2 {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		if resp.Header.Get("X-Ratelimit-Limit-Requests") != "2" || resp.Header.Get("X-Ratelimit-Remaining-Requests") != []string{"1", "0"}[i] {
			t.Fatalf("request %d headers: %v", i, resp.Header)
		}
	}
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	limitType(t, b, "requests")
	if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" || resp.Header.Get("X-Ratelimit-Reset-Requests") == "" {
		t.Fatalf("headers: %v", resp.Header)
	}
	// Another key is not affected.
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamBKey, simple); resp.StatusCode != 200 {
		t.Fatalf("team-b: %d %s", resp.StatusCode, b)
	}
}

func TestLimitConcurrentStreams(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{Concurrent: 1}))
	h.ups["A"].Enqueue(upstreamtest.Script{Text: "slow answer", Deltas: 3, Gap: 300 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.ups["A"].WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "rate_limit_exceeded")
	wg.Wait()
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("after the first ended: %d %s", resp.StatusCode, b)
	}
}

func TestLimitTokensPerMinuteSettlesFromRealUsage(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TPM: 1000}))
	// Each body is ~2000 bytes: 500 tokens reserved. Without settling from
	// the real usage (a few tokens) only two would pass.
	body := `{"model":"gpt-fake-1","input":"` + strings.Repeat("x", 1960) + `"}`
	for i := range 4 {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, body)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		if resp.Header.Get("X-Ratelimit-Limit-Tokens") != "1000" {
			t.Fatalf("headers: %v", resp.Header)
		}
	}
	// A request estimated at the whole minute's tokens cannot pass now.
	big := `{"model":"gpt-fake-1","input":"` + strings.Repeat("x", 4400) + `"}`
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, big)
	limit(t, resp, b, "rate_limit_exceeded")
	if resp.Header.Get("X-Ratelimit-Remaining-Tokens") == "" || resp.Header.Get("X-Ratelimit-Reset-Tokens") == "" {
		t.Fatalf("headers: %v", resp.Header)
	}
	limitType(t, b, "tokens")
}

// limitType checks a 429's error type: OpenAI's "tokens" for a
// tokens-per-minute limit, "requests" for a requests-per-minute one.
func limitType(t *testing.T, b []byte, want string) {
	t.Helper()
	if got := gjson.GetBytes(b, "error.type").Str; got != want {
		t.Fatalf("error type %q, want %q: %s", got, want, b)
	}
}

func TestBudgetTokensPerDay(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 5}))
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
}

func TestBudgetTokensPerMonth(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerMonth: 5}))
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
}

type usageReport struct {
	Data  []store.UsageRecord `json:"data"`
	Total struct {
		Requests     int64    `json:"requests"`
		InputTokens  int64    `json:"input_tokens"`
		OutputTokens int64    `json:"output_tokens"`
		CostUSD      *float64 `json:"cost_usd"`
	} `json:"total"`
}

func TestUsageTotalsEqualTheUpstreamUsage(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	c := openai.NewClient(option.WithBaseURL(h.url+"/v1/"), option.WithAPIKey(teamAKey), option.WithMaxRetries(0))
	ctx := context.Background()
	var wantIn, wantOut int64

	// Responses, streamed.
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-fake-1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			wantIn += ev.Response.Usage.InputTokens
			wantOut += ev.Response.Usage.OutputTokens
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	// Responses, JSON.
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-fake-1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	wantIn += r.Usage.InputTokens
	wantOut += r.Usage.OutputTokens
	// Chat, streamed with the usage chunk.
	cs := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-fake-1",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	for cs.Next() {
		if u := cs.Current().Usage; u.TotalTokens > 0 {
			wantIn += u.PromptTokens
			wantOut += u.CompletionTokens
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if wantIn == 0 || wantOut == 0 {
		t.Fatalf("the fake reported no usage: %d %d", wantIn, wantOut)
	}
	// Usage is settled as each request ends, just after its last byte.
	var rep usageReport
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rep = usageReport{}
		if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 {
			t.Fatalf("admin/usage: %d", code)
		}
		if (rep.Total.Requests == 3 && strings.Count(h.logs.String(), "access: request") == 3) || time.Now().After(deadline) {
			break
		}
	}
	if rep.Total.Requests != 3 || rep.Total.InputTokens != wantIn || rep.Total.OutputTokens != wantOut {
		t.Fatalf("usage %+v, want 3 requests, %d in, %d out", rep.Total, wantIn, wantOut)
	}
	if rep.Total.CostUSD == nil || *rep.Total.CostUSD <= 0 {
		t.Fatalf("no cost: %+v", rep.Total)
	}
	// A range that ends before it starts, or a date that is none, is refused.
	for _, q := range []string{"from=2026-11-28&to=2026-11-01", "from=2026-11-01&to=soon"} {
		var e struct{ Error struct{ Code, Param string } }
		if code := h.getJSON("/admin/usage?"+q, &e); code != http.StatusBadRequest || e.Error.Code != "invalid_date" {
			t.Fatalf("/admin/usage?%s: %d %+v, want 400 invalid_date", q, code, e.Error)
		}
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_usage_tokens_total{key="team-a"`) {
		t.Fatal("no usage counter in /metrics")
	}
	// One access line per request, with the key's name and tokens, never its secret.
	logs := h.logs.String()
	if n := strings.Count(logs, "access: request"); n != 3 {
		t.Fatalf("%d access lines:\n%s", n, logs)
	}
	if !strings.Contains(logs, "key=team-a") || !strings.Contains(logs, "output_tokens=") || strings.Contains(logs, teamAKey) {
		t.Fatalf("access log:\n%s", logs)
	}
}

func TestAdminKeysLifecycle(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("from-config", teamBKey, nil, store.KeyLimits{}))
	admin := func(method, path, body string) (int, []byte) {
		resp, b := send(t, h, method, path, "", body)
		return resp.StatusCode, b
	}
	code, b := admin(http.MethodPost, "/admin/keys", `{"name":"ci","models":["gpt-fake-*"],"limits":{"rpm":100}}`)
	var created struct{ Name, Key string }
	_ = json.Unmarshal(b, &created)
	if code != 201 || created.Name != "ci" || !strings.HasPrefix(created.Key, "sk-sluice-") {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := admin(http.MethodPost, "/admin/keys", `{"name":"ci"}`); code != 409 {
		t.Fatalf("duplicate: %d %s", code, b)
	}
	if code, b := admin(http.MethodDelete, "/admin/keys/from-config", ``); code != 409 {
		t.Fatalf("config key delete: %d %s", code, b)
	}
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", created.Key, simple); resp.StatusCode != 200 {
		t.Fatalf("new key: %d %s", resp.StatusCode, b)
	}
	code, b = admin(http.MethodGet, "/admin/keys", "")
	if code != 200 || !bytes.Contains(b, []byte(`"name":"ci"`)) || !bytes.Contains(b, []byte(`"source":"config"`)) || bytes.Contains(b, []byte(created.Key)) {
		t.Fatalf("list: %d %s", code, b)
	}
	if code, b := admin(http.MethodPatch, "/admin/keys/ci", `{"models":["other-*"]}`); code != 200 {
		t.Fatalf("patch: %d %s", code, b)
	}
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", created.Key, simple); resp.StatusCode != 403 {
		t.Fatalf("after patch: %d %s", resp.StatusCode, b)
	}
	if code, b := admin(http.MethodDelete, "/admin/keys/ci", ""); code != 204 {
		t.Fatalf("delete: %d %s", code, b)
	}
	time.Sleep(1100 * time.Millisecond) // an unknown key reloads the store at most once a second
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", created.Key, simple); resp.StatusCode != 401 {
		t.Fatalf("after delete: %d %s", resp.StatusCode, b)
	}
	if strings.Contains(h.logs.String(), created.Key) {
		t.Fatal("a secret is in the logs")
	}
}

func TestNoAuthRequiredKeepsPassThrough(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", "sk-client-secret", simple); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := h.ups["A"].Requests()[0].Header.Get("Authorization"); got != "Bearer sk-client-secret" {
		t.Fatalf("upstream got %q", got)
	}
}

// TestAccessLogTimeToFirstEvent: a stream's access line times its first
// event, not its last. The upstream waits 50ms before each of its events,
// so the first one reaches the client well before the stream ends.
func TestAccessLogTimeToFirstEvent(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Slow(50 * time.Millisecond))
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s, want response.completed", last.typ)
	}
	line := regexp.MustCompile(`access: request.* ttfe=(\S+) duration=(\S+)`)
	var m []string
	for deadline := time.Now().Add(5 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = line.FindStringSubmatch(h.logs.String())
	}
	if m == nil {
		t.Fatalf("no access line with a ttfe:\n%s", h.logs.String())
	}
	ttfe, err1 := time.ParseDuration(m[1])
	took, err2 := time.ParseDuration(m[2])
	if err1 != nil || err2 != nil {
		t.Fatalf("access line %q: %v %v", m[0], err1, err2)
	}
	if took-ttfe < 100*time.Millisecond {
		t.Fatalf("ttfe %v of a %v stream: it times a later event than the first", ttfe, took)
	}
}

// A PATCH's limits merge field by field: naming one limit leaves the others
// as they were, so that tightening tpm cannot silently drop rpm. Bodies
// the API cannot read unambiguously are refused, naming the field.
func TestAdminKeysPatchMergesLimitsAndRefusesAmbiguousBodies(t *testing.T) {
	h, _ := keyedHarness(t)
	admin := func(method, path, body string) (int, []byte) {
		resp, b := send(t, h, method, path, "", body)
		return resp.StatusCode, b
	}
	if code, b := admin(http.MethodPost, "/admin/keys", `{"name":"ci","limits":{"rpm":100,"tpm":5000}}`); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	limitsOf := func(b []byte) store.KeyLimits {
		var v struct{ Limits store.KeyLimits }
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		return v.Limits
	}
	for _, step := range []struct {
		body string
		want store.KeyLimits
	}{
		{`{"limits":{"tpm":9000}}`, store.KeyLimits{RPM: 100, TPM: 9000}},
		{`{"limits":{"concurrent":2}}`, store.KeyLimits{RPM: 100, TPM: 9000, Concurrent: 2}},
		{`{"limits":{"rpm":0}}`, store.KeyLimits{TPM: 9000, Concurrent: 2}},
		{`{"models":["gpt-*"]}`, store.KeyLimits{TPM: 9000, Concurrent: 2}},
	} {
		code, b := admin(http.MethodPatch, "/admin/keys/ci", step.body)
		if code != 200 || limitsOf(b) != step.want {
			t.Fatalf("PATCH %s: %d %s, want limits %+v", step.body, code, b, step.want)
		}
	}
	for _, bad := range []struct {
		method, path, body, param string
		code                      string // when set: a repeated key has the code /v1 gives it
	}{
		{http.MethodPatch, "/admin/keys/ci", `{"limits":{"rpm":5,"rpm":0}}`, "limits.rpm", "duplicate_key"},
		{http.MethodPatch, "/admin/keys/ci", `{"limits":{"rpm":5,"RPM":0}}`, "limits.RPM", "duplicate_key"},
		{http.MethodPost, "/admin/keys", `{"name":"a","name":"b"}`, "name", "duplicate_key"},
		{http.MethodPatch, "/admin/keys/ci", `{"limits":{"rpm":"5"}}`, "limits.rpm", ""},
		{http.MethodPatch, "/admin/keys/ci", `{"models":"gpt-*"}`, "models", ""},
		{http.MethodPatch, "/admin/keys/ci", `{"name":"other"}`, "name", ""},
		{http.MethodPatch, "/admin/keys/ci", `{"limits":{"rpm":1}} {"limits":{"rpm":0}}`, "", ""},
		{http.MethodPatch, "/admin/keys/ci", `[]`, "", ""},
		{http.MethodPost, "/admin/keys", `{"name":"x","limits":{"rpm":-1}}`, "limits.rpm", ""},
		{http.MethodPost, "/admin/keys", `{"name":"x","bogus":1}`, "bogus", ""},
		{http.MethodPatch, "/admin/keys/ci", `{"limits":{"rpmx":1}}`, "limits.rpmx", ""},
		{http.MethodPatch, "/admin/keys/ci", `{"models":["gpt-*",5]}`, "models[1]", "invalid_type"},
		{http.MethodPatch, "/admin/keys/ci", `{"limits":{"Rpm":5}}`, "limits.Rpm", ""},
		{http.MethodPost, "/admin/keys", `{"NAME":"x"}`, "NAME", ""},
	} {
		code, b := admin(bad.method, bad.path, bad.body)
		var e struct {
			Error struct{ Message, Param, Code string }
		}
		_ = json.Unmarshal(b, &e)
		if bad.code != "" && e.Error.Code != bad.code {
			t.Errorf("%s %s %s: code %q, want %s", bad.method, bad.path, bad.body, e.Error.Code, bad.code)
		}
		if code != http.StatusBadRequest || e.Error.Param != bad.param || strings.Contains(e.Error.Message, "Go ") {
			t.Errorf("%s %s %s: %d %s, want 400 naming %q", bad.method, bad.path, bad.body, code, b, bad.param)
		}
	}
	if code, b := admin(http.MethodGet, "/admin/keys", ""); code != 200 || !bytes.Contains(b, []byte(`"tpm":9000`)) || bytes.Contains(b, []byte(`"name":"a"`)) || bytes.Contains(b, []byte(`"name":"b"`)) {
		t.Fatalf("a refused body changed the keys: %d %s", code, b)
	}
}

// Without a usage store, a key's token budgets live in memory; the gateway
// says so at start instead of letting a restart silently reset them.
func TestBudgetsWithoutAStoreAreWarnedAbout(t *testing.T) {
	budget := keyRec("budgeted", teamAKey, nil, store.KeyLimits{TokensPerDay: 1000})
	plain := keyRec("plain", teamBKey, nil, store.KeyLimits{RPM: 10})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{budget, plain}}}})
	logs := h.logs.String()
	if !strings.Contains(logs, "token budgets are counted in memory only") || !strings.Contains(logs, "key=budgeted") || strings.Contains(logs, "key=plain") {
		t.Fatalf("start-up log:\n%s", logs)
	}
	stored, _ := keyedHarness(t, budget)
	if strings.Contains(stored.logs.String(), "in memory only") {
		t.Fatalf("warned with a store:\n%s", stored.logs.String())
	}
}

// The access line's model is the client's string made a bounded, valid
// UTF-8 value: raw bytes from a client do not reach the log as they are.
func TestAccessLogModelIsSanitised(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	model := "m\xff\xfe" + strings.Repeat("x", 300)
	if resp, _ := send(t, h, http.MethodPost, "/v1/responses", "", `{"model":"`+model+`","input":"hi"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	line := ""
	for deadline := time.Now().Add(5 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		line = grepLines(h.logs.String(), "access: request")
	}
	if line == "" || !utf8.ValidString(line) || strings.Contains(line, strings.Repeat("x", 200)) || !strings.Contains(line, "m\uFFFD") {
		t.Fatalf("access line: %q", line)
	}
}

// A Sluice key in Api-Key next to another credential in Authorization is
// still identified (its models and limits apply) and never reaches the
// upstream, with auth required or not.
func TestSluiceKeyInApiKeyBesideAuthorizationIsNotForwarded(t *testing.T) {
	for _, c := range []struct {
		required bool
		models   []string
		status   int
	}{
		// The key may not use the model: identified, its rule applies.
		{false, []string{"other-*"}, http.StatusForbidden},
		{true, []string{"other-*"}, http.StatusForbidden},
		// Allowed, it is served, and the upstream sees no Sluice key.
		{false, nil, http.StatusOK},
	} {
		h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: c.required,
			Keys: []store.KeyRecord{keyRec("team-a", teamAKey, c.models, store.KeyLimits{})}}}})
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(simple))
		req.Header.Set("Authorization", "Bearer sk-client-own-key-0123456789")
		req.Header.Set("Api-Key", teamAKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("required=%v models=%v: status %d, want %d", c.required, c.models, resp.StatusCode, c.status)
		}
		for _, r := range h.ups["A"].Requests() {
			for k, vs := range r.Header {
				for _, v := range vs {
					if strings.Contains(v, teamAKey) {
						t.Fatalf("the upstream got the Sluice key in %s", k)
					}
				}
			}
		}
	}
}

// unreadableUsage is a usage store whose reads fail the way a store that
// lost Redis does, naming its address.
type unreadableUsage struct{ store.UsageStore }

func (unreadableUsage) Usage(context.Context, string, string, string) ([]store.UsageRecord, error) {
	return nil, errors.New("store: unavailable: redis at 10.1.2.3:6379: dial tcp 10.1.2.3:6379: connect: connection refused")
}

// A store failure behind GET /admin/usage stays in the log: the caller gets
// a fixed message (SECURITY.md), not the store's address or error, as the
// gateway's own store's 503 store_unavailable with Retry-After (README
// "Scale-out with Redis").
func TestUsageStoreFailureIsNotShownToTheCaller(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Usage: unreadableUsage{openStore(t, t.TempDir())}}}})
	resp, err := http.Get(h.url + "/admin/usage")
	if err != nil {
		t.Fatal(err)
	}
	var e apiError
	decodeErr := json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if decodeErr != nil || resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(e.Error.Message, "10.1.2.3") || !strings.Contains(e.Error.Message, "see the gateway log") {
		t.Fatalf("%d %+v (%v)", resp.StatusCode, e.Error, decodeErr)
	}
	if e.Error.Code == nil || *e.Error.Code != "store_unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("code %v, Retry-After %q; want store_unavailable with a wait", e.Error.Code, resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(h.logs.String(), "10.1.2.3") {
		t.Fatalf("the store's error was not logged:\n%s", h.logs.String())
	}
}

// unreachableKeys is a key store that fails as one that lost Redis does,
// naming its address.
type unreachableKeys struct{ store.KeyStore }

var errKeysUnreachable = errors.New("store: unavailable: redis at 10.1.2.3:6379: dial tcp 10.1.2.3:6379: connect: connection refused")

func (unreachableKeys) CreateKey(context.Context, store.KeyRecord) error { return errKeysUnreachable }
func (unreachableKeys) GetKey(context.Context, string) (store.KeyRecord, error) {
	return store.KeyRecord{}, errKeysUnreachable
}
func (unreachableKeys) DeleteKey(context.Context, string) error { return errKeysUnreachable }

// A key store failure behind /admin/keys stays in the log: the caller gets
// a fixed message (SECURITY.md), not the store's address or error.
func TestKeyStoreFailureIsNotShownToTheCaller(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{KeyStore: unreachableKeys{st}}}})
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/admin/keys", `{"name":"k"}`},
		{http.MethodPatch, "/admin/keys/k", `{"models":["m"]}`},
		{http.MethodDelete, "/admin/keys/k", ``},
	} {
		resp, b := send(t, h, c.method, c.path, "", c.body)
		if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(b), "10.1.2.3") || !strings.Contains(string(b), "see the gateway log") {
			t.Fatalf("%s %s: %d %s", c.method, c.path, resp.StatusCode, b)
		}
	}
	if !strings.Contains(h.logs.String(), "10.1.2.3") {
		t.Fatalf("the store's error was not logged:\n%s", h.logs.String())
	}
}
