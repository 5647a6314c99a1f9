package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// do sends method path with body and the headers given (name, value pairs;
// a name may repeat) and returns the answer, its body read.
func do(t *testing.T, h *harness, method, path, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// paramOf is the param of an OpenAI-shaped error body.
func paramOf(b []byte) string {
	var e struct {
		Error struct {
			Param *string `json:"param"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	if e.Error.Param == nil {
		return ""
	}
	return *e.Error.Param
}

// A known Sluice key is found in every value of every credential header: a
// second Authorization or Api-Key line, a comma-joined value, X-Api-Key.
// The request is identified by it (its limits apply: the answer carries its
// x-ratelimit headers) and the key never reaches an upstream without
// api_key (SECURITY.md, Secrets).
func TestSluiceKeyInAnyCredentialValueIsIdentifiedAndNotForwarded(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 1000})}}}})
	const own = "client-own-cred-0123456789"
	for _, c := range []struct {
		name    string
		headers []string
	}{
		{"second Authorization", []string{"Authorization", "Bearer " + own, "Authorization", "Bearer " + teamAKey}},
		{"second Api-Key", []string{"Api-Key", own, "Api-Key", teamAKey}},
		{"comma-joined Authorization", []string{"Authorization", "Bearer " + own + ", " + teamAKey}},
		{"comma-joined Api-Key", []string{"Api-Key", own + "," + teamAKey}},
		{"X-Api-Key beside Authorization", []string{"Authorization", "Bearer " + teamAKey, "X-Api-Key", teamAKey}},
		{"X-Api-Key alone", []string{"X-Api-Key", teamAKey}},
		{"quoted", []string{"Authorization", `Bearer "` + teamAKey + `"`}},
		{"with a semicolon", []string{"Authorization", "Bearer " + teamAKey + ";"}},
		{"Basic", []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(":"+teamAKey))}},
		{"Basic without padding", []string{"Authorization", "Basic " + base64.RawStdEncoding.EncodeToString([]byte("u:" + teamAKey + "x")[:len(teamAKey)+2])}},
		{"Basic of the key alone", []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(teamAKey))}},
		// A browser's cookies are not credentials to count (Cookie is never forwarded).
		{"many cookies", []string{"Authorization", "Bearer " + teamAKey, "Cookie", strings.Repeat("c=1; ", 20)}},
		// Identified by its Sluice key, a request sends no credential to an
		// upstream without api_key (SECURITY.md): not its own either.
		{"own X-Api-Key beside", []string{"Authorization", "Bearer " + teamAKey, "X-Api-Key", own, "OpenAI-Organization", own}},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := h.ups["A"]
			up.ClearRequests()
			for _, path := range []string{"/v1/responses", "/v1/chat/completions"} {
				body := simple
				if path == "/v1/chat/completions" {
					body = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
				}
				resp, b := do(t, h, http.MethodPost, path, body, c.headers...)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
				}
				if resp.Header.Get("X-Ratelimit-Limit-Requests") != "1000" {
					t.Fatalf("%s: not identified as team-a: x-ratelimit-limit-requests %q", path, resp.Header.Get("X-Ratelimit-Limit-Requests"))
				}
			}
			reqs := up.Requests()
			if len(reqs) != 2 {
				t.Fatalf("the upstream got %d requests, want 2", len(reqs))
			}
			for _, r := range reqs {
				for k, vs := range r.Header {
					for _, v := range vs {
						if strings.Contains(v, teamAKey) || strings.Contains(v, own) {
							t.Fatalf("the upstream got a client credential in %s: %q", k, v)
						}
					}
				}
			}
		})
	}
}

// Two different known Sluice keys in one request are refused: which key's
// models, limits and usage would apply is a guess. So is a request whose
// credential headers hold more words than the gateway looks up. Nothing
// reaches the upstream.
func TestTwoSluiceKeysInOneRequestAreRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Keys: []store.KeyRecord{
		keyRec("team-a", teamAKey, nil, store.KeyLimits{}), keyRec("team-b", teamBKey, nil, store.KeyLimits{})}}}})
	for _, headers := range [][]string{
		{"Authorization", "Bearer " + teamAKey, "Authorization", "Bearer " + teamBKey},
		{"Authorization", "Bearer " + teamAKey, "Api-Key", teamBKey},
		{"Api-Key", teamAKey + ", " + teamBKey},
		// More credentials than the gateway looks up, the key among them.
		{"Authorization", "Bearer " + strings.Repeat("x, ", 20) + teamAKey},
	} {
		resp, b := do(t, h, http.MethodPost, "/v1/responses", simple, headers...)
		if resp.StatusCode != http.StatusUnauthorized || codeOf(b) != "invalid_api_key" {
			t.Fatalf("%q: %d %s", headers, resp.StatusCode, b)
		}
		if strings.Contains(string(b), teamAKey) || strings.Contains(string(b), teamBKey) {
			t.Fatalf("the answer shows a key: %s", b)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// Without the admin token, every /admin/ path and /metrics answers 401
// invalid_admin_token, whatever the path or method: the router's 404 and 405
// would map the admin routes. With the token, they keep their 404 and 405.
func TestAdminPathsAre401WithoutTheTokenWhateverTheRoute(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// A handler mounted as an admin one, as --pprof mounts Go's profiles.
	profile := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "profile") })
	h := newHarness(t, harnessConfig{opts: gateway.Options{AdminToken: "adm-secret-0123456789",
		Accounts: gateway.AccountsOptions{KeyStore: st, Usage: st}, Admin: map[string]http.Handler{"/debug/pprof/heap": profile}}})
	for _, c := range []struct {
		method, path string
		withToken    int
	}{
		{http.MethodGet, "/debug/pprof/heap", http.StatusOK},
		{http.MethodOptions, "/admin/keys", http.StatusOK},
		{http.MethodOptions, "/metrics", http.StatusOK},
		{http.MethodGet, "/debug/pprof/other", http.StatusNotFound},
		{http.MethodGet, "/admin/keys/anything", http.StatusMethodNotAllowed},
		{http.MethodPut, "/admin/usage", http.StatusMethodNotAllowed},
		{http.MethodGet, "/admin/nope", http.StatusNotFound},
		{http.MethodGet, "/admin", http.StatusNotFound},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
	} {
		for _, cred := range []string{"", "Bearer wrong-token", "Bearer " + teamAKey} {
			var headers []string
			if cred != "" {
				headers = []string{"Authorization", cred}
			}
			resp, b := do(t, h, c.method, c.path, "", headers...)
			if resp.StatusCode != http.StatusUnauthorized || codeOf(b) != "invalid_admin_token" || resp.Header.Get("Allow") != "" {
				t.Fatalf("%s %s with %q: %d %s, want 401 invalid_admin_token", c.method, c.path, cred, resp.StatusCode, b)
			}
		}
		resp, b := do(t, h, c.method, c.path, "", "Authorization", "Bearer adm-secret-0123456789")
		if resp.StatusCode != c.withToken {
			t.Fatalf("%s %s with the token: %d %s, want %d", c.method, c.path, resp.StatusCode, b, c.withToken)
		}
	}
	// Outside the admin surfaces the router's answers are unchanged.
	if resp, b := do(t, h, http.MethodGet, "/nope", ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nope: %d %s", resp.StatusCode, b)
	}
}

// POST and PATCH /admin/keys refuse a negative limit or one above the
// bound (10^15: the limiters' float64 arithmetic is exact below 2^53) with
// 400 naming the field. A limit at the bound is accepted and its
// x-ratelimit headers report it.
func TestAdminKeysLimitsOutOfRangeNameTheField(t *testing.T) {
	h, _ := keyedHarness(t)
	admin := func(method, path, body string) (int, []byte) {
		resp, b := send(t, h, method, path, "", body)
		return resp.StatusCode, b
	}
	for _, c := range []struct{ limits, param string }{
		{`{"rpm":-1}`, "limits.rpm"},
		{`{"tokens_per_day":-5}`, "limits.tokens_per_day"},
		{`{"rpm":9223372036854775807}`, "limits.rpm"},
		{`{"tpm":1000000000000001}`, "limits.tpm"},
		{`{"concurrent":1000000000000001}`, "limits.concurrent"},
	} {
		code, b := admin(http.MethodPost, "/admin/keys", `{"name":"k1","limits":`+c.limits+`}`)
		if code != http.StatusBadRequest || paramOf(b) != c.param || codeOf(b) != "invalid_limit" {
			t.Fatalf("POST %s: %d %s, want 400 invalid_limit param %s", c.limits, code, b, c.param)
		}
	}
	code, b := admin(http.MethodPost, "/admin/keys", `{"name":"big","limits":{"rpm":1000000000000000,"tpm":1000000000000000}}`)
	var created struct{ Key string }
	if code != http.StatusCreated || json.Unmarshal(b, &created) != nil {
		t.Fatalf("POST at the bound: %d %s", code, b)
	}
	for _, c := range []struct{ limits, param string }{
		{`{"tpm":-1}`, "limits.tpm"},
		{`{"rpm":1000000000000001}`, "limits.rpm"},
	} {
		code, b := admin(http.MethodPatch, "/admin/keys/big", `{"limits":`+c.limits+`}`)
		if code != http.StatusBadRequest || paramOf(b) != c.param || codeOf(b) != "invalid_limit" {
			t.Fatalf("PATCH %s: %d %s, want 400 invalid_limit param %s", c.limits, code, b, c.param)
		}
	}
	resp, b := send(t, h, http.MethodPost, "/v1/responses", created.Key, simple)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %d %s", resp.StatusCode, b)
	}
	for k, want := range map[string]string{
		"X-Ratelimit-Limit-Requests": "1000000000000000", "X-Ratelimit-Remaining-Requests": "999999999999999",
		"X-Ratelimit-Limit-Tokens": "1000000000000000",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if resp.Header.Get("X-Ratelimit-Remaining-Tokens") == "" {
		t.Error("no X-Ratelimit-Remaining-Tokens")
	}
}

// On Redis, a limit at the bound reports exactly in the x-ratelimit headers
// (Lua numbers are float64: the bound keeps them exact).
func TestSharedLimitAtTheBoundReportsItsHeaders(t *testing.T) {
	const bound = 1_000_000_000_000_000
	r1, _, _ := sharedLimitReplicas(t, keyRec("big", teamAKey, nil, store.KeyLimits{RPM: bound, TPM: bound}))
	resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %d %s", resp.StatusCode, b)
	}
	for k, want := range map[string]string{
		"X-Ratelimit-Limit-Requests": "1000000000000000", "X-Ratelimit-Remaining-Requests": "999999999999999",
		// The first request's estimate (body bytes / 4, rounded up) is taken from a full bucket.
		"X-Ratelimit-Limit-Tokens": "1000000000000000", "X-Ratelimit-Remaining-Tokens": strconv.Itoa(bound - (len(simple)+3)/4),
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// A credential header the upstream's forward_headers lets through still
// never carries a Sluice key upstream.
func TestForwardedCredentialHeaderNeverCarriesTheKey(t *testing.T) {
	h := newHarness(t, harnessConfig{forward: map[string][]string{"A": {"X-Api-Key"}}, opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{RPM: 1000})}}}})
	resp, b := do(t, h, http.MethodPost, "/v1/responses", simple, "Authorization", "Bearer "+teamAKey, "X-Api-Key", teamAKey)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Ratelimit-Limit-Requests") != "1000" {
		t.Fatalf("%d %s, want team-a's answer", resp.StatusCode, b)
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
