package bench

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestHistogramPercentilesNearestRank checks percentiles and the mean on
// 1..100 ms recorded out of order.
func TestHistogramPercentilesNearestRank(t *testing.T) {
	var s samples
	// 1..100 ms in shuffled order.
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(100) {
		s.add(time.Duration(i+1) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 1 * time.Millisecond},
		{1, 1 * time.Millisecond},
		{1.5, 2 * time.Millisecond},
		{50, 50 * time.Millisecond},
		{50.1, 51 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{99.9, 100 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{150, 100 * time.Millisecond},
	} {
		if got := s.percentile(c.q); got != c.want {
			t.Errorf("p%v = %v, want %v", c.q, got, c.want)
		}
	}
	if got, want := s.mean(), 50500*time.Microsecond; got != want {
		t.Errorf("mean = %v, want %v", got, want)
	}
}

// TestHistogramSmallAndEmpty checks the edge cases: no observation, one, two.
func TestHistogramSmallAndEmpty(t *testing.T) {
	var s samples
	if s.percentile(50) != 0 || s.mean() != 0 || s.count() != 0 {
		t.Fatal("empty recorder must report zeros")
	}
	s.add(7 * time.Microsecond)
	for _, q := range []float64{0, 0.001, 50, 99, 100} {
		if got := s.percentile(q); got != 7*time.Microsecond {
			t.Errorf("single observation: p%v = %v", q, got)
		}
	}
	s.add(3 * time.Microsecond)
	if p50, p99 := s.percentile(50), s.percentile(99); p50 != 3*time.Microsecond || p99 != 7*time.Microsecond {
		t.Errorf("two observations: p50=%v p99=%v, want 3µs and 7µs", p50, p99)
	}
}

// TestHistogramMergeResorts checks that merging and adding after a
// percentile query re-sort the observations.
func TestHistogramMergeResorts(t *testing.T) {
	var a, b samples
	for i := 1; i <= 10; i++ {
		a.add(time.Duration(i) * time.Second)
	}
	_ = a.percentile(50) // sorts a
	for i := 11; i <= 20; i++ {
		b.add(time.Duration(31-i) * time.Millisecond) // 20ms down to 11ms
	}
	a.merge(&b)
	a.merge(&samples{}) // no-op
	if a.count() != 20 {
		t.Fatalf("count = %d, want 20", a.count())
	}
	if got := a.percentile(0); got != 11*time.Millisecond {
		t.Errorf("min after merge = %v, want 11ms", got)
	}
	if got := a.percentile(50); got != 20*time.Millisecond {
		t.Errorf("p50 after merge = %v, want 20ms", got)
	}
	if got := a.percentile(100); got != 10*time.Second {
		t.Errorf("max after merge = %v, want 10s", got)
	}
	a.add(time.Nanosecond) // adding after a sort must re-sort
	if got := a.percentile(0); got != time.Nanosecond {
		t.Errorf("min after add = %v, want 1ns", got)
	}
}

// TestMedianAndFormatting checks median and the latency formatting.
func TestMedianAndFormatting(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd = %v", got)
	}
	vs := []float64{4, 1, 3, 2}
	if got := median(vs); got != 2.5 {
		t.Errorf("median even = %v", got)
	}
	if vs[0] != 4 {
		t.Error("median modified its input")
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing must be NaN")
	}
	if got := ms(1234567 * time.Nanosecond); got != "1.235ms" {
		t.Errorf("ms = %q", got)
	}
	if got := signedMS(-250 * time.Microsecond); got != "-0.250ms" {
		t.Errorf("signedMS = %q", got)
	}
	if got := ms(0); got != "-" {
		t.Errorf("ms(0) = %q", got)
	}
}
