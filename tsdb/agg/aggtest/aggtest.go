// Package aggtest owns the brute-force reference that aggregates are tested against:
// each function computed from raw points, exactly where that is possible (big.Float
// sums), and the tolerance a compensated float result must meet.
package aggtest

import (
	"fmt"
	"math"
	"math/big"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Tolerances. Float sum and mean must be within SumTol·Σ|x| + 4u·|exact| of the exact
// value (u = 2⁻⁵³): Neumaier's bound is 2u·|S| + O(n²u²)·Σ|x|, and SumTol = 1e-15 is far
// above n²u² for the sizes tested (n ≤ 10⁵ gives 10⁻²²) yet below naive summation's n·u
// (10⁻¹¹ at n = 10⁵), so an uncompensated sum would fail. The standard deviation must
// be within StddevTol relative: its condition number grows with mean²/variance, which
// the tests keep below 10⁴, and two-pass/Chan errors are a few u times that.
const (
	SumTol    = 1e-15
	StddevTol = 1e-9
)

// Reference returns fn over pts (sorted, distinct timestamps) computed directly.
func Reference(pts *series.Points, fn agg.Fn) agg.Value {
	n := pts.Len()
	if fn == agg.Count {
		return agg.Value{Kind: series.Int, I: int64(n)}
	}
	if n == 0 || !agg.Supports(fn, pts.Type) {
		return agg.Value{}
	}
	switch pts.Type {
	case series.String:
		if fn == agg.First {
			return agg.Value{Kind: series.String, S: pts.S[0]}
		}
		return agg.Value{Kind: series.String, S: pts.S[n-1]}
	case series.Int:
		switch fn {
		case agg.Min, agg.Max, agg.Spread:
			mn, mx := pts.I[0], pts.I[0]
			for _, v := range pts.I {
				mn, mx = min(mn, v), max(mx, v)
			}
			switch fn {
			case agg.Min:
				return agg.Value{Kind: series.Int, I: mn}
			case agg.Max:
				return agg.Value{Kind: series.Int, I: mx}
			}
			if d := mx - mn; d >= 0 {
				return agg.Value{Kind: series.Int, I: d}
			}
			return agg.Value{Kind: series.Float, F: float64(mx) - float64(mn)}
		case agg.First:
			return agg.Value{Kind: series.Int, I: pts.I[0]}
		case agg.Last:
			return agg.Value{Kind: series.Int, I: pts.I[n-1]}
		case agg.Sum:
			s := new(big.Int)
			for _, v := range pts.I {
				s.Add(s, big.NewInt(v))
			}
			if s.IsInt64() {
				return agg.Value{Kind: series.Int, I: s.Int64()}
			}
			f, _ := new(big.Float).SetInt(s).Float64()
			return agg.Value{Kind: series.Float, F: f}
		}
		fs := make([]float64, n)
		for i, v := range pts.I {
			fs[i] = float64(v)
		}
		return floatStat(fs, fn)
	case series.Float:
		switch fn {
		case agg.Min, agg.Max, agg.Spread:
			mn, mx := pts.F[0], pts.F[0]
			for _, v := range pts.F {
				mn, mx = min(mn, v), max(mx, v)
			}
			switch fn {
			case agg.Min:
				return agg.Value{Kind: series.Float, F: mn}
			case agg.Max:
				return agg.Value{Kind: series.Float, F: mx}
			}
			return agg.Value{Kind: series.Float, F: mx - mn}
		case agg.First:
			return agg.Value{Kind: series.Float, F: pts.F[0]}
		case agg.Last:
			return agg.Value{Kind: series.Float, F: pts.F[n-1]}
		}
		return floatStat(pts.F, fn)
	}
	return agg.Value{}
}

// floatStat computes sum, mean or stddev exactly in big.Float, rounded at the end.
func floatStat(vs []float64, fn agg.Fn) agg.Value {
	const prec = 2200 // enough for any sum of float64s without rounding
	sum := new(big.Float).SetPrec(prec)
	for _, v := range vs {
		sum.Add(sum, new(big.Float).SetPrec(prec).SetFloat64(v))
	}
	n := new(big.Float).SetPrec(prec).SetInt64(int64(len(vs)))
	switch fn {
	case agg.Sum:
		f, _ := sum.Float64()
		return agg.Value{Kind: series.Float, F: f}
	case agg.Mean:
		f, _ := new(big.Float).SetPrec(prec).Quo(sum, n).Float64()
		return agg.Value{Kind: series.Float, F: f}
	case agg.Stddev:
		if len(vs) < 2 {
			return agg.Value{}
		}
		mean := new(big.Float).SetPrec(prec).Quo(sum, n)
		m2 := new(big.Float).SetPrec(prec)
		for _, v := range vs {
			d := new(big.Float).SetPrec(prec).SetFloat64(v)
			d.Sub(d, mean)
			m2.Add(m2, d.Mul(d, d))
		}
		m2.Quo(m2, new(big.Float).SetPrec(prec).SetInt64(int64(len(vs)-1)))
		f, _ := m2.Float64()
		return agg.Value{Kind: series.Float, F: math.Sqrt(f)}
	}
	return agg.Value{}
}

// AbsSum returns Σ|x| over a numeric series' values: the scale of a sum's error.
func AbsSum(pts *series.Points) float64 {
	var s float64
	for _, v := range pts.F {
		s += math.Abs(v)
	}
	for _, v := range pts.I {
		s += math.Abs(float64(v))
	}
	return s
}

// Check returns an error if got differs from want, the Reference of fn over pts:
// exactly for counts, min, max, first, last, spread and int sums; within the
// tolerances above for float sums, means and standard deviations.
func Check(pts *series.Points, fn agg.Fn, got agg.Value) error {
	want := Reference(pts, fn)
	if got.Kind != want.Kind {
		return fmt.Errorf("%s: got %v (%s), want %v (%s)", fn, got, got.Kind, want, want.Kind)
	}
	if want.Kind != series.Float {
		if got != want {
			return fmt.Errorf("%s: got %v, want %v", fn, got, want)
		}
		return nil
	}
	switch fn {
	case agg.Sum, agg.Mean:
		scale := AbsSum(pts)
		if fn == agg.Mean {
			scale /= float64(pts.Len())
		}
		if d := math.Abs(got.F - want.F); !(d <= SumTol*scale+4*0x1p-53*math.Abs(want.F)) {
			return fmt.Errorf("%s: got %v, want %v (error %g, allowed %g)", fn, got.F, want.F, d, SumTol*scale+4*0x1p-53*math.Abs(want.F))
		}
	case agg.Stddev:
		if d := math.Abs(got.F - want.F); !(d <= StddevTol*math.Abs(want.F)+1e-300) {
			return fmt.Errorf("%s: got %v, want %v (relative error %g)", fn, got.F, want.F, d/math.Abs(want.F))
		}
	default:
		if got.F != want.F && !(math.IsNaN(got.F) && math.IsNaN(want.F)) {
			return fmt.Errorf("%s: got %v, want %v", fn, got.F, want.F)
		}
	}
	return nil
}

// AllFns is every function, for tests that try them all.
var AllFns = []agg.Fn{agg.Mean, agg.Min, agg.Max, agg.Count, agg.Sum, agg.First, agg.Last, agg.Stddev, agg.Spread}
