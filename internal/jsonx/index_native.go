//go:build !wasm

package jsonx

import "bytes"

// Natively bytes.IndexByte (SIMD) skips long strings at memory speed.

func indexByte(b []byte, c byte) int     { return bytes.IndexByte(b, c) }
func lastIndexByte(b []byte, c byte) int { return bytes.LastIndexByte(b, c) }

// skipString returns the index just past the string whose opening quote is
// at b[i].
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		if j > len(b) {
			return 0, ErrSyntax
		}
		k := indexByte(b[j:], '"')
		if k < 0 {
			return 0, ErrSyntax
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

// HasBackslash reports whether raw contains a backslash.
func HasBackslash(raw []byte) bool { return indexByte(raw, '\\') >= 0 }
