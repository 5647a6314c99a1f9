package jsonx

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// scanned is what ScanTop reported, as text: the verdict, then each member
// as key=value.
func scanned(b []byte, max int) string {
	var ms []string
	valid, object := ScanTop(b, max, func(key []byte, vs, ve int) {
		ms = append(ms, fmt.Sprintf("%s=%s", key, b[vs:ve]))
	})
	return fmt.Sprintf("valid=%v object=%v %s", valid, object, strings.Join(ms, " "))
}

func TestScanTop(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"members in order", `{"type":"x","n":1,"o":{"a":[1,2]},"e":{},"l":[]}`, 3,
			`valid=true object=true type="x" n=1 o={"a":[1,2]} e={} l=[]`},
		{"nested keys are not top-level members", `{"a":{"type":"inner"},"b":2}`, 2,
			`valid=true object=true a={"type":"inner"} b=2`},
		{"whitespace everywhere", " \t\n{ \"a\" : 1 , \"b\" :\r\n[ ] }\n ", 2, `valid=true object=true a=1 b=[ ]`},
		{"escaped key stays raw", `{"typ\u0065":"x"}`, 1, `valid=true object=true typ\u0065="x"`},
		{"an array root has no members", `[{"a":1}]`, 2, `valid=true object=false `},
		{"a scalar root", `"x"`, 1, `valid=true object=false `},
		{"an empty object", `{}`, 1, `valid=true object=true `},
		{"at the depth limit", `{"a":[[1]]}`, 3, `valid=true object=true a=[[1]]`},
		{"past the depth limit", `{"a":[[1]]}`, 2, `valid=false object=true `},
		{"depth counts empty containers", `[[[]]]`, 2, `valid=false object=false `},
		{"default depth", strings.Repeat("[", DefaultMaxDepth) + strings.Repeat("]", DefaultMaxDepth), 0, `valid=true object=false `},
		{"default depth crossed", strings.Repeat("[", DefaultMaxDepth+1) + strings.Repeat("]", DefaultMaxDepth+1), 0, `valid=false object=false `},
		{"six million brackets", strings.Repeat("[", 6_000_000), 128, `valid=false object=false `},
		{"members before an error are reported", `{"a":1,"b":}`, 2, `valid=false object=true a=1`},
		{"trailing comma in an object", `{"a":1,}`, 2, `valid=false object=true a=1`},
		{"trailing comma in an array", `[1,]`, 2, `valid=false object=false `},
		{"trailing garbage", `{"a":1}x`, 2, `valid=false object=true a=1`},
		{"two values", `1 2`, 2, `valid=false object=false `},
		{"empty", ``, 2, `valid=false object=false `},
		{"only spaces", `  `, 2, `valid=false object=false `},
		{"unterminated object", `{"a":1`, 2, `valid=false object=true a=1`},
		{"missing colon", `{"a" 1}`, 2, `valid=false object=true `},
		{"key not a string", `{a:1}`, 2, `valid=false object=true `},
		{"mismatched closer", `{"a":[1}}`, 3, `valid=false object=true `},
		{"control byte in a string", "{\"a\":\"x\ty\"}", 2, `valid=false object=true `},
		{"bad escape", `{"a":"\x"}`, 2, `valid=false object=true `},
		{"short unicode escape", `{"a":"\u12"}`, 2, `valid=false object=true `},
		{"unicode escape at the end", `"\u1234`, 2, `valid=false object=false `},
		{"escaped quote", `{"a":"\"}"}`, 2, `valid=true object=true a="\"}"`},
		{"numbers", `[0,-0,1.5,-2e10,3E+2,4e-1,123]`, 1, `valid=true object=false `},
		{"leading zero", `[01]`, 1, `valid=false object=false `},
		{"bare minus", `[-]`, 1, `valid=false object=false `},
		{"dot without digits", `[1.]`, 1, `valid=false object=false `},
		{"exponent without digits", `[1e+]`, 1, `valid=false object=false `},
		{"plus sign", `[+1]`, 1, `valid=false object=false `},
		{"literals", `{"t":true,"f":false,"n":null}`, 1, `valid=true object=true t=true f=false n=null`},
		{"truncated literal", `{"t":tru}`, 1, `valid=false object=true `},
		{"literal with a tail", `{"t":truex}`, 1, `valid=false object=true t=true`},
		{"bytes above 0x7f pass as gjson lets them", "{\"a\":\"\xff\"}", 1, "valid=true object=true a=\"\xff\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scanned([]byte(tc.in), tc.max); got != tc.want {
				t.Fatalf("ScanTop(%.60q, %d):\n got %s\nwant %s", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

// TestScanTopAllocs: the stream path calls ScanTop once per event.
func TestScanTopAllocs(t *testing.T) {
	b := []byte(`{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[{"a":[[[1]]]}]}`)
	n := 0
	if a := testing.AllocsPerRun(100, func() { ScanTop(b, 0, func([]byte, int, int) { n++ }) }); a != 0 {
		t.Fatalf("ScanTop allocates %v times per call", a)
	}
}

// FuzzScanTop holds ScanTop to what it replaced on the stream path:
// CheckDepth followed by gjson's validator, then gjson's member iteration.
// A key with a \uD800-\uDFFF escape is the exception: gjson's unescape
// takes whatever \u escape follows a high surrogate as its pair, and when
// the pair is not one (`"\ud800\u0041"`) it yields U+FFFD and loses the
// second escape; Unescape, like encoding/json, keeps it (U+FFFD then "A").
// Such keys are compared with encoding/json's decoding instead.
func FuzzScanTop(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "scantop", "*.json"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(4))
	}
	f.Fuzz(func(t *testing.T, b []byte, max uint8) {
		depth := int(max%16) + 1
		var got []string
		valid, object := ScanTop(b, depth, func(key []byte, vs, ve int) {
			k, ok := Unescape(key)
			if !ok {
				t.Fatalf("member key %q is not a valid JSON string body", key)
			}
			if hasSurrogateEscape(string(key)) {
				k = perByteValidUTF8(k) // as encoding/json, the reference for such keys, gives it
			}
			got = append(got, fmt.Sprintf("%q@%d=%s", k, vs, b[vs:ve]))
		})
		want := CheckDepth(b, depth) == nil && gjson.ValidBytes(b)
		if valid != want {
			t.Fatalf("ScanTop(%q, %d) valid=%v, CheckDepth+gjson.ValidBytes say %v", b, depth, valid, want)
		}
		if !valid {
			return
		}
		root := gjson.ParseBytes(b)
		if object != root.IsObject() {
			t.Fatalf("ScanTop(%q) object=%v, gjson says %v", b, object, root.IsObject())
		}
		var ref []string
		root.ForEach(func(k, v gjson.Result) bool {
			key := k.Str
			if hasSurrogateEscape(k.Raw) {
				key = stdUnquote(t, k.Raw)
			}
			ref = append(ref, fmt.Sprintf("%q@%d=%s", key, v.Index, v.Raw))
			return true
		})
		if !object {
			ref = nil
		}
		if strings.Join(got, "\n") != strings.Join(ref, "\n") {
			t.Fatalf("members of %q:\n ScanTop %v\n   gjson %v", b, got, ref)
		}
	})
}

// hasSurrogateEscape reports whether a JSON string (its body, or quoted)
// holds a \u escape of a UTF-16 surrogate (U+D800 to U+DFFF).
func hasSurrogateEscape(raw string) bool {
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] == 'u' && i+3 < len(raw) && (raw[i+2] == 'd' || raw[i+2] == 'D') && strings.ContainsRune("89abcdefABCDEF", rune(raw[i+3])) {
			return true
		}
		i++ // the escaped character: "\\ud800" is a backslash, then text
	}
	return false
}

// stdUnquote decodes a quoted JSON string as encoding/json does.
func stdUnquote(t *testing.T, raw string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatalf("encoding/json rejects the key %s that gjson's validator accepts: %v", raw, err)
	}
	return s
}

// perByteValidUTF8 replaces each byte of s that is not part of valid UTF-8
// with U+FFFD, as encoding/json does when it decodes a string.
func perByteValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // an invalid byte ranges as utf8.RuneError, one byte at a time
	}
	return b.String()
}
