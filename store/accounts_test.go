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
