package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Errors of path parsing and document edits. Each maps to one host-function
// code (hostabi.CodeOf).
var (
	ErrPathSyntax    = errors.New("jsonx: bad path")
	ErrPathNotFound  = errors.New("jsonx: path not found")
	ErrNotApplicable = errors.New("jsonx: path does not apply to the value found")
	ErrValue         = errors.New("jsonx: value is not valid JSON")
)

// MaxPathBytes is the longest path ParsePath accepts (hostabi.MaxPathBytes,
// hostabi/ABI.md §8).
const MaxPathBytes = 4 << 10

type segKind uint8

const (
	segKey    segKind = iota // object key (or array index when all digits)
	segAppend                // "-1": append position of an array (Set only)
	segCount                 // "#": length of an array (Get only, last segment)
	segQuery                 // #(key==literal): first matching array element
)

// segment is one parsed path step.
type segment struct {
	kind  segKind
	key   string // segKey: the key; segQuery: the member compared
	index int    // segKey: the array index when isIdx
	isIdx bool
	lit   string // segQuery: the JSON literal compared with
}

// ParsePath checks a path against the syntax of hostabi/ABI.md §6.
func ParsePath(path string) error {
	_, err := parsePath(path)
	return err
}

func parsePath(p string) ([]segment, error) {
	if len(p) > MaxPathBytes {
		return nil, ErrPathSyntax
	}
	if p == "" {
		return nil, nil
	}
	var segs []segment
	i := 0
	for {
		var s segment
		var err error
		if len(p)-i >= 2 && p[i] == '#' && p[i+1] == '(' {
			s, i, err = parseQuery(p, i+2)
		} else {
			s, i, err = parseKey(p, i)
		}
		if err != nil {
			return nil, err
		}
		segs = append(segs, s)
		if i == len(p) {
			break
		}
		if p[i] != '.' {
			return nil, ErrPathSyntax
		}
		i++
		if i == len(p) {
			return nil, ErrPathSyntax // trailing dot
		}
	}
	for k, s := range segs {
		if s.kind == segCount && k != len(segs)-1 {
			return nil, ErrPathSyntax
		}
	}
	return segs, nil
}

func parseKey(p string, i int) (segment, int, error) {
	var buf []byte
	escaped := false
	start := i
	for i < len(p) && p[i] != '.' {
		if p[i] == '\\' {
			if i+1 >= len(p) {
				return segment{}, 0, ErrPathSyntax
			}
			if buf == nil {
				buf = append([]byte{}, p[start:i]...)
			}
			buf = append(buf, p[i+1])
			escaped = true
			i += 2
			continue
		}
		if buf != nil {
			buf = append(buf, p[i])
		}
		i++
	}
	key := p[start:i]
	if buf != nil {
		key = string(buf)
	}
	if key == "" {
		return segment{}, 0, ErrPathSyntax
	}
	s := segment{kind: segKey, key: key}
	if !escaped {
		switch {
		case key == "#":
			s.kind = segCount
		case key == "-1":
			s.kind = segAppend
		case isIndex(key):
			n, err := strconv.Atoi(key)
			if err == nil {
				s.index, s.isIdx = n, true
			}
		}
	}
	return s, i, nil
}

func isIndex(k string) bool {
	if k == "" || len(k) > 9 || (len(k) > 1 && k[0] == '0') {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < '0' || k[i] > '9' {
			return false
		}
	}
	return true
}

