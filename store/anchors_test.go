package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAnchorRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		for _, a := range []Anchor{
			{
				ResponseID: "resp_1", Upstream: "primary", ClientKeyHash: "ckh", ScopeKind: ScopeTurnState,
				ScopeID: "ts-1", Model: "gpt-5", CreatedAt: t0.Add(-time.Minute), ExpiresAt: t0.Add(time.Hour),
			},
			{ // defaults: CreatedAt = clock, ExpiresAt = CreatedAt + AnchorTTL
				ResponseID: "resp_2", Upstream: "secondary", ScopeKind: ScopeClientKey, ScopeID: "ckh",
			},
			{ // a continued response: the id its owner knows it by
				ResponseID: "resp_3", Upstream: "backup", ScopeKind: ScopeSession, ScopeID: "s-3", UpstreamID: "resp_backup_7",
			},
			{ // ids with separator-like and non-UTF-8 bytes
				ResponseID: "resp\x00/\xff", Upstream: "u", ScopeKind: ScopeSession, ScopeID: "\x00\xff",
			},
		} {
			if err := s.PutAnchor(ctx, a); err != nil {
				t.Fatalf("PutAnchor(%q): %v", a.ResponseID, err)
			}
			got, err := s.GetAnchor(ctx, a.ResponseID)
			if err != nil {
				t.Fatalf("GetAnchor(%q): %v", a.ResponseID, err)
			}
			want := a
			if want.CreatedAt.IsZero() {
				want.CreatedAt = t0
				want.ExpiresAt = t0.Add(DefaultAnchorTTL)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("GetAnchor(%q) = %+v, want %+v", a.ResponseID, got, want)
			}
		}
	})
}

// anchorStep is one step of an anchor scenario.
type anchorStep struct {
	op      string // put, get, delete, scope, advance
	a       Anchor // put
	id      string // get, delete: response id; scope: scope id
	kind    ScopeKind
	d       time.Duration // advance
	want    string        // get: upstream; scope: latest response id
	owner   string        // scope: owner
	wantErr error
}

