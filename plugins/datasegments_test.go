package plugins

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/sluice-gw/sluice/policies"
)

// TestMergeDataSegmentsSameMemory instantiates each embedded policy as built
// and with its data segments merged, runs no start function, and compares
// the linear memories: merging must not change a byte a module sees.
func TestMergeDataSegmentsSameMemory(t *testing.T) {
	r := newRuntime(t, Options{})
	ctx := context.Background()
	for file, data := range policies.Defaults() {
		t.Run(file, func(t *testing.T) {
			merged := mergeDataSegments(data)
			before, after := countDataSegments(t, data), countDataSegments(t, merged)
			if after >= before || after > 64 {
				t.Fatalf("segments: %d before, %d after merging", before, after)
			}
			var mems [2][]byte
			for i, mod := range [][]byte{data, merged} {
				cm, err := r.wrt.CompileModule(ctx, mod)
				if err != nil {
					t.Fatal(err)
				}
				m, err := r.wrt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(fmt.Sprintf("%s-%d", file, i)).WithStartFunctions())
				if err != nil {
					t.Fatal(err)
				}
				mem, ok := m.Memory().Read(0, m.Memory().Size())
				if !ok {
					t.Fatal("memory read")
				}
				mems[i] = bytes.Clone(mem)
				_ = m.Close(ctx)
				_ = cm.Close(ctx)
			}
			if !bytes.Equal(mems[0], mems[1]) {
				t.Fatalf("linear memory differs after merging (%d vs %d bytes)", len(mems[0]), len(mems[1]))
			}
		})
	}
}

// TestMergeDataSegmentsLeavesOthers checks the modules the rewrite must not
// touch, and the joining of segments across small gaps only.
func TestMergeDataSegmentsLeavesOthers(t *testing.T) {
	active := func(off int32, data string) []byte {
		b := []byte{0, 0x41}
		b = appendSleb32(b, off)
		b = append(b, 0x0b)
		b = binary.AppendUvarint(b, uint64(len(data)))
		return append(b, data...)
	}
	module := func(extra []byte, segs ...[]byte) []byte {
		body := binary.AppendUvarint(nil, uint64(len(segs)))
		for _, s := range segs {
			body = append(body, s...)
		}
		m := []byte("\x00asm\x01\x00\x00\x00")
		m = append(m, 5, 3, 1, 0, 1) // memory section: one memory, min 1 page
		m = append(m, extra...)
		m = append(m, 11)
		m = binary.AppendUvarint(m, uint64(len(body)))
		return append(m, body...)
	}
	overlap := module(nil, active(16, "abcd"), active(18, "xy"))
	if got := mergeDataSegments(overlap); !bytes.Equal(got, overlap) {
		t.Error("overlapping segments were rewritten")
	}
	withCount := module([]byte{12, 1, 2}, active(16, "ab"), active(20, "cd"))
	if got := mergeDataSegments(withCount); !bytes.Equal(got, withCount) {
		t.Error("a module with a data count section was rewritten")
	}
	passive := module(nil, active(16, "ab"), append([]byte{1, 2}, "cd"...))
	if got := mergeDataSegments(passive); !bytes.Equal(got, passive) {
		t.Error("a module with a passive segment was rewritten")
	}
	truncated := module(nil, active(16, "ab"), active(20, "cd"))
	truncated = truncated[:len(truncated)-1]
	if got := mergeDataSegments(truncated); !bytes.Equal(got, truncated) {
		t.Error("a truncated module was rewritten")
	}

	// Out of order, a small gap and a large one; a negative offset (above
	// 2 GiB as an address) stays last.
	in := module(nil, active(100, "cd"), active(96, "ab"), active(1000, "ef"), active(-16, "gh"))
	want := module(nil, active(96, "ab\x00\x00cd"), active(1000, "ef"), active(-16, "gh"))
	if got := mergeDataSegments(in); !bytes.Equal(got, want) {
		t.Errorf("merged:\n got % x\nwant % x", got, want)
	}
	if _, err := wazero.NewRuntime(context.Background()).CompileModule(context.Background(), mergeDataSegments(module(nil, active(16, "ab"), active(20, "cd")))); err != nil {
		t.Errorf("merged module does not compile: %v", err)
	}
}

func countDataSegments(t *testing.T, mod []byte) uint64 {
	t.Helper()
	for pos := 8; pos < len(mod); {
		size, n := readU32(mod[pos+1:])
		if mod[pos] == 11 {
			c, _ := readU32(mod[pos+1+n:])
			return c
		}
		pos += 1 + n + int(size)
	}
	t.Fatal("no data section")
	return 0
}
