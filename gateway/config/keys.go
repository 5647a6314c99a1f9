package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkTree walks the YAML tree against Config's yaml tags and reports every
// unknown key and every value of the wrong shape, each with its key path and
// in words an operator knows (never a Go type name). It also retags scalars
// that ${VAR} expansion made strings when the key wants a number or a bool,
// so "max_body_bytes: ${MAX}" works. unexpanded holds the values whose ${VAR}
// could not be expanded (already reported): they are refused silently.
// exp.fromEnv says which values came from the environment (envValues).
//
// What it refuses is pruned from the tree afterwards (prune), so that the rest
// decodes and Validate can judge it in the same run; the returned checker
// says what could not be read, for Validate to skip.
func checkTree(root *yaml.Node, exp *expansion) *checker {
	c := &checker{
		unexpanded: exp.failed,
		fromEnv:    exp.fromEnv,
		envValues:  map[string]envValue{},
		lines:      map[string]int{},
		drop:       map[*yaml.Node]bool{},
		stand:      map[*yaml.Node]*yaml.Node{},
		unread: unreadable{refused: map[string]bool{}, empty: map[string]bool{}, written: map[string]map[string]bool{},
			unknownKeys: map[string]bool{}},
	}
	// Walking (or decoding) a tree whose aliases expand it past the bound
	// would take minutes: the aliases that go past it are left out first,
	// and the rest of the file is checked as usual.
	c.leaveOutAliasGrowth(root)
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	c.check(n, reflect.TypeFor[Config](), "")
	return c
}

// maxAliasGrowth bounds how many nodes aliases (*name, and <<: *name merge
// keys) may add to the config, counted as if each were replaced by what it
// names. Shared upstream or key settings add a few thousand at most; a small
// file whose anchors name anchors that name anchors can add billions (an
// alias bomb), which every later walk of the tree would repeat.
const maxAliasGrowth = 100_000

// leaveOutAliasGrowth reports the first alias that takes the config past
// maxAliasGrowth added nodes, at its line, and leaves out every alias that
// would: each becomes a value refused without a word of its own (as a
// ${VAR} that could not be expanded is), so the checker and the decoder see
// a tree of bounded size and the file's other problems are reported in the
// same run. It visits each node of the file once: an anchored node's
// expanded size is remembered, so an alias costs one lookup however often
// its target is named.
func (c *checker) leaveOutAliasGrowth(root *yaml.Node) {
	g := &aliasGrowth{size: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	g.walk(root, "")
	if len(g.past) == 0 {
		return
	}
	first := g.past[0]
	msg := fmt.Sprintf("with the alias *%s, aliases and merge keys expand the config by more than %d nodes", first.alias, maxAliasGrowth)
	if more := len(g.past) - 1; more > 0 {
		msg += fmt.Sprintf(" (it and the %d aliases after it that go past the bound are left out)", more)
	}
	c.badAt(first.line, first.path, "%s", msg)
	for _, p := range g.past {
		c.unexpanded[p.node] = true
	}
}

type aliasGrowth struct {
	added int                // nodes the aliases kept so far add
	size  map[*yaml.Node]int // an anchored node's size with its aliases expanded
	open  map[*yaml.Node]bool
	past  []leftOutAlias // the aliases that would take added past maxAliasGrowth, in file order
}

// leftOutAlias is an alias left out for the growth it would add, where it
// was written.
type leftOutAlias struct {
	node  *yaml.Node // now an empty string standing in for the alias
	alias string     // the anchor it named
	path  string
	line  int
}

// walk visits the nodes of the file under n in order and leaves out (g.past)
// each alias that would take the growth past maxAliasGrowth: the node
// becomes an empty string in place, so nothing later expands it, and the
// aliases after it are judged without it.
func (g *aliasGrowth) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return
		}
		if add := g.expandedSize(n.Alias); g.added+add <= maxAliasGrowth {
			g.added += add
			return
		}
		g.past = append(g.past, leftOutAlias{node: n, alias: n.Value, path: path, line: n.Line})
		*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Line: n.Line, Column: n.Column}
		return
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Value != "<<" || k.Tag != "!!merge" {
				g.walk(v, join(path, k.Value))
				continue
			}
			// <<: *a or <<: [*a, *b]: the aliases belong to the mapping
			// they merge into.
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				g.walk(m, path)
			}
		}
		return
	}
	for i, c := range n.Content { // a list, or the document
		p := path
		if n.Kind == yaml.SequenceNode {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		g.walk(c, p)
	}
}

