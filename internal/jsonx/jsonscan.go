package jsonx

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax reports malformed JSON met while scanning.
var ErrSyntax = errors.New("jsonx: malformed JSON")

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first non-space byte at or after i.
// The loop is out of line: in guests entering a loop costs a host round trip,
// and compact JSON rarely has spaces.
func SkipSpace(b []byte, i int) int {
	if i >= len(b) || !isSpace(b[i]) {
		return i
	}
	return skipSpaceLoop(b, i)
}

//go:noinline
func skipSpaceLoop(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipValue returns the index just past the value that starts at b[i] (no
// leading whitespace). It checks nesting and strings, not full JSON grammar:
// the host validates request bodies before policies see them.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrSyntax
	}
	switch c := b[i]; c {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
				if depth < 0 {
					return 0, ErrSyntax
				}
			}
			i++
		}
		return 0, ErrSyntax
	default:
		if !(c == '-' || c == 't' || c == 'f' || c == 'n' || (c >= '0' && c <= '9')) {
			return 0, ErrSyntax
		}
		j := i
		for j < len(b) {
			d := b[j]
			if d == ',' || d == '}' || d == ']' || isSpace(d) {
				break
			}
			if d == '"' || d == '{' || d == '[' || d == ':' {
				return 0, ErrSyntax
			}
			j++
		}
		return j, nil
	}
}

// WalkMembers calls fn for every member of the object at b[i] (i at '{').
// key is the raw key without quotes (still escaped); ks is the index of the
// key's opening quote and [vs,ve) the value. fn returns false to stop.
// It returns the index just past the closing brace (or where it stopped).
func WalkMembers(b []byte, i int, fn func(key []byte, ks, vs, ve int) bool) (int, error) {
	if i >= len(b) || b[i] != '{' {
		return 0, ErrSyntax
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, ErrSyntax
		}
		ks := i
		ke, err := skipString(b, i)
		if err != nil {
			return 0, err
		}
		i = SkipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, ErrSyntax
		}
		vs := SkipSpace(b, i+1)
		ve, err := skipValue(b, vs)
		if err != nil {
			return 0, err
		}
		if !fn(b[ks+1:ke-1], ks, vs, ve) {
			return ve, nil
		}
		i = SkipSpace(b, ve)
		if i >= len(b) {
			return 0, ErrSyntax
		}
		if b[i] == '}' {
			return i + 1, nil
		}
		if b[i] != ',' {
			return 0, ErrSyntax
		}
		i = SkipSpace(b, i+1)
	}
}

