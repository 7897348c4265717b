package agg_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/agg/aggtest"
	"github.com/tsdht/tsdht/tsdb/series"
)

// randomPoints returns n points of type t at distinct random times in [0, span),
// sorted. Float values mix a PMU-like level with noise and occasional large values of
// both signs, so compensation matters.
func randomPoints(r *rand.Rand, t series.Type, n int, base, span int64) series.Points {
	seen := map[int64]bool{}
	p := series.Points{Type: t}
	for p.Len() < n {
		ts := base + r.Int64N(span)
		if seen[ts] {
			continue
		}
		seen[ts] = true
		switch t {
		case series.Float:
			v := 60 + r.NormFloat64()*0.05
			if r.IntN(50) == 0 {
				v = (r.Float64() - 0.5) * 1e6
			}
			p.AppendFloat(ts, v)
		case series.Int:
			p.AppendInt(ts, r.Int64N(2000)-1000)
		case series.String:
			p.AppendString(ts, string(rune('a'+r.IntN(26))))
		}
	}
	p.Normalize()
	return p
}

// subset returns the points of p at the given indexes (ascending).
func subset(p *series.Points, idx []int) series.Points {
	out := series.Points{Type: p.Type}
	for _, i := range idx {
		out.AppendFrom(p, i)
	}
	return out
}

func checkAll(t *testing.T, what string, pts *series.Points, got *agg.Partial) {
	t.Helper()
	for _, fn := range aggtest.AllFns {
		if err := aggtest.Check(pts, fn, got.Eval(fn)); err != nil {
			t.Fatalf("%s (%d %s points): %v", what, pts.Len(), pts.Type, err)
		}
	}
	checkExtremaT(t, what, pts, got)
}

// checkExtremaT checks MinT and MaxT against the earliest points holding the extremes.
func checkExtremaT(t *testing.T, what string, pts *series.Points, got *agg.Partial) {
	t.Helper()
	if pts.Type == series.String || pts.Len() == 0 {
		return
	}
	if !got.HasExtremaT {
		t.Fatalf("%s: no times of the extremes", what)
	}
	val := func(i int) float64 {
		if pts.Type == series.Int {
			return float64(pts.I[i])
		}
		return pts.F[i]
	}
	mn, mx := 0, 0
	for i := 1; i < pts.Len(); i++ {
		if val(i) < val(mn) {
			mn = i
		}
		if val(i) > val(mx) {
			mx = i
		}
	}
	if got.MinT != pts.T[mn] || got.MaxT != pts.T[mx] {
		t.Fatalf("%s: min at %d, max at %d; want %d and %d (the earliest of equal values)", what, got.MinT, got.MaxT, pts.T[mn], pts.T[mx])
	}
}

// Equal extremes in disjoint sets report the earliest time, whatever the order of the
// merge (InfluxDB's min() and max() select the earliest of equal points).
func TestMergeExtremaTies(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 200; iter++ {
		typ := []series.Type{series.Float, series.Int}[iter%2]
		n := 2 + r.IntN(60)
		pts := series.Points{Type: typ}
		for i := 0; i < n; i++ {
			v := r.IntN(3) // few values: many ties
			if typ == series.Int {
				pts.AppendInt(int64(i)*7-100, int64(v))
			} else {
				pts.AppendFloat(int64(i)*7-100, float64(v)/4)
			}
		}
		parts := 1 + r.IntN(5)
		idx := make([][]int, parts)
		for i := 0; i < n; i++ {
			k := r.IntN(parts)
			idx[k] = append(idx[k], i)
		}
		var total agg.Partial
		for _, k := range r.Perm(parts) {
			sub := subset(&pts, idx[k])
			total = agg.Merge(total, agg.FromPoints(&sub, 0, sub.Len()))
		}
		checkExtremaT(t, "merged with ties", &pts, &total)
	}
}

// Partials in the version 1 wire form (stores' statistics written before the times of
// the extremes) decode, without those times, and merge into partials without them.
func TestCodecV1Decodes(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, typ := range []series.Type{series.Float, series.Int, series.String} {
		pts := randomPoints(r, typ, 50, 0, 1e9)
		p := agg.WithHash(agg.FromPoints(&pts, 0, pts.Len()), &pts, 0, pts.Len())
		b := agg.AppendPartialV1(nil, &p)
		q, rest, err := agg.DecodePartial(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%s: v1 decode: %v, %d bytes left", typ, err, len(rest))
		}
		if q.HasExtremaT {
			t.Fatalf("%s: a v1 partial claims the times of its extremes", typ)
		}
		want := p
		want.MinT, want.MaxT, want.HasExtremaT = 0, 0, false
		if q != want {
			t.Fatalf("%s: v1 decode\n got %+v\nwant %+v", typ, q, want)
		}
		if m := agg.Merge(q, p); m.HasExtremaT {
			t.Fatalf("%s: merge with a v1 partial claims the times of the extremes", typ)
		}
		if v2 := agg.AppendPartial(nil, &p); v2[0] != 2 || bytes.Equal(v2, b) {
			t.Fatalf("%s: AppendPartial writes version %d", typ, v2[0])
		}
	}
}

