package chunk

import (
	"math"
	"math/rand/v2"
	"testing"
)

// euclid is the textbook definition gcd must agree with.
func euclid(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func TestGCDAgreesWithEuclid(t *testing.T) {
	edges := []uint64{0, 1, 2, 3, 1000, 16_666_667, 1 << 32, 1<<63 - 1, 1 << 63, math.MaxUint64}
	for _, a := range edges {
		for _, b := range edges {
			if got, want := gcd(a, b), euclid(a, b); got != want {
				t.Fatalf("gcd(%d, %d) = %d, want %d", a, b, got, want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		// Common factors made likely: a shared multiplier of up to 2^20 and shifts.
		m := rng.Uint64N(1<<20) + 1
		a := (rng.Uint64N(1<<40) * m) << rng.UintN(8)
		b := (rng.Uint64N(1<<40) * m) << rng.UintN(8)
		if got, want := gcd(a, b), euclid(a, b); got != want {
			t.Fatalf("gcd(%d, %d) = %d, want %d", a, b, got, want)
		}
	}
}

func TestGCDAll(t *testing.T) {
	for _, c := range []struct {
		r    []int64
		want uint64
	}{
		{nil, 1},
		{[]int64{0, 0}, 1},
		{[]int64{math.MinInt64}, 1},
		{[]int64{math.MinInt64, math.MinInt64 / 2}, 1 << 62},
		{[]int64{-3000, 6000, 0, 9000}, 3000},
		{[]int64{16_666_000, 16_667_000, -1000}, 1000},
		{[]int64{7, 11}, 1},
	} {
		if got := gcdAll(c.r); got != c.want {
			t.Errorf("gcdAll(%v) = %d, want %d", c.r, got, c.want)
		}
	}
}
