package config

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

// TestUpstreamWeightZeroIsRefused: a written weight: 0 reads as "no share",
// which the pool cannot serve (it would get the share of weight 1), so it
// is refused at its line, saying how to take an upstream out of rotation;
// an absent or empty weight is 1, and the bounds hold.
func TestUpstreamWeightZeroIsRefused(t *testing.T) {
	const zero = `line 3: upstreams[0].weight: must be at least 1: it is a share of the requests, and 0 is not "no share"; ` +
		`to take an upstream out of rotation, remove it from upstreams: (and from any route's targets)`
	for _, tt := range []struct {
		name, yaml, want string
		weight           int // the weight the pool is given, when accepted
	}{
		{"absent", "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n", "", 1},
		{"empty", "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    weight:\n", "", 1},
		{"null", "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    weight: ~\n", "", 1},
		{"one", "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    weight: 1\n", "", 1},
		{"the bound", "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    weight: 1000000\n", "", 1_000_000},
		{"zero", "upstreams:\n  - name: a\n    weight: 0\n    base_url: http://127.0.0.1:1/v1\n", zero, 0},
		{"zero in a flow mapping", "listen: 127.0.0.1:1\nupstreams:\n  - {name: a, base_url: http://127.0.0.1:1/v1, weight: 0}\n  - {name: b, base_url: http://127.0.0.1:2/v1, weight: 3}\n",
			zero, 0},
		{"zero from the environment", "upstreams:\n  - name: a\n    weight: ${W:-0}\n    base_url: http://127.0.0.1:1/v1\n", zero, 0},
		{"zero merged in", "upstreams:\n  - name: b\n    base_url: http://127.0.0.1:2/v1\n    weight: &w 0\n  - <<: {weight: *w}\n    name: a\n    base_url: http://127.0.0.1:1/v1\n",
			"upstreams[1].weight: must be at least 1", 0},
		{"negative", "upstreams:\n  - name: a\n    weight: -1\n    base_url: http://127.0.0.1:1/v1\n", "line 3: upstreams[0].weight: must not be negative", 0},
		{"past the bound", "upstreams:\n  - name: a\n    weight: 1000001\n    base_url: http://127.0.0.1:1/v1\n", "line 3: upstreams[0].weight: must be at most 1000000", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml), env(nil))
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v\nwant a line %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			// What the gateway hands the pool (cmd/sluice serve): an absent
			// weight, 0 in Go, is the pool's 1.
			p, err := upstream.NewPool([]upstream.Config{{Name: cfg.Upstreams[0].Name, BaseURL: cfg.Upstreams[0].BaseURL, Weight: cfg.Upstreams[0].Weight}}, upstream.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Upstreams()[0].Config().Weight; got != tt.weight {
				t.Fatalf("pool weight %d, want %d", got, tt.weight)
			}
		})
	}
}
