package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// iotShape is TSBS' IoT data set on one node: iotSeries series reporting every 10 s for
// 13 h, in quanta of an hour (what an HTTP write fits to that rate), sealed.
const (
	iotSeries   = 1000
	iotQuanta   = 13
	iotQuantum  = 3600
	iotInterval = 10
)

// iotSetup opens a store holding the IoT shape and returns the reads of every pair's
// whole quantum: what an aggregate over all series and all of the data asks a replica.
func iotSetup(b *testing.B) (*Pebble, []PairRead) {
	o := testOptions(SyncNone)
	o.Quantum = iotQuantum
	p := openTest(b, b.TempDir(), o)
	b.Cleanup(func() { p.Close() })
	var reads []PairRead
	var batch []PairAppend
	for q := range iotQuanta {
		start := testStart - testStart%iotQuantum + int64(q)*iotQuantum
		batch = batch[:0]
		for s := range iotSeries {
			key := fmt.Sprintf("readings,name=truck_%d fuel_consumption", s)
			ref := ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start, Q: iotQuantum}
			var pts series.Points
			for t := start; t < start+iotQuantum; t += iotInterval {
				pts.AppendFloat(t*1e9, float64(s+int(t%97)))
			}
			batch = append(batch, PairAppend{Ref: ref, Key: key, Points: pts})
			reads = append(reads, PairRead{Ref: ref, Key: key, From: start * 1e9, To: (start + iotQuantum) * 1e9})
		}
		if err := p.AppendBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
	end := testStart + (iotQuanta+2)*iotQuantum
	if _, err := p.SealNow(time.Unix(end, 0)); err != nil {
		b.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		b.Fatal(err)
	}
	return p, reads
}

// benchPairs runs pass, which returns how many points it went through, as a
// sub-benchmark name of b over pairs pairs, and fails unless each pass went through
// want points; it reports the time per pair.
func benchPairs(b *testing.B, name string, pairs int, want int64, pass func() (int64, error)) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n, err := pass()
			if err != nil {
				b.Fatal(err)
			}
			if n != want {
				b.Fatalf("went through %d points, want %d", n, want)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pairs), "ns/pair")
	})
}

// BenchmarkReadIoT reads every pair of the IoT shape and sums the points, one Read per
// pair (each) and all pairs in one ReadBatch (batch). A pair holds a few hundred
// points, so what the store pays per pair shows against what it pays per point.
func BenchmarkReadIoT(b *testing.B) {
	p, reads := iotSetup(b)
	want := int64(iotSeries * iotQuanta * iotQuantum / iotInterval)
	benchPairs(b, "each", len(reads), want, func() (n int64, _ error) {
		for _, r := range reads {
			pts, _, err := p.Read(r.Ref, r.Key, r.From, r.To)
			if err != nil {
				return n, err
			}
			n += int64(pts.Len())
		}
		return n, nil
	})
	benchPairs(b, "batch", len(reads), want, func() (n int64, err error) {
		err = p.ReadBatch(reads, func(_ int, pts series.Points, _ bool) error {
			n += int64(pts.Len())
			return nil
		})
		return n, err
	})
}

// BenchmarkAggregateIoT answers 10-minute windows over every pair of the IoT shape, as
// a replica answers tsbs' avg-daily-driving-duration: each pair's statistics and, its
// quantum cut by the windows' range, its points. each: PairStats and Aggregate per pair;
// batch: one AggregateBatch over the pairs in the store's key order.
func BenchmarkAggregateIoT(b *testing.B) {
	p, reads := iotSetup(b)
	const every = int64(600e9)
	aggs := make([]PairAgg, len(reads))
	for i, r := range reads {
		// A range that starts a second into the quantum: every pair is read for windows.
		aggs[i] = PairAgg{Ref: r.Ref, Key: r.Key, From: r.From + 1e9, To: r.To, Every: every}
	}
	slices.SortFunc(aggs, func(a, b PairAgg) int { return ComparePairs(a.Ref, a.Key, b.Ref, b.Key) })
	want := int64(len(aggs) * (iotQuantum/iotInterval - 1))
	count := func(ws []agg.Window) (n int64) {
		for _, w := range ws {
			n += w.Count
		}
		return n
	}
	benchPairs(b, "each", len(aggs), want, func() (n int64, _ error) {
		for _, a := range aggs {
			if _, _, err := p.PairStats(a.Ref, a.Key); err != nil {
				return n, err
			}
			ws, _, err := p.Aggregate(a.Ref, a.Key, a.From, a.To, a.Every)
			if err != nil {
				return n, err
			}
			n += count(ws)
		}
		return n, nil
	})
	benchPairs(b, "batch", len(aggs), want, func() (n int64, err error) {
		err = p.AggregateBatch(aggs, func(_ int, _ agg.Partial, _ bool, ws []agg.Window) error {
			n += count(ws)
			return nil
		})
		return n, err
	})
}