// parseQuery parses `key==literal)` starting after "#(".
func parseQuery(p string, i int) (segment, int, error) {
	start := i
	var key []byte // only when the key has escapes
	for {
		if i >= len(p) {
			return segment{}, 0, ErrPathSyntax
		}
		if p[i] == '\\' {
			if i+1 >= len(p) {
				return segment{}, 0, ErrPathSyntax
			}
			if key == nil {
				key = append([]byte{}, p[start:i]...)
			}
			key = append(key, p[i+1])
			i += 2
			continue
		}
		if p[i] == '=' && i+1 < len(p) && p[i+1] == '=' {
			break
		}
		if key != nil {
			key = append(key, p[i])
		}
		i++
	}
	k := p[start:i]
	if key != nil {
		k = string(key)
	}
	i += 2
	if k == "" {
		return segment{}, 0, ErrPathSyntax
	}
	var end int
	if i < len(p) && p[i] == '"' {
		// A string literal: find its closing quote.
		j := i + 1
		for ; j < len(p); j++ {
			if p[j] == '\\' {
				j++
				continue
			}
			if p[j] == '"' {
				break
			}
		}
		if j >= len(p) {
			return segment{}, 0, ErrPathSyntax
		}
		end = j + 1
	} else {
		end = strings.IndexByte(p[i:], ')')
		if end <= 0 {
			return segment{}, 0, ErrPathSyntax
		}
		end += i
	}
	if end >= len(p) || p[end] != ')' {
		return segment{}, 0, ErrPathSyntax
	}
	lit := p[i:end]
	switch lit[0] {
	case '{', '[':
		return segment{}, 0, ErrPathSyntax
	case '"':
		if _, ok := Unescape([]byte(lit[1 : len(lit)-1])); !ok {
			return segment{}, 0, ErrPathSyntax
		}
	default:
		if !validLiteral(lit) {
			return segment{}, 0, ErrPathSyntax
		}
	}
	return segment{kind: segQuery, key: k, lit: lit}, end + 1, nil
}

// validLiteral reports whether s is true, false, null or a JSON number.
func validLiteral(s string) bool {
	switch s {
	case "true", "false", "null":
		return true
	}
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	return i == len(s)
}

// member is one top-level member of the document: the key's opening quote
// at ks and the value at [vs,ve).
type member struct {
	key    string
	ks     int
	vs, ve int
}

// Document is a JSON document edited in place by path (hostabi/ABI.md §6).
// It never modifies the slice it was created from: the first edit copies it
// (once), later edits splice the copy. A Document keeps a lazy index of the
// top-level members of an object root, built by scanning from both ends, so
// that reaching a member near either end of a large request does not cost a
// scan of the whole body. A Document is not safe for concurrent use.
type Document struct {
	buf     []byte
	shared  bool // buf is not ours: copy before writing
	changed bool
	ti      topIndex
}

// NewDocument returns a document over body. body is not modified.
func NewDocument(body []byte) *Document {
	return &Document{buf: body, shared: true}
}

// Bytes returns the current document. It aliases the document's storage:
// it stays valid until the next edit.
func (d *Document) Bytes() []byte { return d.buf }

// Changed reports whether any edit was applied.
func (d *Document) Changed() bool { return d.changed }

// Len is the current document size in bytes.
func (d *Document) Len() int { return len(d.buf) }

// Snapshot is a saved state of a Document (see Checkpoint).
type Snapshot struct {
	buf     []byte
	changed bool
	ti      topIndex
}

// Checkpoint saves the current state; Restore returns to it. After a
// checkpoint the next edit copies the document once more.
func (d *Document) Checkpoint() Snapshot {
	d.shared = true
	return Snapshot{buf: d.buf, changed: d.changed, ti: d.ti.clone()}
}

// Restore returns the document to a Checkpoint.
func (d *Document) Restore(s Snapshot) {
	d.buf, d.changed, d.shared = s.buf, s.changed, true
	d.ti = s.ti.clone()
}

func (d *Document) index() error {
	if d.ti.ok {
		return nil
	}
	return d.ti.init(d.buf)
}

// target is where a path leads.
type target struct {
	found  bool
	vs, ve int // the value, when found

	// The container that holds (or would hold) the value.
	cs, ce  int  // container span, cs at '{' or '['
	cobject bool // the container is an object
	is      int  // start of the item (the key's quote for members, the value for elements)
	rest    int  // when !found: index of the first segment not found
	topIdx  int  // index into the top-level index of the member the path goes through, or -1
	count   int  // segCount: the array length
	isCount bool
}

