//go:build linux

package policies

import (
	"syscall"
	"unsafe"
)

// Evict tells the kernel that the embedded modules' pages are not needed
// now: once the gateway has compiled them they are read again only when a
// policy falls back to its embedded default (a policy_dir file removed).
// They live in the executable's read-only data, so the kernel just drops them
// from this process's resident set (they stay in the page cache, clean and
// shared) and a later read faults them back from the binary. Without this
// an idle gateway keeps 8 MiB of module bytes resident that it read once.
func Evict() {
	page := uintptr(syscall.Getpagesize())
	for _, s := range []string{recoverWasm, replayWasm, rewriteWasm} {
		p := unsafe.StringData(s)
		addr := uintptr(unsafe.Pointer(p))
		skip := (page - addr%page) % page // whole pages inside s only
		if uintptr(len(s)) <= skip {
			continue
		}
		n := (uintptr(len(s)) - skip) &^ (page - 1)
		if n == 0 {
			continue
		}
		b := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), skip)), n)
		_ = syscall.Madvise(b, syscall.MADV_DONTNEED) // advice: nothing to do on failure
	}
}
