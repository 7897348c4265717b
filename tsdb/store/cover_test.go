package store

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestTimeCoverCoversEveryAddedRange adds random ranges and checks, against the set of
// added ranges, that the cover stays within maxSpans ascending disjoint spans and
// meets every timestamp that any added range holds (it may meet more).
func TestTimeCoverCoversEveryAddedRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 2000; trial++ {
		var c timeCover
		var added []timeSpan
		for k := 0; k < 1+rng.IntN(12); k++ {
			lo := rng.Int64N(1000) - 500
			if trial%7 == 0 { // extremes: gaps that overflow an int64 difference
				lo = []int64{math.MinInt64, math.MaxInt64 - 3, 0}[rng.IntN(3)]
			}
			width := int64(40)
			if lo > math.MaxInt64-width {
				width = math.MaxInt64 - lo
			}
			hi := lo + rng.Int64N(width+1)
			c = c.add(lo, hi)
			added = append(added, timeSpan{lo, hi})
			if c.n == 0 || c.n > maxSpans {
				t.Fatalf("cover has %d spans", c.n)
			}
			for i := 0; i < int(c.n); i++ {
				if c.s[i].lo > c.s[i].hi || (i > 0 && c.s[i-1].hi >= c.s[i].lo) {
					t.Fatalf("spans not ascending and disjoint: %v", c.s[:c.n])
				}
			}
			for _, a := range added {
				for _, ts := range [][]int64{{a.lo}, {a.hi}, {a.lo + (a.hi-a.lo)/2}} {
					if !c.meets(ts) {
						t.Fatalf("cover %v misses %d of added range %v", c.s[:c.n], ts[0], a)
					}
				}
			}
		}
		// Timestamps outside every span are not met; one inside is, wherever it sits
		// in the list.
		var outside []int64
		for ts := int64(-600); ts < 600; ts++ {
			in := false
			for _, sp := range c.s[:c.n] {
				in = in || (sp.lo <= ts && ts <= sp.hi)
			}
			if !in {
				outside = append(outside, ts)
			}
		}
		if c.meets(outside) {
			t.Fatalf("cover %v meets timestamps outside it", c.s[:c.n])
		}
		if len(outside) > 0 {
			sp := c.s[rng.IntN(int(c.n))]
			with := append(append([]int64(nil), outside...), sp.lo)
			sort.Slice(with, func(i, j int) bool { return with[i] < with[j] })
			if !c.meets(with) {
				t.Fatalf("cover %v does not meet %d", c.s[:c.n], sp.lo)
			}
		}
	}
	var unknown timeCover
	if !unknown.meets([]int64{1}) {
		t.Fatal("an unknown cover must meet everything")
	}
}

// TestOutOfOrderBatchesStayExact appends a pair's batches in a shuffled order, as
// concurrent senders commit them, with some batches overwriting points (same or
// changed values), a seal in the middle and late points after it. The pair's count,
// points and statistics must equal those of the points written, and batches that only
// fill gaps must not have read the pair.
func TestOutOfOrderBatchesStayExact(t *testing.T) {
	p := openTest(t, t.TempDir(), unbuffered(SyncNone)) // counts the engine's reads per batch
	defer p.Close()
	t0 := testStart * 1e9
	const batch = 50
	pointsFrom := func(first int, v float64) series.Points { // batch points from index first
		pts := series.Points{Type: series.Float}
		for k := 0; k < batch; k++ {
			pts.T = append(pts.T, t0+int64(first+k)*1e9/60)
			pts.F = append(pts.F, v+float64(k))
		}
		return pts
	}
	batchOf := func(j int, v float64) series.Points { return pointsFrom(j*batch, v) }
	want := map[int64]float64{}
	write := func(key string, pts series.Points) {
		t.Helper()
		if err := p.AppendBatch([]PairAppend{{Ref: testRef, Key: key, Points: pts}}); err != nil {
			t.Fatal(err)
		}
		for i, ts := range pts.T {
			want[ts] = pts.F[i]
		}
	}
	check := func(when string) {
		t.Helper()
		var exp series.Points
		exp.Type = series.Float
		ts := make([]int64, 0, len(want))
		for k := range want {
			ts = append(ts, k)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for _, k := range ts {
			exp.T, exp.F = append(exp.T, k), append(exp.F, want[k])
		}
		got, _, err := p.Read(testRef, "gaps", math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if got.Len() != exp.Len() {
			t.Fatalf("%s: read %d points, want %d", when, got.Len(), exp.Len())
		}
		for i := range exp.T {
			if got.T[i] != exp.T[i] || got.F[i] != exp.F[i] {
				t.Fatalf("%s: point %d is (%d, %v), want (%d, %v)", when, i, got.T[i], got.F[i], exp.T[i], exp.F[i])
			}
		}
		sum, _, err := p.Summary(testRef, "gaps")
		if err != nil || sum.Count != int64(exp.Len()) {
			t.Fatalf("%s: summary count %d (%v), want %d", when, sum.Count, err, exp.Len())
		}
		st, _, err := p.PairStats(testRef, "gaps")
		if err != nil {
			t.Fatal(err)
		}
		// Exact but for M2, whose rounding depends on the order batches merged in.
		w := pairStats(&exp)
		if math.Abs(st.M2-w.M2) > 1e-9*math.Abs(w.M2) {
			t.Fatalf("%s: stats M2 %v, want %v", when, st.M2, w.M2)
		}
		st.M2 = w.M2
		if st != w {
			t.Fatalf("%s: stats %+v, want %+v", when, st, w)
		}
	}

	// Four senders, batches 0..39 committed in a shuffled order a few apart: each
	// batch either extends the pair or fills a gap.
	order := make([]int, 40)
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i+4 <= len(order); i += 4 {
		rng.Shuffle(4, func(a, b int) { order[i+a], order[i+b] = order[i+b], order[i+a] })
	}
	for _, j := range order {
		write("gaps", batchOf(j, float64(j)))
	}
	if n := p.overlapReads.Load(); n != 0 {
		t.Errorf("gap-filling batches read the pair %d times, want 0", n)
	}
	check("after the shuffled batches")

	// Overwrites: the same values, then changed ones, then a batch straddling old
	// and new points. Each must read the pair.
	reads := p.overlapReads.Load()
	write("gaps", batchOf(7, 7))
	write("gaps", batchOf(8, 1000))
	write("gaps", pointsFrom(39*batch+batch/2, 2000))
	if got := p.overlapReads.Load() - reads; got != 3 {
		t.Errorf("overwrites read the pair %d times, want 3", got)
	}
	check("after the overwrites")

	// A seal, then late points: a gap-filler after a gap left on purpose, and an
	// overwrite of a sealed point.
	write("gaps", batchOf(45, 45))
	if _, err := p.SealNow(time.Unix(testStart+3600, 0)); err != nil {
		t.Fatal(err)
	}
	write("gaps", batchOf(43, 43))
	write("gaps", batchOf(3, 3000))
	check("after the seal and the late points")

	// A cold cache: the summary comes from disk, without a cover.
	p.pairs.forgetBefore("\xff")
	write("gaps", batchOf(44, 44))
	write("gaps", batchOf(5, 5000))
	check("after the cache was emptied")
}
