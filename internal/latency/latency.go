// Package latency summarises measured request times the way tsdht demo and
// tsdht-bench report them: milliseconds, mean and nearest-rank percentiles.
package latency

import (
	"sort"
	"time"
)

// Ms returns d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Mean returns the mean of ds, 0 for none.
func Mean(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(max(1, len(ds)))
}

// Pct returns the p-th percentile of ds (nearest rank, p in 0..100), 0 for none. ds
// is left as it is.
func Pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}
