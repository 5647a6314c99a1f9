//go:build !linux && !wasip1

package policies

// Evict does nothing on this platform (see evict_linux.go).
func Evict() {}
