package translate

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
)

// This file holds the small append-style JSON writer both directions use. The
// package never builds maps or reflects over structs to produce JSON: bodies
// and events are assembled by appending, and values taken from the input are
// copied as their raw JSON text (already validated), which keeps a 1 MiB
// Codex history to a couple of copies.

// appendInt appends n in decimal.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// appendKey appends `,"key":` (or `"key":` right after an opening brace).
func appendKey(dst []byte, key string) []byte {
	if n := len(dst); n > 0 && dst[n-1] != '{' && dst[n-1] != '[' {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

// present reports whether a JSON value exists and is not null; the Responses
// API treats an explicit null like an absent field.
func present(r gjson.Result) bool { return r.Exists() && r.Type != gjson.Null }

// maxDepth bounds object/array nesting in the JSON this package accepts.
// Real requests nest a tool schema a few dozen levels at most; the bound keeps
// hostile input from driving the recursive validator deep into the stack.
const maxDepth = 512

// tooDeep reports whether b nests objects/arrays deeper than maxDepth. It is a
// linear scan that only tracks strings and brackets; validity is checked
// separately.
func tooDeep(b []byte) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Jump to the closing quote: one not preceded by an odd number
			// of backslashes.
			j := i + 1
			for {
				k := bytes.IndexByte(b[j:], '"')
				if k < 0 {
					return false // unterminated: the validator rejects it
				}
				j += k
				n := 0
				for p := j - 1; p > i && b[p] == '\\'; p-- {
					n++
				}
				if n%2 == 0 {
					break
				}
				j++
			}
			i = j
		case '{', '[':
			depth++
			if depth > maxDepth {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}
