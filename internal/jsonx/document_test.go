package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const sample = `{"model":"gpt-5","stream":true,"input":[{"type":"message","role":"user","content":"hi \"there\" a.b"}],
 "tools":[{"type":"function","name":"shell"},{"type":"web_search"},{"type":"function","name":"apply_patch"}],
 "reasoning":{"effort":"low"},"empty":{},"arr":[],"a.b":{"c":1},"#x":2,"n":[1,2.0,3]}`

func canon(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestDocumentGet(t *testing.T) {
	d := NewDocument([]byte(sample))
	cases := []struct {
		path, want string
		err        error
	}{
		{"model", `"gpt-5"`, nil},
		{"stream", `true`, nil},
		{"tools.1", `{"type":"web_search"}`, nil},
		{"tools.#", `3`, nil},
		{"tools.2.name", `"apply_patch"`, nil},
		{`tools.#(type=="web_search")`, `{"type":"web_search"}`, nil},
		{`tools.#(name=="apply_patch").type`, `"function"`, nil},
		{`tools.#(type=="nope")`, ``, ErrPathNotFound},
		{`n.#(x==1)`, ``, ErrPathNotFound},
		{"reasoning.effort", `"low"`, nil},
		{`a\.b.c`, `1`, nil},
		{`\#x`, `2`, nil},
		{"input.0.content", `"hi \"there\" a.b"`, nil},
		{"missing", ``, ErrPathNotFound},
		{"tools.9", ``, ErrPathNotFound},
		{"tools.name", ``, ErrNotApplicable},
		{"model.x", ``, ErrNotApplicable},
		{"model.", ``, ErrPathSyntax},
		{".model", ``, ErrPathSyntax},
		{"tools.#.type", ``, ErrPathSyntax},
		{`tools.#(type=="x"`, ``, ErrPathSyntax},
		{`tools.#(=="x")`, ``, ErrPathSyntax},
		{`tools.#(type==[1])`, ``, ErrPathSyntax},
		{"tools.-1", ``, ErrPathNotFound},
		{"arr.#", `0`, nil},
		{"tools.01", ``, ErrNotApplicable},
	}
	for _, c := range cases {
		got, err := d.Get(c.path)
		if !errors.Is(err, c.err) {
			t.Errorf("Get(%q) err = %v, want %v", c.path, err, c.err)
			continue
		}
		if err == nil && string(got) != c.want {
			t.Errorf("Get(%q) = %s, want %s", c.path, got, c.want)
		}
	}
	if d.Changed() {
		t.Fatal("Get changed the document")
	}
	whole, err := d.Get("")
	if err != nil || string(whole) != sample {
		t.Fatalf("Get(\"\") = %v", err)
	}
}

func TestDocumentEdits(t *testing.T) {
	orig := []byte(sample)
	keep := append([]byte(nil), orig...)
	type op struct {
		kind, path, val string
		err             error
	}
	cases := []struct {
		name string
		ops  []op
		want func(m map[string]any)
	}{
		{"rename model", []op{{"set", "model", `"gpt-4.1"`, nil}}, func(m map[string]any) { m["model"] = "gpt-4.1" }},
		{"drop tool by query", []op{{"del", `tools.#(type=="web_search")`, "", nil}}, func(m map[string]any) {
			m["tools"] = []any{m["tools"].([]any)[0], m["tools"].([]any)[2]}
		}},
		{"drop first and last tools", []op{{"del", "tools.0", "", nil}, {"del", "tools.1", "", nil}}, func(m map[string]any) {
			m["tools"] = []any{m["tools"].([]any)[1]}
		}},
		{"drop all tools", []op{{"del", "tools.0", "", nil}, {"del", "tools.0", "", nil}, {"del", "tools.0", "", nil}, {"del", "tools.0", "", ErrPathNotFound}}, func(m map[string]any) {
			m["tools"] = []any{}
		}},
		{"delete top-level first and last", []op{{"del", "model", "", nil}, {"del", "n", "", nil}, {"set", "stream", "false", nil}}, func(m map[string]any) {
			delete(m, "model")
			delete(m, "n")
			m["stream"] = false
		}},
		{"add keys", []op{{"set", "store", "false", nil}, {"set", "reasoning.summary", `"auto"`, nil}, {"set", "x.y.z", `[1]`, nil}, {"set", "empty.k", `null`, nil}}, func(m map[string]any) {
			m["store"] = false
			m["reasoning"].(map[string]any)["summary"] = "auto"
			m["x"] = map[string]any{"y": map[string]any{"z": []any{1.0}}}
			m["empty"] = map[string]any{"k": nil}
		}},
		{"append", []op{{"set", "arr.-1", `1`, nil}, {"set", "arr.1", `2`, nil}, {"set", "arr.5", `2`, ErrPathNotFound}, {"set", "tools.-1", `{"type":"x"}`, nil}}, func(m map[string]any) {
			m["arr"] = []any{1.0, 2.0}
			m["tools"] = append(m["tools"].([]any), map[string]any{"type": "x"})
		}},
		{"nested set via query", []op{{"set", `tools.#(name=="shell").name`, `"bash"`, nil}}, func(m map[string]any) {
			m["tools"].([]any)[0].(map[string]any)["name"] = "bash"
		}},
		{"grow then shrink many", []op{{"set", "model", `"` + strings.Repeat("m", 5000) + `"`, nil}, {"set", "reasoning", `{}`, nil}, {"set", "model", `"a"`, nil}}, func(m map[string]any) {
			m["model"] = "a"
			m["reasoning"] = map[string]any{}
		}},
		{"bad value", []op{{"set", "model", `{`, ErrValue}, {"set", "tools.#", `1`, ErrPathSyntax}}, func(m map[string]any) {}},
		{"replace root", []op{{"set", "", `{"a":1}`, nil}, {"set", "b", `2`, nil}}, func(m map[string]any) {
			for k := range m {
				delete(m, k)
			}
			m["a"] = 1.0
			m["b"] = 2.0
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDocument(orig)
			for _, o := range c.ops {
				var err error
				if o.kind == "set" {
					err = d.Set(o.path, []byte(o.val))
				} else {
					err = d.Delete(o.path)
				}
				if !errors.Is(err, o.err) {
					t.Fatalf("%s %q: err %v, want %v", o.kind, o.path, err, o.err)
				}
			}
			var want map[string]any
			_ = json.Unmarshal(orig, &want)
			c.want(want)
			wb, _ := json.Marshal(want)
			if got := canon(t, d.Bytes()); got != string(wb) {
				t.Fatalf("got  %s\nwant %s", got, wb)
			}
			// The index stays right: every top-level key reads back.
			for k, v := range want {
				raw, err := d.Get(EscapeKey(k))
				if err != nil {
					t.Fatalf("Get(%q) after edits: %v", k, err)
				}
				vb, _ := json.Marshal(v)
				if canon(t, raw) != string(vb) {
					t.Fatalf("Get(%q) = %s, want %s", k, raw, vb)
				}
			}
		})
	}
	if !bytes.Equal(orig, keep) {
		t.Fatal("edits modified the input slice")
	}
}

func TestDocumentCheckpoint(t *testing.T) {
	d := NewDocument([]byte(sample))
	_ = d.Set("model", []byte(`"a"`))
	cp := d.Checkpoint()
	before := string(d.Bytes())
	_ = d.Delete("tools.0")
	_ = d.Set("model", []byte(`"bbbbbbbbbbbbbbbbbbb"`))
	d.Restore(cp)
	if string(d.Bytes()) != before {
		t.Fatalf("restore: %s", d.Bytes())
	}
	if got, _ := d.Get("model"); string(got) != `"a"` {
		t.Fatalf("model after restore = %s", got)
	}
	if got, _ := d.Get("tools.#"); string(got) != `3` {
		t.Fatalf("tools after restore = %s", got)
	}
}

func (d *Document) setString(path, v string) error { return d.Set(path, []byte(v)) }

func TestDocumentWhitespaceAndEscapes(t *testing.T) {
	body := " { \"mo\\u0064el\" : \"x\" , \"t\" : [ 1 , { \"k\" : \"a\\\\\" } ] } "
	d := NewDocument([]byte(body))
	if v, err := d.Get("model"); err != nil || string(v) != `"x"` {
		t.Fatalf("escaped key: %s %v", v, err)
	}
	if v, err := d.Get(`t.#(k=="a\\")`); err != nil || string(v) != `{ "k" : "a\\" }` {
		t.Fatalf("query escaped literal: %s %v", v, err)
	}
	if err := d.Delete("t.0"); err != nil {
		t.Fatal(err)
	}
	if err := d.setString("t.-1", "2"); err != nil {
		t.Fatal(err)
	}
	if got := canon(t, d.Bytes()); got != `{"model":"x","t":[{"k":"a\\"},2]}` {
		t.Fatalf("got %s", got)
	}
}

func TestEscapeKeyRoundTrip(t *testing.T) {
	for _, k := range []string{"a.b", `a\b`, "#x", "#", "x#", "1", "-1", "#(a==1)", "a==b"} {
		doc := []byte(`{"other":0,` + Quote(k) + `:42}`)
		v, err := NewDocument(doc).Get(EscapeKey(k))
		if err != nil || string(v) != "42" {
			t.Errorf("EscapeKey(%q) = %q: %s %v", k, EscapeKey(k), v, err)
		}
	}
}

func TestQuoteUnquote(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "ctl\x01\n\t", "ünï", "\xff", "<&>", "\u2028"} {
		q := Quote(s)
		var back string
		if err := json.Unmarshal([]byte(q), &back); err != nil {
			t.Fatalf("Quote(%q)=%s invalid: %v", s, q, err)
		}
		u, ok := Unquote([]byte(q))
		if !ok || u != back {
			t.Fatalf("Unquote(%s) = %q,%v want %q", q, u, ok, back)
		}
	}
	if _, ok := Unquote([]byte(`"a" x`)); ok {
		t.Fatal("trailing garbage accepted")
	}
}

