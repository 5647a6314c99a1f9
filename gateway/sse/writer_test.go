package sse_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/sse"
)

func TestWriterFormat(t *testing.T) {
	long := strings.Repeat("L", 40<<10)
	tests := []struct {
		name string
		do   func(w *sse.Writer) error
		want string
	}{
		{"responses event", func(w *sse.Writer) error {
			return w.WriteEvent("response.output_text.delta", []byte(respDelta))
		}, "event: response.output_text.delta\ndata: " + respDelta + "\n\n"},
		{"chat data", func(w *sse.Writer) error { return w.WriteData([]byte(chatChunk)) },
			"data: " + chatChunk + "\n\n"},
		{"event with empty name", func(w *sse.Writer) error { return w.WriteEvent("", []byte("x")) }, "data: x\n\n"},
		{"multi-line", func(w *sse.Writer) error { return w.WriteData([]byte("a\nb\nc")) },
			"data: a\ndata: b\ndata: c\n\n"},
		{"crlf and cr split", func(w *sse.Writer) error { return w.WriteEvent("n", []byte("a\r\nb\rc\n\rd")) },
			"event: n\ndata: a\ndata: b\ndata: c\ndata: d\n\n"},
		{"empty lines omitted", func(w *sse.Writer) error { return w.WriteData([]byte("\n\na\n\n\nb\n")) },
			"data: a\ndata: b\n\n"},
		{"whitespace lines kept inside", func(w *sse.Writer) error { return w.WriteData([]byte("a\n \nb")) },
			"data: a\ndata:  \ndata: b\n\n"},
		{"leading space kept", func(w *sse.Writer) error { return w.WriteData([]byte(" x")) }, "data:  x\n\n"},
		{"empty data is a no-op", func(w *sse.Writer) error { return w.WriteEvent("response.created", nil) }, ""},
		{"whitespace data is a no-op", func(w *sse.Writer) error { return w.WriteData([]byte(" \r\n\t\n ")) }, ""},
		{"done", func(w *sse.Writer) error { return w.WriteDone() }, "data: [DONE]\n\n"},
		{"comment", func(w *sse.Writer) error { return w.WriteComment("keepalive") }, ": keepalive\n\n"},
		{"empty comment", func(w *sse.Writer) error { return w.WriteComment("") }, ":\n\n"},
		{"multi-line comment", func(w *sse.Writer) error { return w.WriteComment("a\r\nb\n\nc\r") },
			": a\n: b\n: c\n\n"},
		{"long line written directly", func(w *sse.Writer) error {
			return w.WriteEvent("big", []byte("s\n"+long+"\ne"))
		}, "event: big\ndata: s\ndata: " + long + "\ndata: e\n\n"},
		{"sequence", func(w *sse.Writer) error {
			for _, err := range []error{w.WriteComment("hi"), w.WriteData([]byte("1")), w.WriteData(nil),
				w.WriteEvent("e", []byte("2")), w.WriteDone()} {
				if err != nil {
					return err
				}
			}
			return nil
		}, ": hi\n\ndata: 1\n\nevent: e\ndata: 2\n\ndata: [DONE]\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.do(sse.NewWriter(&buf)); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Errorf("wrote %q\nwant  %q", buf.String(), tt.want)
			}
		})
	}
}

