package storetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/agg/aggtest"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// The statistics and aggregates of a store (store.Analyzer), against a brute force over
// the points written.
var statsCases = []testCase{
	{"StatsFollowWritesAndOverwrites", func(t *testing.T, s store.Store, _ func()) {
		if _, held, err := s.PairStats(refA, "k"); err != nil || held {
			t.Fatalf("PairStats of an absent pair: held %v, err %v", held, err)
		}
		steps := []series.Points{
			floats(tsList(sec+10, sec+20, sec+30), 5, 1, 9),
			floats(tsList(sec+40), 4),                    // in order
			floats(tsList(sec+5), 7),                     // late: a new first point
			floats(tsList(sec+20, sec+30), 1, 9),         // a retry: the same values
			floats(tsList(sec+30), 2),                    // the max is overwritten away
			floats(tsList(sec+10, sec+25), -3, 6),        // an overwrite and a new point
			floats(tsList(sec+5, sec+40), 7.5, 4.5),      // first and last values change
			floats(tsList(sec+20), math.Copysign(0, -1)), // bits differ, value compares equal
		}
		for i, step := range steps {
			mustAppend(t, s, refA, "k", step)
			checkPairStats(t, s, refA, "k", fmt.Sprintf("after step %d", i))
		}
	}},
	{"StatsOfIntsAndStrings", func(t *testing.T, s store.Store, _ func()) {
		mustAppend(t, s, refA, "i", ints(tsList(sec+1, sec+2, sec+3), math.MaxInt64, math.MaxInt64, -7))
		mustAppend(t, s, refA, "i", ints(tsList(sec+2), 3))
		checkPairStats(t, s, refA, "i", "ints")
		mustAppend(t, s, refA, "s", strs(tsList(sec+2, sec+1), "b", "a"))
		mustAppend(t, s, refA, "s", strs(tsList(sec+3, sec+1), "c", "z"))
		checkPairStats(t, s, refA, "s", "strings")
	}},
	{"AggregateMatchesBruteForce", aggregateProperty},
}

// checkAggBatch compares store.AggregateBatch over the first n quanta of refOf, for
// key and for other (shard by shard, each quantum's pairs as the store orders them),
// with PairStats of each pair and, in every other one, with Aggregate over [from, to)
// at width every.
func checkAggBatch(t *testing.T, s store.Store, key, other string, refOf, otherOf func(q int) store.ShardRef, n int, from, to, every int64) {
	t.Helper()
	var aggs []store.PairAgg
	for q := range n {
		for k, a := range []store.PairAgg{{Ref: refOf(q), Key: key}, {Ref: otherOf(q), Key: other}} {
			if (q+k)%2 == 0 {
				a.From, a.To, a.Every = from, to, every
			}
			aggs = append(aggs, a)
		}
	}
	slices.SortFunc(aggs, func(a, b store.PairAgg) int { return store.ComparePairs(a.Ref, a.Key, b.Ref, b.Key) })
	seen := 0
	err := store.AggregateBatch(s, aggs, func(i int, st agg.Partial, held bool, ws []agg.Window) error {
		if i != seen {
			return fmt.Errorf("yield of pair %d, want %d", i, seen)
		}
		seen++
		a := &aggs[i]
		want, wheld, err := s.PairStats(a.Ref, a.Key)
		if err != nil {
			return err
		}
		if held != wheld || st != want {
			return fmt.Errorf("pair %d (%q at %d): AggregateBatch gives %+v (held %v), PairStats %+v (held %v)", i, a.Key, a.Ref.Start, st, held, want, wheld)
		}
		var wantWs []agg.Window
		if a.Every > 0 {
			if wantWs, _, err = s.Aggregate(a.Ref, a.Key, a.From, a.To, a.Every); err != nil {
				return err
			}
		}
		if len(ws) != len(wantWs) {
			return fmt.Errorf("pair %d (%q at %d): AggregateBatch gives %d windows, Aggregate %d", i, a.Key, a.Ref.Start, len(ws), len(wantWs))
		}
		for k := range ws {
			if ws[k] != wantWs[k] {
				return fmt.Errorf("pair %d (%q at %d): window %d is %+v, Aggregate's %+v", i, a.Key, a.Ref.Start, k, ws[k], wantWs[k])
			}
		}
		return nil
	})
	if err != nil || seen != len(aggs) {
		t.Fatalf("AggregateBatch of %q and %q: %d of %d pairs, %v", key, other, seen, len(aggs), err)
	}
}

