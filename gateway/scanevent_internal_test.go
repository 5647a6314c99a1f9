package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/jsonx"
)

// gjsonScan is how the pump read an event before the one-pass scan:
// CheckDepth, gjson's validator, then gjson's member iteration. It is the
// reference FuzzScanEvent holds eventFields.scan to.
func gjsonScan(data []byte, maxDepth int) (f eventFields, valid, object bool) {
	if jsonx.CheckDepth(data, maxDepth) != nil || !gjson.ValidBytes(data) {
		return f, false, false
	}
	root := parseJSON(data)
	if !root.IsObject() {
		return f, true, false
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			f.Type = v
		case "sequence_number":
			f.seq = v
		case "output_index":
			f.OutputIndex = v
		case "item_id":
			f.ItemID = v
		case "content_index":
			f.ContentIndex = v
		case "summary_index":
			f.SummaryIndex = v
		case "delta":
			f.Delta = v
		case "item":
			f.Item = v
		case "part":
			f.Part = v
		case "response":
			f.Response = v
		case "error":
			f.errObj = v
		}
		return true
	})
	return f, true, true
}

func (f *eventFields) all() []gjson.Result {
	return []gjson.Result{f.Type, f.seq, f.OutputIndex, f.ContentIndex, f.SummaryIndex, f.ItemID, f.Delta, f.Item, f.Part, f.Response, f.errObj}
}

func FuzzScanEvent(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "internal", "jsonx", "testdata", "scantop", "*.json"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const depth = 6
		var got eventFields
		valid, object := got.scan(data, depth)
		want, wvalid, wobject := gjsonScan(data, depth)
		if valid != wvalid || valid && object != wobject {
			t.Fatalf("scan(%q) = valid %v object %v; the gjson reference says %v %v", data, valid, object, wvalid, wobject)
		}
		if !valid || !object {
			return
		}
		g, w := got.all(), want.all()
		for i := range g {
			if g[i].Type != w[i].Type || g[i].Raw != w[i].Raw || g[i].Str != w[i].Str || g[i].Num != w[i].Num || g[i].Index != w[i].Index {
				t.Fatalf("scan(%q) field %d = %+v, the gjson reference %+v", data, i, g[i], w[i])
			}
		}
	})
}

// BenchmarkScanEvent compares the one-pass scan with the three passes it
// replaced, on a text delta and on a terminal event.
func BenchmarkScanEvent(b *testing.B) {
	for _, name := range []string{"delta.json", "completed.json"} {
		data, err := os.ReadFile(filepath.Join("..", "internal", "jsonx", "testdata", "scantop", name))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/onepass", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var f eventFields
				f.scan(data, jsonx.DefaultMaxDepth)
			}
		})
		b.Run(name+"/gjson", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				gjsonScan(data, jsonx.DefaultMaxDepth)
			}
		})
	}
}
