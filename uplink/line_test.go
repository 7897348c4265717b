package uplink

import (
	"math"
	"strconv"
	"testing"
	"time"
)

// FuzzAppendTime: the line encoder's timestamps are strconv's, whatever the previous
// timestamp was.
func FuzzAppendTime(f *testing.F) {
	for _, t := range []int64{0, -1, 1e9 - 1, 1e9, 1e9 + 1, 1_764_000_000_016_666_667, math.MaxInt64, math.MinInt64} {
		f.Add(t, t+16_666_667)
	}
	f.Fuzz(func(t *testing.T, a, b int64) {
		var l lineEncoder
		for _, v := range []int64{a, b, a} {
			l.buf = l.buf[:0]
			l.appendTime(v)
			if got, want := string(l.buf), strconv.FormatInt(v, 10); got != want {
				t.Fatalf("appendTime(%d) after others = %q, want %q", v, got, want)
			}
		}
	})
}

// TestNextLook: a regular look comes when the horizon has just passed a multiple of
// the interval, within one interval.
func TestNextLook(t *testing.T) {
	u := &Uplink{cfg: Config{Interval: 10 * time.Second}, settle: 2 * time.Second}
	for _, now := range []int64{12_300_000_000, 12_500_000_000, 12_500_000_001, 99_999_999_999, 1_764_000_000_123_456_789} {
		d := u.nextLook(time.Unix(0, now))
		horizon := now + int64(d) - int64(u.settle)
		if d <= 0 || d > u.cfg.Interval || horizon%int64(u.cfg.Interval) != int64(lookPast) {
			t.Errorf("at %d: next look in %v, its horizon %d: want within %v, %v past a multiple of it", now, d, horizon, u.cfg.Interval, lookPast)
		}
	}
}
