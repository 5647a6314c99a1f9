package plugins

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/policies"
)

// TestPolicyMetricsOnlyForExportedHooks: per-hook policy series exist only
// for the hooks a policy answers; a series such as
// hook="recover",policy="rewrite" could never be non-zero.
func TestPolicyMetricsOnlyForExportedHooks(t *testing.T) {
	r := newRuntime(t, Options{
		Embedded: policies.Defaults(),
		Config: map[string]json.RawMessage{
			"rewrite": json.RawMessage(`{"model_aliases":{"a":"b"}}`),
		},
	})
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
	want := map[string]string{"recover": "recover", "replay": "replay", "rewrite": "rewrite_request"}
	seen := map[string]bool{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_policy_calls_total", "sluice_policy_call_duration_seconds":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if h, ok := want[labels["policy"]]; !ok || labels["hook"] != h {
				t.Errorf("%s has a series that can never be non-zero: %v", mf.GetName(), labels)
			}
			seen[labels["policy"]] = true
		}
	}
	for p := range want {
		if !seen[p] {
			t.Errorf("no per-hook series for policy %q (its own hook)", p)
		}
	}
}