// resolve walks segs. When the last step is missing it reports found=false
// with the deepest container reached (t.rest = segment index not found).
func (d *Document) resolve(segs []segment) (target, error) {
	if err := d.index(); err != nil {
		return target{}, ErrInvalidDocument
	}
	b := d.buf
	t := target{topIdx: -1}
	vs := d.ti.root
	ve := -1
	for k, s := range segs {
		if vs >= len(b) {
			return t, ErrInvalidDocument
		}
		c := b[vs]
		switch {
		case c == '{' && (s.kind == segKey || s.kind == segAppend):
			key := s.key
			if s.kind == segAppend {
				key = "-1"
			}
			t.cs, t.cobject, t.found = vs, true, false
			if k == 0 && d.ti.isObj && vs == d.ti.root {
				mi, err := d.ti.find(b, key)
				if err != nil {
					return t, ErrInvalidDocument
				}
				if mi >= 0 {
					m := d.ti.ms[mi]
					t.found, t.is, t.topIdx = true, m.ks, mi
					vs, ve = m.vs, m.ve
				} else {
					t.ce = d.ti.rootEnd + 1
				}
			} else {
				end, err := WalkMembers(b, vs, func(raw []byte, ks, mvs, mve int) bool {
					if keyEquals(raw, key) {
						t.found, t.is = true, ks
						vs, ve = mvs, mve
						return false
					}
					return true
				})
				if err != nil {
					return t, ErrInvalidDocument
				}
				if !t.found {
					t.ce = end
				}
			}
			if !t.found {
				t.rest = k
				return t, nil
			}
		case c == '[' && (s.kind == segKey && s.isIdx || s.kind == segAppend || s.kind == segQuery || s.kind == segCount):
			t.cs, t.cobject, t.found = vs, false, false
			n := 0
			end, err := forEachElement(b, vs, func(idx, evs, eve int) bool {
				n = idx + 1
				switch s.kind {
				case segKey:
					if idx == s.index {
						t.found, t.is = true, evs
						vs, ve = evs, eve
						return false
					}
				case segQuery:
					if matchQuery(b, evs, s) {
						t.found, t.is = true, evs
						vs, ve = evs, eve
						return false
					}
				}
				return true
			})
			if err != nil {
				return t, ErrInvalidDocument
			}
			if s.kind == segCount {
				t.isCount, t.count, t.found = true, n, true
				return t, nil
			}
			if !t.found {
				t.ce = end
				t.rest = k
				if s.kind == segAppend || (s.kind == segKey && s.index == n) {
					t.count = n // append position
				} else {
					t.count = -1
				}
				return t, nil
			}
		default:
			return t, ErrNotApplicable
		}
	}
	if len(segs) == 0 {
		e, err := skipValue(b, d.ti.root)
		if err != nil {
			return t, ErrInvalidDocument
		}
		vs, ve = d.ti.root, e
		t.cs = -1
	}
	t.found, t.vs, t.ve = true, vs, ve
	return t, nil
}

// ErrInvalidDocument reports that the document is not valid JSON where the
// path leads.
var ErrInvalidDocument = errors.New("jsonx: document is not valid JSON")

// matchQuery reports whether the element at b[vs] is an object whose member
// s.key equals the literal s.lit.
func matchQuery(b []byte, vs int, s segment) bool {
	if b[vs] != '{' {
		return false
	}
	match := false
	_, _ = WalkMembers(b, vs, func(raw []byte, _, mvs, mve int) bool {
		if !keyEquals(raw, s.key) {
			return true
		}
		match = literalEqual(b[mvs:mve], s.lit)
		return false
	})
	return match
}

