//go:build !wasip1

// Package policies holds Sluice's first-party policies, written with the Go
// SDK in the recover, replay and rewrite folders, built to recover.wasm,
// replay.wasm and rewrite.wasm (go generate, or build.sh) and embedded here as
// the gateway's defaults. A policy_dir file with the same name overrides one.
package policies

import "embed"

//go:generate ./build.sh

//go:embed *.wasm
var files embed.FS

// Defaults returns the embedded policy modules by file name
// ("recover.wasm", "replay.wasm", "rewrite.wasm"), for plugins.Options.Embedded.
// Modules are ordered by file name; name a custom policy "10-….wasm" to be
// asked before these.
func Defaults() map[string][]byte {
	des, _ := files.ReadDir(".")
	out := make(map[string][]byte, len(des))
	for _, de := range des {
		b, err := files.ReadFile(de.Name())
		if err == nil {
			out[de.Name()] = b
		}
	}
	return out
}