// errKind classifies an error of the document functions by its sentinel,
// as hostabi.CodeOf does when it maps one to a host-function code.
func errKind(err error) error {
	for _, s := range []error{ErrPathNotFound, ErrPathSyntax, ErrValue, ErrNotApplicable} {
		if errors.Is(err, s) {
			return s
		}
	}
	if err != nil {
		return ErrInvalidDocument
	}
	return nil
}

// FuzzDocument checks that no path and no document makes the engine panic,
// and that edits on valid JSON keep it valid.
func FuzzDocument(f *testing.F) {
	f.Add([]byte(sample), "tools.#(type==\"web_search\")", []byte(`"x"`))
	f.Add([]byte(`[1,2,{"a":[]}]`), "2.a.-1", []byte(`{}`))
	f.Add([]byte(`{"a":"\\"}`), `a`, []byte(`1`))
	f.Add([]byte(`{`), `a.b`, []byte(`1`))
	f.Fuzz(func(t *testing.T, body []byte, path string, val []byte) {
		valid := json.Valid(body)
		d := NewDocument(body)
		g1, e1 := d.Get(path)
		g2, e2 := Lookup(body, path)
		if valid && !hasDupKeys(body) && (errKind(e1) != errKind(e2) || string(g1) != string(g2)) {
			t.Fatalf("Get(%q) = %s,%v; Lookup = %s,%v", path, g1, e1, g2, e2)
		}
		err := d.Set(path, val)
		if valid && err == nil && !json.Valid(d.Bytes()) {
			t.Fatalf("Set(%q,%s) on %s made invalid JSON: %s", path, val, body, d.Bytes())
		}
		err = d.Delete(path)
		if valid && err == nil && !json.Valid(d.Bytes()) {
			t.Fatalf("Delete(%q) made invalid JSON: %s", path, d.Bytes())
		}
		_, _ = d.Get(path)
	})
}

