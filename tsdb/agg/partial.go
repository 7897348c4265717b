// Package agg owns partial aggregates of time-series points: what a replica computes
// where the data lives and sends instead of the points, what a coordinator merges
// across shards, and what a store keeps per (shard, series) pair as its statistics.
//
// A Partial summarises a set of points of one series: count, first and last (time and
// value), and for numbers min and max (with the times of the earliest points holding
// them), a compensated sum and a variance term. Partials of
// disjoint sets of points merge into the partial of their union (Merge); that is the
// only merge defined. Two copies of the same points (replicas of one shard) are not
// disjoint: a coordinator picks one copy per shard, or reconciles differing copies
// from their points, before it merges.
//
// Numerics:
//   - Float sums are Neumaier-compensated (Sum + Comp): the error of a sum of n values
//     is about 2u·|sum| + O(n²u²)·Σ|x| (u = 2⁻⁵³) whatever the order of additions and
//     merges, instead of naive summation's n·u·Σ|x|.
//   - The variance term is M2 = Σ(x − mean)². A batch of points gets it in two passes
//     (mean first, then the squared deviations), and partials merge it with Chan et
//     al.'s formula M2 = M2a + M2b + δ²·na·nb/n, δ = meanb − meana, the means taken from
//     the compensated sums. Both are backward stable; the naive Σx² − n·mean² is not.
//   - Int sums are exact: a 128-bit two's-complement accumulator cannot overflow for
//     fewer than 2⁶³ points. Sum returns an int while the total fits in int64 and a
//     float beyond.
//   - NaN is a value: a float set holding one has NaN min, max, sum, mean and stddev.
//
// Functions (Fn): mean, min, max, count, sum, first, last, stddev (the sample standard
// deviation, n − 1 in the denominator, as InfluxDB's STDDEV; undefined for one point)
// and spread (max − min) are answered by partials. String series support count, first
// and last. The function table also names median and percentile, which need the points
// of a window: their callers compute them over the same windows.
//
// Windows (Window, Windows) are aligned to multiples of their width since the epoch,
// flooring toward −∞: InfluxDB's GROUP BY time(D) without an offset.
package agg

