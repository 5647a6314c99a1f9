package store

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestUpdateKeyOnlyUpdatesTheKeyRead: UpdateKey replaces a key only while
// it is the key the caller read (same name, same secret hash); a key
// deleted meanwhile, or deleted and created again with another secret, is
// ErrNotFound and stays as the delete or the create left it. This is what
// lets PATCH /admin/keys/{name} answer 404 instead of bringing a deleted
// key back.
func TestUpdateKeyOnlyUpdatesTheKeyRead(t *testing.T) {
	oldSum, newSum := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	rec := func(sum string, rpm int64) KeyRecord {
		return KeyRecord{Name: "team", SHA256: sum, Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: rpm}}
	}
	for _, tc := range []struct {
		name    string
		before  func(ctx context.Context, s accountStore) error // what happens between the read and the update
		update  KeyRecord
		want    error
		wantKey *KeyRecord // the stored key afterwards; nil: none
	}{
		{
			name:    "the key as read",
			before:  func(context.Context, accountStore) error { return nil },
			update:  rec(oldSum, 9),
			wantKey: &KeyRecord{Name: "team", SHA256: oldSum, Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: 9}},
		},
		{
			name:   "deleted meanwhile",
			before: func(ctx context.Context, s accountStore) error { return s.DeleteKey(ctx, "team") },
			update: rec(oldSum, 9),
			want:   ErrNotFound,
		},
		{
			name: "deleted and created again with another secret",
			before: func(ctx context.Context, s accountStore) error {
				if err := s.DeleteKey(ctx, "team"); err != nil {
					return err
				}
				return s.CreateKey(ctx, rec(newSum, 1))
			},
			update:  rec(oldSum, 9),
			want:    ErrNotFound,
			wantKey: &KeyRecord{Name: "team", SHA256: newSum, Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: 1}},
		},
		{
			name:    "never created",
			before:  func(context.Context, accountStore) error { return nil },
			update:  KeyRecord{Name: "other", SHA256: oldSum},
			want:    ErrNotFound,
			wantKey: &KeyRecord{Name: "team", SHA256: oldSum, Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: 5}},
		},
		{
			name:    "a hash that is not one",
			before:  func(context.Context, accountStore) error { return nil },
			update:  KeyRecord{Name: "team", SHA256: "short"},
			want:    ErrInvalid,
			wantKey: &KeyRecord{Name: "team", SHA256: oldSum, Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: 5}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				ctx := context.Background()
				s := openAccountStore(t, b)
				if err := s.CreateKey(ctx, rec(oldSum, 5)); err != nil {
					t.Fatal(err)
				}
				if err := tc.before(ctx, s); err != nil {
					t.Fatal(err)
				}
				wantErr(t, "UpdateKey", s.UpdateKey(ctx, tc.update), tc.want)
				if tc.update.Name != "team" {
					if _, err := s.GetKey(ctx, tc.update.Name); !errors.Is(err, ErrNotFound) {
						t.Fatalf("UpdateKey created %q: GetKey = %v", tc.update.Name, err)
					}
				}
				got, err := s.GetKey(ctx, "team")
				switch {
				case tc.wantKey == nil && !errors.Is(err, ErrNotFound):
					t.Fatalf("GetKey after the update = %+v, %v; want ErrNotFound (the update brought the key back)", got, err)
				case tc.wantKey != nil && (err != nil || !reflect.DeepEqual(got, *tc.wantKey)):
					t.Fatalf("GetKey after the update = %+v, %v; want %+v", got, err, *tc.wantKey)
				}
			})
		})
	}
}

// TestUpdateKeyRacingDelete: updates racing a delete never leave the key
// behind, on either backend (a fixed number of rounds; no timing).
func TestUpdateKeyRacingDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := openAccountStore(t, b)
		k := KeyRecord{Name: "race", SHA256: strings.Repeat("ef", 32)}
		for round := range 50 {
			if err := s.CreateKey(ctx, k); err != nil {
				t.Fatalf("round %d: CreateKey: %v", round, err)
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					u := k
					u.Limits.RPM = int64(i + 1)
					if err := s.UpdateKey(ctx, u); err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("round %d: UpdateKey: %v", round, err)
					}
				}()
			}
			close(start)
			if err := s.DeleteKey(ctx, k.Name); err != nil {
				t.Fatalf("round %d: DeleteKey: %v", round, err)
			}
			wg.Wait()
			if got, err := s.GetKey(ctx, k.Name); !errors.Is(err, ErrNotFound) {
				t.Fatalf("round %d: after the delete, GetKey = %+v, %v; want ErrNotFound", round, got, err)
			}
		}
	})
}

func openAccountStore(t *testing.T, b backend) accountStore {
	t.Helper()
	cs, _ := b.open(t)
	s, ok := cs.(accountStore)
	if !ok {
		t.Fatalf("%T is not a KeyStore and UsageStore", cs)
	}
	return s
}