// Merging the partials of random disjoint subsets, in random order, gives the
// aggregate of the union.
func TestMergeOfDisjointSubsets(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 300; iter++ {
		typ := []series.Type{series.Float, series.Int, series.String}[iter%3]
		n := 1 + r.IntN(400)
		pts := randomPoints(r, typ, n, -5e9, 1e10)
		parts := 1 + r.IntN(6)
		idx := make([][]int, parts)
		for i := 0; i < n; i++ {
			k := r.IntN(parts)
			idx[k] = append(idx[k], i)
		}
		var total agg.Partial
		for _, k := range r.Perm(parts) {
			sub := subset(&pts, idx[k])
			p := agg.WithHash(agg.FromPoints(&sub, 0, sub.Len()), &sub, 0, sub.Len())
			total = agg.Merge(total, p)
		}
		checkAll(t, "merged", &pts, &total)
		if want := agg.PointsHash(&pts, 0, n); total.Hash != want {
			t.Fatalf("merged hash %x, want %x", total.Hash, want)
		}
	}
}

// The set hash changes when one value changes.
func TestHashSeesValues(t *testing.T) {
	a := series.Points{Type: series.Float, T: []int64{1, 2, 3}, F: []float64{1, 2, 3}}
	b := series.Points{Type: series.Float, T: []int64{1, 2, 3}, F: []float64{1, 2, 3.0000001}}
	if agg.PointsHash(&a, 0, 3) == agg.PointsHash(&b, 0, 3) {
		t.Fatal("hash blind to a changed value")
	}
	c := series.Points{Type: series.Float, T: []int64{1, 2, 4}, F: []float64{1, 2, 3}}
	if agg.PointsHash(&a, 0, 3) == agg.PointsHash(&c, 0, 3) {
		t.Fatal("hash blind to a changed time")
	}
}

func TestWindowStart(t *testing.T) {
	for _, c := range []struct{ t, every, want int64 }{
		{0, 10, 0}, {9, 10, 0}, {10, 10, 10}, {-1, 10, -10}, {-10, 10, -10}, {-11, 10, -20},
		{math.MinInt64, 10, math.MinInt64}, {math.MinInt64 + 1, 10, math.MinInt64},
		{math.MaxInt64, 1 << 62, 1 << 62},
	} {
		if got := agg.WindowStart(c.t, c.every); got != c.want {
			t.Errorf("WindowStart(%d, %d) = %d, want %d", c.t, c.every, got, c.want)
		}
	}
}

// Windows over points equal the brute force over each window's points, for widths
// below, at and above the spacing of the points; and windows computed over random
// disjoint subsets then combined equal windows over the whole.
func TestWindowsMatchBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 200; iter++ {
		typ := []series.Type{series.Float, series.Int, series.String}[iter%3]
		pts := randomPoints(r, typ, 1+r.IntN(500), -3e9, 6e9)
		every := []int64{1, 7, 1000, 1e6, 3e7, 1e9, 7e9, 86400e9}[r.IntN(8)]
		from := -3e9 + r.Int64N(3e9) - 1e9
		to := from + r.Int64N(8e9)
		ws := agg.Windows(&pts, from, to, every)
		in := pts.Trim(from, to)
		// Brute force: group by floor(t/every).
		groups := map[int64][]int{}
		for i, ts := range in.T {
			w := ts - ((ts%every)+every)%every
			groups[w] = append(groups[w], i)
		}
		var starts []int64
		for w := range groups {
			starts = append(starts, w)
		}
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		if len(ws) != len(starts) {
			t.Fatalf("every %d: %d windows, want %d", every, len(ws), len(starts))
		}
		for k, w := range ws {
			if w.Start != starts[k] {
				t.Fatalf("window %d starts at %d, want %d", k, w.Start, starts[k])
			}
			sub := subset(&in, groups[w.Start])
			checkAll(t, "window", &sub, &w.Partial)
		}
		// Split into disjoint subsets, window each, combine.
		parts := 1 + r.IntN(4)
		idx := make([][]int, parts)
		for i := range pts.T {
			k := r.IntN(parts)
			idx[k] = append(idx[k], i)
		}
		lists := make([][]agg.Window, parts)
		for k := range idx {
			sub := subset(&pts, idx[k])
			lists[k] = agg.Windows(&sub, from, to, every)
		}
		combined := agg.Combine(lists...)
		if len(combined) != len(ws) {
			t.Fatalf("combined: %d windows, want %d", len(combined), len(ws))
		}
		for _, w := range combined {
			sub := subset(&in, groups[w.Start])
			checkAll(t, "combined window", &sub, &w.Partial)
		}
	}
}

