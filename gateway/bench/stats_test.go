package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// samples is an exact latency recorder: it keeps every observation, so
// percentiles carry no bucketing error (a benchmark run records at most a
// few million values). The zero value is ready to use; it is not safe for
// concurrent use (give each worker its own and merge).
type samples struct {
	d      []time.Duration
	sorted bool
}

// add records one observation.
func (s *samples) add(d time.Duration) {
	s.d = append(s.d, d)
	s.sorted = false
}

// merge appends all of o's observations to s.
func (s *samples) merge(o *samples) {
	if len(o.d) == 0 {
		return
	}
	s.d = append(s.d, o.d...)
	s.sorted = false
}

// count is the number of observations.
func (s *samples) count() int { return len(s.d) }

// percentile returns the nearest-rank q-th percentile (0 < q <= 100): the
// smallest observation such that at least q% of all observations are less
// than or equal to it. q <= 0 gives the minimum. It returns 0 when there
// are no observations.
func (s *samples) percentile(q float64) time.Duration {
	n := len(s.d)
	if n == 0 {
		return 0
	}
	if !s.sorted {
		slices.Sort(s.d)
		s.sorted = true
	}
	if q <= 0 {
		return s.d[0]
	}
	if q >= 100 {
		return s.d[n-1]
	}
	rank := int(math.Ceil(q / 100 * float64(n))) // 1-based
	rank = min(max(rank, 1), n)
	return s.d[rank-1]
}

// mean is the arithmetic mean, 0 without observations.
func (s *samples) mean() time.Duration {
	if len(s.d) == 0 {
		return 0
	}
	var sum float64
	for _, d := range s.d {
		sum += float64(d)
	}
	return time.Duration(sum / float64(len(s.d)))
}

// ms renders d in milliseconds with three decimals ("1.234ms"), the unit of
// every latency in the tables; "-" for a missing value.
func ms(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

// signedMS renders a latency difference with its sign ("+0.123ms").
func signedMS(d time.Duration) string {
	return fmt.Sprintf("%+.3fms", float64(d)/float64(time.Millisecond))
}

// us is d in microseconds, for b.ReportMetric.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median returns the median of vs (the mean of the middle two for an even
// count), NaN for none. vs is not modified.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	c := slices.Clone(vs)
	slices.Sort(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}
