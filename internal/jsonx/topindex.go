package jsonx

// topIndex is a lazy index of the top-level members of an object root. It
// scans from both ends at once, in small budgets, so that a member near
// either end of a multi-megabyte request (Codex puts "model" first and
// "tools", "stream" after a huge "input") is found without skipping the
// whole body. Positions of known members are kept in step with edits.
type topIndex struct {
	ok      bool // initialized
	isObj   bool
	done    bool // every member is known
	root    int  // the root's first byte
	rootEnd int  // the root object's closing brace
	ms      []member

	front cursor // scans forward from the root's '{'
	back  cursor // scans backward from the closing '}'
	bpos  int    // the earliest member the back cursor completed (its key's quote), or rootEnd
}

// cursor is one end of the scan. Front: pos is the next byte to look at;
// inVal with key/ks/vs set while skipping a member's value. Back: pos is one
// past the next byte to look at; inVal with ve set while skipping backwards.
type cursor struct {
	pos   int
	inVal bool
	key   string
	ks    int
	vs    int
	ve    int
	sk    skipState
	taken int // bytes consumed (for balancing)
}

const (
	scanBudget = 4 << 10  // bytes one cursor scans before the other gets a turn
	bigValue   = 64 << 10 // when both cursors are this deep in one value, only the front goes on
)

func (x *topIndex) init(b []byte) error {
	*x = topIndex{ms: x.ms[:0]}
	x.root = SkipSpace(b, 0)
	if x.root >= len(b) {
		return ErrInvalidDocument
	}
	x.ok = true
	if b[x.root] != '{' {
		x.done = true
		return nil
	}
	x.isObj = true
	e := len(b)
	for e > x.root+1 && isSpace(b[e-1]) {
		e--
	}
	if e <= x.root+1 || b[e-1] != '}' {
		return ErrInvalidDocument
	}
	x.rootEnd = e - 1
	x.front.pos = x.root + 1
	x.back.pos = x.rootEnd
	x.bpos = x.rootEnd
	return nil
}

// frontier is the position of the first member the front cursor does not
// know completely.
func (x *topIndex) frontier(b []byte) int {
	if x.front.inVal {
		return x.front.ks
	}
	p := SkipSpace(b, x.front.pos)
	return p
}

// find returns the index in x.ms of the member named key.
func (x *topIndex) find(b []byte, key string) (int, error) {
	for i := range x.ms {
		if x.ms[i].key == key {
			return i, nil
		}
	}
	for !x.done {
		var added int
		var err error
		fb := x.front.inVal && x.front.sk.pos-x.front.vs > bigValue
		bb := x.back.inVal && x.back.ve-x.back.sk.pos > bigValue
		if x.front.taken <= x.back.taken || (fb && bb) {
			added, err = x.stepFront(b)
		} else {
			added, err = x.stepBack(b)
		}
		if err != nil {
			x.ok = false
			return -1, ErrInvalidDocument
		}
		if added >= 0 && x.ms[added].key == key {
			return added, nil
		}
	}
	return -1, nil
}

// stepFront scans forward for one budget; it returns the index of a member
// it completed, or -1.
func (x *topIndex) stepFront(b []byte) (int, error) {
	f := &x.front
	start := f.pos
	if f.inVal {
		start = f.sk.pos
	}
	limit := start + scanBudget
	if !f.inVal {
		p := SkipSpace(b, f.pos)
		if p >= x.bpos {
			x.done = true
			return -1, nil
		}
		if b[p] != '"' {
			return -1, ErrSyntax
		}
		ke, err := skipString(b, p)
		if err != nil {
			return -1, err
		}
		k, ok := Unescape(b[p+1 : ke-1])
		if !ok {
			k = string(b[p+1 : ke-1])
		}
		q := SkipSpace(b, ke)
		if q >= len(b) || b[q] != ':' {
			return -1, ErrSyntax
		}
		f.key, f.ks, f.vs = k, p, SkipSpace(b, q+1)
		f.inVal = true
		f.sk = skipState{pos: f.vs}
	}
	fin, err := f.sk.fwd(b, limit)
	if err != nil {
		return -1, err
	}
	f.taken += f.sk.pos - start
	if !fin {
		return -1, nil
	}
	ve := f.sk.pos
	f.inVal = false
	x.ms = append(x.ms, member{key: f.key, ks: f.ks, vs: f.vs, ve: ve})
	p := SkipSpace(b, ve)
	switch {
	case p < len(b) && b[p] == ',':
		f.pos = p + 1
	case p == x.rootEnd:
		f.pos = p
	default:
		return -1, ErrSyntax
	}
	if x.frontier(b) >= x.bpos {
		x.done = true
	}
	return len(x.ms) - 1, nil
}

