package jsonx

import (
	"math/bits"
	"unsafe"
)

// Under wazero with WithCloseOnContextDone every loop iteration of a guest
// costs a trip to the host (~50ns), and bytes.IndexByte is a byte-at-a-time
// loop on wasm. These scan 8 bytes per iteration instead (SWAR); wasm builds
// use them (index_wasm.go), native tests check them against the native ones.

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

func load64(b []byte, i int) uint64 { return *(*uint64)(unsafe.Pointer(&b[i])) }

// zeroBytes has the high bit set in each byte of x that is zero (exact for
// the lowest such byte, which is all the callers use).
func zeroBytes(x uint64) uint64 { return (x - lsb) & ^x & msb }

func swarIndexByte(b []byte, c byte) int {
	pat := uint64(c) * lsb
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if m := zeroBytes(load64(b, i) ^ pat); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// swarIndexQuoteOrBackslash returns the index of the first '"' or '\' in b.
func swarIndexQuoteOrBackslash(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := load64(b, i)
		if m := zeroBytes(x^('"'*lsb)) | zeroBytes(x^('\\'*lsb)); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] == '"' || b[i] == '\\' {
			return i
		}
	}
	return -1
}

// swarIndexStringSpecial returns the index of the first byte in b that ends
// a run of plain string bytes: '"', '\' or a control byte (below 0x20).
// Each of the three masks is exact at its lowest flagged byte, so the
// lowest bit of their union is too.
func swarIndexStringSpecial(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := load64(b, i)
		if m := zeroBytes(x^('"'*lsb)) | zeroBytes(x^('\\'*lsb)) | (x-' '*lsb)&^x&msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < ' ' {
			return i
		}
	}
	return -1
}

// swarSkipString returns the index just past the string whose opening quote
// is at b[i].
func swarSkipString(b []byte, i int) (int, error) {
	j := i + 1
	for j <= len(b) {
		k := swarIndexQuoteOrBackslash(b[j:])
		if k < 0 {
			break
		}
		if b[j+k] == '"' {
			return j + k + 1, nil
		}
		j += k + 2 // skip the escaped character
	}
	return 0, ErrSyntax
}