// expandedSize is how many nodes n stands for once every alias in it is
// replaced by its target, capped just past maxAliasGrowth (beyond it the
// exact count no longer matters, and could overflow).
func (g *aliasGrowth) expandedSize(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || g.open[n.Alias] {
			return 1 // an alias cycle: checker reports it
		}
		n = n.Alias
	}
	if s, ok := g.size[n]; ok {
		return s
	}
	if n.Anchor != "" { // only an anchored node can be named again, and so be in a cycle
		g.open[n] = true
		defer delete(g.open, n)
	}
	size := 1
	for _, c := range n.Content {
		size = min(size+g.expandedSize(c), maxAliasGrowth+1)
	}
	if n.Anchor != "" {
		g.size[n] = size
	}
	return size
}

// problem is one thing wrong with a config: the key path it is about ("" for
// the top), the line it is written on (0: found from the key's path when the
// problems are rendered) and what is wrong.
type problem struct {
	key  string
	line int
	msg  string
}

// text is "key: msg", or msg alone at the top.
func (p problem) text() string {
	if p.key == "" {
		return p.msg
	}
	return p.key + ": " + p.msg
}

type checker struct {
	problems   []problem
	depth      int
	unexpanded map[*yaml.Node]bool // values whose ${VAR} could not be expanded
	// lines maps a key path to the line its key (or list item) is written
	// on; a key written explicitly wins over one from a merge (<<:), as in
	// YAML.
	lines   map[string]int
	merging int                 // >0 while checking a merged mapping
	drop    map[*yaml.Node]bool // refused keys and values in mappings, pruned before decoding
	// stand maps a refused or empty list item to the zero value that
	// stands in for it: yaml.v3 would drop a null item, and the items after
	// it would take its index, which the problems name.
	stand  map[*yaml.Node]*yaml.Node
	unread unreadable
	// fromEnv is expansion.fromEnv, and envValues the key paths whose
	// values came from the environment (an alias's path too), for render
	// to keep those values out of the problems.
	fromEnv   map[*yaml.Node][]string
	envValues map[string]envValue
}

// envValue is a value that took text from the environment variables vars.
type envValue struct {
	value string
	vars  []string
}

// hideEnvValues rewrites the problems that quote a value from the
// environment to name its variables instead: a secret read from the wrong
// variable (weight: ${OPENAI_API_KEY}) must not reach the log.
func hideEnvValues(problems []problem, values map[string]envValue) []problem {
	if len(values) == 0 {
		return problems
	}
	out := make([]problem, len(problems))
	for i, p := range problems {
		if v, ok := values[p.key]; ok {
			refs := make([]string, len(v.vars))
			for j, name := range v.vars {
				refs[j] = "${" + name + "}"
			}
			from := "the value of " + strings.Join(refs, " and ")
			if len(refs) > 1 {
				from = "the value expanded from " + strings.Join(refs, " and ")
			}
			p.msg = strings.ReplaceAll(p.msg, strconv.Quote(v.value), from)
		}
		out[i] = p
	}
	return out
}

// bad reports a problem with path; its line is found from the path.
func (c *checker) bad(path, format string, args ...any) {
	c.badAt(0, path, format, args...)
}

// badAt reports a problem written on line (a key that is not path's own).
func (c *checker) badAt(line int, path, format string, args ...any) {
	c.problems = append(c.problems, problem{key: path, line: line, msg: fmt.Sprintf(format, args...)})
}

// refuse reports the value at path as unreadable: it is left out of the
// decoded config, and Validate does not judge it.
func (c *checker) refuse(path, format string, args ...any) bool {
	c.bad(path, format, args...)
	c.unread.refused[path] = true
	return false
}

