package client

import (
	"math"
	"testing"
)

func TestWidenToWindows(t *testing.T) {
	const h = int64(3600)
	for _, c := range []struct{ from, to, cf, ct, every, wantF, wantT int64 }{
		{0, 10 * h, 2*h + 5, 7*h + 1, h, 2 * h, 8 * h},      // both ends back to their windows
		{0, 10 * h, 2 * h, 8 * h, h, 2 * h, 8 * h},          // already aligned
		{h + 7, 3*h - 2, h + 9, 2*h + 3, h, h + 7, 3*h - 2}, // never past the range asked
		{0, 10 * h, 5 * h, 5 * h, h, 5 * h, 5 * h},          // empty stays empty
		{-10 * h, 0, -7*h - 5, -3 * h, h, -8 * h, -3 * h},   // before the epoch
		{math.MinInt64, math.MaxInt64, 5, 6, h, 0, h},
		{math.MinInt64, math.MinInt64 + 10, math.MinInt64 + 1, math.MinInt64 + 2, h, math.MinInt64, math.MinInt64 + 10},
		{math.MaxInt64 - 10, math.MaxInt64, math.MaxInt64 - 5, math.MaxInt64 - 1, h, math.MaxInt64 - 10, math.MaxInt64},
	} {
		f, to := widenToWindows(c.from, c.to, c.cf, c.ct, c.every)
		if f != c.wantF || to != c.wantT {
			t.Errorf("widenToWindows(%d, %d, %d, %d, %d) = [%d, %d), want [%d, %d)", c.from, c.to, c.cf, c.ct, c.every, f, to, c.wantF, c.wantT)
		}
	}
}
