//go:build !wasip1

// Package policies holds Sluice's first-party policies, written with the Go
// SDK in the recover, replay and rewrite folders, built to recover.wasm,
// replay.wasm and rewrite.wasm (go generate, or build.sh) and embedded here as
// the gateway's defaults. A policy_dir file with the same name overrides one.
package policies

import (
	_ "embed"
	"unsafe"
)

//go:generate ./build.sh

// The modules are embedded as strings, which live in the binary's read-only
// data: Defaults hands them out without copying them onto the heap (about
// 8 MiB that an idle gateway would otherwise hold twice).
var (
	//go:embed recover.wasm
	recoverWasm string
	//go:embed replay.wasm
	replayWasm string
	//go:embed rewrite.wasm
	rewriteWasm string
)

// Defaults returns the embedded policy modules by file name
// ("recover.wasm", "replay.wasm", "rewrite.wasm"), for plugins.Options.Embedded.
// Modules are ordered by file name; name a custom policy "10-….wasm" to be
// asked before these.
//
// The slices alias read-only memory: they must not be written to (a write
// faults); copy one before changing it.
func Defaults() map[string][]byte {
	return map[string][]byte{
		"recover.wasm": readOnly(recoverWasm),
		"replay.wasm":  readOnly(replayWasm),
		"rewrite.wasm": readOnly(rewriteWasm),
	}
}

// readOnly is s's bytes without a copy (cap = len, so an append copies).
func readOnly(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
