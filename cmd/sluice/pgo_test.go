package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The binary a plain `go build` makes is optimised with default.pgo (Go's
// profile-guided optimisation, docs/ARCHITECTURE.md §11): `go version -m`
// lists the profile among the build settings. Renaming or moving the file
// would silently build without it.
func TestBinaryIsBuiltWithTheProfile(t *testing.T) {
	if strings.Contains(os.Getenv("GOFLAGS"), "-pgo=") {
		t.Skip("GOFLAGS chooses the profile (or none) for every build")
	}
	out, err := exec.Command("go", "version", "-m", binary).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*build\s+-pgo=\S*cmd/sluice/default\.pgo$`).Match(out) {
		t.Fatalf("the binary was not built with cmd/sluice/default.pgo; go version -m says:\n%s", out)
	}
}
