package storetest

import (
	"errors"
	"math"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

func init() { cases = append(cases, readBatchCases...) }

// store.ReadBatch (the store's own ReadBatcher where it has one) against Read.
var readBatchCases = []testCase{
	{"ReadBatchMatchesRead", func(t *testing.T, s store.Store, _ func()) {
		var ts []int64
		var fs []float64
		for i := range 9 {
			ts = append(ts, sec+int64(i)*10)
			fs = append(fs, float64(i)/4)
		}
		mustAppend(t, s, refA, "k", floats(ts[:5], fs[:5]...))
		mustAppend(t, s, refA, "k", floats(ts[3:], fs[3:]...))            // overlaps the first
		mustAppend(t, s, refA, "k", floats(tsList(sec+20, sec+85), 7, 8)) // an overwrite, a point between
		mustAppend(t, s, refC, "i", ints(tsList(sec+10, sec+11), math.MinInt64, 3))
		mustAppend(t, s, refB, "s", strs(tsList(sec+12, sec+11), "b", "a"))
		reads := []store.PairRead{
			{Ref: refA, Key: "k", From: math.MinInt64, To: math.MaxInt64},
			{Ref: refC, Key: "i", From: sec, To: sec + 11},      // the first point only
			{Ref: refA, Key: "k", From: sec + 25, To: sec + 61}, // the middle, cut inside chunks
			{Ref: refB, Key: "absent", From: math.MinInt64, To: math.MaxInt64},
			{Ref: refA, Key: "k", From: sec + 40, To: sec + 40}, // empty range of a held pair
			{Ref: refB, Key: "s", From: math.MinInt64, To: math.MaxInt64},
			{Ref: refC, Key: "k", From: math.MinInt64, To: math.MaxInt64}, // another shard of k
			{Ref: refA, Key: "k", From: sec + 81, To: math.MaxInt64},
		}
		next := 0
		err := store.ReadBatch(s, reads, func(i int, got series.Points, held bool) error {
			if i != next {
				t.Fatalf("yield of read %d, want %d: reads are answered in order", i, next)
			}
			next++
			r := reads[i]
			want, wantHeld := mustRead(t, s, r.Ref, r.Key, r.From, r.To)
			if held != wantHeld {
				t.Errorf("read %d (%s [%d, %d)): held %v, Read says %v", i, r.Key, r.From, r.To, held, wantHeld)
			}
			if msg := diff(got, want); msg != "" {
				t.Errorf("read %d (%s [%d, %d)): %s\n got  %s\n want %s", i, r.Key, r.From, r.To, msg, show(got), show(want))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("ReadBatch: %v", err)
		}
		if next != len(reads) {
			t.Fatalf("ReadBatch answered %d reads of %d", next, len(reads))
		}
		// Spot checks that Read itself answers what was written, so that the
		// comparison above compares something.
		if got, _ := mustRead(t, s, refA, "k", sec+25, sec+61); got.Len() != 4 || got.F[0] != 0.75 {
			t.Fatalf("Read of k [25, 61): %s, want 4 points from 0.75", show(got))
		}

		stop := errors.New("enough")
		calls := 0
		err = store.ReadBatch(s, reads, func(i int, _ series.Points, _ bool) error {
			calls++
			if i == 1 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != 2 {
			t.Fatalf("ReadBatch with yield failing at read 1: %v after %d calls, want %v after 2", err, calls, stop)
		}
	}},
}