func TestEvalEdges(t *testing.T) {
	var empty agg.Partial
	if v := empty.Eval(agg.Count); v.Kind != series.Int || v.I != 0 {
		t.Fatalf("count of nothing = %v", v)
	}
	if v := empty.Eval(agg.Mean); !v.Null() {
		t.Fatalf("mean of nothing = %v, want null", v)
	}
	one := series.Points{Type: series.Float, T: []int64{5}, F: []float64{2.5}}
	p := agg.FromPoints(&one, 0, 1)
	if v := p.Eval(agg.Stddev); !v.Null() {
		t.Fatalf("stddev of one point = %v, want null (n-1 = 0)", v)
	}
	s := series.Points{Type: series.String, T: []int64{1, 2}, S: []string{"x", "y"}}
	ps := agg.FromPoints(&s, 0, 2)
	if v := ps.Eval(agg.Mean); !v.Null() {
		t.Fatalf("mean of strings = %v, want null", v)
	}
	big := series.Points{Type: series.Int, T: []int64{1, 2, 3}, I: []int64{math.MaxInt64, math.MaxInt64, 5}}
	pb := agg.FromPoints(&big, 0, 3)
	if v := pb.Eval(agg.Sum); v.Kind != series.Float || v.F != 2*float64(math.MaxInt64)+5 {
		t.Fatalf("overflowing int sum = %v (%s)", v, v.Kind)
	}
	nan := series.Points{Type: series.Float, T: []int64{1, 2}, F: []float64{1, math.NaN()}}
	pn := agg.FromPoints(&nan, 0, 2)
	if v := pn.Eval(agg.Max); !math.IsNaN(v.F) {
		t.Fatalf("max with NaN = %v, want NaN", v)
	}
}

func TestParseFns(t *testing.T) {
	fns, err := agg.ParseFns("mean,min,stddev")
	if err != nil || len(fns) != 3 || fns[2] != agg.Stddev {
		t.Fatalf("ParseFns = %v, %v", fns, err)
	}
	if _, err := agg.ParseFns("mean,median"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("median")) {
		t.Fatalf("unknown function: err %v", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 100; iter++ {
		typ := []series.Type{series.Float, series.Int, series.String}[iter%3]
		pts := randomPoints(r, typ, 1+r.IntN(300), -1e10, 2e10)
		ws := agg.Windows(&pts, math.MinInt64, math.MaxInt64, 1+r.Int64N(3e9))
		b := agg.AppendWindowsWire(nil, typ, ws)
		gotT, got, err := agg.DecodeWindowsWire(b)
		if err != nil || gotT != typ {
			t.Fatalf("decode: %v, type %s", err, gotT)
		}
		if again := agg.AppendWindowsWire(nil, gotT, got); !bytes.Equal(again, b) {
			t.Fatal("windows changed in a round trip")
		}
		p := agg.WithHash(agg.FromPoints(&pts, 0, pts.Len()), &pts, 0, pts.Len())
		pb := agg.AppendPartial([]byte("x"), &p)
		q, rest, err := agg.DecodePartial(pb[1:])
		if err != nil || len(rest) != 0 {
			t.Fatalf("partial: %v, %d bytes left", err, len(rest))
		}
		if !bytes.Equal(agg.AppendPartial([]byte("x"), &q), pb) || q != p {
			t.Fatal("partial changed in a round trip")
		}
	}
}

// FuzzDecode: no input panics or allocates out of proportion; what decodes re-encodes
// to the same bytes' meaning.
func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []series.Type{series.Float, series.Int, series.String} {
		pts := randomPoints(r, typ, 20, 0, 1e9)
		f.Add(agg.AppendWindowsWire(nil, typ, agg.Windows(&pts, 0, 1e9, 1e8)))
		p := agg.FromPoints(&pts, 0, pts.Len())
		f.Add(agg.AppendPartial(nil, &p))
		f.Add(agg.AppendPartialV1(nil, &p))
	}
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if typ, ws, err := agg.DecodeWindowsWire(b); err == nil {
			again := agg.AppendWindowsWire(nil, typ, ws)
			typ2, ws2, err := agg.DecodeWindowsWire(again)
			if err != nil || typ2 != typ || len(ws2) != len(ws) {
				t.Fatalf("re-encoded windows do not decode: %v", err)
			}
		}
		if p, rest, err := agg.DecodePartial(b); err == nil {
			again := agg.AppendPartial(nil, &p)
			q, _, err := agg.DecodePartial(again)
			if err != nil || q.Count != p.Count || q.FirstT != p.FirstT || q.LastT != p.LastT ||
				q.HasExtremaT != p.HasExtremaT || q.MinT != p.MinT || q.MaxT != p.MaxT {
				t.Fatalf("re-encoded partial differs: %v", err)
			}
			_ = rest
		}
	})
}

