package upstream

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// markState puts u in state directly, as a probe's answer would.
func markState(u *Upstream, s State) {
	u.mu.Lock()
	u.state = s
	u.mu.Unlock()
}

// TestPickSharesSequentialTrafficByWeight: with nothing in flight every
// upstream is equally loaded, and the weights still decide the share of
// sequential picks (README: `weight`), interleaved rather than in bursts; a
// down upstream gets none.
func TestPickSharesSequentialTrafficByWeight(t *testing.T) {
	tests := []struct {
		name    string
		weights []int // upstreams u0, u1, …; 0 is the default weight 1
		down    []int // indexes of upstreams whose probe failed
		picks   int
		want    []int  // picks each upstream gets
		order   string // the first picks, by name
	}{
		{name: "3:1", weights: []int{3, 1}, picks: 20, want: []int{15, 5}, order: "u0 u0 u1 u0"},
		{name: "1:3", weights: []int{1, 3}, picks: 20, want: []int{5, 15}, order: "u1 u0 u1 u1"},
		{name: "equal weights alternate", weights: []int{1, 1}, picks: 20, want: []int{10, 10}, order: "u0 u1 u0 u1"},
		{name: "default weight is 1", weights: []int{0, 1}, picks: 20, want: []int{10, 10}, order: "u0 u1 u0 u1"},
		{name: "three equal rotate", weights: []int{2, 2, 2}, picks: 21, want: []int{7, 7, 7}, order: "u0 u1 u2 u0 u1 u2"},
		{name: "2:1:1", weights: []int{2, 1, 1}, picks: 20, want: []int{10, 5, 5}, order: "u0 u1 u2 u0"},
		{name: "down target gets nothing", weights: []int{3, 1}, down: []int{0}, picks: 20, want: []int{0, 20}, order: "u1 u1 u1 u1"},
		{name: "down target leaves the others their ratio", weights: []int{1, 3, 1}, down: []int{1}, picks: 20, want: []int{10, 0, 10}, order: "u0 u2 u0 u2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			var cfgs []Config
			for i, w := range tt.weights {
				cfgs = append(cfgs, Config{Name: fmt.Sprintf("u%d", i), BaseURL: fmt.Sprintf("http://127.0.0.1:%d/v1", i+1), Weight: w})
			}
			p := newTestPool(t, c, cfgs...)
			for _, i := range tt.down {
				markState(p.Upstreams()[i], StateDown)
			}
			got := make([]int, len(tt.weights))
			var order []string
			for range tt.picks {
				u, err := p.Pick(nil)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range p.Upstreams() {
					if v == u {
						got[i]++
					}
				}
				order = append(order, u.Name())
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("%d sequential picks: %v, want %v (weights %v)", tt.picks, got, tt.want, tt.weights)
			}
			if first := strings.Join(order[:len(strings.Fields(tt.order))], " "); first != tt.order {
				t.Errorf("first picks %q, want %q", first, tt.order)
			}
		})
	}
}

// TestPickLeastLoadedBeforeWeights: the weighted share is only among the
// equally loaded; an upstream with fewer requests in flight per unit of
// weight is still picked first, whatever the round-robin would say, and a
// cooling one not at all.
func TestPickLeastLoadedBeforeWeights(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := newTestPool(t, c, Config{Name: "heavy", BaseURL: "http://127.0.0.1:1/v1", Weight: 3}, Config{Name: "light", BaseURL: "http://127.0.0.1:2/v1"})
	heavy, light := p.Get("heavy"), p.Get("light")
	release := heavy.Acquire() // 1/3 against 0/1
	for i := range 4 {
		if u, _ := p.Pick(nil); u != light {
			t.Fatalf("pick %d = %s, want the idle light", i, u.Name())
		}
	}
	release()
	light.Acquire() // 0/3 against 1/1
	for i := range 4 {
		if u, _ := p.Pick(nil); u != heavy {
			t.Fatalf("pick %d = %s, want the idle heavy", i, u.Name())
		}
	}
	p.Cooldown(heavy, time.Minute, "429")
	if u, _ := p.Pick(nil); u != light {
		t.Fatalf("picked %s while heavy cools down", u.Name())
	}
}

// TestPickWeightsUnderConcurrentPicks: picks from many goroutines at once
// (none holding a request) share as sequential ones do: the round-robin's
// state is updated under the pool's lock, so no pick is lost or doubled
// (run with -race).
func TestPickWeightsUnderConcurrentPicks(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := newTestPool(t, c, Config{Name: "a", BaseURL: "http://127.0.0.1:1/v1", Weight: 3}, Config{Name: "b", BaseURL: "http://127.0.0.1:2/v1"})
	const goroutines, each = 8, 50
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				u, err := p.Pick(nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[u.Name()]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got["a"] != 300 || got["b"] != 100 {
		t.Fatalf("400 concurrent picks: %v, want a 300, b 100", got)
	}
}