// codexBody builds a Codex-shaped Responses request of about size bytes:
// model first, a long input history, then tools, then the small flags.
func codexBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-5-codex","instructions":"You are Codex.","input":[`)
	for i := 0; b.Len() < size-4000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"please look at file %d and fix the \"bug\" in it; %s"}]}`, i, strings.Repeat("lorem ipsum ", 20))
		case 1:
			fmt.Fprintf(&b, `{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cat\",\"f%d.go\"]}","call_id":"call_%d"}`, i, i)
		default:
			fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%d","output":"{\"output\":\"package main\\nfunc main() {}\\n%s\",\"metadata\":{\"exit_code\":0}}"}`, i, strings.Repeat("// code line\\n", 30))
		}
	}
	b.WriteString(`],"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array"}}}},{"type":"web_search"},{"type":"function","name":"apply_patch","parameters":{}}],`)
	b.WriteString(`"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"abc"}`)
	return b.Bytes()
}

func TestCodexBodyEdit(t *testing.T) {
	body := codexBody(1 << 20)
	if !json.Valid(body) {
		t.Fatal("generator made invalid JSON")
	}
	d := NewDocument(body)
	if err := d.Set("model", []byte(`"gpt-5.1-codex"`)); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(`tools.#(type=="web_search")`); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Model string `json:"model"`
		Tools []any  `json:"tools"`
	}
	if err := json.Unmarshal(d.Bytes(), &v); err != nil || v.Model != "gpt-5.1-codex" || len(v.Tools) != 2 {
		t.Fatalf("%v %+v", err, v)
	}
	if !reflect.DeepEqual(body, codexBody(1<<20)) {
		t.Fatal("input modified")
	}
}

