package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// The multi-pair append (store.BatchAppender), which every store implements: a
// replica stores a grouped write request with it, in one engine commit.
func init() { cases = append(cases, batchCases...) }

func asBatch(t *testing.T, s store.Store) store.BatchAppender {
	t.Helper()
	b, ok := s.(store.BatchAppender)
	if !ok {
		t.Fatalf("%T does not implement store.BatchAppender", s)
	}
	return b
}

// batchPair is a pair the batch cases write, and the model of what it holds.
type batchPair struct {
	ref  store.ShardRef
	key  string
	base int64 // first nanosecond of ref's quantum
	held map[int64]float64
}

var batchCases = []testCase{
	{"AppendBatchEqualsAppendsInOrder", func(t *testing.T, s store.Store, _ func()) {
		ba := asBatch(t, s)
		pairs := []*batchPair{
			{ref: refA, key: "k", base: sec}, {ref: refA, key: "k2", base: sec},
			{ref: refB, key: "k", base: sec + 10e9}, {ref: refC, key: "c", base: sec + 10e9},
		}
		for _, p := range pairs {
			p.held = map[int64]float64{}
		}
		rnd := rand.New(rand.NewPCG(1, 2))
		for round := range 150 {
			var batch []store.PairAppend
			for range 1 + rnd.IntN(6) { // a pair may come twice, overlapping itself
				p := pairs[rnd.IntN(len(pairs))]
				var pts series.Points
				for range 1 + rnd.IntN(5) {
					ts := p.base + int64(rnd.IntN(60))*1e6 // few timestamps: many overwrites
					v := float64(rnd.IntN(1000)) / 8
					pts.AppendFloat(ts, v)
				}
				batch = append(batch, store.PairAppend{Ref: p.ref, Key: p.key, Points: pts})
				// The model: Append's rule within a batch (the last of a timestamp wins,
				// pts is normalised stably), then the later entry over the earlier.
				for i := range pts.T {
					p.held[pts.T[i]] = pts.F[i]
				}
			}
			if err := ba.AppendBatch(batch); err != nil {
				t.Fatalf("round %d: AppendBatch: %v", round, err)
			}
			if round%25 != 24 {
				continue
			}
			want := store.Stats{Series: 3}
			for _, p := range pairs {
				got, held := readAll(t, s, p.ref, p.key)
				if len(p.held) == 0 {
					if held {
						t.Fatalf("round %d: %s/%d held, nothing written", round, p.key, p.ref.Start)
					}
					continue
				}
				want.Shards++
				want.Points += int64(len(p.held))
				wantPoints(t, got, modelFloats(p.held))
				checkPairStats(t, s, p.ref, p.key, fmt.Sprintf("round %d, %s/%d", round, p.key, p.ref.Start))
			}
			wantStats(t, s, want)
		}
	}},
	{"AppendBatchIsAllOrNothing", func(t *testing.T, s store.Store, _ func()) {
		ba := asBatch(t, s)
		mustAppend(t, s, refC, "i", ints(tsList(sec+10e9+1), 1))
		err := ba.AppendBatch([]store.PairAppend{
			{Ref: refA, Key: "k", Points: floats(tsList(sec+1, sec+2), 1, 2)},
			{Ref: refB, Key: "new", Points: floats(tsList(sec+10e9+1), 3)},
			{Ref: refC, Key: "i", Points: floats(tsList(sec+10e9+2), 4)}, // "i" holds ints
		})
		if !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("a batch with a type mismatch: err %v, want series.ErrTypeMismatch", err)
		}
		for _, p := range []struct {
			ref store.ShardRef
			key string
		}{{refA, "k"}, {refB, "new"}} {
			if got, held := readAll(t, s, p.ref, p.key); held || got.Len() > 0 {
				t.Fatalf("%s: %d points held after a refused batch", p.key, got.Len())
			}
		}
		wantStats(t, s, store.Stats{Shards: 1, Series: 1, Points: 1})
		// Two entries of one new series disagreeing on its type: refused too.
		err = ba.AppendBatch([]store.PairAppend{
			{Ref: refA, Key: "x", Points: floats(tsList(sec+1), 1)},
			{Ref: refB, Key: "x", Points: ints(tsList(sec+10e9+1), 1)},
		})
		if !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("one series in two types in a batch: err %v, want series.ErrTypeMismatch", err)
		}
		if _, held := readAll(t, s, refA, "x"); held {
			t.Fatal("x held after a refused batch")
		}
		// The refusals left nothing behind: the series can be written as floats now.
		if err := ba.AppendBatch([]store.PairAppend{{Ref: refA, Key: "x", Points: floats(tsList(sec+1), 1)}}); err != nil {
			t.Fatal(err)
		}
		if err := ba.AppendBatch(nil); err != nil {
			t.Fatalf("empty batch: %v", err)
		}
		wantStats(t, s, store.Stats{Shards: 2, Series: 2, Points: 2})
	}},
	{"ConcurrentAppendBatchesShareNoLockOrder", func(t *testing.T, s store.Store, _ func()) {
		// Writers whose batches name the same pairs in opposite orders: none waits for
		// another forever, and the counts come out exact.
		ba := asBatch(t, s)
		refs := []store.ShardRef{refA, refB, refC}
		bases := []int64{sec, sec + 10e9, sec + 10e9}
		const writers, rounds = 4, 40
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					var batch []store.PairAppend
					for j := range refs {
						if g%2 == 1 {
							j = len(refs) - 1 - j
						}
						ts := bases[j] + int64(i)*1e6 + int64(g%2) // two writers share each timestamp
						batch = append(batch, store.PairAppend{Ref: refs[j], Key: "k", Points: floats(tsList(ts), float64(ts%1e9))})
					}
					if err := ba.AppendBatch(batch); err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			got, _ := readAll(t, s, r, "k")
			if got.Len() != 2*rounds {
				t.Fatalf("quantum %d holds %d points, want %d", r.Start, got.Len(), 2*rounds)
			}
			checkPairStats(t, s, r, "k", fmt.Sprintf("quantum %d", r.Start))
		}
		wantStats(t, s, store.Stats{Shards: 3, Series: 1, Points: 3 * 2 * rounds})
	}},
}

// modelFloats returns the model's points, sorted.
func modelFloats(m map[int64]float64) series.Points {
	ts := make([]int64, 0, len(m))
	for t := range m {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	out := series.Points{Type: series.Float}
	for _, t := range ts {
		out.AppendFloat(t, m[t])
	}
	return out
}
