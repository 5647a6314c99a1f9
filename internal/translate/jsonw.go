package translate

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/jsonx"
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
// hostile input from driving the recursive validator deep into the stack. The
// gateway applies its own, usually lower, limits.max_json_depth first.
const maxDepth = 512

// tooDeep reports whether b nests objects/arrays deeper than maxDepth,
// with the iterative check every entry point shares (internal/jsonx).
func tooDeep(b []byte) bool { return jsonx.CheckDepth(b, maxDepth) != nil }