func literalEqual(v []byte, lit string) bool {
	switch lit[0] {
	case '"':
		if len(v) < 2 || v[0] != '"' {
			return false
		}
		if string(v) == lit {
			return true
		}
		a, ok1 := Unescape(v[1 : len(v)-1])
		b, ok2 := Unescape([]byte(lit[1 : len(lit)-1]))
		return ok1 && ok2 && a == b
	case 't', 'f', 'n':
		return string(v) == lit
	default:
		if string(v) == lit {
			return true
		}
		x, err1 := strconv.ParseFloat(string(v), 64)
		y, err2 := strconv.ParseFloat(lit, 64)
		return err1 == nil && err2 == nil && x == y
	}
}

// Lookup returns the raw JSON value at path inside raw, like Document.Get
// but without building an index: meant for small documents (a policy's
// config) and for guests, where it allocates nothing but the parsed path.
func Lookup(raw []byte, path string) ([]byte, error) {
	segs, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	vs := SkipSpace(raw, 0)
	ve := -1
	for k, s := range segs {
		if vs >= len(raw) {
			return nil, ErrInvalidDocument
		}
		found := false
		switch c := raw[vs]; {
		case c == '{' && (s.kind == segKey || s.kind == segAppend):
			key := s.key
			if s.kind == segAppend {
				key = "-1"
			}
			_, err = WalkMembers(raw, vs, func(rk []byte, _, mvs, mve int) bool {
				if keyEquals(rk, key) {
					found, vs, ve = true, mvs, mve
					return false
				}
				return true
			})
		case c == '[' && (s.kind == segKey && s.isIdx || s.kind == segQuery || s.kind == segCount):
			n := 0
			_, err = forEachElement(raw, vs, func(idx, evs, eve int) bool {
				n = idx + 1
				if (s.kind == segKey && idx == s.index) || (s.kind == segQuery && matchQuery(raw, evs, s)) {
					found, vs, ve = true, evs, eve
					return false
				}
				return true
			})
			if err == nil && s.kind == segCount && k == len(segs)-1 {
				return strconv.AppendInt(nil, int64(n), 10), nil
			}
		case c == '[' && s.kind == segAppend:
		default:
			return nil, ErrNotApplicable
		}
		if err != nil {
			return nil, ErrInvalidDocument
		}
		if !found {
			return nil, ErrPathNotFound
		}
	}
	if len(segs) == 0 {
		e, err := skipValue(raw, vs)
		if err != nil {
			return nil, ErrInvalidDocument
		}
		ve = e
	}
	return raw[vs:ve], nil
}

// Get returns the raw JSON value at path. For a last segment "#" it returns
// the array's length as a JSON number. The returned slice aliases the
// document: copy it before the next edit if it must live on.
func (d *Document) Get(path string) ([]byte, error) {
	segs, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	t, err := d.resolve(segs)
	if err != nil {
		return nil, err
	}
	if !t.found {
		return nil, ErrPathNotFound
	}
	if t.isCount {
		return strconv.AppendInt(nil, int64(t.count), 10), nil
	}
	return d.buf[t.vs:t.ve], nil
}

// Set stores the raw JSON value at path: it replaces an existing value,
// appends to an array ("-1" or an index equal to the length), or adds a
// member to an object, creating missing intermediate objects for key
// segments. value must be valid JSON.
func (d *Document) Set(path string, value []byte) error {
	segs, err := parsePath(path)
	if err != nil {
		return err
	}
	value = bytes.TrimSpace(value)
	if !json.Valid(value) {
		return ErrValue
	}
	for _, s := range segs {
		if s.kind == segCount {
			return ErrPathSyntax
		}
	}
	t, err := d.resolve(segs)
	if err != nil {
		return err
	}
	if t.found {
		d.splice(t.vs, t.ve, value, t.topIdx, false)
		return nil
	}
	// Missing: build what is missing below the deepest container reached.
	rest := segs[t.rest:]
	if t.cobject {
		for _, s := range rest[1:] {
			if s.kind != segKey || s.isIdx {
				return ErrPathNotFound
			}
		}
		ins := make([]byte, 0, len(value)+32)
		ins = AppendQuote(ins, keyOf(rest[0]))
		ins = append(ins, ':')
		for _, s := range rest[1:] {
			ins = append(ins, '{')
			ins = AppendQuote(ins, s.key)
			ins = append(ins, ':')
		}
		ins = append(ins, value...)
		for range rest[1:] {
			ins = append(ins, '}')
		}
		d.insertItem(t, ins)
		return nil
	}
	if len(rest) != 1 || t.count < 0 {
		return ErrPathNotFound
	}
	d.insertItem(t, value)
	return nil
}

