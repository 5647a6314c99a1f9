package upstream_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
)

// A readiness probe carries the upstream's api_key, so it follows no
// redirect: Go's client would send the Authorization header along to the
// same host on another port (SECURITY.md: upstream keys are sent only to
// their own upstream). The 3xx is a failed probe whose reason says where
// the upstream pointed, without what may hold a key. Both the pool's
// default client and one built as `sluice serve` builds it are checked.
func TestProbeFollowsNoRedirect(t *testing.T) {
	const key = "sk-upstream-secret-0123456789"
	var mu sync.Mutex
	var leaked []string // Authorization headers the redirect target received
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"data":[{"id":"m"}]}`))
	}))
	defer other.Close()

	for _, tc := range []struct {
		name, location, wantReason string
		client                     *http.Client
	}{
		{name: "default client", location: other.URL + "/v1/models",
			wantReason: "probe: HTTP 307 redirect to " + other.URL + "/v1/models (the gateway follows no redirects: check the upstream's base_url)"},
		{name: "sluice serve's client", location: other.URL + "/v1/models",
			client:     &http.Client{Transport: gateway.NewTransport(time.Second, time.Second), Timeout: 30 * time.Second},
			wantReason: "probe: HTTP 307 redirect to " + other.URL + "/v1/models (the gateway follows no redirects"},
		{name: "userinfo and query left out", location: "http://user:pass@" + strings.TrimPrefix(other.URL, "http://") + "/v1/models?token=abc#frag",
			wantReason: "probe: HTTP 307 redirect to " + other.URL + "/v1/models?… (the gateway"},
		{name: "a Location echoing the key", location: other.URL + "/echo/" + key + "/models",
			wantReason: "probe: HTTP 307 redirect to a Location that holds the api_key (not shown)"},
		{name: "relative Location", location: "/elsewhere/models",
			wantReason: "/elsewhere/models (the gateway follows no redirects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			leaked = nil
			mu.Unlock()
			redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/models" {
					t.Errorf("the probe followed the redirect to %s", r.URL.Path)
				}
				w.Header().Set("Location", tc.location)
				w.WriteHeader(http.StatusTemporaryRedirect)
			}))
			defer redirector.Close()
			pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: redirector.URL + "/v1", APIKey: key}},
				upstream.Options{Client: tc.client})
			if err != nil {
				t.Fatal(err)
			}
			pool.ProbeAll(context.Background())
			st := pool.Get("A").Status(time.Now())
			if st.State != upstream.StateDown || !strings.Contains(st.Reason, tc.wantReason) {
				t.Errorf("state %s, reason %q; want down, with %q", st.State, st.Reason, tc.wantReason)
			}
			if strings.Contains(st.Reason, key) || strings.Contains(st.Reason, "pass") || strings.Contains(st.Reason, "token") {
				t.Errorf("the reason repeats a credential: %q", st.Reason)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(leaked) != 0 {
				t.Errorf("the redirect target received %d requests, Authorization %q", len(leaked), leaked)
			}
		})
	}
}
