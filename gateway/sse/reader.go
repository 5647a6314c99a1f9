package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
)

// DefaultMaxEventSize is the event size limit a [Reader] uses when
// [NewReader] is given a limit <= 0.
const DefaultMaxEventSize = 16 << 20 // 16 MiB

// ErrEventTooLarge is matched (errors.Is) by the error [Reader.Next] returns
// when an event, or a single line, exceeds the Reader's size limit. The
// returned error wraps it with the limit that was crossed.
var ErrEventTooLarge = errors.New("sse: event too large")

const (
	initialBufSize = 2 << 10  // first read buffer (held per open stream); grows only for longer lines
	retainBufSize  = 64 << 10 // Reset keeps buffers up to this size
	maxEmptyReads  = 100      // consecutive (0, nil) reads before io.ErrNoProgress
	maxInternLen   = 64       // longest event name kept in a Reader's name cache
	maxInterned    = 64       // most names a Reader caches
)

// bom is the UTF-8 byte order mark, skipped at the start of a stream.
const bom = "\xEF\xBB\xBF"

// Event is one parsed SSE event.
//
// Data and Error returned by [Reader.Next] alias the Reader's buffers and are
// valid only until the next call to Next or Reset; see [Event.Clone].
type Event struct {
	Name  string // value of the last "event:" field, "" when absent
	Data  []byte // "data:" lines joined with "\n"; nil when the event had no non-empty data
	ID    string // "id:" field
	Error []byte // payload of a non-standard "error:" field (llama.cpp issue #16104 emits `error: {json}`); nil if absent
	Done  bool   // Data was exactly "[DONE]"
}

// Clone returns a copy of e whose Data and Error do not alias any Reader
// buffer, so it stays valid after the next call to [Reader.Next]. Nil slices
// stay nil.
func (e Event) Clone() Event {
	e.Data = bytes.Clone(e.Data)
	e.Error = bytes.Clone(e.Error)
	return e
}

// Reader reads events incrementally from an upstream body. Create one with
// [NewReader]; the zero value is not usable. A Reader buffers at most one
// line and one event, both bounded by its size limit, and never reads ahead
// of what it needs to find the end of the current line.
type Reader struct {
	src     io.Reader
	max     int // event and line size limit
	bufMax  int // largest read buffer: one line of max bytes plus one byte
	buf     []byte
	start   int   // first unconsumed byte in buf
	end     int   // end of valid bytes in buf
	scanned int   // bytes after start known to hold no CR or LF
	skipLF  bool  // the last line ended in CR: drop an LF that follows
	bomDone bool  // the start of the stream was checked for a BOM
	rerr    error // error from src, surfaced once buffered lines are consumed
	err     error // sticky error returned by Next

	data   []byte // joined data lines of the pending event
	alias  []byte // the pending event's only data line, still in buf (data is empty then)
	errb   []byte // joined error lines of the pending event
	names  map[string]string
	lastID string
}

// NewReader returns a Reader that parses the event stream r. maxEventSize
// limits the size of one event and of one line (see the package
// documentation for how it is counted); maxEventSize <= 0 selects
// [DefaultMaxEventSize].
func NewReader(r io.Reader, maxEventSize int) *Reader {
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	// The read buffer holds one line of maxEventSize bytes plus one byte to
	// find its end, and at least a whole BOM.
	bufMax := maxEventSize
	if bufMax < math.MaxInt {
		bufMax++
	}
	bufMax = max(bufMax, len(bom)+1)
	return &Reader{src: r, max: maxEventSize, bufMax: bufMax}
}

// Reset makes the Reader read a new stream from src with the same size
// limit, discarding any buffered state and sticky error but keeping buffers
// of modest size for reuse. Event slices returned earlier become invalid.
func (r *Reader) Reset(src io.Reader) {
	if cap(r.buf) > retainBufSize {
		r.buf = nil
	}
	if cap(r.data) > retainBufSize {
		r.data = nil
	}
	if cap(r.errb) > retainBufSize {
		r.errb = nil
	}
	*r = Reader{
		src:    src,
		max:    r.max,
		bufMax: r.bufMax,
		buf:    r.buf,
		data:   r.data[:0],
		errb:   r.errb[:0],
		names:  r.names,
	}
}

