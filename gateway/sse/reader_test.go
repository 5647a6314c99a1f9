package sse_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/sluice-gw/sluice/gateway/sse"
)

// chunkers feed the same input to a Reader in different read sizes.
var chunkers = []struct {
	name string
	wrap func(b []byte) io.Reader
}{
	{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
	{"onebyte", func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
	{"half", func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) }},
	{"dataerr", func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) }},
	{"random1", func(b []byte) io.Reader { return newRandomChunks(b, 1) }},
	{"random2", func(b []byte) io.Reader { return newRandomChunks(b, 2) }},
	{"random3", func(b []byte) io.Reader { return newRandomChunks(b, 3) }},
}

// randomChunks returns its input in pseudo-random pieces of 0..17 bytes,
// including empty reads.
type randomChunks struct {
	b   []byte
	rng *rand.Rand
}

func newRandomChunks(b []byte, seed uint64) *randomChunks {
	return &randomChunks{b: b, rng: rand.New(rand.NewPCG(seed, seed*7919))}
}

func (r *randomChunks) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(r.rng.IntN(18), len(p), len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// readAll returns the cloned events of a stream and the error that ended it.
func readAll(r *sse.Reader) ([]sse.Event, error) {
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev.Clone())
		if len(evs) > 1<<20 {
			return evs, errors.New("runaway reader")
		}
	}
}

func ev(name, data string) sse.Event {
	e := sse.Event{Name: name}
	if data != "" {
		e.Data = []byte(data)
		e.Done = data == "[DONE]"
	}
	return e
}

func errEv(name, errPayload, data string) sse.Event {
	e := ev(name, data)
	e.Error = []byte(errPayload)
	return e
}

func idEv(id, data string) sse.Event {
	e := ev("", data)
	e.ID = id
	return e
}

func eventsEqual(a, b []sse.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !eventEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func eventEqual(a, b sse.Event) bool {
	return a.Name == b.Name && a.ID == b.ID && a.Done == b.Done &&
		(a.Data == nil) == (b.Data == nil) && bytes.Equal(a.Data, b.Data) &&
		(a.Error == nil) == (b.Error == nil) && bytes.Equal(a.Error, b.Error)
}

func fmtEvents(evs []sse.Event) string {
	var sb strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&sb, "\n  {Name:%q ID:%q Data:%q Error:%q Done:%v}", e.Name, e.ID, e.Data, e.Error, e.Done)
	}
	return sb.String()
}

