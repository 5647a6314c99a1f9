package store

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
)

// oldAnchorValue is an anchor value as written before Anchor.Earlier
// existed, spelled out byte by byte rather than through encodeAnchor, so
// that it stays the old layout whatever the encoder becomes: version 1, the
// scope kind (high bit: an upstream id follows), upstream, client key hash,
// scope id, model, created_at, expires_at, then the upstream id if any.
func oldAnchorValue(a Anchor) []byte {
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	kind := byte(a.ScopeKind)
	if a.UpstreamID != "" {
		kind |= 0x80
	}
	v := []byte{1, kind}
	v = str(v, a.Upstream)
	v = str(v, a.ClientKeyHash)
	v = str(v, a.ScopeID)
	v = str(v, a.Model)
	v = binary.AppendVarint(v, a.CreatedAt.UnixNano())
	v = binary.AppendVarint(v, a.ExpiresAt.UnixNano())
	if a.UpstreamID != "" {
		v = str(v, a.UpstreamID)
	}
	return v
}

// TestOldFormatAnchorLoads: anchors a store holds from before the earlier
// copies of a continued response were kept (records.go encodeAnchor) load
// as they did, with no earlier copy, on either backend; the store is
// shared across versions during a rolling upgrade and outlives them.
func TestOldFormatAnchorLoads(t *testing.T) {
	old := []Anchor{
		{ResponseID: "resp_old", Upstream: "primary", ClientKeyHash: "ckh", ScopeKind: ScopeSession, ScopeID: "s-1",
			Model: "gpt-5", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		{ResponseID: "resp_old_continued", Upstream: "backup", ClientKeyHash: "ckh", ScopeKind: ScopeTurnState, ScopeID: "ts-1",
			Model: "gpt-5", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), UpstreamID: "resp_backup_1"},
	}
	check := func(t *testing.T, s Store) {
		t.Helper()
		for _, want := range old {
			got, err := s.GetAnchor(context.Background(), want.ResponseID)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("GetAnchor(%q) = %+v, %v; want %+v", want.ResponseID, got, err, want)
			}
		}
	}
	t.Run("pebble", func(t *testing.T) {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range old {
			if err := db.Set(anchorKey(a.ResponseID), oldAnchorValue(a), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		s, _ := openTest(t, func(o *Options) { o.Dir = dir })
		check(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		s, _ := openRedisTest(t)
		for _, a := range old {
			if err := s.c.Set(context.Background(), s.anchorKey(a.ResponseID), oldAnchorValue(a), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		check(t, s)
	})
}

// TestAnchorEarlierCopies: a continued response's anchor keeps the copies
// the upstreams it was cut on hold, in order, on either backend, and
// ReplaceAnchor writes them over the first owner's anchor.
func TestAnchorEarlierCopies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		first := Anchor{ResponseID: "resp_a", Upstream: "a", ClientKeyHash: "ckh", ScopeKind: ScopeSession, ScopeID: "s"}
		if err := s.PutAnchor(ctx, first); err != nil {
			t.Fatal(err)
		}
		continued := first
		continued.Upstream, continued.UpstreamID = "c", "resp_c_1"
		continued.Earlier = []UpstreamCopy{{Upstream: "a"}, {Upstream: "b", ID: "resp_b_1"}}
		if err := s.ReplaceAnchor(ctx, continued); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetAnchor(ctx, "resp_a")
		if err != nil || got.Upstream != "c" || got.UpstreamID != "resp_c_1" || !reflect.DeepEqual(got.Earlier, continued.Earlier) {
			t.Fatalf("GetAnchor = %+v, %v; want the earlier copies %+v", got, err, continued.Earlier)
		}
	})
}

// TestAnchorEarlierCopiesRefused: an earlier copy without an upstream, with
// an id over MaxIDLen, or more of them than MaxEarlierCopies is refused as
// invalid; a value announcing copies it does not hold is corrupt.
func TestAnchorEarlierCopiesRefused(t *testing.T) {
	s, _ := openTest(t)
	long := make([]byte, MaxIDLen+1)
	for i := range long {
		long[i] = 'x'
	}
	for name, earlier := range map[string][]UpstreamCopy{
		"no upstream": {{ID: "resp_x"}},
		"id too long": {{Upstream: "a", ID: string(long)}},
		"too many":    make([]UpstreamCopy, MaxEarlierCopies+1),
	} {
		a := anchor("r", "up", "sess")
		a.Earlier = earlier
		if err := s.PutAnchor(context.Background(), a); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: PutAnchor = %v; want ErrInvalid", name, err)
		}
	}
	a := anchor("r", "up", "sess")
	a.CreatedAt, a.ExpiresAt = t0, t0.Add(time.Hour)
	for name, v := range map[string][]byte{
		"announced, absent": append(encodeAnchor(&a)[:0:0], encodeAnchor(&a)...),
		"count zero":        append(encodeAnchor(&a), 0),
		"empty upstream":    append(encodeAnchor(&a), 1, 0, 0),
	} {
		v[1] |= anchorHasEarlier
		if got, err := decodeAnchor("r", v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decodeAnchor = %+v, %v; want ErrCorrupt", name, got, err)
		}
	}
}
