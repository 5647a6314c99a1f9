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
// so "max_body_bytes: ${MAX}" works.
func checkTree(root *yaml.Node) error {
	if err := checkAliasGrowth(root); err != nil {
		return err // walking such a tree (or decoding it) would take minutes
	}
	c := &checker{}
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	c.check(n, reflect.TypeFor[Config](), "")
	return errors.Join(c.errs...)
}

// maxAliasGrowth bounds how many nodes aliases (*name, and <<: *name merge
// keys) may add to the config, counted as if each were replaced by what it
// names. Shared upstream or key settings add a few thousand at most; a small
// file whose anchors name anchors that name anchors can add billions (an
// alias bomb), which every later walk of the tree would repeat.
const maxAliasGrowth = 100_000

// checkAliasGrowth refuses a config whose aliases add more than
// maxAliasGrowth nodes, naming the alias that goes past it. It visits each
// node of the file once: an anchored node's expanded size is remembered, so
// an alias costs one lookup however often its target is named.
func checkAliasGrowth(root *yaml.Node) error {
	g := &aliasGrowth{size: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	if alias, path := g.walk(root, ""); alias != nil {
		if path == "" {
			return fmt.Errorf("with the alias *%s, aliases and merge keys expand the config by more than %d nodes", alias.Value, maxAliasGrowth)
		}
		return fmt.Errorf("%s: with the alias *%s, aliases and merge keys expand the config by more than %d nodes", path, alias.Value, maxAliasGrowth)
	}
	return nil
}

type aliasGrowth struct {
	added int                // nodes the aliases seen so far add
	size  map[*yaml.Node]int // an anchored node's size with its aliases expanded
	open  map[*yaml.Node]bool
}

// walk visits the nodes of the file under n in order and returns the first
// alias that takes the growth past maxAliasGrowth, with its key path.
func (g *aliasGrowth) walk(n *yaml.Node, path string) (*yaml.Node, string) {
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias != nil {
			g.added += g.expandedSize(n.Alias)
		}
		if g.added > maxAliasGrowth {
			return n, path
		}
		return nil, ""
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Value != "<<" || k.Tag != "!!merge" {
				if alias, at := g.walk(v, join(path, k.Value)); alias != nil {
					return alias, at
				}
				continue
			}
			// <<: *a or <<: [*a, *b]: the aliases belong to the mapping
			// they merge into.
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				if alias, at := g.walk(m, path); alias != nil {
					return alias, at
				}
			}
		}
		return nil, ""
	}
	for i, c := range n.Content { // a list, or the document
		p := path
		if n.Kind == yaml.SequenceNode {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		if alias, at := g.walk(c, p); alias != nil {
			return alias, at
		}
	}
	return nil, ""
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

type checker struct {
	errs  []error
	depth int
}

func (c *checker) bad(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	c.errs = append(c.errs, errors.New(msg))
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (c *checker) check(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode {
		if c.depth > 64 || n.Alias == nil { // an alias cycle: yaml.v3 refuses it too
			c.bad(path, "the alias *%s cannot be resolved", n.Value)
			return
		}
		c.depth++
		defer func() { c.depth-- }()
		c.check(n.Alias, t, path)
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value: the default, then Validate has its say (a list item that is one is refused below)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A struct with its own UnmarshalYAML (RouteTimeouts) still has its
	// keys checked here; a scalar type with one (Duration) reports itself.
	if t.Kind() != reflect.Struct && reflect.PointerTo(t).Implements(unmarshalerType) {
		c.custom(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode && path == "" {
			c.bad(path, "expected keys like \"listen: 127.0.0.1:8080\" at the top, not %s", describe(n))
			return
		}
		if n.Kind != yaml.MappingNode {
			c.bad(path, "expected keys (a mapping), not %s", describe(n))
			return
		}
		c.mapping(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.bad(path, "expected a mapping, not %s", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.check(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.bad(path, "expected a list, not %s", describe(n))
			return
		}
		for i, item := range n.Content {
			if isNull(item) { // a dangling "-" or a ~: decoding would drop it without a word
				c.bad(fmt.Sprintf("%s[%d]", path, i), "is empty")
				continue
			}
			c.check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Interface:
		// Anything goes (policies: config is the policy's business).
	default:
		if n.Kind != yaml.ScalarNode {
			c.bad(path, "expected %s, not %s", expected(t), describe(n))
			return
		}
		c.scalar(n, t, path)
	}
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
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" { // <<: *defaults
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				c.check(m, t, path)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			c.bad(path, "a key must be a plain name, not %s", describe(k))
			continue
		}
		f, ok := fields[k.Value]
		if !ok {
			c.bad(path, "unknown key %q%s", k.Value, hint(k.Value, names))
			continue
		}
		if seen[k.Value] {
			c.bad(path, "key %q appears twice", k.Value)
			continue
		}
		seen[k.Value] = true
		c.check(v, f.Type, join(path, k.Value))
	}
}

// custom checks a value of a type with its own UnmarshalYAML (Duration):
// its errors are already written for people.
func (c *checker) custom(n *yaml.Node, t reflect.Type, path string) {
	if t == reflect.TypeFor[Duration]() && n.Kind != yaml.ScalarNode {
		c.bad(path, "expected a duration (like 30s or 5m), not %s", describe(n))
		return
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if strings.HasPrefix(msg, "line ") { // yaml.v3's own "line N: cannot unmarshal …"
			msg = "expected " + expected(t) + ", not " + describe(n)
		}
		c.bad(path, "%s", msg)
	}
}

// scalar checks a scalar against a string, number or bool field.
func (c *checker) scalar(n *yaml.Node, t reflect.Type, path string) {
	v := strings.TrimSpace(n.Value)
	switch t.Kind() {
	case reflect.String:
		return // yaml.v3 gives a string field any scalar's text
	case reflect.Bool:
		if n.Tag == "!!str" { // quoted, or from ${VAR}
			if b, err := strconv.ParseBool(v); err == nil {
				n.Tag, n.Style, n.Value = "!!bool", 0, strconv.FormatBool(b)
				return
			}
		}
		if n.Decode(new(bool)) != nil {
			c.bad(path, "%q is not true or false", n.Value)
		}
		return
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Tag == "!!str" { // quoted, or from ${VAR}
			if _, err := strconv.ParseInt(v, 0, 64); err == nil {
				n.Tag, n.Style, n.Value = "!!int", 0, v
			}
		}
		if n.Decode(reflect.New(t).Interface()) == nil {
			if f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64); n.ShortTag() != "!!float" || err != nil || f == math.Trunc(f) {
				return
			} // yaml.v3 truncates 1.5 to 1: refuse it below
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			if f != math.Trunc(f) {
				c.bad(path, "%q is not a whole number", n.Value)
			} else if f < 0 && t.Kind() >= reflect.Uint {
				c.bad(path, "%q must not be negative", n.Value)
			} else {
				c.bad(path, "%q is too large", n.Value)
			}
			return
		}
		c.bad(path, "%q is not a number", n.Value)
	case reflect.Float32, reflect.Float64:
		if n.Tag == "!!str" {
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				n.Tag, n.Style, n.Value = "!!float", 0, v
			}
		}
		if n.Decode(reflect.New(t).Interface()) != nil {
			c.bad(path, "%q is not a number", n.Value)
		}
	default:
		if n.Decode(reflect.New(t).Interface()) != nil {
			c.bad(path, "%q is not %s", n.Value, expected(t))
		}
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
