package plugins

import (
	"strings"
	"testing"
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