// checkPairStats compares PairStats with the pair's points: every function, and the
// hash.
func checkPairStats(t *testing.T, s store.Store, r store.ShardRef, key, when string) {
	t.Helper()
	pts, held := readAll(t, s, r, key)
	st, sheld, err := s.PairStats(r, key)
	if err != nil || sheld != held {
		t.Fatalf("%s: PairStats: held %v (Read: %v), err %v", when, sheld, held, err)
	}
	for _, fn := range aggtest.AllFns {
		if err := aggtest.Check(&pts, fn, st.Eval(fn)); err != nil {
			t.Fatalf("%s: PairStats: %v", when, err)
		}
	}
	if want := agg.PointsHash(&pts, 0, pts.Len()); st.Hash != want {
		t.Fatalf("%s: PairStats hash %x, want %x (the hash of the points held)", when, st.Hash, want)
	}
	if st.FirstT != pts.T[0] || st.LastT != pts.T[pts.Len()-1] {
		t.Fatalf("%s: PairStats span [%d, %d], points span [%d, %d]", when, st.FirstT, st.LastT, pts.T[0], pts.T[pts.Len()-1])
	}
}

// propQuantum is the quantum length of the property test, and propBase its first
// quantum: 30 s before a UTC midnight, so day-wide windows are cut by it.
const (
	propQuantum = int64(10e9)
	propBase    = int64(1_700_006_400-30) * 1e9
	propQuanta  = 6
)

// aggregateProperty writes random late, overlapping and repeated batches (and
// overwrites with new values) into propQuanta quanta of three series, one per value
// type, and checks at several points that the windowed aggregates a replica computes
// (store.AggregateQuantum per quantum, combined) equal a brute force over the points
// written (last write wins), at widths from 1 ms to 2 days, over whole and partial
// ranges; and that each pair's statistics equal its points'.
func aggregateProperty(t *testing.T, s store.Store, _ func()) {
	r := rand.New(rand.NewPCG(11, 12))
	prev := "prop/none" // the series written before this one (none: absent)
	for _, typ := range []series.Type{series.Float, series.Int, series.String} {
		key := "prop/" + typ.String()
		prevOf := func(q int) store.ShardRef { return ref(prev, (propBase+int64(q)*propQuantum)/1e9) }
		model := map[int64]int{} // time → index into values
		var values series.Points
		values.Type = typ
		var sent []struct {
			q   int
			pts series.Points
		}
		refOf := func(q int) store.ShardRef { return ref(key, (propBase+int64(q)*propQuantum)/1e9) }
		for op := 1; op <= 120; op++ {
			var q int
			var batch series.Points
			switch k := r.IntN(10); {
			case k < 2 && len(sent) > 0: // a retry of an earlier batch
				b := sent[r.IntN(len(sent))]
				q, batch = b.q, b.pts
			default: // new points, on a 10 ms grid so that timestamps repeat often
				q = r.IntN(propQuanta)
				if k < 6 {
					q = propQuanta - 1 - r.IntN(2) // mostly recent quanta, some late
				}
				batch.Type = typ
				for n := 1 + r.IntN(40); n > 0; n-- {
					ts := propBase + int64(q)*propQuantum + int64(r.IntN(1000))*10e6
					switch typ {
					case series.Float:
						v := 50 + r.NormFloat64()
						if r.IntN(40) == 0 {
							v = (r.Float64() - 0.5) * 1e7
						}
						batch.AppendFloat(ts, v)
					case series.Int:
						batch.AppendInt(ts, r.Int64N(1e6)-5e5)
					case series.String:
						batch.AppendString(ts, fmt.Sprint(r.IntN(100)))
					}
				}
				sent = append(sent, struct {
					q   int
					pts series.Points
				}{q, batch})
			}
			// The model: Append sorts a batch stably and keeps the last of equal times.
			mustAppend(t, s, refOf(q), key, series.Concat(batch))
			for i := range batch.T {
				model[batch.T[i]] = values.Len()
				values.AppendFrom(&batch, i)
			}
			if op%40 != 0 {
				continue
			}
			all := modelPoints(model, &values)
			for q := 0; q < propQuanta; q++ {
				if _, held, _ := s.PairStats(refOf(q), key); held {
					checkPairStats(t, s, refOf(q), key, fmt.Sprintf("%s quantum %d, op %d", key, q, op))
				}
			}
			// One past the quanta written: absent.
			from := propBase + r.Int64N(propQuanta*propQuantum)
			every := []int64{1e6, 1e9, 60e9, 86400e9}[r.IntN(4)]
			checkAggBatch(t, s, key, prev, refOf, prevOf, propQuanta+1, from, from+r.Int64N(propQuanta*propQuantum), every)

			for _, every := range []int64{1e6, 7e6, 1e9, 3e9, 10e9, 15e9, 20e9, 60e9, 3600e9, 86400e9, 2 * 86400e9} {
				ranges := [][2]int64{{propBase - 1e9, propBase + propQuanta*propQuantum + 1e9}}
				for k := 0; k < 3; k++ {
					from := propBase + r.Int64N(propQuanta*propQuantum)
					ranges = append(ranges, [2]int64{from, from + r.Int64N(propQuanta*propQuantum)})
				}
				for _, rg := range ranges {
					checkWindows(t, s, key, &all, refOf, rg[0], rg[1], every)
				}
			}
		}
		prev = key
	}
}

