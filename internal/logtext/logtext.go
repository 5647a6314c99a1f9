// Package logtext makes text that someone else chose safe to put in a log
// line: the gateway's client-chosen fields (model names, key names) and a
// policy's log messages.
package logtext

import (
	"strings"
	"unicode"
)

// Printable returns s as valid UTF-8 (invalid bytes become U+FFFD) without
// control characters: a newline, an escape sequence or a NUL in it would
// let whoever chose the text forge or garble log lines.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
