package coord

import (
	"math"
	"testing"
)

// TestSpanWindow: a window as wide as the range, in whole quanta, never overflowing.
func TestSpanWindow(t *testing.T) {
	const q = int64(10e9)
	for _, c := range []struct{ from, to, want int64 }{
		{0, 1, q}, {0, q, q}, {0, q + 1, 2 * q}, {5, 5, q}, {7, 3, q},
		{math.MinInt64, math.MaxInt64, math.MaxInt64 / q * q},
		{-q, 50_000 * q, 50_001 * q},
	} {
		if got := spanWindow(c.from, c.to, q); got != c.want || got%q != 0 || got <= 0 {
			t.Errorf("spanWindow(%d, %d) = %d, want %d", c.from, c.to, got, c.want)
		}
	}
}
