package sse

// Tests for behaviour that mutation testing showed no other test pinned
// down: buffer retention on Reset, the read buffer's growth sequence, the
// size floor and overflow guard of NewReader, BOM consumption, reads that
// claim more bytes than offered, the event-name cache bounds and the
// Writer's direct-write threshold.
//
// Surviving mutants judged equivalent (no input can tell them apart):
//   - reader.go:162:41 `c >= 0` -> `c > 0`: c == 0 means the line starts with ':', which Next has already skipped as a comment.
//   - reader.go:302:64 `r.start > 0` -> `>=`: alias != nil implies start > 0 (the aliased line lies before start until a move materializes it), so at start == 0 materialize is skipped either way.
//   - reader.go:308:43 `r.start > 0` -> `>=`: at start == 0 the compaction copies buf[0:end] onto itself and leaves start and end unchanged.
//   - reader.go:318:26 `n <= 0` -> `n < 0`: n = 2*len(buf) is never 0 (buf has at least len(bom)+1 bytes and no addressable length doubles to exactly 0).
//   - reader.go:321:8 `n <= len(r.buf)` -> `<`: fill only sees a full buffer at bufMax if more than max bytes without a line end are buffered, which line() rejects first (bufMax > max, and the BOM check holds under 3 bytes); for max == math.MaxInt it would take MaxInt bytes of memory.

import (
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// Reset keeps buffers of up to retainBufSize bytes and drops larger ones.
func TestResetBufferRetention(t *testing.T) {
	fields := []struct {
		name string
		get  func(r *Reader) []byte
		set  func(r *Reader, b []byte)
	}{
		{"buf", func(r *Reader) []byte { return r.buf }, func(r *Reader, b []byte) { r.buf = b }},
		{"data", func(r *Reader) []byte { return r.data }, func(r *Reader, b []byte) { r.data = b }},
		{"errb", func(r *Reader) []byte { return r.errb }, func(r *Reader, b []byte) { r.errb = b }},
	}
	sizes := []struct {
		cap  int
		kept bool
	}{
		{initialBufSize, true},
		{retainBufSize, true},
		{retainBufSize + 1, false},
	}
	for _, f := range fields {
		for _, s := range sizes {
			r := NewReader(strings.NewReader(""), 0)
			f.set(r, make([]byte, s.cap))
			r.Reset(strings.NewReader("data: x\nerror: e\n\n"))
			got := f.get(r)
			if s.kept && cap(got) != s.cap {
				t.Errorf("%s: cap %d after Reset = %d, want it kept", f.name, s.cap, cap(got))
			}
			if !s.kept && got != nil {
				t.Errorf("%s: cap %d after Reset = %d, want it dropped", f.name, s.cap, cap(got))
			}
			if f.name != "buf" && len(got) != 0 {
				t.Errorf("%s: len %d after Reset, want 0", f.name, len(got))
			}
			e, err := r.Next()
			if err != nil || string(e.Data) != "x" || string(e.Error) != "e" {
				t.Errorf("%s: cap %d: after Reset got %q %q, %v", f.name, s.cap, e.Data, e.Error, err)
			}
		}
	}

	// The same through the public API: a 40 KiB line grows the read buffer
	// to exactly retainBufSize, which Reset keeps; a 70 KiB line grows it
	// past that, and Reset drops it.
	for _, tc := range []struct {
		line int
		kept bool
	}{{40 << 10, true}, {70 << 10, false}} {
		r := NewReader(strings.NewReader("data: "+strings.Repeat("x", tc.line)+"\n\n"), 0)
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		r.Reset(strings.NewReader(""))
		if kept := r.buf != nil; kept != tc.kept {
			t.Errorf("line %d: buffer of cap %d kept = %v, want %v", tc.line, cap(r.buf), kept, tc.kept)
		}
	}
}

// The read buffer doubles from initialBufSize, but jumps straight to bufMax
// once doubling would pass half of it.
func TestReadBufferGrowth(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		payload int // bytes after "data: " on the only line
		wantLen int // len(r.buf) after the event
	}{
		{"short line, default limit", 0, 100, initialBufSize},
		{"one doubling", 0, 3000, 2 * initialBufSize},
		{"doubling up to retainBufSize", 0, 40 << 10, retainBufSize},
		{"small limit caps the first buffer", 100, 50, 101},
		{"double exactly to half the limit", 8192, 3000, 4096},
		{"then straight to the limit", 8192, 5000, 8193},
		{"doubling past half the limit", 8190, 3000, 8191},
		{"limit math.MaxInt", math.MaxInt, 3000, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := strings.Repeat("y", tt.payload)
			r := NewReader(strings.NewReader("data: "+payload+"\n\n"), tt.max)
			e, err := r.Next()
			if err != nil || string(e.Data) != payload {
				t.Fatalf("got %d bytes, %v", len(e.Data), err)
			}
			if len(r.buf) != tt.wantLen {
				t.Errorf("len(buf) = %d, want %d", len(r.buf), tt.wantLen)
			}
		})
	}
}

