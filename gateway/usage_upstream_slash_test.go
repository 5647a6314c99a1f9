package gateway_test

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// An upstream's name may contain "/", as may a model's: the usage of each
// upstream is charged to it by its whole name, in the usage metrics, in
// GET /admin/usage and in the store's totals, never to the part of its name
// before the first "/" (two upstreams "team/a" and "team/b" are not one
// target "team").
func TestUsageNamesAnUpstreamWhoseNameHasASlash(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "team/a"}, {Name: "team/b"}},
		opts: gateway.Options{
			Accounts: gateway.AccountsOptions{Usage: st},
			Routes: []gateway.Route{
				{Models: []string{"ma"}, Targets: []gateway.RouteTarget{{Upstream: "team/a", Model: "org/m1"}}},
				{Models: []string{"mb"}, Targets: []gateway.RouteTarget{{Upstream: "team/b", Model: "org/m1"}}},
			},
		},
	})
	for _, model := range []string{"ma", "mb", "mb"} {
		resp := h.post("/v1/responses", `{"model":"`+model+`","input":"hi"}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("model %s: status %d", model, resp.StatusCode)
		}
	}
	waitAccessLines(t, h, 3)

	m := h.metrics()
	for _, series := range []string{
		`sluice_usage_requests_total{key="",model="org/m1",route="ma",target="team/a"} 1`,
		`sluice_usage_requests_total{key="",model="org/m1",route="mb",target="team/b"} 2`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_requests_total"))
		}
	}

	// The store's totals, as GET /admin/usage shows them.
	var targets []string
	eventually(t, "the usage of 3 requests in the store", func() bool {
		var rep usageReport
		if code := h.getJSON("/admin/usage", &rep); code != http.StatusOK {
			t.Fatalf("GET /admin/usage: %d", code)
		}
		targets = targets[:0]
		for _, r := range rep.Data {
			targets = append(targets, r.Target+"="+strconv.FormatInt(r.Requests, 10))
		}
		return rep.Total.Requests == 3
	})
	sort.Strings(targets)
	if got := strings.Join(targets, ","); got != "team/a=1,team/b=2" {
		t.Fatalf("GET /admin/usage targets %s, want team/a=1,team/b=2", got)
	}
}