func TestAnchorsAndScopes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		tests := []struct {
			name  string
			steps []anchorStep
		}{
			{"unknown anchor", []anchorStep{
				{op: "get", id: "nope", wantErr: ErrNotFound},
				{op: "scope", kind: ScopeSession, id: "nope", wantErr: ErrNotFound},
			}},
			{"put then get", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "get", id: "r1", want: "up1"},
				{op: "scope", kind: ScopeSession, id: "s1", want: "r1", owner: "up1"},
			}},
			{"scope points at the latest", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "put", a: anchor("r2", "up2", "s1")},
				{op: "scope", kind: ScopeSession, id: "s1", want: "r2", owner: "up2"},
				{op: "get", id: "r1", want: "up1"},
				{op: "get", id: "r2", want: "up2"},
			}},
			{"put again replaces", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "put", a: anchor("r1", "up2", "s1")},
				{op: "get", id: "r1", want: "up2"},
			}},
			{"kinds are separate scopes", []anchorStep{
				{op: "put", a: Anchor{ResponseID: "r1", Upstream: "up1", ScopeKind: ScopeTurnState, ScopeID: "x"}},
				{op: "put", a: Anchor{ResponseID: "r2", Upstream: "up2", ScopeKind: ScopeSession, ScopeID: "x"}},
				{op: "put", a: Anchor{ResponseID: "r3", Upstream: "up3", ScopeKind: ScopeClientKey, ScopeID: "x"}},
				{op: "scope", kind: ScopeTurnState, id: "x", want: "r1", owner: "up1"},
				{op: "scope", kind: ScopeSession, id: "x", want: "r2", owner: "up2"},
				{op: "scope", kind: ScopeClientKey, id: "x", want: "r3", owner: "up3"},
			}},
			{"delete the latest clears the scope", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "put", a: anchor("r2", "up1", "s1")},
				{op: "delete", id: "r2"},
				{op: "get", id: "r2", wantErr: ErrNotFound},
				{op: "get", id: "r1", want: "up1"},
				{op: "scope", kind: ScopeSession, id: "s1", wantErr: ErrNotFound},
			}},
			{"delete an older anchor keeps the scope", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "put", a: anchor("r2", "up2", "s1")},
				{op: "delete", id: "r1"},
				{op: "get", id: "r1", wantErr: ErrNotFound},
				{op: "scope", kind: ScopeSession, id: "s1", want: "r2", owner: "up2"},
			}},
			{"delete leaves other scopes alone", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "put", a: anchor("r2", "up1", "s2")},
				{op: "delete", id: "r1"},
				{op: "scope", kind: ScopeSession, id: "s1", wantErr: ErrNotFound},
				{op: "scope", kind: ScopeSession, id: "s2", want: "r2", owner: "up1"},
			}},
			{"delete absent is not an error", []anchorStep{
				{op: "delete", id: "nope"},
				{op: "delete", id: "nope"},
			}},
			{"anchor and scope expire", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "advance", d: DefaultAnchorTTL - time.Nanosecond},
				{op: "get", id: "r1", want: "up1"},
				{op: "scope", kind: ScopeSession, id: "s1", want: "r1", owner: "up1"},
				{op: "advance", d: time.Nanosecond},
				{op: "get", id: "r1", wantErr: ErrNotFound},
				{op: "scope", kind: ScopeSession, id: "s1", wantErr: ErrNotFound},
			}},
			{"explicit ExpiresAt wins", []anchorStep{
				{op: "put", a: func() Anchor { a := anchor("r1", "up1", "s1"); a.ExpiresAt = t0.Add(time.Minute); return a }()},
				{op: "advance", d: time.Minute},
				{op: "get", id: "r1", wantErr: ErrNotFound},
				{op: "scope", kind: ScopeSession, id: "s1", want: "r1", owner: "up1"},
			}},
			{"a newer anchor refreshes the scope", []anchorStep{
				{op: "put", a: anchor("r1", "up1", "s1")},
				{op: "advance", d: DefaultScopeTTL - time.Hour},
				{op: "put", a: anchor("r2", "up1", "s1")},
				{op: "advance", d: 2 * time.Hour},
				{op: "get", id: "r1", wantErr: ErrNotFound},
				{op: "scope", kind: ScopeSession, id: "s1", want: "r2", owner: "up1"},
			}},
			{"invalid arguments", []anchorStep{
				{op: "put", a: anchor("", "up1", "s1"), wantErr: ErrInvalid},
				{op: "put", a: anchor("r1", "", "s1"), wantErr: ErrInvalid},
				{op: "put", a: anchor("r1", "up1", ""), wantErr: ErrInvalid},
				{op: "put", a: Anchor{ResponseID: "r1", Upstream: "up1", ScopeID: "s1"}, wantErr: ErrInvalid},
				{op: "put", a: anchor(strings.Repeat("r", MaxIDLen+1), "up1", "s1"), wantErr: ErrInvalid},
				{op: "get", id: "", wantErr: ErrInvalid},
				{op: "delete", id: "", wantErr: ErrInvalid},
				{op: "scope", kind: 0, id: "s1", wantErr: ErrInvalid},
				{op: "scope", kind: ScopeSession, id: "", wantErr: ErrInvalid},
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, clk := b.open(t)
				ctx := context.Background()
				for i, st := range tt.steps {
					what := func(op string) string { return fmt.Sprintf("step %d (%s)", i, op) }
					switch st.op {
					case "put":
						wantErr(t, what("put"), s.PutAnchor(ctx, st.a), st.wantErr)
					case "get":
						a, err := s.GetAnchor(ctx, st.id)
						wantErr(t, what("get"), err, st.wantErr)
						if st.wantErr == nil && a.Upstream != st.want {
							t.Fatalf("%s: upstream %q, want %q", what("get"), a.Upstream, st.want)
						}
					case "delete":
						wantErr(t, what("delete"), s.DeleteAnchor(ctx, st.id), st.wantErr)
					case "scope":
						r, err := s.GetScope(ctx, st.kind, st.id)
						wantErr(t, what("scope"), err, st.wantErr)
						if st.wantErr == nil && (r.LatestResponseID != st.want || r.Owner != st.owner) {
							t.Fatalf("%s: got %+v, want latest %q owner %q", what("scope"), r, st.want, st.owner)
						}
					case "advance":
						clk.Advance(st.d)
					default:
						t.Fatalf("unknown op %q", st.op)
					}
				}
			})
		}
	})
}

