package config

import (
	"strings"
	"testing"
)

// Tests that pin behaviour a second sampled mutation run found unchecked.

// TestGaps2ResumeMaxBytesZeroRefused: streams.resume_max_bytes of 0 is
// refused like a negative one (a log that can hold nothing).
func TestGaps2ResumeMaxBytesZeroRefused(t *testing.T) {
	_, err := Parse([]byte("streams:\n  resume_max_bytes: 0\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "streams.resume_max_bytes: must be positive") {
		t.Fatalf("resume_max_bytes 0: %v", err)
	}
}

// TestGaps2DurableStreamsNeedAResumeWindow: streams.durable is accepted
// with the default resume window and refused with resume_window 0.
func TestGaps2DurableStreamsNeedAResumeWindow(t *testing.T) {
	if _, err := Parse([]byte("data_dir: /tmp/x\nstreams:\n  durable: true\n"), env(nil)); err != nil {
		t.Fatalf("durable with the default window: %v", err)
	}
	_, err := Parse([]byte("data_dir: /tmp/x\nstreams:\n  durable: true\n  resume_window: 0s\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "streams.durable: needs streams.resume_window > 0") {
		t.Fatalf("durable with resume_window 0: %v", err)
	}
}
