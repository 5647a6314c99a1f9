package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// ScopeKind says which request attribute a scope id came from. Kinds are
// ordered from tightest to loosest.
type ScopeKind uint8

// Scope kinds. The zero value is invalid.
const (
	// ScopeTurnState is the x-codex-turn-state header.
	ScopeTurnState ScopeKind = 1
	// ScopeSession is session_id, x-codex-session-id or
	// x-codex-conversation-id.
	ScopeSession ScopeKind = 2
	// ScopeClientKey is the client key hash, used when the request carries
	// neither of the above.
	ScopeClientKey ScopeKind = 3
)

// String returns the kind's name as used in configs and metrics labels:
// "turn_state", "session" or "client_key".
func (k ScopeKind) String() string {
	switch k {
	case ScopeTurnState:
		return "turn_state"
	case ScopeSession:
		return "session"
	case ScopeClientKey:
		return "client_key"
	default:
		return fmt.Sprintf("ScopeKind(%d)", uint8(k))
	}
}

// Valid reports whether k is one of the defined kinds.
func (k ScopeKind) Valid() bool {
	return k >= ScopeTurnState && k <= ScopeClientKey
}

// ParseScopeKind is the inverse of ScopeKind.String.
func ParseScopeKind(s string) (ScopeKind, error) {
	for _, k := range []ScopeKind{ScopeTurnState, ScopeSession, ScopeClientKey} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("store: unknown scope kind %q: %w", s, ErrInvalid)
}

// Anchor records which upstream produced a response and in which scope.
type Anchor struct {
	// ResponseID is the upstream's response id (the key).
	ResponseID string
	// Upstream is the name of the upstream that owns the response.
	Upstream string
	// ClientKeyHash identifies the client key that made the request.
	ClientKeyHash string
	// ScopeKind and ScopeID are the tightest scope of the request. They are
	// stored as given and returned unchanged.
	ScopeKind ScopeKind
	ScopeID   string
	// Model is the model the request asked for.
	Model string
	// CreatedAt defaults to the store's clock.
	CreatedAt time.Time
	// ExpiresAt defaults to CreatedAt + Options.AnchorTTL.
	ExpiresAt time.Time
	// UpstreamID is the id the owner knows this response by, when it is
	// not ResponseID: a stream continued on another upstream after content
	// reached the client keeps the id the client was shown, and the
	// upstream that finished it knows only its own. Empty: ResponseID.
	UpstreamID string
	// Earlier are the copies of a continued response that the upstreams
	// it was cut on keep (the request and the answer up to the cut, under
	// their own ids), oldest first, so that a DELETE of the response
	// reaches them too (README "Continuation"). Empty for any other
	// response, and for an anchor written before the field existed: those
	// load as they always did, and a DELETE reaches only Upstream.
	Earlier []UpstreamCopy
}

// UpstreamCopy is a copy of a response that an upstream keeps.
type UpstreamCopy struct {
	// Upstream is the name of the upstream that keeps it.
	Upstream string
	// ID is the id that upstream knows it by. Empty: the anchor's
	// ResponseID.
	ID string
}

// MaxEarlierCopies bounds Anchor.Earlier: a continuation is bounded by its
// route's targets, so a longer list is a bug, not a response.
const MaxEarlierCopies = 64

// ScopeRecord points a scope at its latest response.
type ScopeRecord struct {
	// LatestResponseID is the response id most recently anchored in the
	// scope (last writer wins).
	LatestResponseID string
	// Owner is the upstream that owns LatestResponseID.
	Owner string
	// UpdatedAt is when the record was last written (store clock).
	UpdatedAt time.Time
	// ExpiresAt is UpdatedAt + Options.ScopeTTL.
	ExpiresAt time.Time
}

// Turn is one request/response exchange of a conversation: the items the
// client sent and the items the upstream produced. Turns are chained through
// ParentID (the request's previous_response_id); items are not copied from
// turn to turn.
type Turn struct {
	// ResponseID is the id of the response this turn produced (the key).
	ResponseID string
	// ParentID is the previous_response_id of the request, or "" for the
	// first turn of a conversation.
	ParentID string
	// Input holds the input items the client sent with this request.
	Input []json.RawMessage
	// Output holds the output items of the response.
	Output []json.RawMessage
	// CreatedAt defaults to the store's clock.
	CreatedAt time.Time
	// ExpiresAt defaults to CreatedAt + Options.TurnTTL.
	ExpiresAt time.Time
}

