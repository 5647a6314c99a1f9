// Package eventring keeps the last events of an upstream attempt for the
// policy recording (README "Recorded traffic as tests", docs/ARCHITECTURE.md):
// while hook calls are recorded, the gateway feeds each attempt's upstream
// events into a Ring and hands it to the recover and replay calls about
// that attempt's failure through their context; the plugin runtime writes
// the events into the call's record. When nothing is recorded no Ring is
// made, and the normal path pays nothing.
package eventring

import (
	"context"
	"encoding/json"
)

// Size is how many events a Ring keeps: the last Size before a failure.
const Size = 32

// MaxEventBytes bounds what a Ring keeps of one event's data (or error
// payload); longer data is cut and recorded as a string, Truncated set.
const MaxEventBytes = 8 << 10

// Event is one upstream event as a recording shows it (the SSE event as
// the gateway read it, after the upstream scrubbing).
type Event struct {
	Name string `json:"event,omitempty"` // the SSE event name
	// Data is the event's data: the JSON as it came, or a JSON string when
	// it is not JSON (or was cut at MaxEventBytes).
	Data      json.RawMessage `json:"data,omitempty"`
	Error     json.RawMessage `json:"error,omitempty"` // a non-standard `error:` field's payload, the same way
	Done      bool            `json:"done,omitempty"`  // the [DONE] sentinel
	Truncated bool            `json:"truncated,omitempty"`
}

type slot struct {
	name      string
	data, err []byte
	done      bool
	cut       bool
}

// Ring holds the last Size events of one upstream attempt. It is used by
// one goroutine at a time (the attempt's); its slots' buffers are reused,
// so a long stream costs no allocation per event once the ring is full.
type Ring struct {
	slots [Size]slot
	next  int // the slot the next event goes into
	n     int // events held, ≤ Size
}

// Reset forgets the events (a new attempt).
func (r *Ring) Reset() {
	if r != nil {
		r.next, r.n = 0, 0
	}
}

// Len is the number of events held.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return r.n
}

// Add keeps one event (copying data and errPayload), dropping the oldest
// when the ring is full.
func (r *Ring) Add(name string, data, errPayload []byte, done bool) {
	s := &r.slots[r.next]
	s.name, s.done, s.cut = name, done, false
	s.data, s.cut = keep(s.data, data, s.cut)
	s.err, s.cut = keep(s.err, errPayload, s.cut)
	r.next = (r.next + 1) % Size
	if r.n < Size {
		r.n++
	}
}

func keep(dst, src []byte, cut bool) ([]byte, bool) {
	if src == nil {
		return dst[:0], cut
	}
	if len(src) > MaxEventBytes {
		src, cut = src[:MaxEventBytes], true
	}
	return append(dst[:0], src...), cut
}

// Events returns the events held, oldest first, ready for JSON. Their data
// aliases the ring: use them before the next Add.
func (r *Ring) Events() []Event {
	if r.Len() == 0 {
		return nil
	}
	out := make([]Event, 0, r.n)
	for i := range r.n {
		s := &r.slots[(r.next-r.n+i+Size)%Size]
		out = append(out, Event{Name: s.name, Data: raw(s.data, s.cut), Error: raw(s.err, s.cut), Done: s.done, Truncated: s.cut})
	}
	return out
}

// raw is b as JSON: itself when it is JSON (and was not cut), else a string.
func raw(b []byte, cut bool) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if !cut && json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b)) // invalid UTF-8 (a rune cut at the bound) becomes U+FFFD
	return s
}

type ctxKey struct{}

// NewContext returns ctx carrying r for the hook calls made with it.
func NewContext(ctx context.Context, r *Ring) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// FromContext returns the Ring ctx carries, or nil.
func FromContext(ctx context.Context) *Ring {
	r, _ := ctx.Value(ctxKey{}).(*Ring)
	return r
}
