package gateway

import "testing"

func TestSnapshotBase(t *testing.T) {
	for _, tc := range []struct {
		model, base string
		dated       bool
	}{
		{"gpt-5-2025-08-07", "gpt-5", true},
		{"gpt-4.1-mini-2025-04-14", "gpt-4.1-mini", true},
		{"claude-sonnet-4-20250514", "claude-sonnet-4", true},
		{"gpt-5", "", false},
		{"2025-08-07", "", false},  // a date alone names no model
		{"-2025-08-07", "", false}, // nothing before the date
		{"gpt-5-2025-8-07", "", false},
		{"gpt-5-2025x08-07", "", false},
		{"model-v20250514x", "", false},
		{"llama-3.1-8b", "", false},
		{"m-1234567", "", false}, // seven digits: not a date
	} {
		base, dated := snapshotBase(tc.model)
		if base != tc.base || dated != tc.dated {
			t.Errorf("snapshotBase(%q) = %q, %v; want %q, %v", tc.model, base, dated, tc.base, tc.dated)
		}
	}
}