import (
	"math"
	"math/bits"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Partial is the aggregate of a set of points of one series. The zero value is the
// aggregate of no points. Only the fields of its Type are meaningful.
type Partial struct {
	Type   series.Type // Float, Int or String; may be Unknown while Count is 0
	Count  int64       // points
	FirstT int64       // earliest timestamp
	LastT  int64       // latest timestamp

	// Float series.
	Min, Max    float64
	Sum, Comp   float64 // the sum is Sum + Comp (Neumaier compensation)
	First, Last float64 // values at FirstT and LastT

	// M2 is Σ(x − mean)² over the points (Float and Int series).
	M2 float64

	// MinT and MaxT are the times of the earliest points holding the minimum and the
	// maximum (Float and Int series), when HasExtremaT: what InfluxQL's min() and max()
	// report, ties going to the earliest point as InfluxDB's do. Partials decoded from
	// the version 1 wire form, and merges that include one, lack them.
	MinT, MaxT  int64
	HasExtremaT bool

	// Int series.
	IMin, IMax    int64
	ISum          Int128 // exact sum
	IFirst, ILast int64

	// String series.
	SFirst, SLast string

	// Hash digests the set of points, independently of the order they were added in:
	// the sum mod 2⁶⁴ of a hash of each (time, value). Two copies of a shard with equal
	// Count and Hash hold the same points but for a 2⁻⁶⁴ chance. It is 0 when the
	// partial was computed without it (FromPoints; see WithHash).
	Hash uint64
}

// Int128 is a two's-complement 128-bit integer: Hi·2⁶⁴ + Lo.
type Int128 struct {
	Hi int64
	Lo uint64
}

// Add returns a + b.
func (a Int128) Add(b Int128) Int128 {
	lo, carry := bits.Add64(a.Lo, b.Lo, 0)
	return Int128{Hi: a.Hi + b.Hi + int64(carry), Lo: lo}
}

// Int128Of returns v as an Int128.
func Int128Of(v int64) Int128 {
	return Int128{Hi: v >> 63, Lo: uint64(v)}
}

// Int64 returns the value and whether it fits in an int64.
func (a Int128) Int64() (int64, bool) {
	v := int64(a.Lo)
	return v, a.Hi == v>>63
}

// Float64 returns the value rounded to a float64.
func (a Int128) Float64() float64 {
	if v, ok := a.Int64(); ok {
		return float64(v)
	}
	// Hi·2⁶⁴ + Lo; both terms are exact up to float rounding of each.
	return float64(a.Hi)*0x1p64 + float64(a.Lo)
}

// Empty reports whether the partial aggregates no points.
func (p *Partial) Empty() bool { return p.Count == 0 }

// SumFloat returns the compensated sum of a float partial, or an int partial's sum
// rounded to a float.
func (p *Partial) SumFloat() float64 {
	switch p.Type {
	case series.Int:
		return p.ISum.Float64()
	case series.Float:
		if math.IsInf(p.Sum, 0) || math.IsNaN(p.Sum) {
			return p.Sum // the compensation of an infinite sum is NaN or meaningless
		}
		return p.Sum + p.Comp
	}
	return math.NaN()
}

// Mean returns the arithmetic mean of a numeric partial.
func (p *Partial) Mean() float64 {
	if p.Count == 0 {
		return math.NaN()
	}
	return p.SumFloat() / float64(p.Count)
}

// neumaier adds x to the compensated sum (s, c).
func neumaier(s, c, x float64) (float64, float64) {
	t := s + x
	if math.Abs(s) >= math.Abs(x) {
		c += (s - t) + x
	} else {
		c += (x - t) + s
	}
	return t, c
}

// FromPoints returns the aggregate of points i..j-1 of p, which must be sorted by time
// with distinct timestamps (as stores return them). Hash is left 0.
func FromPoints(p *series.Points, i, j int) Partial {
	if i >= j {
		return Partial{}
	}
	out := Partial{Type: p.Type, Count: int64(j - i), FirstT: p.T[i], LastT: p.T[j-1]}
	switch p.Type {
	case series.Float:
		vs := p.F[i:j]
		ts := p.T[i:j]
		mn, mx := vs[0], vs[0]
		mnT, mxT := ts[0], ts[0]
		var s, c float64
		nan := false
		for k, v := range vs {
			if v < mn {
				mn, mnT = v, ts[k]
			} else if v > mx {
				mx, mxT = v, ts[k]
			} else if v != v {
				nan = true
			}
			// Neumaier, inlined: this loop is the hot path of every sub-quantum window.
			t := s + v
			if math.Abs(s) >= math.Abs(v) {
				c += (s - t) + v
			} else {
				c += (v - t) + s
			}
			s = t
		}
		if nan {
			mn, mx = math.NaN(), math.NaN()
		}
		out.Min, out.Max, out.Sum, out.Comp = mn, mx, s, c
		out.MinT, out.MaxT, out.HasExtremaT = mnT, mxT, true
		out.First, out.Last = vs[0], vs[len(vs)-1]
		mean := out.SumFloat() / float64(len(vs))
		var m2 float64
		for _, v := range vs {
			d := v - mean
			m2 += d * d
		}
		out.M2 = m2
	case series.Int:
		vs := p.I[i:j]
		ts := p.T[i:j]
		mn, mx := vs[0], vs[0]
		mnT, mxT := ts[0], ts[0]
		var sum Int128
		for k, v := range vs {
			if v < mn {
				mn, mnT = v, ts[k]
			}
			if v > mx {
				mx, mxT = v, ts[k]
			}
			lo, carry := bits.Add64(sum.Lo, uint64(v), 0)
			sum = Int128{Hi: sum.Hi + (v >> 63) + int64(carry), Lo: lo}
		}
		out.IMin, out.IMax, out.ISum = mn, mx, sum
		out.MinT, out.MaxT, out.HasExtremaT = mnT, mxT, true
		out.IFirst, out.ILast = vs[0], vs[len(vs)-1]
		mean := out.Mean()
		var m2 float64
		for _, v := range vs {
			d := float64(v) - mean
			m2 += d * d
		}
		out.M2 = m2
	case series.String:
		out.SFirst, out.SLast = p.S[i], p.S[j-1]
	}
	return out
}

// Merge returns the aggregate of the union of a's and b's points, which must be
// disjoint sets of one series (they may interleave in time). Where both hold a point
// at the first (or last) time — which disjoint sets do not — b's value is taken.
func Merge(a, b Partial) Partial {
	if a.Count == 0 {
		return b
	}
	if b.Count == 0 {
		return a
	}
	out := a
	out.Count = a.Count + b.Count
	out.Hash = a.Hash + b.Hash
	firstB := b.FirstT <= a.FirstT
	lastB := b.LastT >= a.LastT
	if firstB {
		out.FirstT = b.FirstT
	}
	if lastB {
		out.LastT = b.LastT
	}
	out.HasExtremaT = a.HasExtremaT && b.HasExtremaT
	switch a.Type {
	case series.Float:
		out.MinT = extremumT(a.Min, b.Min, a.MinT, b.MinT, true)
		out.MaxT = extremumT(a.Max, b.Max, a.MaxT, b.MaxT, false)
		out.Min, out.Max = fmin(a.Min, b.Min), fmax(a.Max, b.Max)
		s, c := neumaier(a.Sum, a.Comp+b.Comp, b.Sum)
		out.Sum, out.Comp = s, c
		out.M2 = chan_(a, b)
		if firstB {
			out.First = b.First
		}
		if lastB {
			out.Last = b.Last
		}
	case series.Int:
		out.MinT = intExtremumT(a.IMin, b.IMin, a.MinT, b.MinT, true)
		out.MaxT = intExtremumT(a.IMax, b.IMax, a.MaxT, b.MaxT, false)
		out.IMin, out.IMax = min(a.IMin, b.IMin), max(a.IMax, b.IMax)
		out.ISum = a.ISum.Add(b.ISum)
		out.M2 = chan_(a, b)
		if firstB {
			out.IFirst = b.IFirst
		}
		if lastB {
			out.ILast = b.ILast
		}
	case series.String:
		if firstB {
			out.SFirst = b.SFirst
		}
		if lastB {
			out.SLast = b.SLast
		}
	}
	return out
}

// MergeSeries returns the aggregate of a's and b's points when they come from different
// series over one window (InfluxQL's GROUP BY over several series), where two points
// may share a time: first and last then take the greater value, as InfluxDB's
// selectors do; min and max already take the earliest point.
func MergeSeries(a, b Partial) Partial {
	out := Merge(a, b)
	if a.Count == 0 || b.Count == 0 {
		return out
	}
	if a.FirstT == b.FirstT && a.Type == b.Type {
		out.First, out.IFirst, out.SFirst = max(a.First, b.First), max(a.IFirst, b.IFirst), max(a.SFirst, b.SFirst)
	}
	if a.LastT == b.LastT && a.Type == b.Type {
		out.Last, out.ILast, out.SLast = max(a.Last, b.Last), max(a.ILast, b.ILast), max(a.SLast, b.SLast)
	}
	return out
}

// extremumT returns the time of the merged minimum (or maximum) of two sets whose
// extremes are va at ta and vb at tb: the time of the winning value, the earlier time on
// a tie. A NaN extreme keeps its own time.
func extremumT(va, vb float64, ta, tb int64, isMin bool) int64 {
	switch {
	case va != va:
		return ta
	case vb != vb:
		return tb
	case va == vb:
		return min(ta, tb)
	case (va < vb) == isMin:
		return ta
	}
	return tb
}

// intExtremumT is extremumT for integers, compared exactly.
func intExtremumT(va, vb int64, ta, tb int64, isMin bool) int64 {
	switch {
	case va == vb:
		return min(ta, tb)
	case (va < vb) == isMin:
		return ta
	}
	return tb
}

// chan_ merges the variance terms of a and b (Chan, Golub and LeVeque).
func chan_(a, b Partial) float64 {
	na, nb := float64(a.Count), float64(b.Count)
	d := b.Mean() - a.Mean()
	return a.M2 + b.M2 + d*d*(na*nb/(na+nb))
}

// fmin and fmax are min and max where NaN wins, like math.Min without its ±0 rules.
func fmin(a, b float64) float64 {
	if a != a || b != b {
		return math.NaN()
	}
	return min(a, b)
}

func fmax(a, b float64) float64 {
	if a != a || b != b {
		return math.NaN()
	}
	return max(a, b)
}

// WithHash returns p with Hash set to the digest of points i..j-1 of pts, which p
// must aggregate.
func WithHash(p Partial, pts *series.Points, i, j int) Partial {
	p.Hash = PointsHash(pts, i, j)
	return p
}

// PointsHash returns the order-independent digest of points i..j-1 of p (see Hash).
func PointsHash(p *series.Points, i, j int) uint64 {
	var h uint64
	for k := i; k < j; k++ {
		h += PointHash(p, k)
	}
	return h
}

// PointHash returns the hash of point k of p: Partial.Hash sums it over a set.
func PointHash(p *series.Points, k int) uint64 {
	t := uint64(p.T[k])
	var v uint64
	switch p.Type {
	case series.Float:
		v = math.Float64bits(p.F[k])
	case series.Int:
		v = uint64(p.I[k])
	case series.String:
		v = stringHash(p.S[k])
	}
	return mix(mix(t^0x9e3779b97f4a7c15) ^ v)
}

// mix is splitmix64's finaliser: a bijection whose output bits each depend on every
// input bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// stringHash is FNV-1a, mixed.
func stringHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix(h ^ uint64(len(s)))
}
