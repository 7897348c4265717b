package store

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// BenchmarkBatchLoadFlash loads history the way tsbs' IoT load reaches a node's store
// (scripts/bench-tsbs): 1,000 series of 1 h quanta, a point every 10 s each, in batches
// holding 28 points of every series (what a 5,000-line batch of 100 trucks holds), one
// AppendBatch each under --sync always, with a sealer pass every hour of data. Each
// append rewrites its pair's summary; how many of those rewrites die in the memtable,
// and how many tables compactions merge, depends on the memtable's size. Reported:
//
//	flash-B/point   bytes the engine wrote to the device per point (Stats.FlashBytesWritten)
//	flushes         memtables flushed to tables
//	compacted-MB    bytes pebble's compactions read
//
// Sub-benchmarks: memtables of 2 MiB and the default.
func BenchmarkBatchLoadFlash(b *testing.B) {
	for _, mem := range []int64{2 << 20, DefaultPebbleOptions().MemTableSize} {
		b.Run(fmt.Sprintf("memtable-%dMiB", mem>>20), func(b *testing.B) {
			for b.Loop() {
				benchBatchLoad(b, mem)
			}
		})
	}
}

func benchBatchLoad(b *testing.B, memTable int64) {
	const (
		nSeries  = 1000
		hours    = 4
		step     = int64(10 * time.Second)
		perBatch = 28
		q        = quanta.Quantum(3600)
	)
	o := DefaultPebbleOptions()
	o.MemTableSize = memTable
	o.SealInterval, o.EnforceInterval = -1, -1
	p := openTest(b, b.TempDir(), o)
	defer p.Close()
	start := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	n := hours * 3600 * int64(time.Second) / step
	keys := make([]string, nSeries)
	for s := range keys {
		keys[s] = fmt.Sprintf("readings,name=truck_%d#velocity", s)
	}
	points, sealedHour := int64(0), int64(0)
	for i := int64(0); i < n; i += perBatch {
		var batch []PairAppend
		for s, key := range keys {
			pts := series.Points{Type: series.Float}
			for j := i; j < min(i+perBatch, n); j++ {
				pts.T = append(pts.T, start+j*step)
				pts.F = append(pts.F, math.Round(float64(s)+10*math.Sin(float64(j)/50))/10)
			}
			// A batch may cross an hour: one append per quantum, as a coordinator cuts it.
			for k := 0; k < pts.Len(); {
				qs := q.Start(pts.T[k])
				e := k
				for e < pts.Len() && q.Start(pts.T[e]) == qs {
					e++
				}
				ref := ShardRef{ID: quanta.ShardID(quanta.QFI, key, qs), Start: qs, Q: q}
				batch = append(batch, PairAppend{Ref: ref, Key: key, Points: pts.Slice(k, e)})
				k = e
			}
		}
		if err := p.AppendBatch(batch); err != nil {
			b.Fatal(err)
		}
		points += int64(nSeries * min(perBatch, n-i))
		if h := (i + perBatch) * step / int64(time.Hour); h > sealedHour {
			sealedHour = h
			if err := p.sealAll(time.Unix(0, start).Add(time.Duration(h+2) * time.Hour)); err != nil {
				b.Fatal(err)
			}
		}
	}
	m := p.db.Metrics()
	b.ReportMetric(float64(p.Stats().FlashBytesWritten)/float64(points), "flash-B/point")
	b.ReportMetric(float64(m.Flush.Count), "flushes")
	var read uint64
	for _, l := range m.Levels {
		read += l.BytesRead
	}
	b.ReportMetric(float64(read)/(1<<20), "compacted-MB")
}
