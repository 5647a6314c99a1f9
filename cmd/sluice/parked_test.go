package main

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestEmbeddedPoliciesParkedAtIdle: `sluice serve` with the defaults holds
// the embedded recover and replay policies parked (checked at load, no
// compiled code kept: docs/ARCHITECTURE.md, "Memory at idle"). The first
// failure that asks the replay policy is answered at once by its native
// twin, with the policy's config (the request is replayed on the next
// target); the module is compiled in the background and answers the next
// failure itself.
func TestEmbeddedPoliciesParkedAtIdle(t *testing.T) {
	a := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(a.Close)
	b := upstreamtest.NewServer(upstreamtest.Options{Name: "B"})
	t.Cleanup(b.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
data_dir: %q
log: {level: warn}
routes:
  - models: ["gpt-fake-1"]
    targets: [{upstream: A}, {upstream: B}]
upstreams:
  - {name: A, base_url: %q}
  - {name: B, base_url: %q}
policies:
  replay: {penalty_ms: 1}
# The second replay call waits for the module's first instance no longer
# than call_timeout: the default (50ms) is short for the race detector on a
# loaded machine, and a call that gives up is answered by the default.
policy_limits: {call_timeout: 5s}
`, filepath.Join(dir, "data"), a.URL, b.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, []string{"HOME=" + dir}, "serve", "--config", cfg)
	t.Cleanup(func() { _, _ = stop() })

	parked := func() map[string]bool {
		t.Helper()
		var got struct {
			Policies []struct {
				Name   string `json:"name"`
				Parked bool   `json:"parked"`
			} `json:"policies"`
		}
		getJSONInto(t, base+"/admin/policies", &got)
		out := map[string]bool{}
		for _, p := range got.Policies {
			out[p.Name] = p.Parked
		}
		return out
	}
	if p := parked(); !p["recover"] || !p["replay"] {
		t.Fatalf("after start: parked %v, want recover and replay parked", p)
	}

	// A capacity error before any content: the replay policy moves the
	// request to B and cools A down for penalty_ms (1ms), so A is asked
	// first again by the second request.
	rateLimited := upstreamtest.ErrorField([]byte(`{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}`), 1)
	for i, want := range []string{"stand_in", "ok"} {
		a.Enqueue(rateLimited)
		if got := streamTurn(t, base); got != "Hello from B" {
			t.Fatalf("request %d: %q, want B's answer after A's 429", i+1, got)
		}
		if n := policyCalls(t, base, "replay", want); n != 1 {
			t.Fatalf("request %d: replay calls with outcome %s = %v, want 1", i+1, want, n)
		}
		if i == 0 {
			deadline := time.Now().Add(60 * time.Second)
			for parked()["replay"] {
				if time.Now().After(deadline) {
					t.Fatal("replay still parked 60s after its first call")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !parked()["recover"] {
				t.Fatal("a replay call unparked recover")
			}
		}
	}
}

// getJSONInto decodes GET url's JSON body into v.
func getJSONInto(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// policyCalls is sluice_policy_calls_total for policy's hook of the same
// name and outcome, from /metrics.
func policyCalls(t *testing.T, base, policy, outcome string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^sluice_policy_calls_total\{hook="` + policy + `",outcome="` + outcome + `",policy="` + policy + `"\} (\S+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBinaryKeepsMethodDeadCodeElimination: nothing in the binary may make
// the linker keep every exported method (docs/ARCHITECTURE.md, "Memory at
// idle"). text/template's and html/template's executors call methods by
// name through reflect; linking either one (directly, or through gRPC's
// golang.org/x/net/trace, which the official OTLP exporter pulls in) grows
// the binary by about 15 MB and an idle gateway's RSS by about 9 MiB.
func TestBinaryKeepsMethodDeadCodeElimination(t *testing.T) {
	f, err := elf.Open(binary)
	if err != nil {
		t.Skipf("not an ELF binary here: %v", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		for _, pkg := range []string{"text/template.", "html/template.", "google.golang.org/grpc.", "golang.org/x/net/trace."} {
			if strings.HasPrefix(s.Name, pkg) {
				t.Fatalf("the binary links %s (symbol %s)", strings.TrimSuffix(pkg, "."), s.Name)
			}
		}
	}
	// And the effect itself: go-redis's client methods the store never
	// calls are not linked.
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "github.com/redis/go-redis/v9.cmdable.GeoRadiusByMember") {
			t.Fatalf("unused exported methods are linked (%s): something calls methods by name through reflect", s.Name)
		}
	}
}