// Next returns the next event of the stream. It skips comments and events
// without data or error payload (see the package documentation). At a clean
// end of the stream it returns io.EOF; if the stream ends inside a line it
// returns an error matching io.ErrUnexpectedEOF. Other failures are
// [ErrEventTooLarge] and wrapped errors of the underlying reader. Errors are
// sticky.
//
// The returned Data and Error are valid until the next call to Next or Reset.
func (r *Reader) Next() (Event, error) {
	if r.err != nil {
		return Event{}, r.err
	}
	r.data, r.alias = r.data[:0], nil
	r.errb = r.errb[:0]
	var name, id string
	size := 0
	for {
		line, err := r.line()
		if err != nil {
			if err == io.EOF && r.pending() {
				// The last event lacks its blank line, but its last line
				// was complete: dispatch it, report EOF next time.
				r.err = io.EOF
				return r.event(name, id), nil
			}
			r.err = err
			return Event{}, err
		}
		if len(line) == 0 { // blank line: dispatch
			if r.pending() {
				return r.event(name, id), nil
			}
			name, id, size = "", "", 0
			continue
		}
		if line[0] == ':' { // comment / keepalive
			continue
		}
		size += len(line)
		if size > r.max {
			r.err = fmt.Errorf("%w: event exceeds %d bytes", ErrEventTooLarge, r.max)
			return Event{}, r.err
		}
		field, value := line, []byte(nil)
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			field, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			switch {
			case len(value) == 0:
			case len(r.data) == 0 && r.alias == nil:
				// Most events have one data line: return it from the
				// read buffer without copying.
				r.alias = value[:len(value):len(value)]
			default:
				r.materialize()
				r.data = appendLine(r.data, value)
			}
		case "event":
			name = r.intern(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				id = r.idString(value)
			}
		case "error":
			r.errb = appendLine(r.errb, value)
		}
		// "retry" and unknown fields are ignored.
	}
}

// appendLine appends a non-empty field value to a "\n"-joined payload.
func appendLine(dst, value []byte) []byte {
	if len(value) == 0 {
		return dst
	}
	if len(dst) > 0 {
		dst = append(dst, '\n')
	}
	return append(dst, value...)
}

// pending reports whether the pending event has a payload to dispatch.
func (r *Reader) pending() bool {
	return r.alias != nil || len(r.data) > 0 || len(r.errb) > 0
}

// materialize copies an aliased data line into r.data, before the read
// buffer's bytes move or a second data line is appended.
func (r *Reader) materialize() {
	if r.alias != nil {
		r.data = append(r.data[:0], r.alias...)
		r.alias = nil
	}
}

// event builds the event to dispatch from the pending state.
func (r *Reader) event(name, id string) Event {
	ev := Event{Name: name, ID: id}
	if r.alias != nil {
		ev.Data = r.alias
	} else if n := len(r.data); n > 0 {
		ev.Data = r.data[:n:n]
	}
	ev.Done = string(ev.Data) == "[DONE]"
	if n := len(r.errb); n > 0 {
		ev.Error = r.errb[:n:n]
	}
	return ev
}

// line returns the next line without its terminator. The slice aliases r.buf
// and is valid until the next call. At the end of the stream it returns
// io.EOF if no bytes are pending and an io.ErrUnexpectedEOF otherwise; after
// a read error it returns that error once the complete lines before it are
// consumed.
func (r *Reader) line() ([]byte, error) {
	for {
		if r.skipLF && r.start < r.end {
			if r.buf[r.start] == '\n' {
				r.start++
			}
			r.skipLF = false
		}
		if !r.bomDone {
			b := r.buf[r.start:r.end]
			if len(b) >= len(bom) || !bytes.HasPrefix([]byte(bom), b) || r.rerr != nil {
				if bytes.HasPrefix(b, []byte(bom)) {
					r.start += len(bom)
				}
				r.bomDone = true
			}
		}
		if r.bomDone {
			from := r.start + r.scanned
			if i := indexEOL(r.buf[from:r.end]); i >= 0 {
				eol := from + i
				line := r.buf[r.start:eol]
				next := eol + 1
				if r.buf[eol] == '\r' {
					if next < r.end {
						if r.buf[next] == '\n' {
							next++
						}
					} else {
						r.skipLF = true
					}
				}
				r.start, r.scanned = next, 0
				if len(line) > r.max {
					return nil, r.lineTooLarge()
				}
				return line, nil
			}
			r.scanned = r.end - r.start
			if r.scanned > r.max {
				return nil, r.lineTooLarge()
			}
		}
		if r.rerr != nil {
			if r.rerr == io.EOF && r.start < r.end {
				return nil, fmt.Errorf("sse: stream ended inside a line (%d bytes pending): %w",
					r.end-r.start, io.ErrUnexpectedEOF)
			}
			return nil, r.rerr
		}
		r.fill()
	}
}