// A limit of math.MaxInt must not overflow the buffer size computation.
func TestReaderMaxIntLimit(t *testing.T) {
	r := NewReader(strings.NewReader("event: a\ndata: x\n\n"), math.MaxInt)
	if r.bufMax != math.MaxInt {
		t.Errorf("bufMax = %d, want math.MaxInt", r.bufMax)
	}
	e, err := r.Next()
	if err != nil || e.Name != "a" || string(e.Data) != "x" {
		t.Fatalf("got %q %q, %v", e.Name, e.Data, err)
	}
}

// The buffer holds a whole BOM even when the limit is smaller than one.
func TestReaderBOMWithTinyLimit(t *testing.T) {
	for _, in := range []string{bom + "\n", bom + "\n\n", bom} {
		r := NewReader(strings.NewReader(in), 1)
		if _, err := r.Next(); err != io.EOF {
			t.Errorf("%q: err = %v, want io.EOF", in, err)
		}
	}
}

// sizeRecorder serves parts one per Read and records len(p) of each call.
type sizeRecorder struct {
	parts   []string
	offered []int
}

func (s *sizeRecorder) Read(p []byte) (int, error) {
	s.offered = append(s.offered, len(p))
	if len(s.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.parts[0])
	s.parts[0] = s.parts[0][n:]
	if s.parts[0] == "" {
		s.parts = s.parts[1:]
	}
	return n, nil
}

// A BOM is consumed as soon as it is complete, so the next read is offered
// the whole buffer rather than what the BOM left over.
func TestReaderBOMConsumedBeforeNextRead(t *testing.T) {
	for _, parts := range [][]string{
		{bom, "data: x\n\n"},
		{bom[:1], bom[1:], "data: x\n\n"},
		{bom[:2], bom[2:], "data: x\n\n"},
	} {
		src := &sizeRecorder{parts: append([]string(nil), parts...)}
		r := NewReader(src, 0)
		e, err := r.Next()
		if err != nil || string(e.Data) != "x" {
			t.Fatalf("%q: got %q, %v", parts, e.Data, err)
		}
		// The read after the one that completed the BOM.
		i := len(parts) - 1
		if len(src.offered) <= i || src.offered[i] != initialBufSize {
			t.Errorf("%q: reads offered %v, want read %d offered %d bytes", parts, src.offered, i, initialBufSize)
		}
	}
}

// badCount serves first, then reports count(len(p)) bytes for every read.
type badCount struct {
	first string
	count func(offered int) int
}