// stepBack scans backward for one budget.
func (x *topIndex) stepBack(b []byte) (int, error) {
	k := &x.back
	if !k.inVal {
		p := x.bpos - 1
		for p > x.root && isSpace(b[p]) {
			p--
		}
		if p == x.root { // reached the opening brace
			x.done = true
			return -1, nil
		}
		if x.bpos != x.rootEnd {
			if b[p] != ',' {
				return -1, ErrSyntax
			}
			p--
			for p > x.root && isSpace(b[p]) {
				p--
			}
		}
		k.ve = p + 1
		k.inVal = true
		k.sk = skipState{pos: k.ve}
	}
	start := k.sk.pos
	fin, err := k.sk.bwd(b, start-scanBudget)
	if err != nil {
		return -1, err
	}
	k.taken += start - k.sk.pos
	if !fin {
		return -1, nil
	}
	vs := k.sk.pos
	k.inVal = false
	p := vs - 1
	for p > x.root && isSpace(b[p]) {
		p--
	}
	if p <= x.root || b[p] != ':' {
		return -1, ErrSyntax
	}
	p--
	for p > x.root && isSpace(b[p]) {
		p--
	}
	if p <= x.root || b[p] != '"' {
		return -1, ErrSyntax
	}
	ks, err := skipStringBack(b, p+1)
	if err != nil || ks <= x.root {
		return -1, ErrSyntax
	}
	if fr := x.frontier(b); ks < fr {
		// The front cursor completed this member already: the scans met.
		x.done = true
		return -1, nil
	} else if ks == fr {
		x.done = true
		x.front.inVal = false
	}
	key, ok := Unescape(b[ks+1 : p])
	if !ok {
		key = string(b[ks+1 : p])
	}
	x.ms = append(x.ms, member{key: key, ks: ks, vs: vs, ve: k.ve})
	x.bpos = ks
	if x.frontier(b) >= x.bpos {
		x.done = true
	}
	return len(x.ms) - 1, nil
}

// shift moves every stored position at or after at by delta (an edit
// replaced bytes ending at at).
func (x *topIndex) shift(at, delta int) {
	if delta == 0 {
		return
	}
	mv := func(p *int) {
		if *p >= at {
			*p += delta
		}
	}
	for i := range x.ms {
		mv(&x.ms[i].ks)
		mv(&x.ms[i].vs)
		mv(&x.ms[i].ve)
	}
	mv(&x.rootEnd)
	mv(&x.bpos)
	mv(&x.front.pos)
	mv(&x.front.ks)
	mv(&x.front.vs)
	mv(&x.front.sk.pos)
	mv(&x.back.pos)
	mv(&x.back.ve)
	mv(&x.back.sk.pos)
}

func (x *topIndex) clone() topIndex {
	c := *x
	c.ms = append([]member(nil), x.ms...)
	return c
}

// skipState is a resumable skip over one value.
type skipState struct {
	pos   int
	depth int
	open  bool
}

// fwd skips forward from s.pos; it stops at a token boundary once pos
// reaches limit and reports whether the value ended (s.pos just past it).
func (s *skipState) fwd(b []byte, limit int) (bool, error) {
	if !s.open {
		if s.pos >= len(b) {
			return false, ErrSyntax
		}
		if c := b[s.pos]; c != '{' && c != '[' {
			e, err := skipValue(b, s.pos)
			if err != nil {
				return false, err
			}
			s.pos = e
			return true, nil
		}
		s.open = true
	}
	i, depth := s.pos, s.depth
	for i < len(b) {
		if i >= limit {
			s.pos, s.depth = i, depth
			return false, nil
		}
		switch b[i] {
		case '"':
			e, err := skipString(b, i)
			if err != nil {
				return false, err
			}
			i = e
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.pos = i + 1
				return true, nil
			}
			if depth < 0 {
				return false, ErrSyntax
			}
		}
		i++
	}
	return false, ErrSyntax
}

// bwd skips backward from s.pos (one past the value's last byte); when the
// value's first byte is reached it sets s.pos to it and reports true.
func (s *skipState) bwd(b []byte, limit int) (bool, error) {
	if !s.open {
		if s.pos <= 0 || s.pos > len(b) {
			return false, ErrSyntax
		}
		switch c := b[s.pos-1]; c {
		case '"':
			st, err := skipStringBack(b, s.pos)
			if err != nil {
				return false, err
			}
			s.pos = st
			return true, nil
		case '}', ']':
			s.open = true
		default:
			i := s.pos
			for i > 0 {
				d := b[i-1]
				if d == ',' || d == ':' || d == '[' || d == '{' || isSpace(d) {
					break
				}
				if d == '"' || d == '}' || d == ']' {
					return false, ErrSyntax
				}
				i--
			}
			if i == s.pos {
				return false, ErrSyntax
			}
			s.pos = i
			return true, nil
		}
	}
	i, depth := s.pos, s.depth
	for i > 0 {
		if i <= limit {
			s.pos, s.depth = i, depth
			return false, nil
		}
		switch b[i-1] {
		case '"':
			st, err := skipStringBack(b, i)
			if err != nil {
				return false, err
			}
			i = st
			continue
		case '}', ']':
			depth++
		case '{', '[':
			depth--
			if depth == 0 {
				s.pos = i - 1
				return true, nil
			}
			if depth < 0 {
				return false, ErrSyntax
			}
		}
		i--
	}
	return false, ErrSyntax
}

// skipStringBack returns the index of the opening quote of the string whose
// closing quote is b[end-1].
func skipStringBack(b []byte, end int) (int, error) {
	j := end - 1
	for {
		k := lastIndexByte(b[:j], '"')
		if k < 0 {
			return 0, ErrSyntax
		}
		n := 0
		for p := k - 1; p >= 0 && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return k, nil
		}
		j = k
	}
}
