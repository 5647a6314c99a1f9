package gateway

import (
	"fmt"
	"testing"
)

// The usage metrics label at most maxModelLabels model names; later names
// share "other", names already labelled keep their label, and the bound is
// reported once.
func TestModelLabelsAreBounded(t *testing.T) {
	var l modelLabels
	warned := 0
	warn := func() { warned++ }
	for i := range maxModelLabels {
		if got, want := l.of(fmt.Sprint("m", i), warn), fmt.Sprint("m", i); got != want {
			t.Fatalf("model %d labelled %q", i, got)
		}
	}
	for _, name := range []string{"new-1", "new-2"} {
		if got := l.of(name, warn); got != "other" {
			t.Fatalf("%s past the bound labelled %q", name, got)
		}
	}
	if got := l.of("m0", warn); got != "m0" {
		t.Fatalf("a labelled model lost its label: %q", got)
	}
	if warned != 1 {
		t.Fatalf("warned %d times, want once", warned)
	}
}
