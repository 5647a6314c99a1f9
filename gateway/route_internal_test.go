package gateway

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

func TestRouteMatching(t *testing.T) {
	pool, err := upstream.NewPool([]upstream.Config{{Name: "primary", BaseURL: "http://127.0.0.1:1/v1"}, {Name: "backup", BaseURL: "http://127.0.0.1:2/v1"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	routes := []Route{
		{Models: []string{"gpt-5*", "fast"}, Targets: []RouteTarget{{Upstream: "primary"}, {Upstream: "backup", Model: "gpt-4.1"}}},
		{Models: []string{"gpt-5-mini"}, Targets: []RouteTarget{{Upstream: "backup"}}}, // shadowed by gpt-5*
		{Models: []string{"o[34]-*", "exact?"}, Targets: []RouteTarget{{Upstream: "backup"}}},
		{Models: []string{"*"}, Targets: []RouteTarget{{Upstream: "primary", Model: "catch-all"}}},
	}
	rt, err := newRouteTable(routes, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model string
		route int // -1: none
	}{
		{"gpt-5", 0}, {"gpt-5-mini", 0}, {"fast", 0}, // first match wins
		{"o3-mini", 2}, {"o4-pro", 2}, {"o5-x", 3}, {"exact1", 2}, {"exact", 3},
		{"faster", 3}, {"org/model", -1}, // path.Match: * does not cross a /
	} {
		got := rt.match(tt.model)
		want := (*Route)(nil)
		if tt.route >= 0 {
			want = &rt.routes[tt.route]
		}
		if got != want {
			t.Errorf("match(%q) = route %v, want %d", tt.model, got, tt.route)
		}
	}
	var none *routeTable
	if none.match("fast") != nil || none.names() != nil {
		t.Error("no routes must match nothing")
	}
	if got := strings.Join(rt.names(), ","); got != "fast,gpt-5-mini" {
		t.Errorf("names %q: want the plain names only", got)
	}
	// A target without a model sends the client's; targets keep their order.
	ts := rt.match("fast").targets(pool, "fast")
	if len(ts) != 2 || ts[0].Upstream.Name() != "primary" || ts[0].Model != "fast" || ts[1].Upstream.Name() != "backup" || ts[1].Model != "gpt-4.1" {
		t.Errorf("targets %v", ts)
	}
	// Targets with a model are known to the pool from the start.
	var known []string
	for _, st := range pool.TargetStatuses() {
		known = append(known, st.Upstream+"/"+st.Model)
	}
	if strings.Join(known, ",") != "primary/catch-all,backup/gpt-4.1" {
		t.Errorf("registered targets %v", known)
	}

	for _, bad := range []struct {
		r    Route
		want string
	}{
		{Route{Models: []string{"a"}, Targets: []RouteTarget{{Upstream: "nope"}}}, `gateway: routes[0].targets[0].upstream: "nope" is not a configured upstream`},
		{Route{Models: []string{"a["}, Targets: []RouteTarget{{Upstream: "primary"}}}, `gateway: routes[0].models[0]: "a[" is not a valid pattern (syntax error in pattern)`},
		{Route{Targets: []RouteTarget{{Upstream: "primary"}}}, `gateway: routes[0].models: is required`},
		{Route{Models: []string{"a"}}, `gateway: routes[0].targets: is required`},
		{Route{Models: []string{"a"}, Targets: []RouteTarget{{Upstream: "primary"}}, Continuation: "maybe"}, `gateway: routes[0].continuation: "maybe" is not one of auto, restart, off`},
	} {
		if _, err := newRouteTable([]Route{bad.r}, pool); err == nil || err.Error() != bad.want {
			t.Errorf("error %v, want %q", err, bad.want)
		}
	}
}