// InputSession is a request that a client sends in pieces. The store keeps
// the fields as given; their meaning belongs to the gateway.
type InputSession struct {
	// ID is the session id (the key).
	ID string
	// ClientKeyHash identifies the client key that opened the session.
	ClientKeyHash string
	// Endpoint is the API endpoint the assembled request goes to.
	Endpoint string
	// Template is the request body the chunks are assembled into.
	Template []byte
	// StartPolicy says when the assembled request may start.
	StartPolicy string
	// State is the gateway's state name for the session.
	State string
	// NextSeq is the next sequence id the gateway expects.
	NextSeq uint64
	// ReceivedBytes counts payload bytes received so far.
	ReceivedBytes int64
	// CreatedAt defaults to the store's clock on create.
	CreatedAt time.Time
	// LastActivity defaults to the store's clock on every write.
	LastActivity time.Time
	// ExpiresAt defaults to LastActivity + Options.InputSessionTTL.
	ExpiresAt time.Time
}

// Chunk is one piece of a streaming-input session.
type Chunk struct {
	// Seq is the chunk's sequence id within its session.
	Seq uint64
	// Modality names the kind of payload (text, audio, …).
	Modality string
	// Payload is the chunk's bytes.
	Payload []byte
}

// valueVersion is the first byte of every encoded value.
const valueVersion = 1

// encoder appends a value's fields to buf.
type encoder struct{ buf []byte }

func (e *encoder) byte(b byte)      { e.buf = append(e.buf, b) }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) string(s string)  { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.buf = append(e.buf, b...) }
func (e *encoder) time(t time.Time) { e.varint(timeNanos(t)) }
func (e *encoder) items(items []json.RawMessage) {
	e.uvarint(uint64(len(items)))
	for _, it := range items {
		e.bytes(it)
	}
}

// timeNanos encodes t as Unix nanoseconds, with 0 for the zero time.
func timeNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// nanosTime is the inverse of timeNanos. Times come back in UTC.
func nanosTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// decoder reads a value's fields. The first error sticks; later reads
// return zero values.
type decoder struct {
	buf []byte
	err error
}

func newDecoder(buf []byte) *decoder {
	d := &decoder{buf: buf}
	if v := d.byte(); d.err == nil && v != valueVersion {
		d.err = fmt.Errorf("value version %d: %w", v, ErrCorrupt)
	}
	return d
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("truncated value: %w", ErrCorrupt)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.buf) < 1 {
		d.fail()
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// rawBytes returns the next length-prefixed field, aliasing the buffer.
func (d *decoder) rawBytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.buf)) {
		d.fail()
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) string() string { return string(d.rawBytes()) }

// bytes returns a copy of the next length-prefixed field (nil if empty).
func (d *decoder) bytes() []byte {
	b := d.rawBytes()
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func (d *decoder) time() time.Time { return nanosTime(d.varint()) }

// items returns the next item list, aliasing the buffer.
func (d *decoder) items() []json.RawMessage {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.buf)) { // every item takes >= 1 byte
		d.fail()
		return nil
	}
	out := make([]json.RawMessage, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, json.RawMessage(d.rawBytes()))
	}
	return out
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%d trailing bytes: %w", len(d.buf), ErrCorrupt)
	}
	return d.err
}

// Anchor value: version, kind(1), upstream, client_key_hash, scope_id,
// model, created_at, expires_at; then upstream_id when it is set, which the
// kind byte's high bit (anchorHasUpstreamID) announces; then, when the next
// bit (anchorHasEarlier) says so, the earlier copies: a uvarint count and
// each copy's upstream and id. Anchors without them keep the original
// layout, so records written before either field existed load unchanged
// (the store outlives upgrades: a rolling upgrade shares it across versions),
// and a truncation is still detected.
func encodeAnchor(a *Anchor) []byte {
	e := encoder{buf: make([]byte, 0, 16+len(a.Upstream)+len(a.ClientKeyHash)+len(a.ScopeID)+len(a.Model))}
	e.byte(valueVersion)
	kind := byte(a.ScopeKind)
	if a.UpstreamID != "" {
		kind |= anchorHasUpstreamID
	}
	if len(a.Earlier) > 0 {
		kind |= anchorHasEarlier
	}
	e.byte(kind)
	e.string(a.Upstream)
	e.string(a.ClientKeyHash)
	e.string(a.ScopeID)
	e.string(a.Model)
	e.time(a.CreatedAt)
	e.time(a.ExpiresAt)
	if a.UpstreamID != "" {
		e.string(a.UpstreamID)
	}
	if len(a.Earlier) > 0 {
		e.uvarint(uint64(len(a.Earlier)))
		for _, c := range a.Earlier {
			e.string(c.Upstream)
			e.string(c.ID)
		}
	}
	return e.buf
}

// anchorHasUpstreamID and anchorHasEarlier flag, in an anchor value's kind
// byte, that the value goes on with Anchor.UpstreamID and Anchor.Earlier.
const (
	anchorHasUpstreamID = 0x80
	anchorHasEarlier    = 0x40
)

