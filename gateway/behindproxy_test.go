package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestStreamsBehindAKeepAliveProxy: a load balancer reuses its connections
// to the gateway for request after request; every stream must still reach
// its terminal event (a context cancelled on a reused connection would end
// streams early as client_gone).
func TestStreamsBehindAKeepAliveProxy(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}}, opts: gateway.Options{Store: st}})
	target, _ := url.Parse(h.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	// A transport of its own: sharing http.DefaultTransport with the test's
	// client (2 idle connections per host) ends about 1 stream in 500 early,
	// with Sluice of wave 1 as well; that case is open (see the README's
	// "Known issues").
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 16}
	defer rp.Transport.(*http.Transport).CloseIdleConnections()
	front := httptest.NewServer(rp)
	defer front.Close()
	base := front.URL
	const clients, each = 4, 200
	var mu sync.Mutex
	bad := map[string]int{}
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(respBody))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					mu.Lock()
					bad["error: "+err.Error()]++
					mu.Unlock()
					continue
				}
				r := sse.NewReader(resp.Body, 1<<20)
				last := ""
				for {
					ev, err := r.Next()
					if err != nil {
						break
					}
					last = ev.Name
				}
				resp.Body.Close()
				if last != "response.completed" {
					mu.Lock()
					bad["last event "+last]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d streams through a keep-alive proxy: %v\n%s", clients*each, bad, grep(h.logs.String(), "anchor")+grep(h.logs.String(), "ERROR")+grep(h.logs.String(), "WARN"))
	}
}
