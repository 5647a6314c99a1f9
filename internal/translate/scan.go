package translate

import (
	"strings"

	"github.com/tidwall/gjson"
)

// A minimal scanner over JSON that is already known to be valid. gjson's
// iterators unescape every string value they pass; a Codex history is mostly
// large escaped strings (tool output, encrypted reasoning) that ToChat only
// copies, so the hot loops walk items with these helpers instead, and jump
// over strings with IndexByte.

// skipString returns the index just past the string literal at s[i] ('"').
func skipString(s string, i int) int {
	j := i + 1
	for {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return len(s)
		}
		j += k
		n := 0
		for p := j - 1; p > i && s[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipValue returns the index just past the JSON value that starts at s[i].
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(s)
	default: // number, true, false, null
		for i < len(s) {
			switch s[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// eachMember calls fn with each member of the object raw, stopping when fn
// returns false. The value is raw JSON text.
func eachMember(raw string, fn func(key, val string) bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			return
		}
		if raw[i] == ',' {
			i++
			continue
		}
		ke := skipString(raw, i)
		key := raw[i+1 : ke-1]
		if strings.IndexByte(key, '\\') >= 0 {
			key = gjson.Parse(raw[i:ke]).Str
		}
		i = skipSpace(raw, ke) + 1 // the colon
		i = skipSpace(raw, i)
		ve := skipValue(raw, i)
		if !fn(key, raw[i:ve]) {
			return
		}
		i = ve
	}
}

// eachElement calls fn with each element of the array raw, stopping when fn
// returns false.
func eachElement(raw string, fn func(val string) bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return
	}
	i++
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == ']' {
			return
		}
		if raw[i] == ',' {
			i++
			continue
		}
		ve := skipValue(raw, i)
		if !fn(raw[i:ve]) {
			return
		}
		i = ve
	}
}

// resultOf turns raw JSON into a gjson.Result with Str set for strings.
func resultOf(raw string) gjson.Result {
	switch raw[0] {
	case '{', '[':
		return gjson.Result{Type: gjson.JSON, Raw: raw}
	case '"':
		if strings.IndexByte(raw, '\\') < 0 {
			return gjson.Result{Type: gjson.String, Raw: raw, Str: raw[1 : len(raw)-1]}
		}
	}
	return gjson.Parse(raw)
}

// rawResult is resultOf without unescaping: a string's Str is left empty
// when the literal has escapes. Only for values used through Raw and Type.
func rawResult(raw string) gjson.Result {
	if raw[0] == '"' {
		r := gjson.Result{Type: gjson.String, Raw: raw}
		if strings.IndexByte(raw, '\\') < 0 {
			r.Str = raw[1 : len(raw)-1]
		}
		return r
	}
	return resultOf(raw)
}