// recordLine notes where path is written.
func (c *checker) recordLine(path string, line int) {
	if _, ok := c.lines[path]; ok && c.merging > 0 {
		return
	}
	c.lines[path] = line
}

// lineIn is the line path, or else its nearest written ancestor, is
// written on according to lines (0: none is). A problem about a key the
// file leaves out (routes[0].targets: is required) points at the section
// that lacks it.
func lineIn(lines map[string]int, path string) int {
	for {
		if line, ok := lines[path]; ok {
			return line
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// parentPath is the path one step up: a.b[2] → a.b → a → "".
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndex(path, "["); i > 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}

// render joins problems, each as "line N: key: problem" when its line is
// known; nil when there are none.
func (c *checker) render(problems []problem) error {
	return renderProblems(c.lines, hideEnvValues(problems, c.envValues))
}

// renderProblems is render with the lines of a file's keys (lines).
func renderProblems(lines map[string]int, problems []problem) error {
	errs := make([]error, 0, len(problems))
	for _, p := range problems {
		line := p.line
		if line == 0 {
			line = lineIn(lines, p.key)
		}
		if line > 0 {
			errs = append(errs, fmt.Errorf("line %d: %s", line, p.text()))
		} else {
			errs = append(errs, errors.New(p.text()))
		}
	}
	return errors.Join(errs...)
}

// unreadable is what of a file could not be read. Validate skips a check
// whose input is in it, so that no problem is reported twice or as a
// consequence of another (a misspelt base_url is not also a missing one).
// The zero value (nil maps) is a file read whole.
type unreadable struct {
	refused map[string]bool // values refused, and a key written twice
	empty   map[string]bool // empty list items (decoded as zero, so later items keep their index)
	// written lists the keys each mapping wrote; unknownKeys the mappings
	// with an unknown key, which may be any key they did not write,
	// misspelt.
	written     map[string]map[string]bool
	unknownKeys map[string]bool
}

// covers reports whether a check of key would judge something unread: key
// is, or is under, or holds what was refused or left empty; it holds a
// mapping with an unknown key; or it is a key such a mapping did not write.
func (u *unreadable) covers(key string) bool {
	for _, set := range []map[string]bool{u.refused, u.empty} {
		for p := range set {
			if under(key, p) || under(p, key) {
				return true
			}
		}
	}
	for m := range u.unknownKeys {
		if key != "" && under(m, key) {
			return true
		}
		if m == key || !under(key, m) {
			continue
		}
		rest := key
		if m != "" {
			rest = key[len(m)+1:]
		}
		if i := strings.IndexAny(rest, ".["); i >= 0 {
			rest = rest[:i]
		}
		if !u.written[m][rest] {
			return true
		}
	}
	return false
}

// under reports whether path is prefix or below it (a.b[1].c is under a.b).
func under(path, prefix string) bool {
	if prefix == "" || path == prefix {
		return true
	}
	return strings.HasPrefix(path, prefix) && (path[len(prefix)] == '.' || path[len(prefix)] == '[')
}

// prune removes what the checker refused from the tree under n: a refused
// value (or a second or odd key) takes its mapping entry with it (the
// default stays), and a refused or empty list item is replaced by its zero
// value (c.stand). Aliases are not followed: what they name is pruned where
// it is written.
func (c *checker) prune(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !c.drop[n.Content[i]] && !c.drop[n.Content[i+1]] {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
	case yaml.SequenceNode:
		for i, item := range n.Content {
			if zero := c.stand[item]; zero != nil {
				n.Content[i] = zero
			}
		}
	}
	for _, child := range n.Content {
		c.prune(child)
	}
}

// zeroNode is a node that decodes to t's zero value.
func zeroNode(t reflect.Type) *yaml.Node {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	case reflect.Slice:
		return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "0"}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// check checks n against t and reports whether it was read; the caller
// drops a value that was not (c.drop).
func (c *checker) check(n *yaml.Node, t reflect.Type, path string) bool {
	if n.Kind == yaml.AliasNode {
		if c.depth > 64 || n.Alias == nil { // an alias cycle: yaml.v3 refuses it too
			return c.refuse(path, "the alias *%s cannot be resolved", n.Value)
		}
		c.depth++
		defer func() { c.depth-- }()
		return c.check(n.Alias, t, path)
	}
	if c.unexpanded[n] { // reported by expandNode
		c.unread.refused[path] = true
		return false
	}
	if vars, ok := c.fromEnv[n]; ok { // before scalar retags it
		c.envValues[path] = envValue{value: n.Value, vars: vars}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return true // an empty value: the default, then Validate has its say (a list item that is one is refused below)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A struct with its own UnmarshalYAML (RouteTimeouts) still has its
	// keys checked here; a scalar type with one (Duration) reports itself.
	if t.Kind() != reflect.Struct && reflect.PointerTo(t).Implements(unmarshalerType) {
		return c.custom(n, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode && path == "" {
			return c.refuse(path, "expected keys like \"listen: 127.0.0.1:8080\" at the top, not %s", describe(n))
		}
		if n.Kind != yaml.MappingNode {
			return c.refuse(path, "expected keys (a mapping), not %s", describe(n))
		}
		c.mapping(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return c.refuse(path, "expected a mapping, not %s", describe(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			c.recordLine(p, n.Content[i].Line)
			if !c.check(n.Content[i+1], t.Elem(), p) {
				c.drop[n.Content[i+1]] = true
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return c.refuse(path, "expected a list, not %s", describe(n))
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			c.recordLine(p, item.Line)
			if isNull(item) { // a dangling "-" or a ~: decoding would drop it without a word
				c.bad(p, "is empty")
				c.unread.empty[p] = true
				c.stand[item] = zeroNode(t.Elem())
				continue
			}
			if !c.check(item, t.Elem(), p) {
				c.stand[item] = zeroNode(t.Elem())
			}
		}
	case reflect.Interface:
		// Anything goes (policies: config is the policy's business).
	default:
		if n.Kind != yaml.ScalarNode {
			return c.refuse(path, "expected %s, not %s", expected(t), describe(n))
		}
		return c.scalar(n, t, path)
	}
	return true
}

// isNull reports whether n is, or is an alias of, a null (~, null, or
// nothing at all).
func isNull(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias // an anchor is never on an alias, so one step resolves it
	}
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// mapping checks a mapping node against a struct's yaml tags.
func (c *checker) mapping(n *yaml.Node, t reflect.Type, path string) {
	fields, names := yamlFields(t)
	seen := map[string]bool{}
	written := c.unread.written[path] // a merged mapping adds to its mapping's keys
	if written == nil {
		written = map[string]bool{}
		c.unread.written[path] = written
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" { // <<: *defaults
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			c.merging++
			for _, m := range merged {
				if !c.check(m, t, path) {
					c.drop[v] = true // a merge of something else than a mapping does not decode
				}
			}
			c.merging--
			continue
		}
		if k.Kind != yaml.ScalarNode {
			c.badAt(k.Line, path, "a key must be a plain name, not %s", describe(k))
			c.drop[k], c.unread.unknownKeys[path] = true, true
			continue
		}
		f, ok := fields[k.Value]
		if !ok {
			// Not pruned: what it holds may be an anchor that a known key
			// aliases. The file is then decoded without KnownFields.
			c.badAt(k.Line, path, "unknown key %q%s", k.Value, hint(k.Value, names))
			c.unread.unknownKeys[path] = true
			continue
		}
		p := join(path, k.Value)
		if seen[k.Value] {
			c.badAt(k.Line, path, "key %q appears twice", k.Value)
			c.drop[k], c.unread.refused[p] = true, true // which of the two was meant is not known
			continue
		}
		seen[k.Value], written[k.Value] = true, true
		c.recordLine(p, k.Line)
		if !c.check(v, f.Type, p) {
			c.drop[v] = true
		}
	}
}

// custom checks a value of a type with its own UnmarshalYAML (Duration):
// its errors are already written for people.
func (c *checker) custom(n *yaml.Node, t reflect.Type, path string) bool {
	if t == reflect.TypeFor[Duration]() && n.Kind != yaml.ScalarNode {
		return c.refuse(path, "expected a duration (like 30s or 5m), not %s", describe(n))
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if strings.HasPrefix(msg, "line ") { // yaml.v3's own "line N: cannot unmarshal …"
			msg = "expected " + expected(t) + ", not " + describe(n)
		}
		return c.refuse(path, "%s", msg)
	}
	return true
}

// scalar checks a scalar against a string, number or bool field.
func (c *checker) scalar(n *yaml.Node, t reflect.Type, path string) bool {
	v := strings.TrimSpace(n.Value)
	switch t.Kind() {
	case reflect.String:
		return true // yaml.v3 gives a string field any scalar's text
	case reflect.Bool:
		if n.Tag == "!!str" { // quoted, or from ${VAR}
			if b, err := strconv.ParseBool(v); err == nil {
				n.Tag, n.Style, n.Value = "!!bool", 0, strconv.FormatBool(b)
				return true
			}
		}
		if n.Decode(new(bool)) != nil {
			return c.refuse(path, "%q is not true or false", n.Value)
		}
		return true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Tag == "!!str" { // quoted, or from ${VAR}
			if _, err := strconv.ParseInt(v, 0, 64); err == nil {
				n.Tag, n.Style, n.Value = "!!int", 0, v
			}
		}
		if n.Decode(reflect.New(t).Interface()) == nil {
			if f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64); n.ShortTag() != "!!float" || err != nil || f == math.Trunc(f) {
				return true
			} // yaml.v3 truncates 1.5 to 1: refuse it below
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			switch {
			case f != math.Trunc(f):
				return c.refuse(path, "%q is not a whole number", n.Value)
			case f < 0 && t.Kind() >= reflect.Uint:
				return c.refuse(path, "%q must not be negative", n.Value)
			default:
				return c.refuse(path, "%q is too large", n.Value)
			}
		}
		return c.refuse(path, "%q is not a number", n.Value)
	case reflect.Float32, reflect.Float64:
		if n.Tag == "!!str" {
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				n.Tag, n.Style, n.Value = "!!float", 0, v
			}
		}
		if n.Decode(reflect.New(t).Interface()) != nil {
			return c.refuse(path, "%q is not a number", n.Value)
		}
		return true
	default:
		if n.Decode(reflect.New(t).Interface()) != nil {
			return c.refuse(path, "%q is not %s", n.Value, expected(t))
		}
		return true
	}
}

// yamlFields maps a struct's yaml keys to their fields, and lists the keys
// in declaration order (for suggestions).
func yamlFields(t reflect.Type) (map[string]reflect.StructField, []string) {
	fields := map[string]reflect.StructField{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			inner, innerNames := yamlFields(f.Type)
			for k, v := range inner {
				fields[k] = v
			}
			names = append(names, innerNames...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name) // yaml.v3's default key
		}
		fields[name] = f
		names = append(names, name)
	}
	return fields, names
}

// hint suggests the known key closest to an unknown one, or lists the known
// keys when there are few and none is close.
func hint(key string, names []string) string {
	if s := suggest(key, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	if len(names) <= 10 {
		return " (known keys: " + strings.Join(names, ", ") + ")"
	}
	return ""
}

// suggest returns the known key a typo most likely meant: the same key
// spelled with other case or separators (baseURL, base-url), else the
// nearest by edit distance when it is close enough.
func suggest(key string, names []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	for _, n := range names {
		if norm(n) == norm(key) {
			return n
		}
	}
	best, bestD := "", min(3, 1+len(key)/5)+1
	for _, n := range names {
		if d := editDistance(strings.ToLower(key), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours cost 1.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// describe names what a node is, for "expected X, not Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(n.Value)
}

// expected names what a type wants, in YAML words.
func expected(t reflect.Type) string {
	if t == reflect.TypeFor[Duration]() {
		return "a duration (like 30s or 5m)"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a value"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
