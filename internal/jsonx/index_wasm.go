//go:build wasm

package jsonx

func skipString(b []byte, i int) (int, error) { return swarSkipString(b, i) }
func HasBackslash(raw []byte) bool            { return swarIndexByte(raw, '\\') >= 0 }

func lastIndexByte(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}