// TestFnTable: one table names every function; partials answer the mergeable ones,
// and the CLI's list refuses the others while InfluxQL's parse accepts them.
func TestFnTable(t *testing.T) {
	for f := agg.Mean; f.Valid(); f++ {
		g, err := agg.ParseFn(f.String())
		if err != nil || g != f {
			t.Fatalf("ParseFn(%q) = %v, %v", f, g, err)
		}
		if _, err := agg.ParseFns(f.String()); (err == nil) != f.Mergeable() {
			t.Fatalf("ParseFns(%q): err %v, mergeable %v", f, err, f.Mergeable())
		}
		if agg.Supports(f, series.Float) != f.Mergeable() {
			t.Fatalf("Supports(%v, float) = %v", f, !f.Mergeable())
		}
	}
	if agg.Median.Mergeable() || agg.Percentile.Mergeable() || !agg.Percentile.Selector() || agg.Mean.Selector() {
		t.Fatal("median and percentile need the points; percentile selects a point, mean does not")
	}
	p := agg.FromPoints(&series.Points{Type: series.Float, T: []int64{1, 2}, F: []float64{3, 1}}, 0, 2)
	if !p.Eval(agg.Median).Null() {
		t.Fatal("a partial evaluated median")
	}
	if ts, ok := p.SelectedT(agg.Min); !ok || ts != 2 {
		t.Fatalf("min's time = %d, %v; want 2", ts, ok)
	}
}

// TestWindowCountAndPages: WindowCount counts the windows a range meets, and PageEnd
// splits any range into pages of at most n windows that end on window boundaries
// (but the last) and cover the range exactly.
func TestWindowCountAndPages(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for k := 0; k < 2000; k++ {
		every := 1 + r.Int64N(50)
		from := r.Int64N(2000) - 1000
		to := from + r.Int64N(500)
		n := 1 + r.Int64N(6)
		want := int64(0)
		for s := agg.WindowStart(from, every); s < to && from < to; s += every {
			want++
		}
		if got := agg.WindowCount(from, to, every); got != want {
			t.Fatalf("WindowCount(%d, %d, %d) = %d, want %d", from, to, every, got, want)
		}
		pages := int64(0)
		for lo := from; lo < to; pages++ {
			hi := agg.PageEnd(lo, to, every, n)
			if hi <= lo || hi > to || agg.WindowCount(lo, hi, every) > n || (hi < to && agg.WindowStart(hi, every) != hi) {
				t.Fatalf("PageEnd(%d, %d, %d, %d) = %d", lo, to, every, n, hi)
			}
			lo = hi
		}
		if pages != (want+n-1)/n {
			t.Fatalf("[%d, %d) every %d: %d pages of %d windows for %d windows", from, to, every, pages, n, want)
		}
	}
	if got := agg.WindowCount(math.MinInt64, math.MaxInt64, 1<<40); got != 1<<24 {
		t.Fatalf("WindowCount over all time = %d, want 2^24", got)
	}
	if got := agg.PageEnd(math.MaxInt64-10, math.MaxInt64, 1<<40, 1<<30); got != math.MaxInt64 {
		t.Fatalf("PageEnd near the end of time = %d", got)
	}
}

// TestMergeSeriesTies: across series two points may share a time; first and last then
// take the greater value, as InfluxDB's selectors do, whichever side it is on.
func TestMergeSeriesTies(t *testing.T) {
	a := agg.FromPoints(&series.Points{Type: series.Float, T: []int64{1, 5}, F: []float64{7, 2}}, 0, 2)
	b := agg.FromPoints(&series.Points{Type: series.Float, T: []int64{1, 5}, F: []float64{3, 9}}, 0, 2)
	for _, m := range []agg.Partial{agg.MergeSeries(a, b), agg.MergeSeries(b, a)} {
		if m.First != 7 || m.Last != 9 || m.Count != 4 || m.Min != 2 || m.MinT != 5 {
			t.Fatalf("MergeSeries: first %v last %v count %d min %v at %d; want 7, 9, 4, 2 at 5", m.First, m.Last, m.Count, m.Min, m.MinT)
		}
	}
	ai := agg.FromPoints(&series.Points{Type: series.Int, T: []int64{1}, I: []int64{4}}, 0, 1)
	bi := agg.FromPoints(&series.Points{Type: series.Int, T: []int64{1}, I: []int64{6}}, 0, 1)
	if m := agg.MergeSeries(bi, ai); m.IFirst != 6 || m.ILast != 6 {
		t.Fatalf("MergeSeries of ints: first %d last %d, want 6", m.IFirst, m.ILast)
	}
}