// forEachElement calls fn for every element of the array at b[i] (i at '[').
func forEachElement(b []byte, i int, fn func(idx, vs, ve int) bool) (int, error) {
	if i >= len(b) || b[i] != '[' {
		return 0, ErrSyntax
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for idx := 0; ; idx++ {
		vs := i
		ve, err := skipValue(b, vs)
		if err != nil {
			return 0, err
		}
		if !fn(idx, vs, ve) {
			return ve, nil
		}
		i = SkipSpace(b, ve)
		if i >= len(b) {
			return 0, ErrSyntax
		}
		if b[i] == ']' {
			return i + 1, nil
		}
		if b[i] != ',' {
			return 0, ErrSyntax
		}
		i = SkipSpace(b, i+1)
	}
}

// keyEquals reports whether the raw (escaped, unquoted) key equals want.
func keyEquals(raw []byte, want string) bool {
	if !HasBackslash(raw) {
		return string(raw) == want
	}
	s, ok := Unescape(raw)
	return ok && s == want
}

// Unescape decodes the body of a JSON string (without quotes).
func Unescape(raw []byte) (string, bool) {
	if !HasBackslash(raw) {
		return string(raw), true
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(raw) {
			return "", false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			out = append(out, raw[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw, i+2)
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2, ok := hex4(raw, i+2); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							out = utf8.AppendRune(out, d)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(out), true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Unquote decodes a raw JSON string value (with its quotes). It reports false
// when raw is not a JSON string.
func Unquote(raw []byte) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	end, err := skipString(raw, 0)
	if err != nil || end != len(raw) {
		return "", false
	}
	return Unescape(raw[1 : len(raw)-1])
}

// Quote returns s as a JSON string literal.
func Quote(s string) string { return string(AppendQuote(nil, s)) }

const hexDigits = "0123456789abcdef"

// AppendQuote appends s as a JSON string literal. Invalid UTF-8 becomes
// U+FFFD; control characters, quote and backslash are escaped; nothing else is
// (in particular not <, > and &).
func AppendQuote(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// EscapeKey escapes an object key for use as one segment of a document path
// (hostabi/ABI.md §6): '.', '\' and a leading '#' get a backslash.
func EscapeKey(key string) string {
	need := len(key) > 0 && key[0] == '#'
	for i := 0; i < len(key) && !need; i++ {
		need = key[i] == '.' || key[i] == '\\'
	}
	if !need {
		return key
	}
	out := make([]byte, 0, len(key)+4)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '.' || c == '\\' || (i == 0 && c == '#') {
			out = append(out, '\\')
		}
		out = append(out, c)
	}
	return string(out)
}

// ForEachElement calls fn with each element of the JSON array raw (raw JSON
// of every element). It stops when fn returns false and reports whether raw
// is an array.
func ForEachElement(raw []byte, fn func(i int, elem []byte) bool) bool {
	i := SkipSpace(raw, 0)
	_, err := forEachElement(raw, i, func(idx, vs, ve int) bool { return fn(idx, raw[vs:ve]) })
	return err == nil
}

// ForEachMember calls fn with each member of the JSON object raw (decoded key,
// raw JSON value). It stops when fn returns false and reports whether raw is
// an object.
func ForEachMember(raw []byte, fn func(key string, value []byte) bool) bool {
	i := SkipSpace(raw, 0)
	bad := false
	_, err := WalkMembers(raw, i, func(key []byte, _, vs, ve int) bool {
		k, ok := Unescape(key)
		if !ok {
			bad = true
			return false
		}
		return fn(k, raw[vs:ve])
	})
	return err == nil && !bad
}

// ParseInt parses the integral JSON number raw (null is 0) of magnitude at
// most 2^62, exactly: numbers written with a fraction or exponent are
// accepted when their value is an integer (hostabi/ABI.md §4: a number is
// read by its value), never rounded through float64.
func ParseInt(raw []byte) (int64, error) {
	if string(raw) == "null" {
		return 0, nil
	}
	if isIntegerLiteral(raw) {
		neg := raw[0] == '-'
		digits := raw
		if neg {
			digits = raw[1:]
		}
		if len(digits) > 18 {
			// Read exactly, not rounded through float64 (2^62+1 must
			// not pass as 2^62).
			v, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || v > 1<<62 || v < -(1<<62) {
				return 0, ErrSyntax
			}
			return v, nil
		}
		// Up to 18 digits fit an int64, below 2^62: no allocation.
		var v int64
		for _, c := range digits {
			v = v*10 + int64(c-'0')
		}
		if neg {
			v = -v
		}
		return v, nil
	}
	// Integral numbers written with a fraction or exponent.
	if v, ok := decimalInt(raw); ok {
		return v, nil
	}
	return 0, ErrSyntax
}

// decimalInt reads raw, a JSON number with a fraction or an exponent, by
// its decimal digits: the integer it is, when it is one of magnitude at
// most 2^62. It allocates nothing (it is on the guests' decoding path).
func decimalInt(raw []byte) (int64, bool) {
	digitsFrom := func(i int) int {
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i
	}
	i, neg := 0, len(raw) > 0 && raw[0] == '-'
	if neg {
		i++
	}
	intEnd := digitsFrom(i)
	whole := raw[i:intEnd]
	if len(whole) == 0 || len(whole) > 1 && whole[0] == '0' {
		return 0, false
	}
	i = intEnd
	var frac []byte
	if i < len(raw) && raw[i] == '.' {
		end := digitsFrom(i + 1)
		if frac = raw[i+1 : end]; len(frac) == 0 {
			return 0, false
		}
		i = end
	}
	exp := 0
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		expNeg := i < len(raw) && raw[i] == '-'
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		end := digitsFrom(i)
		if end == i {
			return 0, false
		}
		for _, c := range raw[i:end] {
			exp = min(exp*10+int(c-'0'), 1<<20) // far past any digit count: the value is 0 or out of range
		}
		if expNeg {
			exp = -exp
		}
		i = end
	}
	if i != len(raw) {
		return 0, false
	}
	// The digits whole+frac, with the decimal point after point of them:
	// digits past it must be zeros, and zeros past the digits scale it.
	const limit = 1 << 62
	n, point := len(whole)+len(frac), len(whole)+exp
	var v uint64
	for k := range n {
		var d byte
		if k < len(whole) {
			d = whole[k]
		} else {
			d = frac[k-len(whole)]
		}
		switch {
		case k >= point:
			if d != '0' {
				return 0, false // a fraction
			}
		case v > limit/10:
			return 0, false
		default:
			if v = v*10 + uint64(d-'0'); v > limit {
				return 0, false
			}
		}
	}
	for k := n; k < point && v != 0; k++ {
		if v > limit/10 {
			return 0, false
		}
		v *= 10
	}
	if v > limit {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// isIntegerLiteral reports whether raw is a JSON number without a fraction
// or exponent: an optional minus, then 0 or digits not starting with 0.
func isIntegerLiteral(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 || (raw[0] == '0' && len(raw) > 1) {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Kind names the kind of the well-formed JSON value b for a message: "an
// object", "an array", "a string", "a boolean", "null" or "a number".
func Kind(b []byte) string {
	switch b[SkipSpace(b, 0)] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// ParseBool parses the JSON boolean raw (null is false).
func ParseBool(raw []byte) (bool, error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false", "null":
		return false, nil
	}
	return false, ErrSyntax
}
