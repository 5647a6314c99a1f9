package config

import (
	"strings"
	"testing"
)

func TestStreamsMalformedEvents(t *testing.T) {
	c, err := Parse(nil, env(nil))
	if err != nil || c.Streams.MalformedEvents != "skip" {
		t.Fatalf("default: %q %v", c.Streams.MalformedEvents, err)
	}
	c, err = Parse([]byte("streams:\n  malformed_events: fail\n"), env(nil))
	if err != nil || c.Streams.MalformedEvents != "fail" {
		t.Fatalf("fail: %q %v", c.Streams.MalformedEvents, err)
	}
	if _, err = Parse([]byte("streams:\n  malformed_events: ignore\n"), env(nil)); err == nil || !strings.Contains(err.Error(), "streams.malformed_events") {
		t.Fatalf("bad value: %v", err)
	}
}
