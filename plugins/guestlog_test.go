package plugins

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestGuestLogHasNoControlCharacters: what a guest logs reaches the text
// log without control characters, as the client-chosen fields the gateway
// logs: a newline would start a forged line, an escape sequence would
// recolour the terminal, a NUL would cut the line for some readers.
func TestGuestLogHasNoControlCharacters(t *testing.T) {
	gate := &initGate{}
	newRuntime(t, Options{Embedded: map[string][]byte{"chatty.wasm": fixture(t, "init_log")}, Logger: gate.logger()})
	logged := gate.String()
	var line string
	for _, l := range strings.Split(logged, "\n") {
		if strings.Contains(l, "policy: init") {
			line = l
		}
	}
	if !strings.Contains(line, "policy: init2026-01-01T00:00:00Z [ERROR] forged [31mredend") {
		t.Fatalf("the guest's line is not its message without control characters: %q (log %q)", line, logged)
	}
	if strings.ContainsAny(logged, "\x1b\x00") || strings.Contains(logged, "\n2026-01-01T00:00:00Z [ERROR] forged") {
		t.Fatalf("the guest forged or garbled a log line: %q", logged)
	}
}

// TestGuestLogIsBounded: a policy's lines reach the gateway's log within a
// budget (ABI.md §5). One call that logs a thousand lines and returns
// normally (never tripped, so it would do so on every request) writes at
// most logLinesPerCall of them; the rest are counted in
// sluice_policy_log_dropped_total and a warning says how many were dropped.
// A policy that logs a few lines per call has every line written.
func TestGuestLogIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name         string
		linesPerCall int
		calls        int
		wantWritten  int
		wantDropped  float64
		wantWarning  bool
	}{
		{"a thousand lines in one call", 1000, 1, logLinesPerCall, 1000 - logLinesPerCall, true},
		{"a few lines per call", 3, 5, 15, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := &initGate{}
			// The fixture logs as many lines as its config has bytes.
			config := json.RawMessage(`"` + strings.Repeat("x", tc.linesPerCall-2) + `"`)
			r := newRuntime(t, Options{Embedded: map[string][]byte{"chatty.wasm": fixture(t, "log_lines")},
				Config: map[string]json.RawMessage{"chatty": config}, Logger: gate.logger()})
			in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
			for range tc.calls {
				if out, tr := r.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover {
					t.Fatalf("the policy did not answer (verdict %d): %+v", out.Verdict, tr)
				}
			}
			logged := gate.String()
			if got := strings.Count(logged, "policy: line"); got != tc.wantWritten {
				t.Errorf("%d of the policy's lines were written, want %d", got, tc.wantWritten)
			}
			if got := counterValue(t, r, "sluice_policy_log_dropped_total", map[string]string{"policy": "chatty"}); got != tc.wantDropped {
				t.Errorf("sluice_policy_log_dropped_total{policy=\"chatty\"} = %v, want %v", got, tc.wantDropped)
			}
			warned := strings.Contains(logged, "[WARN]  policies: policy log lines dropped") &&
				strings.Contains(logged, "policy=chatty hook=recover dropped=")
			if warned != tc.wantWarning {
				t.Errorf("warning about dropped lines: %v, want %v (log %q)", warned, tc.wantWarning, logged)
			}
		})
	}
}

// TestLogBudgetRefills: the per-policy bucket of lines, with explicit times.
func TestLogBudgetRefills(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := newLogBudget(prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), t0)
	took := func(n int, at time.Time) int {
		got := 0
		for range n {
			if b.take(at) {
				got++
			}
		}
		return got
	}
	steps := []struct {
		at        time.Duration
		ask, want int
	}{
		{0, logLinesBurst + 10, logLinesBurst},                         // a full bucket, then nothing
		{time.Second, 2 * logLinesPerSecond, logLinesPerSecond},        // a second's refill
		{time.Second, 1, 0},                                            // no time, no line
		{time.Hour, 2 * logLinesBurst, logLinesBurst},                  // refilled only up to the burst
		{time.Hour + 100*time.Millisecond, 10, logLinesPerSecond / 10}, // in proportion to the time
	}
	for i, s := range steps {
		if got := took(s.ask, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (+%v): took %d of %d lines, want %d", i, s.at, got, s.ask, s.want)
		}
	}
}
