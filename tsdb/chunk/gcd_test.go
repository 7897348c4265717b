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

// TestDerivedScaleIsTheGCD checks prepare's shortcut: the scale of a lag-1 column
// derived from the next order's equals the gcd of its own residuals.
func TestDerivedScaleIsTheGCD(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20_000 {
		n := 1 + rng.IntN(40)
		m := int64(1) << rng.UintN(12) * (1 + rng.Int64N(1000))
		base := rng.Int64N(derivable/2) - derivable/4
		vals := make([]int64, n)
		for i := range vals {
			vals[i] = base + m*(rng.Int64N(2000)-1000)
			if rng.IntN(4) == 0 && i > 0 {
				vals[i] = vals[i-1] // repeats
			}
		}
		var ps [3]prepared
		for order := 2; order >= 0; order-- {
			if order > n {
				continue
			}
			var next *prepared
			if order < 2 && order+1 <= n {
				next = &ps[order+1]
			}
			p := &ps[order]
			p.prepare(vals, order, 1, next)
			var direct prepared
			direct.prepare(vals, order, 1, nil)
			if p.raw != direct.raw || string(p.head) != string(direct.head) {
				t.Fatalf("vals %v order %d: derived gcd %d, direct %d", vals, order, p.raw, direct.raw)
			}
		}
	}
}
