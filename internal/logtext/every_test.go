package logtext

import (
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	e := Every{Interval: 10 * time.Second}
	t0 := time.Unix(1_000_000, 0)
	steps := []struct {
		at     time.Duration
		wantN  int64
		wantOK bool
	}{
		{0, 1, true},                 // the first occurrence is written
		{time.Second, 0, false},      // held back
		{9 * time.Second, 0, false},  // held back
		{10 * time.Second, 3, true},  // an interval later: stands for the two held and itself
		{11 * time.Second, 0, false}, // the interval starts again from the last line
		{25 * time.Second, 2, true},
		{40 * time.Second, 1, true},
	}
	for i, s := range steps {
		n, ok := e.Allow(t0.Add(s.at))
		if n != s.wantN || ok != s.wantOK {
			t.Errorf("step %d (+%v): Allow = %d, %v; want %d, %v", i, s.at, n, ok, s.wantN, s.wantOK)
		}
	}
}
