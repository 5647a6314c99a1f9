package plugins

import (
	"encoding/binary"
	"slices"
)

// mergeGap is the largest run of zero bytes between two data segments that
// mergeDataSegments fills to join them. wazero keeps about 100 bytes of
// bookkeeping per decoded segment for as long as the module stays compiled,
// so a filled gap of this size costs less than the segment it saves.
const mergeGap = 64

// mergeDataSegments returns mod with its active data segments joined into a
// few large ones, or mod itself when there is nothing to join or the module
// is not one this rewrite is known to be exact for.
//
// Go's wasm linker splits the data into one segment per run of non-zero
// bytes: the embedded Go policies have about 33,000 segments each (0.8 MB
// of data), which wazero decodes into some 3.5 MB of heap per module, held
// for as long as the module is compiled. Joined, they are a dozen segments
// (1.4 MB with the zero gaps filled), and instantiating copies fewer pieces.
//
// The rewrite keeps the memory a module sees at instantiation: every segment
// must be active, for memory 0, at a constant i32 offset; no two may
// overlap (so the order in which they apply does not matter, and a filled
// gap covers no other segment's bytes); and the module must have no data
// count section (without one, no instruction can name a segment by index).
// A segment out of bounds keeps the merged one out of bounds, so such a
// module still fails to instantiate. Anything else returns mod unchanged.
func mergeDataSegments(mod []byte) []byte {
	if len(mod) < 8 || string(mod[:4]) != "\x00asm" {
		return mod
	}
	var dataHdr, dataStart, dataEnd int // the data section's id byte, its payload
	for pos := 8; pos < len(mod); {
		id := mod[pos]
		size, n := readU32(mod[pos+1:])
		if n == 0 || size > uint64(len(mod)-pos-1-n) {
			return mod
		}
		start := pos + 1 + n
		end := start + int(size)
		switch id {
		case 12: // data count: instructions may refer to segments
			return mod
		case 11:
			dataHdr, dataStart, dataEnd = pos, start, end
		}
		pos = end
	}
	if dataEnd == 0 {
		return mod
	}
	type seg struct {
		off  uint32
		data []byte
	}
	sec := mod[dataStart:dataEnd]
	count, n := readU32(sec)
	if n == 0 || count < 2 || count > uint64(len(sec)) {
		return mod
	}
	sec = sec[n:]
	segs := make([]seg, 0, count)
	for range count {
		// flag 0: active, memory 0, then the offset expression
		// "i32.const off; end", then the bytes.
		if len(sec) < 2 || sec[0] != 0 || sec[1] != 0x41 {
			return mod
		}
		off, n := readI32(sec[2:])
		if n == 0 || len(sec) < 3+n || sec[2+n] != 0x0b {
			return mod
		}
		sec = sec[3+n:]
		size, n := readU32(sec)
		if n == 0 || size > uint64(len(sec)-n) {
			return mod
		}
		segs = append(segs, seg{off: uint32(off), data: sec[n : n+int(size)]})
		sec = sec[n+int(size):]
	}
	if len(sec) != 0 {
		return mod
	}
	slices.SortStableFunc(segs, func(a, b seg) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	})
	type run struct{ first, last int } // indexes into segs, inclusive
	var runs []run
	for i, s := range segs {
		if i > 0 {
			prev := segs[i-1]
			prevEnd := uint64(prev.off) + uint64(len(prev.data))
			if uint64(s.off) < prevEnd {
				return mod // overlapping segments: their order matters
			}
			if uint64(s.off)-prevEnd <= mergeGap {
				runs[len(runs)-1].last = i
				continue
			}
		}
		runs = append(runs, run{i, i})
	}
	if len(runs) == len(segs) {
		return mod
	}
	body := binary.AppendUvarint(nil, uint64(len(runs)))
	for _, r := range runs {
		start := segs[r.first].off
		end := uint64(segs[r.last].off) + uint64(len(segs[r.last].data))
		body = append(body, 0, 0x41)
		body = appendSleb32(body, int32(start))
		body = append(body, 0x0b)
		body = binary.AppendUvarint(body, end-uint64(start))
		base := len(body)
		body = append(body, make([]byte, end-uint64(start))...)
		for _, s := range segs[r.first : r.last+1] {
			copy(body[base+int(s.off-start):], s.data)
		}
	}
	out := make([]byte, 0, len(mod)-(dataEnd-dataHdr)+len(body)+6)
	out = append(out, mod[:dataHdr]...)
	out = append(out, 11) // the section id, then the payload's size
	out = binary.AppendUvarint(out, uint64(len(body)))
	out = append(out, body...)
	return append(out, mod[dataEnd:]...)
}

// readU32 decodes an unsigned LEB128 of at most 5 bytes (a wasm u32); n is 0 when
// b does not start with one.
func readU32(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 5; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			if v > 1<<32-1 {
				return 0, 0
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// readI32 decodes a signed LEB128 of at most 5 bytes (a wasm i32); n is 0 when
// b does not start with one.
func readI32(b []byte) (v int32, n int) {
	var x int64
	for i := 0; i < len(b) && i < 5; i++ {
		x |= int64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			if shift := 7 * (i + 1); shift < 64 && b[i]&0x40 != 0 {
				x -= 1 << shift
			}
			if x < -1<<31 || x > 1<<31-1 {
				return 0, 0
			}
			return int32(x), i + 1
		}
	}
	return 0, 0
}

// appendSleb32 appends v as a signed LEB128.
func appendSleb32(b []byte, v int32) []byte {
	x := int64(v)
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if x == 0 && c&0x40 == 0 || x == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
