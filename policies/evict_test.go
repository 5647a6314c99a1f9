package policies

import (
	"bytes"
	"strings"
	"testing"
)

// TestEvictKeepsBytes: after Evict the modules read back unchanged (the
// kernel faults the pages in again from the binary).
func TestEvictKeepsBytes(t *testing.T) {
	before := map[string][]byte{}
	for name, b := range Defaults() {
		before[name] = bytes.Clone(b)
	}
	Evict()
	Evict() // twice is harmless
	for name, b := range Defaults() {
		if !bytes.Equal(b, before[name]) || !strings.HasPrefix(string(b), "\x00asm") {
			t.Fatalf("%s changed after Evict", name)
		}
	}
}