func TestWriterInvalidName(t *testing.T) {
	var buf bytes.Buffer
	w := sse.NewWriter(&buf)
	for _, name := range []string{"a\nb", "a\r", "\r\n"} {
		if err := w.WriteEvent(name, []byte("x")); !errors.Is(err, sse.ErrInvalidEventName) {
			t.Errorf("%q: err = %v", name, err)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q", buf.String())
	}
}

// countFlusher counts Flush calls (http.Flusher).
type countFlusher struct {
	bytes.Buffer
	flushes int
}

func (c *countFlusher) Flush() { c.flushes++ }

// errFlusher has FlushError, as http.ResponseController prefers.
type errFlusher struct {
	bytes.Buffer
	err     error
	flushes int
}

func (e *errFlusher) FlushError() error { e.flushes++; return e.err }

// wrappedRW is middleware that hides the Flusher but offers Unwrap.
type wrappedRW struct{ http.ResponseWriter }

func (w wrappedRW) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// plainRW is a ResponseWriter that cannot flush at all.
type plainRW struct {
	h http.Header
	bytes.Buffer
}

func (p *plainRW) Header() http.Header { return p.h }
func (p *plainRW) WriteHeader(int)     {}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterFlush(t *testing.T) {
	t.Run("http.Flusher", func(t *testing.T) {
		cf := &countFlusher{}
		w := sse.NewWriter(cf)
		_ = w.WriteData([]byte("x"))
		_ = w.WriteData(nil) // no-op: no flush
		_ = w.WriteDone()
		_ = w.WriteComment("k")
		if cf.flushes != 3 {
			t.Errorf("flushes = %d, want 3", cf.flushes)
		}
	})
	t.Run("FlushError", func(t *testing.T) {
		boom := errors.New("client gone")
		ef := &errFlusher{err: boom}
		err := sse.NewWriter(ef).WriteData([]byte("x"))
		if !errors.Is(err, boom) || ef.flushes != 1 || ef.String() != "data: x\n\n" {
			t.Errorf("err = %v, flushes = %d, wrote %q", err, ef.flushes, ef.String())
		}
	})
	t.Run("ResponseWriter through Unwrap", func(t *testing.T) {
		rec := httptest.NewRecorder()
		if err := sse.NewWriter(wrappedRW{rec}).WriteData([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if !rec.Flushed || rec.Body.String() != "data: x\n\n" {
			t.Errorf("flushed = %v, body %q", rec.Flushed, rec.Body.String())
		}
	})
	t.Run("ResponseWriter that cannot flush", func(t *testing.T) {
		p := &plainRW{h: http.Header{}}
		w := sse.NewWriter(p)
		for range 3 {
			if err := w.WriteData([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if p.String() != strings.Repeat("data: x\n\n", 3) {
			t.Errorf("wrote %q", p.String())
		}
	})
	t.Run("bufio.Writer", func(t *testing.T) {
		var out bytes.Buffer
		bw := bufio.NewWriterSize(&out, 4096)
		if err := sse.NewWriter(bw).WriteEvent("a", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if out.String() != "event: a\ndata: x\n\n" {
			t.Errorf("not flushed through bufio: %q", out.String())
		}
	})
	t.Run("real server", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "text/event-stream")
			w := sse.NewWriter(rw)
			_ = w.WriteEvent("response.created", []byte(`{"type":"response.created"}`))
			_ = w.WriteComment("keepalive")
			_ = w.WriteEvent("response.completed", []byte(`{"type":"response.completed"}`))
		}))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := readAll(sse.NewReader(resp.Body, 0))
		want := []sse.Event{ev("response.created", `{"type":"response.created"}`),
			ev("response.completed", `{"type":"response.completed"}`)}
		if err != io.EOF || !eventsEqual(got, want) {
			t.Errorf("got %s, %v", fmtEvents(got), err)
		}
	})
	t.Run("write error", func(t *testing.T) {
		boom := errors.New("broken pipe")
		w := sse.NewWriter(failWriter{boom})
		for _, err := range []error{w.WriteData([]byte("x")), w.WriteDone(), w.WriteComment("c"),
			w.WriteEvent("big", []byte(strings.Repeat("x", 64<<10)))} {
			if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "sse: write: ") {
				t.Errorf("err = %v", err)
			}
		}
	})
}

// discardFlusher discards writes and counts flushes, without allocating.
type discardFlusher struct{ n, flushes int }

func (d *discardFlusher) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
func (d *discardFlusher) Flush()                      { d.flushes++ }

func TestWriterAllocs(t *testing.T) {
	d := &discardFlusher{}
	w := sse.NewWriter(d)
	data := []byte(respDelta)
	multi := []byte("line one\r\nline two\nline three")
	big := bytes.Repeat([]byte("b"), 100<<10)
	allocs := testing.AllocsPerRun(1000, func() {
		_ = w.WriteEvent("response.output_text.delta", data)
		_ = w.WriteData(multi)
		_ = w.WriteEvent("big", big)
		_ = w.WriteComment("keepalive")
		_ = w.WriteDone()
	})
	if allocs != 0 {
		t.Errorf("%.1f allocs per run, want 0", allocs)
	}
}

// normalize is what a Reader gives back for data written by a Writer: lines
// split at CRLF, CR or LF, empty ones dropped, joined with LF.
func normalize(data []byte) []byte {
	var lines [][]byte
	for _, l := range bytes.Split(bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")),
		[]byte("\r"), []byte("\n")), []byte("\n")) {
		if len(l) > 0 {
			lines = append(lines, l)
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

func isBlank(b []byte) bool { return len(bytes.Trim(b, " \t\r\n\f\v")) == 0 }

func TestRoundTrip(t *testing.T) {
	type item struct {
		name string
		data []byte
	}
	fixed := []item{
		{"response.created", []byte(`{"type":"response.created","sequence_number":0}`)},
		{"response.output_text.delta", []byte(respDelta)},
		{"", []byte(chatChunk)},
		{"", []byte("[DONE]")},
		{"multi", []byte("a\nb\nc")},
		{"crlf", []byte("a\r\nb\rc")},
		{"blanks", []byte("\na\n\n\nb\n")},
		{" spaced name", []byte("  two leading spaces")},
		{"colons:in:name", []byte(": looks like a comment")},
		{"unicode ✓", []byte("héllo\n世界")},
		{"skipped", []byte("  \n ")},
		{"big", bytes.Repeat([]byte("0123456789"), 5000)},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab {}\":,\n\r\t ✓x\x00")
	for range 2000 {
		var it item
		if rng.IntN(3) > 0 {
			it.name = strings.Map(func(r rune) rune {
				if r == '\r' || r == '\n' {
					return '_'
				}
				return r
			}, string(randBytes(rng, alphabet, 12)))
		}
		it.data = randBytes(rng, alphabet, 40)
		fixed = append(fixed, it)
	}

	var stream bytes.Buffer
	w := sse.NewWriter(&stream)
	var want []sse.Event
	for i, it := range fixed {
		if err := w.WriteEvent(it.name, it.data); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			_ = w.WriteComment("keepalive")
		}
		if isBlank(it.data) {
			continue
		}
		want = append(want, ev(it.name, string(normalize(it.data))))
	}
	if err := w.WriteDone(); err != nil {
		t.Fatal(err)
	}
	want = append(want, ev("", "[DONE]"))

	for _, c := range chunkers {
		got, err := readAll(sse.NewReader(c.wrap(stream.Bytes()), 0))
		if err != io.EOF {
			t.Fatalf("%s: err = %v", c.name, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", c.name, len(got), len(want))
		}
		for i := range want {
			if !eventEqual(got[i], want[i]) {
				t.Fatalf("%s: event %d:%s\nwant:%s", c.name, i, fmtEvents(got[i:i+1]), fmtEvents(want[i:i+1]))
			}
		}
	}
}

func randBytes(rng *rand.Rand, alphabet []byte, maxLen int) []byte {
	b := make([]byte, rng.IntN(maxLen+1))
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return b
}
