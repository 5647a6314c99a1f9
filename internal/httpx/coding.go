// Package httpx holds HTTP rules that more than one layer of the gateway
// applies to the same header, so that each has one definition.
package httpx

import (
	"net/http"
	"strings"
)

// ContentCoding is h's Content-Encoding as one list, every header line's
// codings joined by ", ", in lower case: repeated lines are one
// comma-separated list (RFC 9110 §5.3), so "gzip" and "br" on two lines are
// "gzip, br", as on one line, and neither is taken for gzip alone. Empty
// elements do not count (RFC 9110 §5.6.1); coding names are
// case-insensitive (RFC 9110 §8.4.1).
func ContentCoding(h http.Header) string {
	var codings []string
	for _, line := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(line, ",") {
			if c = strings.TrimSpace(c); c != "" {
				codings = append(codings, strings.ToLower(c))
			}
		}
	}
	return strings.Join(codings, ", ")
}
