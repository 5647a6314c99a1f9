package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// activeSeries lists the sluice_policy_active series of policy as
// "sha256 state" strings.
func activeSeries(t *testing.T, r *Runtime, policy string) []string {
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
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "sluice_policy_active" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["policy"] == policy && m.GetGauge().GetValue() == 1 {
				out = append(out, labels["sha256"]+" "+labels["state"])
			}
		}
	}
	return out
}

// TestRejectedSwapKeepsServingVersionActive: after a swap is rejected the
// previous version keeps serving, so /admin/policies shows it as active
// (not "rejected", which an operator reads as "the policy is off"), with
// the refused file as rejected_sha256 and its error; the metric agrees.
func TestRejectedSwapKeepsServingVersionActive(t *testing.T) {
	dir := t.TempDir()
	v1, bad := fixture(t, "recover_v1"), fixture(t, "selftest_fail")
	write(t, dir, "p.wasm", v1)
	r := newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour})
	write(t, dir, "p.wasm", bad)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := statusOf(r, "p")
	if st.State != StateActive || st.SHA256 != shaOf(v1) || st.Source != SourceDir || st.Rejected != shaOf(bad) ||
		!strings.Contains(st.LastError, "self_test failed") {
		t.Fatalf("after a rejected swap: %+v", st)
	}
	if got, want := strings.Join(activeSeries(t, r, "p"), ";"), shaOf(v1)+" "+StateActive; got != want {
		t.Fatalf("sluice_policy_active: %q, want %q", got, want)
	}
	// With nothing serving, the name is rejected (and has no active series).
	if err := os.Remove(filepath.Join(dir, "p.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "p.wasm", bad)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := statusOf(r, "p"); st.State != StateRejected || st.SHA256 != "" || st.Rejected != shaOf(bad) {
		t.Fatalf("a rejected file with nothing serving: %+v", st)
	}
	if got := activeSeries(t, r, "p"); len(got) != 0 {
		t.Fatalf("sluice_policy_active for a name nothing serves: %q", got)
	}
}

// TestMissingPolicyDirWarns: a policy_dir that does not exist is created
// (so that it can be watched) with a warning naming it, since a mistyped
// path would otherwise leave the operator's policies unloaded in silence;
// an existing one gets no such warning.
func TestMissingPolicyDirWarns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies.d")
	logger, logs := captureLogs(t)
	newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Logger: logger})
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("policy dir not created: %v", err)
	}
	if !strings.Contains(logs.String(), "[WARN]") || !strings.Contains(logs.String(), "policy dir did not exist and was created") ||
		!strings.Contains(logs.String(), "dir="+dir) {
		t.Fatalf("no warning naming the created policy dir:\n%s", logs)
	}
	logger, logs = captureLogs(t)
	newRuntime(t, Options{PolicyDir: dir, Debounce: time.Hour, Logger: logger})
	if strings.Contains(logs.String(), "did not exist") {
		t.Fatalf("warned about an existing policy dir:\n%s", logs)
	}
}