func TestScopeRecordTimes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, clk := b.open(t, func(o *Options) { o.ScopeTTL = time.Hour })
		ctx := context.Background()
		clk.Advance(time.Minute)
		// The scope is stamped with the store's clock, not the anchor's
		// CreatedAt.
		a := anchor("r1", "up1", "s1")
		a.CreatedAt = t0.Add(-24 * time.Hour)
		a.ExpiresAt = t0.Add(24 * time.Hour)
		if err := s.PutAnchor(ctx, a); err != nil {
			t.Fatal(err)
		}
		r, err := s.GetScope(ctx, ScopeSession, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(time.Minute); !r.UpdatedAt.Equal(want) || !r.ExpiresAt.Equal(want.Add(time.Hour)) {
			t.Errorf("scope times %v / %v, want %v / +1h", r.UpdatedAt, r.ExpiresAt, want)
		}
	})
}

func TestScopeKindStrings(t *testing.T) {
	for _, k := range []ScopeKind{ScopeTurnState, ScopeSession, ScopeClientKey} {
		got, err := ParseScopeKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseScopeKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if _, err := ParseScopeKind("tenant"); err == nil {
		t.Error("ParseScopeKind(tenant) succeeded")
	}
	if ScopeKind(0).Valid() || ScopeKind(4).Valid() {
		t.Error("invalid kinds reported valid")
	}
}

// TestReplaceAnchorNeverRecreates: ReplaceAnchor writes over a live anchor
// only; after DeleteAnchor, or with none ever written, or once expired, it
// writes nothing and says ErrNotFound, so a retried write cannot bring a
// deleted response back.
func TestReplaceAnchorNeverRecreates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		first := Anchor{ResponseID: "resp_c", Upstream: "first", ScopeKind: ScopeSession, ScopeID: "s"}
		second := Anchor{ResponseID: "resp_c", Upstream: "second", ScopeKind: ScopeSession, ScopeID: "s", UpstreamID: "resp_second_1"}
		for _, tc := range []struct {
			name      string
			before    func(s contractStore, clk *fakeClock)
			wantOwner string // "" for no anchor and ErrNotFound
		}{
			{"over a live anchor", func(s contractStore, _ *fakeClock) { mustPutAnchor(t, s, first) }, "second"},
			{"after a delete", func(s contractStore, _ *fakeClock) {
				mustPutAnchor(t, s, first)
				if err := s.DeleteAnchor(ctx, first.ResponseID); err != nil {
					t.Fatal(err)
				}
			}, ""},
			{"never written", func(contractStore, *fakeClock) {}, ""},
			{"expired", func(s contractStore, clk *fakeClock) {
				a := first
				a.ExpiresAt = clk.Now().Add(time.Second)
				mustPutAnchor(t, s, a)
				clk.Advance(2 * time.Second)
			}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.name == "expired" && b.name == "redis" {
					// Redis expires the key itself (PEXPIRE, in real time,
					// not the test's clock): an expired anchor is absent.
					t.Skip("expiry is Redis's own")
				}
				s, clk := b.open(t)
				tc.before(s, clk)
				err := s.ReplaceAnchor(ctx, second)
				got, gerr := s.GetAnchor(ctx, second.ResponseID)
				if tc.wantOwner == "" {
					if !errors.Is(err, ErrNotFound) || !errors.Is(gerr, ErrNotFound) {
						t.Fatalf("ReplaceAnchor: %v; then GetAnchor: %+v %v; want ErrNotFound and no anchor", err, got, gerr)
					}
					return
				}
				if err != nil || gerr != nil || got.Upstream != tc.wantOwner || got.UpstreamID != second.UpstreamID {
					t.Fatalf("ReplaceAnchor: %v; then GetAnchor: %+v %v", err, got, gerr)
				}
			})
		}
	})
}

func mustPutAnchor(t *testing.T, s Store, a Anchor) {
	t.Helper()
	if err := s.PutAnchor(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}