func (r *Reader) lineTooLarge() error {
	return fmt.Errorf("%w: line exceeds %d bytes", ErrEventTooLarge, r.max)
}

// fill makes room in r.buf and reads from the source once (retrying reads
// that return nothing), recording any error in r.rerr.
func (r *Reader) fill() {
	if r.buf == nil {
		r.buf = make([]byte, min(initialBufSize, r.bufMax))
	}
	moving := r.start == r.end || (r.end == len(r.buf) && r.start > 0)
	if moving && r.alias != nil {
		r.materialize()
	}
	if r.start == r.end {
		r.start, r.end = 0, 0
	} else if r.end == len(r.buf) && r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end == len(r.buf) {
		// A line fills the buffer. line() guarantees it is at most r.max
		// bytes, so the buffer may still grow to r.bufMax.
		// Grow by doubling, but go straight to the limit rather than
		// allocating a last buffer only a few bytes short of it.
		n := len(r.buf) * 2
		if n > r.bufMax/2 || n <= 0 {
			n = r.bufMax
		}
		if n <= len(r.buf) { // unreachable while line() enforces the limit
			r.rerr = r.lineTooLarge()
			return
		}
		nb := make([]byte, n)
		copy(nb, r.buf[:r.end])
		r.buf = nb
	}
	for range maxEmptyReads {
		n, err := r.src.Read(r.buf[r.end:])
		if n < 0 || n > len(r.buf)-r.end {
			r.rerr = fmt.Errorf("sse: read: invalid byte count %d", n)
			return
		}
		r.end += n
		if err != nil {
			if err == io.EOF {
				r.rerr = io.EOF
			} else {
				r.rerr = fmt.Errorf("sse: read: %w", err)
			}
			return
		}
		if n > 0 {
			return
		}
	}
	r.rerr = fmt.Errorf("sse: read: %w", io.ErrNoProgress)
}

// indexEOL returns the index of the first CR or LF in b, or -1.
func indexEOL(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// intern returns b as a string, reusing the strings of well-known and
// recently seen event names so that steady-state streams do not allocate.
func (r *Reader) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := knownNames[string(b)]; ok {
		return s
	}
	if s, ok := r.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= maxInternLen && len(r.names) < maxInterned {
		if r.names == nil {
			r.names = make(map[string]string)
		}
		r.names[s] = s
	}
	return s
}

// idString returns b as a string, reusing the previous ID when it repeats.
func (r *Reader) idString(b []byte) string {
	if string(b) != r.lastID {
		r.lastID = string(b)
	}
	return r.lastID
}

// knownNames holds the event names of OpenAI-compatible streams. It is
// built once and only read afterwards.
var knownNames = func() map[string]string {
	names := []string{
		"error", "message", "ping", "done",
		"response.created", "response.in_progress", "response.queued",
		"response.completed", "response.failed", "response.incomplete",
		"response.output_item.added", "response.output_item.done",
		"response.content_part.added", "response.content_part.done",
		"response.output_text.delta", "response.output_text.done",
		"response.output_text.annotation.added",
		"response.refusal.delta", "response.refusal.done",
		"response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
		"response.reasoning_text.delta", "response.reasoning_text.done",
		"response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
		"response.web_search_call.in_progress", "response.web_search_call.searching",
		"response.web_search_call.completed",
		"response.file_search_call.in_progress", "response.file_search_call.searching",
		"response.file_search_call.completed",
		"response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting",
		"response.code_interpreter_call.completed",
		"response.image_generation_call.in_progress", "response.image_generation_call.generating",
		"response.image_generation_call.partial_image", "response.image_generation_call.completed",
		"response.mcp_call.in_progress", "response.mcp_call.completed", "response.mcp_call.failed",
		"response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
		"response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
		"response.mcp_list_tools.failed",
	}
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = n
	}
	return m
}()
