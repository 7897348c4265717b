package uplink

import (
	"math"
	"strconv"
	"testing"
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
