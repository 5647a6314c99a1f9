package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestKeysAndUsageRecords(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	k := KeyRecord{Name: "ci", SHA256: strings.Repeat("ab", 32), Models: []string{"gpt-5*"}, Limits: KeyLimits{RPM: 5}}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, k); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	k.Limits.RPM = 9
	if err := s.UpdateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetKey(ctx, "ci"); err != nil || got.Limits.RPM != 9 || got.Models[0] != "gpt-5*" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if list, err := s.ListKeys(ctx); err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := s.DeleteKey(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetKey(ctx, "ci"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.UpdateKey(ctx, KeyRecord{Name: "x", SHA256: "short"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad hash: %v", err)
	}

	for _, u := range []UsageRecord{
		{Day: "2026-03-01", Key: "a", Target: "up", Model: "m", Requests: 1, InputTokens: 10, OutputTokens: 5},
		{Day: "2026-03-01", Key: "a", Target: "up", Model: "m", Requests: 1, InputTokens: 1, OutputTokens: 2, CachedTokens: 1},
		{Day: "2026-03-02", Key: "a", Target: "up", Model: "m", Requests: 1, InputTokens: 100},
		{Day: "2026-03-02", Key: "b", Target: "up", Model: "m", Requests: 1, InputTokens: 1000},
	} {
		if err := s.AddUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Usage(ctx, "a", "2026-03-01", "2026-03-01")
	if err != nil || len(got) != 1 || got[0].Requests != 2 || got[0].InputTokens != 11 || got[0].OutputTokens != 7 || got[0].CachedTokens != 1 {
		t.Fatalf("day 1 of a: %+v %v", got, err)
	}
	if got, _ := s.Usage(ctx, "a", "2026-03-01", "2026-03-02"); len(got) != 2 {
		t.Fatalf("two days of a: %+v", got)
	}
	if got, _ := s.Usage(ctx, "", "2026-03-02", "2026-03-02"); len(got) != 2 {
		t.Fatalf("every key on day 2: %+v", got)
	}
	if _, err := s.Usage(ctx, "", "bad", "2026-03-02"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad day: %v", err)
	}
}

// TestUsageTotalsKeepTheKeyID: totals of one name under different key ids
// (a key deleted and created again under its name) are kept apart, each
// with its id, beside the name's totals without one (a config key's, or
// those an older version wrote, whose stored form has no id).
func TestUsageTotalsKeepTheKeyID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		us, ok := s.(UsageStore)
		if !ok {
			t.Fatalf("%T is no UsageStore", s)
		}
		ctx := context.Background()
		day := "2026-03-01"
		for _, u := range []UsageRecord{
			{Day: day, Key: "k8", Target: "up", Model: "m", Requests: 1, InputTokens: 10},
			{Day: day, Key: "k8", KeyID: "one", Target: "up", Model: "m", Requests: 1, InputTokens: 20},
			{Day: day, Key: "k8", KeyID: "two", Target: "up", Model: "m", Requests: 1, InputTokens: 30},
			{Day: day, Key: "k8", KeyID: "two", Target: "up", Model: "m", Requests: 1, InputTokens: 40},
		} {
			if err := us.AddUsage(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		got, err := us.Usage(ctx, "k8", day, day)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]int64{}
		for _, u := range got {
			byID[u.KeyID] += u.InputTokens
		}
		if len(got) != 3 || byID[""] != 10 || byID["one"] != 20 || byID["two"] != 70 {
			t.Fatalf("totals by key id: %+v", got)
		}
	})
}
