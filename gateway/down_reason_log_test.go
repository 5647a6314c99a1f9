package gateway_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
)

// TestDownReasonChangeIsLogged: an upstream that stays down for another
// reason (its port refused connections; then it answers its probe with a
// 503) gets a WARN line for the change, as its going down did, once per
// change, not at each probe that finds the same reason; /admin/upstreams
// shows the reason the log last named.
func TestDownReasonChangeIsLogged(t *testing.T) {
	addr, pool, logs, logger := closedPortPool(t, time.Hour)
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	base := serveGateway(t, gw)
	adminReason := func() string {
		t.Helper()
		var st struct {
			Upstreams []struct {
				Name, State, Reason string
			}
		}
		resp, err := http.Get(base + "/admin/upstreams")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		if len(st.Upstreams) != 1 || st.Upstreams[0].State != "down" {
			t.Fatalf("/admin/upstreams: %+v; want only, down", st.Upstreams)
		}
		return st.Upstreams[0].Reason
	}
	ctx := context.Background()

	pool.ProbeAll(ctx)
	refused := adminReason()
	if !strings.Contains(logs.String(), "[WARN]  upstream state changed") || !strings.Contains(refused, "refused") {
		t.Fatalf("down for %q; log:\n%s", refused, logs.String())
	}
	pool.ProbeAll(ctx)
	if n := strings.Count(logs.String(), "upstream down reason changed"); n != 0 {
		t.Fatalf("%d reason changes logged for a probe that found the same reason:\n%s", n, logs.String())
	}

	var probes atomic.Int32
	uln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the reserved port %s was taken meanwhile: %v", addr, err)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	go func() { _ = hs.Serve(uln) }()
	t.Cleanup(func() { _ = hs.Close() })

	for range 3 {
		pool.ProbeAll(ctx)
	}
	if probes.Load() != 3 {
		t.Fatalf("%d probes reached the upstream, want 3", probes.Load())
	}
	if got := adminReason(); got != "probe: HTTP 503" {
		t.Fatalf("/admin/upstreams reason %q, want probe: HTTP 503", got)
	}
	var changes []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "upstream down reason changed") {
			changes = append(changes, l)
		}
	}
	if len(changes) != 1 || !strings.Contains(changes[0], "[WARN]") || !strings.Contains(changes[0], `to="probe: HTTP 503"`) ||
		!strings.Contains(changes[0], "refused") {
		t.Fatalf("the change from %q to the 503 logged as %q; want one WARN line naming both", refused, changes)
	}
}
