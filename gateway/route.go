package gateway

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

// Route sends the client models it matches to its targets, tried in order.
// Routes are matched in order; the first match wins. Without routes every
// usable upstream serves every model, as the pool chooses.
type Route struct {
	// Models are client model names: exact, or path.Match globs
	// ("gpt-5*"; a * does not cross a /).
	Models  []string
	Targets []RouteTarget
	// FirstByte bounds the wait for an upstream's response headers;
	// FirstToken the wait for its first event after them. A target that
	// stays silent is cancelled and the next one tried, never the same one
	// again. Zero: no bound beyond the gateway's header and idle timeouts.
	FirstByte  time.Duration
	FirstToken time.Duration
	// Stall is how long a stream may go without an event once content has
	// been sent (for the client stream's continuation); zero: the idle
	// timeout.
	Stall time.Duration
	// Continuation is auto, restart or off ("" = auto): what the client
	// stream does when a target breaks after content.
	Continuation string
}

// RouteTarget is one entry of a route's targets.
type RouteTarget struct {
	Upstream string // a configured upstream's name
	Model    string // the model sent upstream; "" sends the client's model
}

// Continuation modes of a route.
const (
	ContinuationAuto    = "auto"
	ContinuationRestart = "restart"
	ContinuationOff     = "off"
)

// routeTable matches client models to routes.
type routeTable struct {
	routes []Route
}

// newRouteTable validates routes against the pool; errors name the route
// by its index, as the config does.
func newRouteTable(routes []Route, pool *upstream.Pool) (*routeTable, error) {
	rt := &routeTable{}
	for i, r := range routes {
		key := fmt.Sprintf("routes[%d]", i)
		if len(r.Models) == 0 {
			return nil, fmt.Errorf("gateway: %s.models: is required", key)
		}
		for j, m := range r.Models {
			if err := checkModelPattern(m); err != nil {
				return nil, fmt.Errorf("gateway: %s.models[%d]: %w", key, j, err)
			}
		}
		if len(r.Targets) == 0 {
			return nil, fmt.Errorf("gateway: %s.targets: is required", key)
		}
		for j, t := range r.Targets {
			if pool.Get(t.Upstream) == nil {
				return nil, fmt.Errorf("gateway: %s.targets[%d].upstream: %q is not a configured upstream", key, j, t.Upstream)
			}
		}
		switch r.Continuation {
		case "", ContinuationAuto, ContinuationRestart, ContinuationOff:
		default:
			return nil, fmt.Errorf("gateway: %s.continuation: %q is not one of auto, restart, off", key, r.Continuation)
		}
		r.Models = append([]string(nil), r.Models...)
		r.Targets = append([]RouteTarget(nil), r.Targets...)
		if r.Continuation == "" {
			r.Continuation = ContinuationAuto
		}
		rt.routes = append(rt.routes, r)
		for _, t := range r.Targets {
			if t.Model != "" {
				pool.RegisterTarget(upstream.Target{Upstream: pool.Get(t.Upstream), Model: t.Model})
			}
		}
	}
	return rt, nil
}

// checkModelPattern checks a route's model name or glob.
func checkModelPattern(p string) error {
	if strings.TrimSpace(p) == "" {
		return fmt.Errorf("must not be empty")
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("%q is not a valid pattern (%v)", p, err)
	}
	return nil
}

// isGlob reports whether a route model is a pattern rather than a name.
func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// match returns the first route naming model, or nil.
func (rt *routeTable) match(model string) *Route {
	if rt == nil {
		return nil
	}
	for i := range rt.routes {
		for _, p := range rt.routes[i].Models {
			if p == model {
				return &rt.routes[i]
			}
			if ok, _ := path.Match(p, model); ok {
				return &rt.routes[i]
			}
		}
	}
	return nil
}

// names are the route models that are plain names (no glob), sorted: what
// /v1/models lists besides the upstreams' models.
func (rt *routeTable) names() []string {
	if rt == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, r := range rt.routes {
		for _, p := range r.Models {
			if !isGlob(p) && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// targets resolves the route's targets for a client model: a target
// without a model of its own sends the client's.
func (r *Route) targets(pool *upstream.Pool, clientModel string) []upstream.Target {
	out := make([]upstream.Target, 0, len(r.Targets))
	for _, t := range r.Targets {
		u := pool.Get(t.Upstream)
		if u == nil {
			continue
		}
		m := t.Model
		if m == "" {
			m = clientModel
		}
		out = append(out, upstream.Target{Upstream: u, Model: m})
	}
	return out
}
