package streaminput

import (
	"bytes"
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// AccumulatorOptions configure an Accumulator. Zero values take the
// package defaults (DefaultMaxSessionBytes, DefaultReorderWindow,
// jsonx.DefaultMaxDepth).
type AccumulatorOptions struct {
	// MaxBytes caps the decoded payload bytes held for one response.create.
	MaxBytes int64
	// ReorderWindow bounds out-of-order buffering, as for sessions.
	ReorderWindow int
	// MaxJSONDepth caps the nesting of the frames Add and Apply take: a
	// deeper one is refused (400 nesting_too_deep) before it is parsed.
	MaxJSONDepth int
	// Registerer, when set, counts the chunks Add takes in the chunk
	// series the Manager registers there too
	// (sluice_streaming_input_chunks_total{outcome},
	// sluice_streaming_input_bytes_total), with the same outcomes.
	Registerer prometheus.Registerer
}

// Accumulator collects the input_chunk frames of a Responses WebSocket and
// merges them into the next response.create, with the same rules as a
// session: ordering by sequence_id (optional; it follows the previous
// chunk's, from 0), out-of-order chunks buffered within the window,
// duplicates ignored, conflicting duplicates rejected, a byte cap. Text
// extends the last user message; audio and images become input parts.
//
//	{"type":"input_chunk","sequence_id":0,"modality":"text","payload":"Tell me about "}
//	{"type":"input_chunk","payload":"otters."}
//	{"type":"response.create","model":"…","input":[…]}   ← Apply merges the two chunks here
//
// Sequence ids start again from 0 after each Apply. An Accumulator belongs
// to one socket's read loop: it is not safe for concurrent use. Its errors
// are *apierr.Error values, ready to be sent as error frames (their Status
// is the HTTP status a REST request would have had).
type Accumulator struct {
	opts   AccumulatorOptions
	met    *chunkCounters // nil: not counted
	chunks map[uint64]chunk
	next   uint64 // next expected in order
	auto   uint64 // the id a chunk without sequence_id takes
	maxSeq uint64
	bytes  int64
	end    bool
	endSeq uint64
}

// NewAccumulator returns an empty Accumulator.
func NewAccumulator(opts AccumulatorOptions) *Accumulator {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxSessionBytes
	}
	if opts.ReorderWindow <= 0 {
		opts.ReorderWindow = DefaultReorderWindow
	}
	if opts.MaxJSONDepth <= 0 {
		opts.MaxJSONDepth = jsonx.DefaultMaxDepth
	}
	a := &Accumulator{opts: opts, chunks: map[uint64]chunk{}}
	if opts.Registerer != nil {
		met := newChunkCounters()
		if met.register(opts.Registerer) == nil {
			a.met = &met
		}
	}
	return a
}

// count records a chunk's outcome (accepted, duplicate, rejected).
func (a *Accumulator) count(outcome string, payload int) {
	if a.met == nil {
		return
	}
	a.met.chunks.WithLabelValues(outcome).Inc()
	if outcome == "accepted" {
		a.met.bytes.Add(float64(payload))
	}
}

// IsInputChunk reports whether a WebSocket text frame is an input_chunk
// frame, the ones Add takes. It is safe on any bytes, however deeply
// nested: looking up a top-level key skips nested values with an iterative
// scan, without recursion.
func IsInputChunk(frame []byte) bool {
	return gjson.GetBytes(frame, "type").Str == "input_chunk"
}

// Add takes one input_chunk frame. A duplicate of a chunk already held
// (same sequence_id, same content) is accepted and ignored. A frame nested
// deeper than MaxJSONDepth, or repeating a key, is refused with a 400.
func (a *Accumulator) Add(frame []byte) error {
	return a.AddContext(context.Background(), frame)
}

// AddContext is Add that stops, with a 499 client_closed_request error,
// when ctx ends (the socket is gone) while a large frame is checked.
func (a *Accumulator) AddContext(ctx context.Context, frame []byte) error {
	if aerr := checkJSON(ctx, frame, a.opts.MaxJSONDepth, "the input_chunk frame"); aerr != nil {
		return aerr
	}
	root := gjson.ParseBytes(frame)
	if !root.IsObject() {
		return apierr.Invalid("", apierr.CodeInvalidType, "an input_chunk frame must be a JSON object")
	}
	if t := root.Get("type"); t.Exists() && t.Str != "input_chunk" {
		return apierr.Invalid("type", apierr.CodeInvalidValue, "expected an input_chunk frame, got type %.64q", t.Str)
	}
	c, aerr := parseChunk(ctx, root, &a.auto)
	if aerr != nil {
		return aerr
	}
	if old, ok := a.chunks[c.seq]; ok {
		if old.meta == c.meta && bytes.Equal(old.payload, c.payload) {
			a.auto = c.seq + 1
			a.count("duplicate", 0)
			return nil
		}
		a.count("rejected", 0)
		// Name what differs, as the REST path does: a resend with only
		// end_of_input or new_part changed keeps its payload.
		prev := chunkInfo{d: old.digest(), meta: old.meta}
		return errConflict(CodeSequenceConflict, "sequence_id", "sequence_id %d was already received with %s", c.seq, conflictDetail(prev, c))
	}
	if err := a.check(c); err != nil {
		a.count("rejected", 0)
		return err
	}
	a.chunks[c.seq] = c
	a.bytes += int64(len(c.payload))
	if len(a.chunks) == 1 || c.seq > a.maxSeq {
		a.maxSeq = c.seq
	}
	if c.meta.end {
		a.end, a.endSeq = true, c.seq
	}
	for _, ok := a.chunks[a.next]; ok; _, ok = a.chunks[a.next] {
		a.next++
	}
	a.auto = c.seq + 1
	a.count("accepted", len(c.payload))
	return nil
}

