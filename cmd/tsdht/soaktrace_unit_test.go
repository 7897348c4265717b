package main

import (
	"testing"
	"time"
)

// TestTimelineSum checks the soak's timeline against spans that cross millisecond
// boundaries and windows that cut them.
func TestTimelineSum(t *testing.T) {
	var tl timeline
	tl.add(500_000, 2_500_000, "a") // 0.5–2.5 ms
	tl.add(2_000_000, 2_100_000, "b")
	tl.add(9_999_999, 10_000_001, "a")
	for _, c := range []struct {
		lo, hi int64
		a, b   int64
	}{
		{0, 3_000_000, 2_000_000, 100_000},
		{1_000_000, 2_050_000, 1_050_000, 50_000},
		{2_400_000, 2_400_000, 0, 0},
		{9_000_000, 11_000_000, 2, 0},
		{3_000_000, 9_000_000, 0, 0},
	} {
		got := tl.sum(c.lo, c.hi)
		if got["a"] != c.a || got["b"] != c.b {
			t.Errorf("sum(%d, %d) = %v, want a %d, b %d", c.lo, c.hi, got, c.a, c.b)
		}
	}
}

// TestTraceClock checks that trace and wall times convert both ways through the
// nearest clock snapshot, whose rates differ slightly as a real trace's do.
func TestTraceClock(t *testing.T) {
	w0 := time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	nt := &nodeTrace{syncs: []clockSync{
		{trace: 1_000_000_000, wall: w0},
		{trace: 2_000_000_100, wall: w0.Add(time.Second)}, // the trace clock 100 ns fast a second
		{trace: 3_000_000_200, wall: w0.Add(2 * time.Second)},
	}}
	for _, tt := range []int64{900_000_000, 1_000_000_000, 1_400_000_000, 1_600_000_000, 2_000_000_100, 2_999_999_999, 4_000_000_000} {
		w := nt.wallTime(tt)
		if back := nt.traceTime(w); back < tt-200 || back > tt+200 {
			t.Errorf("trace time %d: wall %v, back %d", tt, w, back)
		}
	}
	if got, want := nt.wallTime(1_600_000_000), w0.Add(time.Second-400*time.Millisecond-100); !got.Equal(want) {
		t.Errorf("wallTime(1.6 s) = %v, want %v (from the nearer, second snapshot)", got, want)
	}
}