const (
	respDelta = `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}`
	chatChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`
	llamaErr  = `{"code":500,"message":"context shift is disabled","type":"server_error"}`
)

func TestReaderShapes(t *testing.T) {
	big := strings.Repeat("x", 100)
	tests := []struct {
		name    string
		in      string
		max     int
		want    []sse.Event
		wantErr error
	}{
		{"empty stream", "", 0, nil, io.EOF},
		{"responses delta", "event: response.output_text.delta\ndata: " + respDelta + "\n\n", 0,
			[]sse.Event{ev("response.output_text.delta", respDelta)}, io.EOF},
		{"chat chunks and done", "data: " + chatChunk + "\n\ndata: " + chatChunk + "\n\ndata: [DONE]\n\n", 0,
			[]sse.Event{ev("", chatChunk), ev("", chatChunk), ev("", "[DONE]")}, io.EOF},
		{"done needs exact data", "data: [DONE] \n\ndata:[DONE]\n\n", 0,
			[]sse.Event{ev("", "[DONE] "), ev("", "[DONE]")}, io.EOF},
		{"crlf", "event: a\r\ndata: x\r\n\r\nevent: b\r\ndata: y\r\n\r\n", 0,
			[]sse.Event{ev("a", "x"), ev("b", "y")}, io.EOF},
		{"lone cr", "event: a\rdata: x\r\rdata: y\r\r", 0,
			[]sse.Event{ev("a", "x"), ev("", "y")}, io.EOF},
		{"mixed endings", "data: a\r\n\rdata: b\n\r\ndata: c\r\r\n", 0,
			[]sse.Event{ev("", "a"), ev("", "b"), ev("", "c")}, io.EOF},
		{"cr cr is a blank line", "data: a\r\rdata: b\n\n", 0,
			[]sse.Event{ev("", "a"), ev("", "b")}, io.EOF},
		{"multi-line data", "data: a\ndata: b\ndata: c\n\n", 0,
			[]sse.Event{ev("", "a\nb\nc")}, io.EOF},
		{"empty data lines inside are dropped", "data: a\ndata:\ndata: \ndata\ndata: b\n\n", 0,
			[]sse.Event{ev("", "a\nb")}, io.EOF},
		{"only empty data lines: dropped", "data:\n\ndata: \n\ndata\n\nevent: x\ndata:\n\n", 0, nil, io.EOF},
		{"event without data: dropped", "event: ping\n\nevent: a\ndata: x\n\n", 0,
			[]sse.Event{ev("a", "x")}, io.EOF},
		{"name does not leak into the next event", "event: a\n\ndata: x\n\n", 0,
			[]sse.Event{ev("", "x")}, io.EOF},
		{"last event name wins", "event: a\nevent: b\ndata: x\n\n", 0,
			[]sse.Event{ev("b", "x")}, io.EOF},
		{"empty event name", "event:\ndata: x\n\n", 0, []sse.Event{ev("", "x")}, io.EOF},
		{"comments and keepalives", ": keepalive\n\n:\n\n: ping\ndata: x\n: inside\ndata: y\n\n:bye\n", 0,
			[]sse.Event{ev("", "x\ny")}, io.EOF},
		{"one space stripped", "data:x\n\ndata:  x\n\ndata:\tx\n\n", 0,
			[]sse.Event{ev("", "x"), ev("", " x"), ev("", "\tx")}, io.EOF},
		{"colon in value", "data: {\"a\":\"b:c\"}\n\n", 0, []sse.Event{ev("", `{"a":"b:c"}`)}, io.EOF},
		{"retry and unknown fields ignored", "retry: 1000\nfoo: bar\nDATA: no\ndata : no\ndata: x\n\n", 0,
			[]sse.Event{ev("", "x")}, io.EOF},
		{"id", "id: 7\ndata: x\n\ndata: y\n\nid: 1\nid: 2\ndata: z\n\nid: a\x00b\ndata: w\n\n", 0,
			[]sse.Event{idEv("7", "x"), idEv("", "y"), idEv("2", "z"), idEv("", "w")}, io.EOF},
		{"llama.cpp error field", "error: " + llamaErr + "\n\n", 0,
			[]sse.Event{errEv("", llamaErr, "")}, io.EOF},
		{"error field with data and name", "event: error\nerror: e1\nerror:\nerror: e2\ndata: d\n\n", 0,
			[]sse.Event{errEv("error", "e1\ne2", "d")}, io.EOF},
		{"empty error field: dropped", "error:\n\nerror: \n\n", 0, nil, io.EOF},
		{"bom", "\xEF\xBB\xBFdata: x\n\n", 0, []sse.Event{ev("", "x")}, io.EOF},
		{"bom only at start", "data: x\n\n\xEF\xBB\xBFdata: y\n\n", 0, []sse.Event{ev("", "x")}, io.EOF},
		{"partial bom", "\xEF\xBBdata: x\n\n", 0, nil, io.EOF},
		{"final event without blank line", "data: a\n\ndata: b\n", 0,
			[]sse.Event{ev("", "a"), ev("", "b")}, io.EOF},
		{"final event ended by cr", "event: n\rdata: b\r", 0, []sse.Event{ev("n", "b")}, io.EOF},
		{"final empty event without blank line", "data: a\n\nevent: x\ndata:\n", 0,
			[]sse.Event{ev("", "a")}, io.EOF},
		{"cut mid data line", "data: a\n\ndata: {\"par", 0, []sse.Event{ev("", "a")}, io.ErrUnexpectedEOF},
		{"cut mid field name", "data: a\n\nevent: x\nda", 0, []sse.Event{ev("", "a")}, io.ErrUnexpectedEOF},
		{"cut mid comment", "data: a\n\n: keep", 0, []sse.Event{ev("", "a")}, io.ErrUnexpectedEOF},
		{"cut without any newline", "data: [DONE]", 0, nil, io.ErrUnexpectedEOF},
		{"only blank lines", "\n\r\n\r\n\n", 0, nil, io.EOF},
		{"line at the cap", "data: " + big[:10] + "\n\n", 16, []sse.Event{ev("", big[:10])}, io.EOF},
		{"line over the cap", "data: a\n\ndata: " + big[:11] + "\n\n", 16,
			[]sse.Event{ev("", "a")}, sse.ErrEventTooLarge},
		{"event over the cap", "data: 0123456789\ndata: 0123456789\n\n", 20, nil, sse.ErrEventTooLarge},
		{"field names count", "event: abcdef\ndata: 0123456789\n\n", 24, nil, sse.ErrEventTooLarge},
		{"comments do not count", ": " + big[:14] + "\ndata: 0123456789\n\n", 16,
			[]sse.Event{ev("", "0123456789")}, io.EOF},
		{"long comment line over the cap", ": " + big + "\ndata: x\n\n", 16, nil, sse.ErrEventTooLarge},
		{"oversize line without newline", "data: " + big, 16, nil, sse.ErrEventTooLarge},
		{"size resets per event", strings.Repeat("data: 0123456789\n\n", 20), 16,
			[]sse.Event{ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"),
				ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"),
				ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"),
				ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"),
				ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789"), ev("", "0123456789")}, io.EOF},
	}
	for _, tt := range tests {
		for _, c := range chunkers {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				r := sse.NewReader(c.wrap([]byte(tt.in)), tt.max)
				got, err := readAll(r)
				if !eventsEqual(got, tt.want) {
					t.Errorf("events:%s\nwant:%s", fmtEvents(got), fmtEvents(tt.want))
				}
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("err = %v, want %v", err, tt.wantErr)
				}
				if _, err2 := r.Next(); err2 != err {
					t.Errorf("error not sticky: %v then %v", err, err2)
				}
			})
		}
	}
}

func TestReaderEOFIsBare(t *testing.T) {
	r := sse.NewReader(strings.NewReader("data: x\n\n"), 0)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("err = %#v, want io.EOF itself", err)
	}
}

func TestReaderTooLargeMessage(t *testing.T) {
	r := sse.NewReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 32)
	_, err := r.Next()
	if !errors.Is(err, sse.ErrEventTooLarge) || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("err = %v", err)
	}
}

// scriptedReader returns each step's data and error in one Read call.
type scriptedReader struct {
	steps []step
}

type step struct {
	data string
	err  error
}

func (s *scriptedReader) Read(p []byte) (int, error) {
	if len(s.steps) == 0 {
		return 0, io.EOF
	}
	st := &s.steps[0]
	n := copy(p, st.data)
	st.data = st.data[n:]
	if st.data != "" {
		return n, nil
	}
	err := st.err
	s.steps = s.steps[1:]
	return n, err
}

func TestReaderReadErrors(t *testing.T) {
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	tests := []struct {
		name  string
		steps []step
		want  []sse.Event
		is    error
	}{
		{"deadline after complete event", []step{{"data: a\n\ndata: b", context.DeadlineExceeded}},
			[]sse.Event{ev("", "a")}, context.DeadlineExceeded},
		{"net error in a later read", []step{{"data: a\n\n", nil}, {"data: b\n", nil}, {"", opErr}},
			[]sse.Event{ev("", "a")}, syscall.ECONNRESET},
		{"data returned with the error is used", []step{{"data: a\n\ndata: b\n\n", context.Canceled}},
			[]sse.Event{ev("", "a"), ev("", "b")}, context.Canceled},
		{"truncated http body", []step{{"data: a\n\nda", io.ErrUnexpectedEOF}},
			[]sse.Event{ev("", "a")}, io.ErrUnexpectedEOF},
		{"data with eof in one read", []step{{"data: a\n\ndata: b\n", io.EOF}},
			[]sse.Event{ev("", "a"), ev("", "b")}, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sse.NewReader(&scriptedReader{steps: tt.steps}, 0)
			got, err := readAll(r)
			if !eventsEqual(got, tt.want) {
				t.Errorf("events:%s\nwant:%s", fmtEvents(got), fmtEvents(tt.want))
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			if tt.is != io.EOF && !strings.HasPrefix(err.Error(), "sse: read: ") {
				t.Errorf("err = %q, want sse: read: prefix", err)
			}
			if _, err2 := r.Next(); err2 != err {
				t.Errorf("error not sticky: %v then %v", err, err2)
			}
		})
	}

	var ne net.Error
	r := sse.NewReader(iotest.ErrReader(&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}), 0)
	_, err := r.Next()
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("net.Error with Timeout not preserved: %v", err)
	}
}

type noProgress struct{}

func (noProgress) Read([]byte) (int, error) { return 0, nil }

func TestReaderNoProgress(t *testing.T) {
	_, err := sse.NewReader(noProgress{}, 0).Next()
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

// endless yields prefix, then the byte fill forever, counting bytes served.
type endless struct {
	prefix string
	fill   byte
	served int
}

func (e *endless) Read(p []byte) (int, error) {
	n := copy(p, e.prefix)
	e.prefix = e.prefix[n:]
	for i := n; i < len(p); i++ {
		p[i] = e.fill
	}
	e.served += len(p)
	return len(p), nil
}

// An endless line (think 1 GiB without a newline) must fail at the cap
// without reading, or buffering, much more than the cap.
func TestReaderEndlessLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		max    int
	}{
		{"data 1MiB cap", "data: ", 1 << 20},
		{"comment 64KiB cap", ": ", 64 << 10},
		{"no colon 100 cap", "", 100},
		{"default cap", "event: x\ndata: ", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &endless{prefix: tc.prefix, fill: 'a'}
			max := tc.max
			if max <= 0 {
				max = sse.DefaultMaxEventSize
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := sse.NewReader(src, tc.max).Next()
			runtime.ReadMemStats(&after)
			if !errors.Is(err, sse.ErrEventTooLarge) {
				t.Fatalf("err = %v", err)
			}
			if src.served > max+64 {
				t.Errorf("read %d bytes for a cap of %d", src.served, max)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(3*max+64<<10) {
				t.Errorf("allocated %d bytes for a cap of %d", alloc, max)
			}
		})
	}
}

func TestReaderEndlessEvent(t *testing.T) {
	// Many short data lines and no blank line: bounded by the event cap.
	r := sse.NewReader(&cycle{b: []byte("data: x\n")}, 4096)
	if _, err := r.Next(); !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("err = %v", err)
	}
	// Endless blank lines and comments are not an event: keep reading.
	var stream bytes.Buffer
	for range 10000 {
		stream.WriteString(": keepalive\n\n\n")
	}
	stream.WriteString("data: end\n\n")
	evs, err := readAll(sse.NewReader(&stream, 64))
	if err != io.EOF || len(evs) != 1 || string(evs[0].Data) != "end" {
		t.Fatalf("got %s, %v", fmtEvents(evs), err)
	}
}

func TestReaderAliasingAndClone(t *testing.T) {
	r := sse.NewReader(strings.NewReader("data: first\nerror: e1\n\ndata: other\nerror: e2\n\n"), 0)
	a, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	kept := a.Clone()
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if string(kept.Data) != "first" || string(kept.Error) != "e1" {
		t.Fatalf("clone changed: %q %q", kept.Data, kept.Error)
	}
	if string(a.Data) == "first" {
		t.Log("note: Data was not reused (allowed, but unexpected)")
	}
	var zero sse.Event
	if c := zero.Clone(); c.Data != nil || c.Error != nil {
		t.Fatal("Clone of nil slices must stay nil")
	}
	// Appending to returned Data must not corrupt the Reader's next event.
	r = sse.NewReader(strings.NewReader("data: ab\n\ndata: cd\n\n"), 0)
	e1, _ := r.Next()
	_ = append(e1.Data, "ZZZZ"...)
	e2, _ := r.Next()
	if string(e2.Data) != "cd" {
		t.Fatalf("second event = %q", e2.Data)
	}
}

func TestReaderReset(t *testing.T) {
	r := sse.NewReader(strings.NewReader("data: a\n\ndata: cut"), 0)
	if _, err := readAll(r); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	r.Reset(strings.NewReader("\xEF\xBB\xBFevent: n\ndata: b\n\n"))
	got, err := readAll(r)
	if err != io.EOF || !eventsEqual(got, []sse.Event{ev("n", "b")}) {
		t.Fatalf("after Reset: %s, %v", fmtEvents(got), err)
	}
	// The size limit survives Reset.
	r = sse.NewReader(strings.NewReader(""), 8)
	r.Reset(strings.NewReader("data: 0123456789\n\n"))
	if _, err := r.Next(); !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

// cycle serves a byte slice over and over without allocating.
type cycle struct {
	b   []byte
	off int
}

func (c *cycle) Read(p []byte) (int, error) {
	n := copy(p, c.b[c.off:])
	c.off = (c.off + n) % len(c.b)
	return n, nil
}

func TestReaderSteadyStateAllocs(t *testing.T) {
	for name, stream := range map[string][]byte{
		"responses": responsesStream(),
		"chat":      chatStream(50),
		"custom":    []byte("event: my.custom.event\nid: 1\ndata: {\"x\":1}\n\nevent: other\nid: 1\ndata: {\"y\":2}\r\n\r\n"),
	} {
		r := sse.NewReader(&cycle{b: stream}, 0)
		for range 100 { // warm up buffers and name caches
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.2f allocs per event, want 0", name, allocs)
		}
	}
}
