package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestPrefixSuccessor(t *testing.T) {
	tests := []struct{ in, want []byte }{
		{[]byte("a"), []byte("b")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xfe"), []byte("a\xff")},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{}, nil},
	}
	for _, tt := range tests {
		if got := prefixSuccessor(tt.in); !bytes.Equal(got, tt.want) {
			t.Errorf("prefixSuccessor(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestExpiryKey(t *testing.T) {
	primary := anchorKey("r1")
	tests := []struct {
		name string
		at   time.Time
		want time.Time // the time encoded in the key
	}{
		{"on the minute", t0, t0},
		{"rounded up", t0.Add(time.Nanosecond), t0.Add(time.Minute)},
		{"rounded up from the last nanosecond", t0.Add(time.Minute - time.Nanosecond), t0.Add(time.Minute)},
		{"before 1970 clamps to zero", time.Unix(-5, 0), time.Unix(0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := expiryKey(tt.at, primary)
			want := binary.BigEndian.AppendUint64([]byte{famExpiry}, uint64(tt.want.UnixNano()))
			want = append(want, primary...)
			if !bytes.Equal(k, want) {
				t.Errorf("expiryKey = %x, want %x", k, want)
			}
			if p, ok := expiryPrimary(k); !ok || !bytes.Equal(p, primary) {
				t.Errorf("expiryPrimary = %q, %v", p, ok)
			}
			// Due exactly at the rounded time, not a nanosecond before.
			if bytes.Compare(k, expiryUpperBound(tt.want)) >= 0 {
				t.Error("entry not due at its rounded time")
			}
			if tt.want.UnixNano() > 0 && bytes.Compare(k, expiryUpperBound(tt.want.Add(-time.Nanosecond))) < 0 {
				t.Error("entry due before its rounded time")
			}
		})
	}
	// Index order is time order, whatever the primary keys.
	a := expiryKey(t0, anchorKey("zzz"))
	b := expiryKey(t0.Add(time.Hour), anchorKey("a"))
	if bytes.Compare(a, b) >= 0 {
		t.Error("expiry keys do not sort by time")
	}
}

func TestChunkKeys(t *testing.T) {
	// Sequence order is key order, and no session's chunk prefix is a
	// prefix of another session's chunk keys.
	seqs := []uint64{0, 1, 255, 256, 1 << 32, 1<<64 - 1}
	for i := 1; i < len(seqs); i++ {
		if bytes.Compare(chunkKey("s", seqs[i-1]), chunkKey("s", seqs[i])) >= 0 {
			t.Errorf("chunk %d does not sort before %d", seqs[i-1], seqs[i])
		}
	}
	for _, pair := range [][2]string{{"s", "s1"}, {"s", "s\x00"}, {"ab", "a"}} {
		p := chunkPrefix(pair[0])
		for _, seq := range seqs {
			if k := chunkKey(pair[1], seq); bytes.HasPrefix(k, p) {
				t.Errorf("chunk key of %q/%d has the prefix of %q", pair[1], seq, pair[0])
			}
		}
	}
	p := chunkPrefix("s")
	if seq, ok := chunkSeq(chunkKey("s", 42), len(p)); !ok || seq != 42 {
		t.Errorf("chunkSeq = %d, %v", seq, ok)
	}
}

func TestScopeKey(t *testing.T) {
	if bytes.Equal(scopeKey(ScopeSession, "x"), scopeKey(ScopeTurnState, "x")) {
		t.Error("scope kinds share a key")
	}
	if k := scopeKey(ScopeSession, "a-very-long-session-id-that-should-not-appear"); len(k) != 34 ||
		bytes.Contains(k, []byte("session")) {
		t.Errorf("scope key %q", k)
	}
}

func TestValueRoundTrip(t *testing.T) {
	a := Anchor{ResponseID: "r", Upstream: "u", ClientKeyHash: "c", ScopeKind: ScopeSession, ScopeID: "s",
		Model: "m", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	aliased := a
	aliased.UpstreamID = "r2"
	sc := ScopeRecord{LatestResponseID: "r", Owner: "u", UpdatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	tu := Turn{ResponseID: "r", ParentID: "p", Input: []json.RawMessage{[]byte(`{"a":1}`), {}}, Output: []json.RawMessage{},
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	se := InputSession{ID: "i", ClientKeyHash: "c", Endpoint: "/e", Template: []byte("{}"), StartPolicy: "p", State: "s",
		NextSeq: 7, ReceivedBytes: -1, CreatedAt: t0, LastActivity: t0, ExpiresAt: t0.Add(time.Hour)}
	ch := Chunk{Seq: 3, Modality: "text", Payload: []byte("hi")}

	tests := []struct {
		name   string
		value  []byte
		decode func([]byte) (any, error)
		want   any
	}{
		{"anchor", encodeAnchor(&a), func(v []byte) (any, error) { return decodeAnchor("r", v) }, a},
		{"aliased anchor", encodeAnchor(&aliased), func(v []byte) (any, error) { return decodeAnchor("r", v) }, aliased},
		{"scope", encodeScope(&sc), func(v []byte) (any, error) { return decodeScope(v) }, sc},
		{"turn", encodeTurn(nil, &tu), func(v []byte) (any, error) { return decodeTurn("r", v) }, tu},
		{"session", encodeSession(&se), func(v []byte) (any, error) { return decodeSession("i", v) }, se},
		{"chunk", encodeChunk(&ch), func(v []byte) (any, error) { return decodeChunk(3, v) }, ch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.decode(tt.value)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("round trip = %+v, %v; want %+v", got, err, tt.want)
			}
			// Every truncation and a trailing byte are detected.
			for n := range len(tt.value) {
				if _, err := tt.decode(tt.value[:n]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decoding %d of %d bytes: %v, want ErrCorrupt", n, len(tt.value), err)
				}
			}
			if _, err := tt.decode(append(tt.value[:len(tt.value):len(tt.value)], 0)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("trailing byte: %v", err)
			}
			bad := append([]byte{valueVersion + 1}, tt.value[1:]...)
			if _, err := tt.decode(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unknown version: %v", err)
			}
		})
	}
	if n := turnValueLen(&tu); n != len(encodeTurn(nil, &tu)) {
		t.Errorf("turnValueLen = %d, encoded %d", n, len(encodeTurn(nil, &tu)))
	}
}
