package sse

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ErrInvalidEventName is matched by the error [Writer.WriteEvent] returns for
// an event name containing CR or LF, which cannot be framed.
var ErrInvalidEventName = errors.New("sse: event name contains a line break")

const (
	initialWriteBuf = 512
	// Segments longer than this are written straight from the caller's
	// slice instead of being copied into the Writer's buffer, so the buffer
	// stays small whatever the event size.
	directWriteSize = 16 << 10
)

// Writer writes SSE events to a client and flushes after each one. Create
// one with [NewWriter]. Each event is handed to the destination in a single
// Write call unless it holds a line longer than 16 KiB, which is written
// from the caller's slice without copying. A Writer allocates nothing in the
// steady state. It is not safe for concurrent use.
type Writer struct {
	w     io.Writer
	flush func() error
	buf   []byte
}

// NewWriter returns a Writer that writes events to w and flushes after every
// event. The flush method is chosen once, in this order:
//
//  1. w has FlushError() error (as http.ResponseController expects): called,
//     its error returned.
//  2. w implements http.Flusher: Flush is called.
//  3. w is any other http.ResponseWriter: flushed through
//     http.NewResponseController(w).Flush, which follows Unwrap() chains of
//     middleware wrappers.
//  4. w has Flush() error (bufio.Writer, gzip.Writer, …): called, its error
//     returned.
//  5. Otherwise events are written without flushing.
//
// A flush that fails with http.ErrNotSupported switches flushing off for the
// rest of the Writer's life and is not reported.
func NewWriter(w io.Writer) *Writer {
	sw := &Writer{buf: make([]byte, 0, initialWriteBuf)}
	sw.Reset(w)
	return sw
}

// Reset makes the Writer write to w, choosing the flush method anew as
// [NewWriter] does, and keeps its buffer.
func (w *Writer) Reset(dst io.Writer) {
	w.w = dst
	switch f := dst.(type) {
	case interface{ FlushError() error }:
		w.flush = f.FlushError
	case http.Flusher:
		w.flush = func() error { f.Flush(); return nil }
	case http.ResponseWriter:
		w.flush = http.NewResponseController(f).Flush
	case interface{ Flush() error }:
		w.flush = f.Flush
	default:
		w.flush = nil
	}
}

// WriteEvent writes one event: "event: name\n" (omitted when name is ""),
// one "data: " line per line of data, and a blank line; then it flushes.
// LF, CRLF and lone CR in data all separate lines, and empty lines are
// omitted. Data that is empty or consists only of ASCII whitespace is not
// written (nil is returned), so an empty data line is never sent. A name
// containing CR or LF fails with [ErrInvalidEventName]. WriteEvent never
// writes an "error:" field.
func (w *Writer) WriteEvent(name string, data []byte) error {
	if strings.ContainsAny(name, "\r\n") {
		return fmt.Errorf("%w: %q", ErrInvalidEventName, name)
	}
	if blank(data) {
		return nil
	}
	w.buf = w.buf[:0]
	if name != "" {
		w.buf = append(w.buf, "event: "...)
		w.buf = append(w.buf, name...)
		w.buf = append(w.buf, '\n')
	}
	return w.writeLines("data: ", data)
}

// WriteData writes data as an unnamed event (Chat Completions style), with
// the same rules as [Writer.WriteEvent].
func (w *Writer) WriteData(data []byte) error {
	return w.WriteEvent("", data)
}

// WriteDone writes the Chat Completions terminator "data: [DONE]\n\n" and
// flushes.
func (w *Writer) WriteDone() error {
	w.buf = append(w.buf[:0], "data: [DONE]\n\n"...)
	return w.emit()
}

// WriteComment writes a comment (keepalive) ": text\n\n" and flushes. Each
// line of a multi-line text becomes its own comment line; empty lines are
// omitted, and an empty text writes ":\n\n". Readers skip comments.
func (w *Writer) WriteComment(text string) error {
	w.buf = w.buf[:0]
	for len(text) > 0 {
		line := text
		i := strings.IndexAny(text, "\r\n")
		if i >= 0 {
			line, text = text[:i], text[i+1:]
			if line == "" {
				continue
			}
		} else {
			text = ""
		}
		w.buf = append(w.buf, ": "...)
		w.buf = append(w.buf, line...)
		w.buf = append(w.buf, '\n')
	}
	if len(w.buf) == 0 {
		w.buf = append(w.buf, ':', '\n')
	}
	w.buf = append(w.buf, '\n')
	return w.emit()
}

// writeLines appends one prefixed line per non-empty line of data and the
// terminating blank line to w.buf, then writes and flushes. Lines longer
// than directWriteSize are written from data directly.
func (w *Writer) writeLines(prefix string, data []byte) error {
	for len(data) > 0 {
		line := data
		if i := indexEOL(data); i >= 0 {
			line, data = data[:i], data[i+1:]
			if len(line) == 0 {
				continue // also skips the LF of a CRLF
			}
		} else {
			data = nil
		}
		w.buf = append(w.buf, prefix...)
		if len(line) > directWriteSize {
			if err := w.write(w.buf); err != nil {
				return err
			}
			if err := w.write(line); err != nil {
				return err
			}
			w.buf = w.buf[:0]
		} else {
			w.buf = append(w.buf, line...)
		}
		w.buf = append(w.buf, '\n')
	}
	w.buf = append(w.buf, '\n')
	return w.emit()
}

// emit writes w.buf and flushes.
func (w *Writer) emit() error {
	if err := w.write(w.buf); err != nil {
		return err
	}
	if w.flush == nil {
		return nil
	}
	if err := w.flush(); err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			w.flush = nil
			return nil
		}
		return fmt.Errorf("sse: flush: %w", err)
	}
	return nil
}

func (w *Writer) write(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	return nil
}

// blank reports whether b is empty or only ASCII whitespace.
func blank(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r', '\f', '\v':
		default:
			return false
		}
	}
	return true
}