func keyOf(s segment) string {
	if s.kind == segAppend {
		return "-1"
	}
	return s.key
}

// insertItem adds an item at the end of the container t.cs..t.ce.
func (d *Document) insertItem(t target, item []byte) {
	closeAt := t.ce - 1
	p := closeAt - 1
	for p > t.cs && isSpace(d.buf[p]) {
		p--
	}
	var ins []byte
	if p == t.cs { // empty container
		ins = item
	} else {
		ins = make([]byte, 0, len(item)+1)
		ins = append(ins, ',')
		ins = append(ins, item...)
	}
	d.splice(p+1, p+1, ins, d.within(t), t.cs == d.ti.root)
}

// within returns the index of the top-level member whose value contains the
// container of t, or -1.
func (d *Document) within(t target) int {
	if !d.ti.ok || t.cs == d.ti.root {
		return -1
	}
	if t.topIdx >= 0 {
		return t.topIdx
	}
	for i, m := range d.ti.ms {
		if m.vs <= t.cs && t.cs < m.ve {
			return i
		}
	}
	return -1
}

// Delete removes the member or element at path. It reports ErrPathNotFound
// when there is nothing there.
func (d *Document) Delete(path string) error {
	segs, err := parsePath(path)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		return ErrNotApplicable
	}
	for _, s := range segs {
		if s.kind == segCount {
			return ErrPathSyntax
		}
	}
	t, err := d.resolve(segs)
	if err != nil {
		return err
	}
	if !t.found {
		return ErrPathNotFound
	}
	b := d.buf
	start, end := t.is, t.ve
	p := start - 1
	for p > t.cs && isSpace(b[p]) {
		p--
	}
	if b[p] == ',' {
		start = p
	} else {
		q := SkipSpace(b, end)
		if q < len(b) && b[q] == ',' {
			end = SkipSpace(b, q+1)
		}
	}
	d.splice(start, end, nil, d.within(t), t.cs == d.ti.root)
	return nil
}

// splice replaces d.buf[s:e] with repl and keeps the top-level index in step:
// within is the top-level member whose value contains the edit (-1 if none),
// structural says the edit adds or removes a top-level member.
func (d *Document) splice(s, e int, repl []byte, within int, structural bool) {
	old := len(d.buf)
	delta := len(repl) - (e - s)
	n := old + delta
	switch {
	case d.shared || n > cap(d.buf):
		// Appending to a full slice allocates without zeroing what it
		// copies: one pass over the body (make+copy would write it twice).
		nb := append(d.buf[:s:s], repl...)
		nb = append(nb, d.buf[e:old]...)
		d.buf, d.shared = nb, false
	case delta <= 0:
		copy(d.buf[s:], repl)
		copy(d.buf[s+len(repl):], d.buf[e:])
		d.buf = d.buf[:n]
	default:
		d.buf = d.buf[:n]
		copy(d.buf[s+len(repl):], d.buf[e:old])
		copy(d.buf[s:], repl)
	}
	d.changed = true
	if !d.ti.ok {
		return
	}
	if structural || within < 0 {
		d.ti.ok = false
		return
	}
	d.ti.shift(e, delta)
}
