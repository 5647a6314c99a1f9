package gateway_test

import (
	"encoding/binary"
	"fmt"
)

// swapPolicy hand-assembles a WebAssembly policy (hostabi/ABI.md, no wabt
// needed) whose two hooks both say which version answered:
//
//   - sluice_rewrite_request sets the body's model to "model-<version>";
//   - sluice_recover answers {"verdict":1,"code":"swap_<version in words>"}
//     (swap_one, swap_two), so the client's response.failed carries the
//     recovering version's code.
//
// Different versions differ only in their data, so every version is a valid
// module of the same shape.
func swapPolicy(version int) []byte {
	model := fmt.Sprintf(`"model-%d"`, version)
	verdict := fmt.Sprintf(`{"verdict":1,"code":"swap_%s"}`, []string{"zero", "one", "two", "three"}[version])
	const (
		pathAt    = 256 // "model"
		modelAt   = 272 // the new model, a JSON string
		verdictAt = 320 // the recover output
		inputAt   = 65536
	)
	i32, i64 := byte(0x7f), byte(0x7e)

	var m []byte
	m = append(m, 0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00)

	// 1 type: 0 () → i32, 1 (i32) → i32, 2 (i32 i32) → i64, 3 (i32×4) → i32
	m = wSection(m, 1, wVec(
		wFunctype(nil, []byte{i32}),
		wFunctype([]byte{i32}, []byte{i32}),
		wFunctype([]byte{i32, i32}, []byte{i64}),
		wFunctype([]byte{i32, i32, i32, i32}, []byte{i32}),
	))
	// 2 import: func 0 = sluice.doc_set (type 3)
	m = wSection(m, 2, wVec(wCat(wName("sluice"), wName("doc_set"), []byte{0x00, 0x03})))
	// 3 function: 1 abi_version (t0), 2 alloc (t1), 3 rewrite (t2), 4 recover (t2)
	m = wSection(m, 3, wVec([]byte{0x00}, []byte{0x01}, []byte{0x02}, []byte{0x02}))
	// 5 memory: 2 pages
	m = wSection(m, 5, wVec([]byte{0x00, 0x02}))
	// 7 export
	m = wSection(m, 7, wVec(
		wCat(wName("memory"), []byte{0x02, 0x00}),
		wCat(wName("sluice_abi_version"), []byte{0x00, 0x01}),
		wCat(wName("sluice_alloc"), []byte{0x00, 0x02}),
		wCat(wName("sluice_rewrite_request"), []byte{0x00, 0x03}),
		wCat(wName("sluice_recover"), []byte{0x00, 0x04}),
	))
	// 10 code
	abi := wCat([]byte{0x00}, wI32(1), []byte{0x0b})
	alloc := wCat([]byte{0x00},
		[]byte{0x20, 0x00}, wI32(inputAt), []byte{0x4b}, // local.get 0; i32.const; i32.gt_u
		[]byte{0x04, 0x40, 0x00, 0x0b}, // if: unreachable
		wI32(inputAt), []byte{0x0b})
	rewrite := wCat([]byte{0x00},
		wI32(pathAt), wI32(5), wI32(modelAt), wI32(int32(len(model))),
		[]byte{0x10, 0x00, 0x1a}, // call doc_set; drop
		[]byte{0x42, 0x00, 0x0b}) // i64.const 0 (done)
	recoverFn := wCat([]byte{0x00}, []byte{0x42}, wSleb(int64(verdictAt)<<32|int64(len(verdict))), []byte{0x0b})
	m = wSection(m, 10, wVec(wSized(abi), wSized(alloc), wSized(rewrite), wSized(recoverFn)))
	// 11 data
	m = wSection(m, 11, wVec(
		wData(pathAt, []byte("model")),
		wData(modelAt, []byte(model)),
		wData(verdictAt, []byte(verdict)),
	))
	return m
}

func wUleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func wSleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func wI32(v int32) []byte { return append([]byte{0x41}, wSleb(int64(v))...) }

func wCat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func wName(s string) []byte { return append(wUleb(uint64(len(s))), s...) }

func wSized(b []byte) []byte { return append(wUleb(uint64(len(b))), b...) }

func wVec(items ...[]byte) []byte { return append(wUleb(uint64(len(items))), wCat(items...)...) }

func wSection(m []byte, id byte, content []byte) []byte {
	return append(append(m, id), wSized(content)...)
}

func wFunctype(params, results []byte) []byte {
	return wCat([]byte{0x60}, wSized(params), wSized(results))
}

func wData(at int32, data []byte) []byte {
	return wCat([]byte{0x00}, wI32(at), []byte{0x0b}, wSized(data))
}
