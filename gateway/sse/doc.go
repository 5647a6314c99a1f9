// Package sse reads and writes Server-Sent Events (text/event-stream) on the
// gateway's hot path: a tolerant, incremental [Reader] for upstream bodies
// (OpenAI Responses and Chat Completions, llama.cpp, vLLM) and a flushing
// [Writer] for client responses.
//
// Neither type starts goroutines, and both reuse their buffers, so a
// steady-state stream allocates nothing per event. Neither is safe for
// concurrent use; one stream, one goroutine.
//
// # Reading
//
// [Reader.Next] returns one [Event] per dispatched SSE event. The parser
// follows the WHATWG event-stream grammar with these deliberate choices,
// made so that whatever the gateway forwards can never break a client (see
// the terminal-event rule in docs/ARCHITECTURE.md):
//
//   - Lines end in LF, CRLF or a lone CR, in any mix, and may be split across
//     reads at any byte (including between the CR and LF of a CRLF). A UTF-8
//     byte order mark at the very start of the stream is skipped.
//   - A line "name: value" sets a field; exactly one space after the colon is
//     stripped; a line without a colon is a field with an empty value. Lines
//     starting with ':' are comments (keepalives) and are skipped. Known
//     fields are data, event, id, retry (parsed by nobody, ignored) and the
//     non-standard error field that llama.cpp emits (`error: {json}`); other
//     fields are ignored.
//   - Empty data lines are dropped: "data: a", "data:", "data: b" yields
//     "a\nb", and an event whose data lines are all empty yields no data at
//     all. The same holds for error lines. An event with neither data nor
//     error (only event:, id:, empty data:, unknown fields) is dropped and
//     never returned, because an empty data line aborts openai-go.
//   - Event.Name is the last event: value of the event; Event.ID is the last
//     id: value of the event (ignored if it contains NUL). Neither is
//     inherited by later events: callers that need the last event ID across
//     events track it themselves.
//   - Event.Error carries the joined error: lines; when the event also has
//     data, both Data and Error are set.
//   - Event.Done is true when Data is exactly "[DONE]" (no trimming).
//
// Event.Data and Event.Error alias buffers owned by the Reader and are valid
// only until the next call to Next (or Reset); use [Event.Clone] to keep an
// event longer. Name and ID are ordinary strings and stay valid.
//
// # End of stream and errors
//
// Next returns io.EOF when the stream ends cleanly: no bytes of an unfinished
// line are pending. An event whose last line was terminated by a newline but
// which lacks the closing blank line is still dispatched at EOF (many servers
// omit the final blank line), and io.EOF follows on the next call. If the
// stream ends in the middle of a line, the pending event is discarded and
// Next returns an error matching io.ErrUnexpectedEOF, so that a cut upstream
// is always detectable.
//
// An event is limited to maxEventSize bytes, counted as the sum of the
// lengths of its field lines (line terminators and comment lines are not
// counted); additionally no single line, comments included, may be longer
// than maxEventSize. Either excess fails with an error matching
// [ErrEventTooLarge] as soon as the limit is crossed, so memory stays bounded
// (about twice maxEventSize in the worst case) whatever the upstream sends.
// Because the limit covers field names too, the Name, ID, Data and Error of
// a returned event together never exceed maxEventSize bytes.
//
// Errors from the underlying reader are wrapped ("sse: read: …") and match
// the original with errors.Is (context.DeadlineExceeded, net errors,
// io.ErrUnexpectedEOF from a truncated HTTP body, …). Events that were
// complete before the failing read are returned first. A reader that keeps
// returning no data and no error fails with io.ErrNoProgress. Every error is
// sticky: once Next has returned an error it returns the same error again.
//
// # Writing
//
// [Writer] formats events and flushes after each one (see [NewWriter] for
// how a flusher is found). Data is split into one "data: " line per line,
// with LF, CRLF and lone CR all treated as line breaks; empty lines are
// omitted, and data that is empty or only whitespace is not written at all,
// so a Writer never emits an empty data line. It never writes an error:
// field. For data without CR bytes or empty lines, an event written by a
// Writer reads back from a Reader with identical Name and Data.
package sse
