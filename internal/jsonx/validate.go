package jsonx

// ScanTop checks that b is one JSON value nested at most maxDepth levels
// deep (maxDepth <= 0 means DefaultMaxDepth) and, when that value is an
// object, calls member for each of its top-level members, in order, with
// the key's raw bytes (between the quotes, escapes undecoded) and the value's
// bounds b[vs:ve]. valid is false at the first syntax error or nesting past
// the limit; member may have been called for the members before it. object
// reports whether the value starts with '{'.
//
// It is the stream path's one pass over an upstream event (docs/ARCHITECTURE.md
// §11): before it, an event was walked three times (CheckDepth, gjson's
// validator, gjson's member iteration). The grammar it accepts is exactly
// gjson.Valid's, which is RFC 8259's except that strings are not checked for
// UTF-8 (bytes below 0x20 are refused, escapes must be well formed); the
// differential fuzz test in validate_test.go holds it to that. It is
// iterative, so no input can exhaust the stack, and does not allocate below
// 64 levels.
func ScanTop(b []byte, maxDepth int, member func(key []byte, vs, ve int)) (valid, object bool) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	i := SkipSpace(b, 0)
	if i >= len(b) {
		return false, false
	}
	object = b[i] == '{'
	// inObject[d-1]: the container at depth d is an object.
	inObject := make([]bool, 0, 64)
	var key []byte
	vs := 0
	ok := true
	for {
		// b[i] starts a value (an object member's key and colon were read).
		if object && len(inObject) == 1 {
			vs = i
		}
		if i >= len(b) {
			return false, object
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(inObject) >= maxDepth {
				return false, object
			}
			inObject = append(inObject, c == '{')
			i = SkipSpace(b, i+1)
			if i < len(b) && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']') {
				i++
				inObject = inObject[:len(inObject)-1]
				break // an empty container: a complete value
			}
			if c == '{' {
				if i, ok = scanMemberKey(b, i, len(inObject) == 1, &key); !ok {
					return false, object
				}
			}
			continue
		case '"':
			i, ok = scanString(b, i+1)
		case 't':
			i, ok = scanLiteral(b, i, "true")
		case 'f':
			i, ok = scanLiteral(b, i, "false")
		case 'n':
			i, ok = scanLiteral(b, i, "null")
		default:
			i, ok = scanNumber(b, i)
		}
		if !ok {
			return false, object
		}
		// A value ended at i. Close the containers it completes, up to the
		// next member or element.
		for {
			if len(inObject) == 0 {
				return SkipSpace(b, i) == len(b), object
			}
			if object && len(inObject) == 1 {
				member(key, vs, i)
			}
			i = SkipSpace(b, i)
			if i >= len(b) {
				return false, object
			}
			top := inObject[len(inObject)-1]
			if b[i] == ',' {
				i = SkipSpace(b, i+1)
				if top {
					if i, ok = scanMemberKey(b, i, len(inObject) == 1, &key); !ok {
						return false, object
					}
				}
				break
			}
			if top && b[i] != '}' || !top && b[i] != ']' {
				return false, object
			}
			i++
			inObject = inObject[:len(inObject)-1]
		}
	}
}

// scanMemberKey reads a member's key and colon at b[i]; the key replaces
// *key only for the root's own members (root), whose values ScanTop
// reports.
func scanMemberKey(b []byte, i int, root bool, key *[]byte) (int, bool) {
	k, next, ok := scanKey(b, i)
	if ok && root {
		*key = k
	}
	return next, ok
}

// scanKey reads `"key" :` at b[i] and returns the key's raw bytes and the
// index of the value after the colon (whitespace skipped).
func scanKey(b []byte, i int) (key []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	end, ok := scanString(b, i+1)
	if !ok {
		return nil, end, false
	}
	key = b[i+1 : end-1]
	i = SkipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return nil, i, false
	}
	return key, SkipSpace(b, i+1), true
}

// scanString returns the index past the closing quote of the string whose
// body starts at b[i], 8 bytes at a time between the bytes that matter.
func scanString(b []byte, i int) (int, bool) {
	for {
		k := swarIndexStringSpecial(b[i:])
		if k < 0 {
			return len(b), false
		}
		i += k
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < ' ':
			return i, false
		}
		// A backslash.
		i++
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if _, ok := hex4(b, i+1); !ok {
				return i, false
			}
			i += 4
		default:
			return i, false
		}
		i++
	}
}

func scanLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// scanNumber returns the index past the number at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b) || !isDigit(b[i]):
		return i, false
	case b[i] == '0':
		i++
	default:
		i = skipDigits(b, i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		i = skipDigits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		i = skipDigits(b, i)
	}
	return i, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func skipDigits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}
