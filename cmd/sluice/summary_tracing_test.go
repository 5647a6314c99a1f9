package main

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestStartupSummaryTellsWhetherTracingRuns: the startup summary says
// whether spans are exported and where, and a sample_ratio without an
// otlp_endpoint, which traces nothing, is a WARN rather than silence.
func TestStartupSummaryTellsWhetherTracingRuns(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	const warning = "tracing.sample_ratio is set but tracing.otlp_endpoint is not: nothing is traced"
	for _, tc := range []struct {
		name, tracing, want string
		warns               bool
	}{
		{"no tracing", "", "config: tracing=off\n", false},
		{"ratio without endpoint", "tracing: {sample_ratio: 0.5}\n", "config: tracing=off\n", true},
		{"endpoint", "tracing: {otlp_endpoint: \"http://collector.example:4318\", sample_ratio: 0.25}\n",
			`config: tracing="on, OTLP to http://collector.example:4318/v1/traces, sample ratio 0.25"` + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr := startupSummary(t, t.TempDir(), "listen: 127.0.0.1:0\nupstreams:\n  - {name: A, base_url: \""+up.URL+"\"}\n"+tc.tracing)
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("summary lacks %q:\n%s", tc.want, stderr)
			}
			warned := false
			for _, line := range strings.Split(stderr, "\n") {
				if strings.Contains(line, "[WARN]") && strings.Contains(line, warning) {
					warned = true
				}
			}
			if warned != tc.warns {
				t.Errorf("WARN %q: %v, want %v:\n%s", warning, warned, tc.warns, stderr)
			}
		})
	}
}