func decodeAnchor(responseID string, v []byte) (Anchor, error) {
	d := newDecoder(v)
	a := Anchor{ResponseID: responseID}
	kind := d.byte()
	a.ScopeKind = ScopeKind(kind &^ (anchorHasUpstreamID | anchorHasEarlier))
	a.Upstream = d.string()
	a.ClientKeyHash = d.string()
	a.ScopeID = d.string()
	a.Model = d.string()
	a.CreatedAt = d.time()
	a.ExpiresAt = d.time()
	if kind&anchorHasUpstreamID != 0 {
		if a.UpstreamID = d.string(); d.err == nil && a.UpstreamID == "" {
			d.err = fmt.Errorf("empty upstream id: %w", ErrCorrupt) // written only when set
		}
	}
	if kind&anchorHasEarlier != 0 {
		a.Earlier = d.upstreamCopies()
	}
	return a, d.finish()
}

// upstreamCopies reads Anchor.Earlier: written only when there is one.
func (d *decoder) upstreamCopies() []UpstreamCopy {
	n := d.uvarint()
	if d.err == nil && (n == 0 || n > MaxEarlierCopies) {
		d.err = fmt.Errorf("%d earlier copies: %w", n, ErrCorrupt)
	}
	if d.err != nil {
		return nil
	}
	out := make([]UpstreamCopy, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		c := UpstreamCopy{Upstream: d.string(), ID: d.string()}
		if d.err == nil && c.Upstream == "" {
			d.err = fmt.Errorf("earlier copy without an upstream: %w", ErrCorrupt)
		}
		out = append(out, c)
	}
	return out
}

// Scope value: version, latest_response_id, owner, updated_at, expires_at.
func encodeScope(r *ScopeRecord) []byte {
	e := encoder{buf: make([]byte, 0, 8+len(r.LatestResponseID)+len(r.Owner)+20)}
	e.byte(valueVersion)
	e.string(r.LatestResponseID)
	e.string(r.Owner)
	e.time(r.UpdatedAt)
	e.time(r.ExpiresAt)
	return e.buf
}

func decodeScope(v []byte) (ScopeRecord, error) {
	d := newDecoder(v)
	var r ScopeRecord
	r.LatestResponseID = d.string()
	r.Owner = d.string()
	r.UpdatedAt = d.time()
	r.ExpiresAt = d.time()
	return r, d.finish()
}

// Turn value: version, parent_id, created_at, expires_at, input items,
// output items; an item list is a uvarint count then length-prefixed items.
func encodeTurn(dst []byte, t *Turn) []byte {
	e := encoder{buf: dst}
	e.byte(valueVersion)
	e.string(t.ParentID)
	e.time(t.CreatedAt)
	e.time(t.ExpiresAt)
	e.items(t.Input)
	e.items(t.Output)
	return e.buf
}

// turnValueLen is the exact length encodeTurn produces.
func turnValueLen(t *Turn) int {
	n := 1 + lenPrefixed(len(t.ParentID)) +
		varintLen(timeNanos(t.CreatedAt)) + varintLen(timeNanos(t.ExpiresAt))
	for _, items := range [][]json.RawMessage{t.Input, t.Output} {
		n += uvarintLen(uint64(len(items)))
		for _, it := range items {
			n += lenPrefixed(len(it))
		}
	}
	return n
}

// decodeTurn decodes a turn; its items alias v.
func decodeTurn(responseID string, v []byte) (Turn, error) {
	d := newDecoder(v)
	t := Turn{ResponseID: responseID}
	t.ParentID = d.string()
	t.CreatedAt = d.time()
	t.ExpiresAt = d.time()
	t.Input = d.items()
	t.Output = d.items()
	return t, d.finish()
}

// Input-session value: version, client_key_hash, endpoint, template,
// start_policy, state, next_seq, received_bytes, created_at, last_activity,
// expires_at.
func encodeSession(s *InputSession) []byte {
	e := encoder{buf: make([]byte, 0, 64+len(s.ClientKeyHash)+len(s.Endpoint)+len(s.Template)+len(s.StartPolicy)+len(s.State))}
	e.byte(valueVersion)
	e.string(s.ClientKeyHash)
	e.string(s.Endpoint)
	e.bytes(s.Template)
	e.string(s.StartPolicy)
	e.string(s.State)
	e.uvarint(s.NextSeq)
	e.varint(s.ReceivedBytes)
	e.time(s.CreatedAt)
	e.time(s.LastActivity)
	e.time(s.ExpiresAt)
	return e.buf
}

func decodeSession(id string, v []byte) (InputSession, error) {
	d := newDecoder(v)
	s := InputSession{ID: id}
	s.ClientKeyHash = d.string()
	s.Endpoint = d.string()
	s.Template = d.bytes()
	s.StartPolicy = d.string()
	s.State = d.string()
	s.NextSeq = d.uvarint()
	s.ReceivedBytes = d.varint()
	s.CreatedAt = d.time()
	s.LastActivity = d.time()
	s.ExpiresAt = d.time()
	return s, d.finish()
}

