package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/sluice-gw/sluice/hostabi"
)

// version and commit are stamped at build time:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/sluice
//
// (the justfile's build and release recipes do). Unstamped builds fall back
// to the Go build info (the module version, vcs.revision), then to "devel"
// and "unknown" (as in builds made with -buildvcs=false).
var (
	version string
	commit  string
)

// buildInfo is what `sluice version` prints.
type buildInfo struct {
	Version, Commit, Go string
	ABI                 int
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, ABI: hostabi.ABIVersion}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		if b.Commit == "" {
			var rev, modified string
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if rev != "" && modified == "true" {
				rev += " (modified)"
			}
			b.Commit = rev
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func printVersion(w io.Writer) {
	b := currentBuild()
	fmt.Fprintf(w, "sluice %s\ncommit:     %s\ngo:         %s\npolicy ABI: %d\n", b.Version, b.Commit, b.Go, b.ABI)
}