func (b *badCount) Read(p []byte) (int, error) {
	if b.first != "" {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	return b.count(len(p)), nil
}

// A source that reports more bytes than it was offered, or a negative count,
// is an error, also when bytes are already buffered.
func TestReaderInvalidByteCount(t *testing.T) {
	plus := func(k int) func(int) int { return func(offered int) int { return offered + k } }
	tests := []struct {
		name  string
		first string
		count func(offered int) int
	}{
		{"one more on the first read", "", plus(1)},
		{"one more after buffered bytes", "data: ", plus(1)},
		{"as many more as are buffered", "data: ", plus(len("data: "))},
		{"negative", "data: ", func(int) int { return -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panic: %v", p)
				}
			}()
			r := NewReader(&badCount{first: tt.first, count: tt.count}, 0)
			_, err := r.Next()
			if err == nil || !strings.Contains(err.Error(), "sse: read: invalid byte count") {
				t.Fatalf("err = %v, want invalid byte count", err)
			}
			if _, err2 := r.Next(); err2 != err {
				t.Errorf("error not sticky: %v then %v", err, err2)
			}
		})
	}
}

// Event names of up to maxInternLen bytes are cached, at most maxInterned
// of them; longer or later names are still returned correctly.
func TestInternBounds(t *testing.T) {
	read := func(r *Reader, name string) {
		t.Helper()
		e, err := r.Next()
		if err != nil || e.Name != name || string(e.Data) != "x" {
			t.Fatalf("got %q %q, %v; want name %q", e.Name, e.Data, err, name)
		}
	}
	var stream strings.Builder
	atLimit := strings.Repeat("n", maxInternLen)
	overLimit := strings.Repeat("o", maxInternLen+1)
	for _, name := range []string{atLimit, overLimit} {
		stream.WriteString("event: " + name + "\ndata: x\n\n")
	}
	r := NewReader(strings.NewReader(stream.String()), 0)
	read(r, atLimit)
	read(r, overLimit)
	if _, ok := r.names[atLimit]; !ok {
		t.Errorf("%d-byte name not cached", len(atLimit))
	}
	if _, ok := r.names[overLimit]; ok {
		t.Errorf("%d-byte name cached", len(overLimit))
	}

	stream.Reset()
	var names []string
	for i := range maxInterned + 6 {
		name := "custom." + strconv.Itoa(i)
		names = append(names, name)
		stream.WriteString("event: " + name + "\ndata: x\n\n")
	}
	r = NewReader(strings.NewReader(stream.String()), 0)
	for _, name := range names {
		read(r, name)
	}
	if len(r.names) != maxInterned {
		t.Errorf("cache holds %d names, want %d", len(r.names), maxInterned)
	}
	for i, name := range names {
		if _, ok := r.names[name]; ok != (i < maxInterned) {
			t.Errorf("name %d cached = %v, want %v", i, ok, i < maxInterned)
		}
	}
}

// writeRecorder keeps a copy of every Write call's bytes.
type writeRecorder struct{ writes []string }

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// An event goes out in one Write unless a line is longer than
// directWriteSize; such a line is written on its own, from the caller's
// slice.
func TestWriterDirectWriteThreshold(t *testing.T) {
	at := strings.Repeat("a", directWriteSize)
	over := strings.Repeat("b", directWriteSize+1)
	tests := []struct {
		name   string
		evName string
		data   string
		want   []string
	}{
		{"short line", "", "x", []string{"data: x\n\n"}},
		{"short lines with name", "n", "x\ny", []string{"event: n\ndata: x\ndata: y\n\n"}},
		{"line of directWriteSize", "", at, []string{"data: " + at + "\n\n"}},
		{"line over directWriteSize", "", over, []string{"data: ", over, "\n\n"}},
		{"long line between short ones", "n", "s\n" + over + "\ne",
			[]string{"event: n\ndata: s\ndata: ", over, "\ndata: e\n\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &writeRecorder{}
			data := []byte(tt.data)
			if err := NewWriter(rec).WriteEvent(tt.evName, data); err != nil {
				t.Fatal(err)
			}
			if len(rec.writes) != len(tt.want) {
				t.Fatalf("%d writes, want %d", len(rec.writes), len(tt.want))
			}
			for i := range tt.want {
				if rec.writes[i] != tt.want[i] {
					t.Errorf("write %d = %.40q… (%d bytes), want %.40q… (%d bytes)",
						i, rec.writes[i], len(rec.writes[i]), tt.want[i], len(tt.want[i]))
				}
			}
		})
	}
}