// Chunk value: version, modality, payload. The sequence id is in the key.
func encodeChunk(c *Chunk) []byte {
	e := encoder{buf: make([]byte, 0, 12+len(c.Modality)+len(c.Payload))}
	e.byte(valueVersion)
	e.string(c.Modality)
	e.bytes(c.Payload)
	return e.buf
}

func decodeChunk(seq uint64, v []byte) (Chunk, error) {
	d := newDecoder(v)
	c := Chunk{Seq: seq}
	c.Modality = d.string()
	c.Payload = d.bytes()
	return c, d.finish()
}

// Stream-log value: version, flags(1: streamLog* bits), owner, status,
// response, input, created_at, expires_at, then issued_below when its flag
// is set (a record that carries none has neither). The response id is in
// the key.
func encodeStreamLog(l *StreamLog) []byte {
	e := encoder{buf: make([]byte, 0, 32+len(l.Owner)+len(l.Status)+len(l.Response)+len(l.Input))}
	e.byte(valueVersion)
	var flags byte
	if l.Background {
		flags |= streamLogBackground
	}
	if l.Ended {
		flags |= streamLogEnded
	}
	if l.CancelRequested {
		flags |= streamLogCancelRequested
	}
	if l.IssuedBelow > 0 {
		flags |= streamLogIssuedBelow
	}
	e.byte(flags)
	e.string(l.Owner)
	e.string(l.Status)
	e.bytes(l.Response)
	e.bytes(l.Input)
	e.time(l.CreatedAt)
	e.time(l.ExpiresAt)
	if l.IssuedBelow > 0 {
		e.varint(l.IssuedBelow)
	}
	return e.buf
}

// Flags of a stream-log value.
const (
	streamLogBackground      = 1 << 0
	streamLogEnded           = 1 << 1
	streamLogCancelRequested = 1 << 2
	streamLogIssuedBelow     = 1 << 3
	streamLogFlags           = streamLogBackground | streamLogEnded | streamLogCancelRequested | streamLogIssuedBelow
)

func decodeStreamLog(responseID string, v []byte) (StreamLog, error) {
	d := newDecoder(v)
	l := StreamLog{ResponseID: responseID}
	flags := d.byte()
	if d.err == nil && flags&^streamLogFlags != 0 {
		d.err = fmt.Errorf("stream log flags %#x: %w", flags, ErrCorrupt)
	}
	l.Background = flags&streamLogBackground != 0
	l.Ended = flags&streamLogEnded != 0
	l.CancelRequested = flags&streamLogCancelRequested != 0
	l.Owner = d.string()
	l.Status = d.string()
	l.Response = d.bytes()
	l.Input = d.bytes()
	l.CreatedAt = d.time()
	l.ExpiresAt = d.time()
	if flags&streamLogIssuedBelow != 0 {
		l.IssuedBelow = d.varint()
	}
	return l, d.finish()
}

// Stream-event value: version, name, data. The sequence number is in the
// key (Pebble) or in front of the value (Redis).
func encodeStreamEvent(ev *StreamEvent) []byte {
	e := encoder{buf: make([]byte, 0, 12+len(ev.Name)+len(ev.Data))}
	e.byte(valueVersion)
	e.string(ev.Name)
	e.bytes(ev.Data)
	return e.buf
}

func decodeStreamEvent(seq int64, v []byte) (StreamEvent, error) {
	d := newDecoder(v)
	ev := StreamEvent{Seq: seq}
	ev.Name = d.string()
	ev.Data = d.bytes()
	return ev, d.finish()
}

// decodeExpiry returns the ExpiresAt of a record of the given family; the
// sweeper uses it to check an index entry against the record.
func decodeExpiry(primary, v []byte) (time.Time, error) {
	switch primary[0] {
	case famAnchor:
		a, err := decodeAnchor("", v)
		return a.ExpiresAt, err
	case famScope:
		r, err := decodeScope(v)
		return r.ExpiresAt, err
	case famTurn:
		t, err := decodeTurn("", v)
		return t.ExpiresAt, err
	case famSession:
		s, err := decodeSession("", v)
		return s.ExpiresAt, err
	case famStreamLog:
		l, err := decodeStreamLog("", v)
		return l.ExpiresAt, err
	default:
		return time.Time{}, fmt.Errorf("family %q has no expiry: %w", primary[0], ErrCorrupt)
	}
}

func uvarintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}

func lenPrefixed(n int) int { return uvarintLen(uint64(n)) + n }

// expired reports whether a record with the given expiry is dead at now.
// The zero ExpiresAt never expires (records written by this package always
// have one).
func expired(expiresAt, now time.Time) bool {
	return !expiresAt.IsZero() && !now.Before(expiresAt)
}
