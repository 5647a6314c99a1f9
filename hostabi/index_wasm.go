//go:build wasm

package hostabi

func skipString(b []byte, i int) (int, error) { return swarSkipString(b, i) }
func hasBackslash(raw []byte) bool            { return swarIndexByte(raw, '\\') >= 0 }

func lastIndexByte(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}