// modelPoints returns the model's points, sorted.
func modelPoints(model map[int64]int, values *series.Points) series.Points {
	ts := make([]int64, 0, len(model))
	for t := range model {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	out := series.Points{Type: values.Type}
	for _, t := range ts {
		out.AppendFrom(values, model[t])
	}
	return out
}

// checkWindows aggregates [from, to) at width every the way a replica does, quantum by
// quantum, and compares each window with the brute force over the model's points.
func checkWindows(t *testing.T, s store.Store, key string, all *series.Points, refOf func(int) store.ShardRef, from, to, every int64) {
	t.Helper()
	var lists [][]agg.Window
	for q := 0; q < propQuanta; q++ {
		begin := propBase + int64(q)*propQuantum
		ws, _, err := store.AggregateQuantum(s, refOf(q), key, begin, begin+propQuantum, from, to, every)
		if err != nil {
			t.Fatalf("AggregateQuantum: %v", err)
		}
		lists = append(lists, ws)
	}
	got := agg.Combine(lists...)
	in := all.Trim(from, to)
	var want []int64 // window starts
	groups := map[int64]*series.Points{}
	for i, ts := range in.T {
		w := ts - ((ts%every)+every)%every
		g := groups[w]
		if g == nil {
			g = &series.Points{Type: in.Type}
			groups[w] = g
			want = append(want, w)
		}
		g.AppendFrom(&in, i)
	}
	if len(got) != len(want) {
		t.Fatalf("%s every %d over [%d, %d): %d windows, want %d", key, every, from, to, len(got), len(want))
	}
	for i, w := range got {
		if w.Start != want[i] {
			t.Fatalf("%s every %d: window %d starts at %d, want %d", key, every, i, w.Start, want[i])
		}
		for _, fn := range aggtest.AllFns {
			if err := aggtest.Check(groups[w.Start], fn, w.Eval(fn)); err != nil {
				t.Fatalf("%s every %d over [%d, %d), window %d: %v", key, every, from, to, w.Start, err)
			}
		}
	}
}
