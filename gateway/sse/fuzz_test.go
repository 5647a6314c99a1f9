package sse_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/sluice-gw/sluice/gateway/sse"
)

// Outcome classes of a stream, compared between the Reader and the model.
const (
	endEOF      = "eof"
	endCut      = "unexpected-eof"
	endTooLarge = "too-large"
)

func classify(err error) string {
	switch {
	case err == io.EOF:
		return endEOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return endCut
	case errors.Is(err, sse.ErrEventTooLarge):
		return endTooLarge
	}
	return "other: " + err.Error()
}

// model is a deliberately simple, whole-input implementation of the rules in
// the package documentation, used as the oracle for the incremental Reader.
func model(in []byte, max int) ([]sse.Event, string) {
	in = bytes.TrimPrefix(in, []byte("\xEF\xBB\xBF"))
	var evs []sse.Event
	var name, id string
	var data, errb []byte
	size := 0
	dispatch := func() {
		if len(data) > 0 || len(errb) > 0 {
			e := sse.Event{Name: name, ID: id, Data: data, Error: errb}
			e.Done = string(data) == "[DONE]"
			evs = append(evs, e)
		}
		name, id, data, errb, size = "", "", nil, nil, 0
	}
	join := func(dst, v []byte) []byte {
		if len(v) == 0 {
			return dst
		}
		if len(dst) > 0 {
			dst = append(dst, '\n')
		}
		return append(dst, v...)
	}
	for len(in) > 0 {
		i := bytes.IndexAny(in, "\r\n")
		if i < 0 {
			if len(in) > max {
				return evs, endTooLarge
			}
			return evs, endCut
		}
		line := in[:i]
		if in[i] == '\r' && i+1 < len(in) && in[i+1] == '\n' {
			i++
		}
		in = in[i+1:]
		if len(line) > max {
			return evs, endTooLarge
		}
		switch {
		case len(line) == 0:
			dispatch()
			continue
		case line[0] == ':':
			continue
		}
		if size += len(line); size > max {
			return evs, endTooLarge
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "data":
			data = join(data, value)
		case "error":
			errb = join(errb, value)
		case "event":
			name = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				id = string(value)
			}
		}
	}
	dispatch()
	return evs, endEOF
}

// partsReader serves its parts in order; no Read crosses a part boundary.
type partsReader struct{ parts [][]byte }

func (p *partsReader) Read(b []byte) (int, error) {
	for len(p.parts) > 0 && len(p.parts[0]) == 0 {
		p.parts = p.parts[1:]
	}
	if len(p.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.parts[0])
	p.parts[0] = p.parts[0][n:]
	return n, nil
}

// checkStream runs all the Reader properties over one input.
func checkStream(t *testing.T, in []byte, split int, max int) {
	t.Helper()
	whole, werr := readAll(sse.NewReader(bytes.NewReader(in), max))
	for _, e := range whole {
		if n := len(e.Name) + len(e.ID) + len(e.Data) + len(e.Error); n > max {
			t.Fatalf("event of %d bytes returned with cap %d: %s", n, max, fmtEvents([]sse.Event{e}))
		}
		if e.Data == nil && e.Error == nil {
			t.Fatalf("event without payload returned")
		}
		if e.Data != nil && (len(e.Data) == 0 || e.Data[0] == '\n' || e.Data[len(e.Data)-1] == '\n' ||
			bytes.Contains(e.Data, []byte("\n\n")) || bytes.IndexByte(e.Data, '\r') >= 0) {
			t.Fatalf("malformed data %q", e.Data)
		}
		if e.Done != (string(e.Data) == "[DONE]") {
			t.Fatalf("Done = %v for data %q", e.Done, e.Data)
		}
	}
	wantEvs, wantEnd := model(in, max)
	if !eventsEqual(whole, wantEvs) || classify(werr) != wantEnd {
		t.Fatalf("input %q cap %d\nreader:%s\n  end %s (%v)\nmodel:%s\n  end %s",
			in, max, fmtEvents(whole), classify(werr), werr, fmtEvents(wantEvs), wantEnd)
	}
	if split < 0 || split > len(in) {
		split = 0
	}
	for name, src := range map[string]io.Reader{
		"split":   &partsReader{parts: [][]byte{in[:split], in[split:]}},
		"onebyte": iotest.OneByteReader(bytes.NewReader(in)),
	} {
		got, err := readAll(sse.NewReader(src, max))
		if !eventsEqual(got, whole) || err.Error() != werr.Error() {
			t.Fatalf("%s at %d: input %q cap %d\nsplit:%s\n  end %v\nwhole:%s\n  end %v",
				name, split, in, max, fmtEvents(got), err, fmtEvents(whole), werr)
		}
	}
}

func FuzzReader(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzReader; a few more are added here.
	f.Add([]byte("event: response.output_text.delta\ndata: {\"delta\":\"hi\"}\n\n"), uint16(20), uint8(200))
	f.Add([]byte("data: [DONE]\r\n\r\n"), uint16(13), uint8(63))
	f.Fuzz(func(t *testing.T, in []byte, split uint16, limit uint8) {
		max := int(limit) + 1 // a small cap: 1..256 bytes
		at := 0
		if len(in) > 0 {
			at = int(split) % (len(in) + 1)
		}
		checkStream(t, in, at, max)
	})
}

// TestReaderModel drives checkStream with random streams stitched from SSE
// fragments, so plain `go test` covers the fuzz properties too.
func TestReaderModel(t *testing.T) {
	frags := []string{
		"data: ", "data:", "data", "event: ", "event:x", "id: ", "id:\x00", "error: ", "error:", "retry: 5",
		": ping", ":", "x", "{\"a\":1}", "[DONE]", " ", "\n", "\r\n", "\r", "\n\n", "\r\r", "\xEF\xBB\xBF",
		"response.completed", "0123456789abcdef", "data: [DONE]\n\n", "\x00", "\xff",
	}
	rng := rand.New(rand.NewPCG(42, 43))
	for range 20000 {
		var in []byte
		for range rng.IntN(30) {
			in = append(in, frags[rng.IntN(len(frags))]...)
		}
		checkStream(t, in, rng.IntN(len(in)+1), 1+rng.IntN(80))
	}
}