// check applies the ordering rules and the byte cap to a chunk not held
// before; the byte cap's refusal drops every chunk held.
func (a *Accumulator) check(c chunk) error {
	switch {
	case a.end && c.seq > a.endSeq:
		return errConflict(CodeSessionFinished, "sequence_id", "sequence_id %d is after the end of input (sequence_id %d)", c.seq, a.endSeq)
	case c.meta.end && a.end:
		return errConflict(CodeSessionFinished, "end_of_input", "end_of_input was already set by sequence_id %d", a.endSeq)
	case c.meta.end && len(a.chunks) > 0 && a.maxSeq > c.seq:
		return errConflict(CodeSequenceConflict, "end_of_input", "sequence_id %d cannot end the input: sequence_id %d was already received", c.seq, a.maxSeq)
	case c.seq >= a.next+uint64(a.opts.ReorderWindow):
		return errConflict(CodeOutOfWindow, "sequence_id", "sequence_id %d is too far ahead: the next expected is %d", c.seq, a.next)
	case a.bytes+int64(len(c.payload)) > a.opts.MaxBytes:
		e := apierr.TooLarge(a.opts.MaxBytes)
		e.Message = "the input chunks of this response exceed the gateway limit; they were discarded"
		a.Reset()
		return e
	}
	return nil
}

// Len is the number of chunks held.
func (a *Accumulator) Len() int { return len(a.chunks) }

// Bytes is the payload size of the chunks held.
func (a *Accumulator) Bytes() int64 { return a.bytes }

// Reset drops every chunk held.
func (a *Accumulator) Reset() {
	*a = Accumulator{opts: a.opts, met: a.met, chunks: map[uint64]chunk{}}
}

// Apply merges the chunks held into a response.create frame (flat, as
// Codex sends it, or with the request under "response") and resets the
// Accumulator. With no chunks held it returns body unchanged. It resets the
// Accumulator when it fails too (a gap in the sequence ids fails with 409
// sequence_gap): the refused response.create was answered, and the next
// one starts clean, its sequence ids again from 0 (README "WebSocket"), so
// one bad batch does not refuse every later request on the socket.
func (a *Accumulator) Apply(body []byte) ([]byte, error) {
	if len(a.chunks) == 0 {
		return body, nil
	}
	defer a.Reset()
	if a.next <= a.maxSeq {
		var gaps []uint64
		for q := a.next; q <= a.maxSeq && len(gaps) < maxListedGaps; q++ {
			if _, ok := a.chunks[q]; !ok {
				gaps = append(gaps, q)
			}
		}
		// The chunks held are every id below next and the buffered ones.
		missing := a.maxSeq + 1 - uint64(len(a.chunks))
		return nil, errConflict(CodeSequenceGap, "sequence_id", "the input chunks have gaps: %s", describeMissing(gaps, missing))
	}
	if aerr := checkJSON(context.Background(), body, a.opts.MaxJSONDepth, "the response.create frame"); aerr != nil {
		return nil, aerr
	}
	if !gjson.ParseBytes(body).IsObject() {
		return nil, apierr.Invalid("", apierr.CodeInvalidJSON, "the response.create frame is not a JSON object")
	}
	chunks := make([]chunk, 0, len(a.chunks))
	for _, c := range a.chunks {
		chunks = append(chunks, c)
	}
	slices.SortFunc(chunks, func(x, y chunk) int {
		switch {
		case x.seq < y.seq:
			return -1
		case x.seq > y.seq:
			return 1
		}
		return 0
	})
	root := gjson.ParseBytes(body)
	var out []byte
	if inner := root.Get("response"); inner.IsObject() && !root.Get("input").Exists() {
		merged, aerr := assemble(context.Background(), false, []byte(inner.Raw), chunks, a.opts.MaxJSONDepth)
		if aerr != nil {
			return nil, aerr
		}
		var err error
		if out, err = sjson.SetRawBytes(body, "response", merged); err != nil {
			return nil, apierr.Invalid("", apierr.CodeInvalidTemplate, "the input chunks could not be merged: %v", err)
		}
	} else {
		merged, aerr := assemble(context.Background(), false, body, chunks, a.opts.MaxJSONDepth)
		if aerr != nil {
			return nil, aerr
		}
		out = merged
	}
	return out, nil
}
