package plugins

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/hostabi"
)

// policySeries lists policy's per-hook series (calls, durations, faults) as
// "family hook" strings, sorted and deduplicated.
func policySeries(t *testing.T, r *Runtime, policy string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range r.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_policy_calls_total", "sluice_policy_call_duration_seconds", "sluice_policy_faults_total":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["policy"] == policy {
				seen[mf.GetName()+" "+labels["hook"]] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// TestPolicySeriesGoWithTheHooks: per-hook series exist only for the hooks
// a served policy answers (README, Observability): unloading a policy
// deletes them, and so does a new version that no longer answers a hook.
func TestPolicySeriesGoWithTheHooks(t *testing.T) {
	odd, _ := oddEven(t)
	dir := t.TempDir()
	write(t, dir, "20-x.wasm", fixture(t, "trap"))     // recover
	write(t, dir, "p.wasm", fixture(t, "replay_json")) // recover (defers) and replay
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour})
	r.Recover(context.Background(), odd) // 20-x faults: a faults series too
	r.Replay(context.Background(), hostabi.ReplayInput{Code: "transport"})
	if got := strings.Join(policySeries(t, r, "20-x"), ","); !strings.Contains(got, "sluice_policy_faults_total recover") || !strings.Contains(got, "sluice_policy_calls_total recover") {
		t.Fatalf("20-x series: %s", got)
	}

	if err := os.Remove(filepath.Join(dir, "20-x.wasm")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "p.wasm", fixture(t, "recover_v1")) // recover only
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := policySeries(t, r, "20-x"); len(got) != 0 {
		t.Fatalf("an unloaded policy's series stay: %v", got)
	}
	want := "sluice_policy_call_duration_seconds recover,sluice_policy_calls_total recover"
	if got := strings.Join(policySeries(t, r, "p"), ","); got != want {
		t.Fatalf("p's series after it stopped answering replay: %s, want %s", got, want)
	}
	if out := r.Recover(context.Background(), odd); out.Verdict != hostabi.RecoverRecover {
		t.Fatalf("the new version does not count: %+v", out)
	}
	if n := counterValue(t, r, "sluice_policy_calls_total", map[string]string{"policy": "p", "hook": "recover", "outcome": "ok"}); n != 1 {
		t.Fatalf("calls_total{p,recover,ok} = %v", n)
	}
}