func benchEdit(b *testing.B, size int) {
	body := codexBody(size)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		d := NewDocument(body)
		if v, err := d.Get("stream"); err != nil || string(v) != "true" {
			b.Fatal(err)
		}
		if err := d.Set("model", []byte(`"gpt-5.1-codex"`)); err != nil {
			b.Fatal(err)
		}
		if err := d.Delete(`tools.#(type=="web_search")`); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDocumentEdit1KiB/1MiB: index + model rename + drop one tool, natively.
func BenchmarkDocumentEdit1KiB(b *testing.B) { benchEdit(b, 1<<10) }
func BenchmarkDocumentEdit1MiB(b *testing.B) { benchEdit(b, 1<<20) }

// TestDocumentRandomized drives random edits on random objects and compares
// with encoding/json: the two-ended index must agree with a plain parse.
func TestDocumentRandomized(t *testing.T) {
	rng := newRand(7)
	for round := 0; round < 300; round++ {
		n := rng.intn(12)
		ref := map[string]any{}
		var b bytes.Buffer
		b.WriteString("{ ")
		keys := []string{}
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("k%d%s", i, []string{"", ".x", `"q`, `\`, "#"}[rng.intn(5)])
			var v any
			switch rng.intn(5) {
			case 0:
				v = strings.Repeat(`ab"\`, rng.intn(3000))
			case 1:
				v = float64(rng.intn(100))
			case 2:
				arr := []any{}
				for j := rng.intn(6); j > 0; j-- {
					arr = append(arr, map[string]any{"type": fmt.Sprint("t", j%3), "s": strings.Repeat("]}", rng.intn(500))})
				}
				v = arr
			case 3:
				v = map[string]any{"a": []any{true, nil, "x\\"}}
			default:
				v = false
			}
			ref[k] = v
			keys = append(keys, k)
			if i > 0 {
				b.WriteString(" ,\n ")
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(v)
			b.Write(kb)
			b.WriteString(" : ")
			b.Write(vb)
		}
		b.WriteString(" }\n")
		d := NewDocument(b.Bytes())
		for op := 0; op < 8; op++ {
			var k string
			if len(keys) > 0 && rng.intn(4) > 0 {
				k = keys[rng.intn(len(keys))]
			} else {
				k = fmt.Sprint("new", rng.intn(3))
			}
			p := EscapeKey(k)
			switch rng.intn(4) {
			case 0, 1:
				got, err := d.Get(p)
				want, ok := ref[k]
				if ok != (err == nil) {
					t.Fatalf("round %d Get(%q): err %v, present %v", round, p, err, ok)
				}
				if ok {
					wb, _ := json.Marshal(want)
					if canon(t, got) != string(wb) {
						t.Fatalf("round %d Get(%q) = %.80s want %.80s", round, p, got, wb)
					}
				}
			case 2:
				v := strings.Repeat("z", rng.intn(50))
				if err := d.Set(p, []byte(Quote(v))); err != nil {
					t.Fatalf("Set(%q): %v", p, err)
				}
				if _, ok := ref[k]; !ok {
					keys = append(keys, k)
				}
				ref[k] = v
			case 3:
				err := d.Delete(p)
				if _, ok := ref[k]; ok != (err == nil) {
					t.Fatalf("Delete(%q): %v", p, err)
				}
				delete(ref, k)
			}
		}
		wb, _ := json.Marshal(ref)
		if got := canon(t, d.Bytes()); got != string(wb) {
			t.Fatalf("round %d: got %.200s want %.200s", round, got, wb)
		}
	}
}

type xorshift struct{ s uint64 }

func newRand(seed uint64) *xorshift { return &xorshift{s: seed*2654435761 + 1} }
func (r *xorshift) intn(n int) int {
	if n <= 0 {
		return 0
	}
	r.s ^= r.s << 13
	r.s ^= r.s >> 7
	r.s ^= r.s << 17
	return int(r.s % uint64(n))
}

// FuzzSWAR checks the wasm scanners against the native ones.
func FuzzSWAR(f *testing.F) {
	f.Add([]byte(`"abc\"def\\\\" tail`), byte('"'))
	f.Add([]byte(`"0123456789abcdef\\u0041 and \\" more text here"`), byte('\\'))
	f.Fuzz(func(t *testing.T, b []byte, c byte) {
		if got, want := swarIndexByte(b, c), bytes.IndexByte(b, c); got != want {
			t.Fatalf("swarIndexByte(%q,%q) = %d, want %d", b, c, got, want)
		}
		want := -1
		for i, x := range b {
			if x == '"' || x == '\\' || x < ' ' {
				want = i
				break
			}
		}
		if got := swarIndexStringSpecial(b); got != want {
			t.Fatalf("swarIndexStringSpecial(%q) = %d, want %d", b, got, want)
		}
		if len(b) > 0 && b[0] == '"' {
			e1, err1 := skipString(b, 0)
			e2, err2 := swarSkipString(b, 0)
			if (err1 == nil) != (err2 == nil) || (err1 == nil && e1 != e2) {
				t.Fatalf("skipString(%q) = %d,%v; swar %d,%v", b, e1, err1, e2, err2)
			}
		}
	})
}

// hasDupKeys reports whether some object in b repeats a key (then the
// index and a plain walk may legitimately pick different members).
func hasDupKeys(b []byte) bool {
	dup := false
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	_ = walk
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj    bool
		keys   map[string]bool
		expKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return dup
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.obj {
					top.expKey = true
				}
				stack = append(stack, &frame{obj: t == '{', keys: map[string]bool{}, expKey: true})
			default:
				stack = stack[:len(stack)-1]
			}
		default:
			if top != nil && top.obj {
				if top.expKey {
					k, _ := t.(string)
					if top.keys[k] {
						dup = true
					}
					top.keys[k] = true
					top.expKey = false
				} else {
					top.expKey = true
				}
			}
		}
	}
}
