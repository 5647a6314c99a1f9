// Package jsonx holds the JSON checks every entry point runs before any
// recursive parser sees a document.
//
// Recursive JSON walkers (gjson's validator, encoding/json, the translators)
// recurse once per nesting level; a body of a few million '[' overflows the
// goroutine stack, which Go cannot recover from: the whole process dies.
// CheckDepth is iterative and runs first, so no recursive code ever sees a
// document nested deeper than the configured limit (docs/ARCHITECTURE.md,
// "Untrusted input").
//
// It is also the JSON engine of the policy ABI (hostabi): Document edits a
// body in place by path (the doc_* host functions, the SDK's test harness),
// with scanning, quoting and the primitives hostabi's decoders use. The
// policy SDK links it into every Go guest, so it imports nothing a guest does
// not already link (not even context; docs/ARCHITECTURE.md, "Packages and
// imports").
package jsonx

import (
	"bytes"
	"fmt"
)

// DefaultMaxDepth is the nesting limit used when none is configured. Real
// API bodies nest well under 20 levels (tool schemas are the deepest).
const DefaultMaxDepth = 128

// DepthError reports a document nested deeper than the limit.
type DepthError struct {
	Limit  int // the configured limit
	Offset int // byte offset of the bracket that crossed it
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("JSON nesting deeper than %d levels (at byte %d)", e.Limit, e.Offset)
}

// CheckDepth reports a *DepthError when b nests objects and arrays more than
// max levels deep. It does not validate the rest of the syntax; strings
// (with escapes) are skipped so brackets inside them do not count. It runs
// in one pass, without recursion and without allocating. max <= 0 means
// DefaultMaxDepth.
func CheckDepth(b []byte, max int) error {
	return checkDepth(nil, b, max)
}

// CheckDepthContext is CheckDepth that also stops, with ctx's error, when
// ctx ends: a client that went away does not keep a core busy. ctx is a
// context.Context; only its Err method is used. The parameter is that
// one-method interface so that this package does not import context: the
// policy SDK links it into every Wasm guest, where context's package
// initialization would cost about a kilobyte per guest.
func CheckDepthContext(ctx interface{ Err() error }, b []byte, max int) error {
	return checkDepth(ctx, b, max)
}

// ctxStride is how many bytes are scanned between context checks.
const ctxStride = 1 << 20

func checkDepth(ctx interface{ Err() error }, b []byte, max int) error {
	if max <= 0 {
		max = DefaultMaxDepth
	}
	depth := 0
	next := ctxStride
	for i := 0; i < len(b); i++ {
		if i >= next && ctx != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			next = i + ctxStride
		}
		switch b[i] {
		case '{', '[':
			depth++
			if depth > max {
				return &DepthError{Limit: max, Offset: i}
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		case '"':
			i = skipStringBody(b, i+1)
		}
	}
	return nil
}

// skipStringBody returns the index of the quote that closes the string whose
// body starts at i (or len(b)-1 when it never closes). Unlike skipString it
// takes the body, not the opening quote, and never fails.
func skipStringBody(b []byte, i int) int {
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b) - 1
		}
		q := i + j
		// An odd run of backslashes before the quote escapes it.
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
	return len(b) - 1
}
