package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/cputime"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

func BenchmarkAppendSyncAlways(b *testing.B) { benchAppend(b, SyncAlways) }
func BenchmarkAppendSyncBatch(b *testing.B)  { benchAppend(b, SyncBatch) }
func BenchmarkAppendSyncNone(b *testing.B)   { benchAppend(b, SyncNone) }

// streamDrains returns what a benchmark of a real-time stream calls after each append
// at stream time t (ns): it drains the write buffer whenever the stream's clock passes
// the moment the store's timer (SyncNone, BufferWait) or sync loop (SyncBatch,
// SyncInterval) would have drained it, so a stream replayed faster than real time
// reaches pebble in the batches it would reach it in at its own rate, not in whole
// buffers.
func streamDrains(p *Pebble) func(b *testing.B, t int64) {
	var every int64
	switch {
	case p.buf == nil:
		return func(*testing.B, int64) {}
	case p.opts.Sync == SyncNone:
		every = int64(p.opts.BufferWait)
	default:
		every = int64(p.opts.SyncInterval)
	}
	var last int64
	return func(b *testing.B, t int64) {
		if t-last < every {
			return
		}
		if last != 0 {
			if err := p.settle(); err != nil {
				b.Fatal(err)
			}
		}
		last = t
	}
}

// benchAppend measures one Append: "point" is the latency of a lone single-point
// write (and "point-60hz" of one in a stream at 60 Hz), "frame-40series" of 40 series'
// one point each in one batch, "batch60" of a 60-point batch (one second of a PMU
// channel), and "parallel-point" the cost per single-point write when 8 writers share
// fsyncs through pebble's group commit.
func benchAppend(b *testing.B, mode SyncMode) {
	open := func(b *testing.B) *Pebble {
		p := openTest(b, b.TempDir(), testOptions(mode))
		b.Cleanup(func() { p.Close() })
		return p
	}
	b.Run("point", func(b *testing.B) {
		p := open(b)
		t := testStart * 1e9
		cpu := cputime.Process()
		defer func() {
			if err := p.settle(); err != nil { // what waits in the write buffer is part of the cost
				b.Fatal(err)
			}
			b.ReportMetric(float64(cputime.Process()-cpu)/1e3/float64(b.N), "cpu-µs/op")
		}()
		for b.Loop() {
			t++
			if err := p.Append(testRef, "k", series.Points{Type: series.Float, T: []int64{t}, F: []float64{60}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// point-60hz: lone single-point writes of one 60 Hz channel, as a replica takes
	// them from a writer that sends every sample by itself: a new pair every quantum
	// (600 points), folds of each pair's tail, and what all that writes to flash.
	b.Run("point-60hz", func(b *testing.B) {
		p := open(b)
		t := testStart * 1e9
		cpu := cputime.Process()
		q := p.Quantum()
		drain := streamDrains(p)
		for b.Loop() {
			t += 16_666_667
			start := q.Start(t)
			ref := ShardRef{ID: quanta.ShardID(quanta.QFI, "k", start), Start: start}
			if err := p.Append(ref, "k", series.Points{Type: series.Float, T: []int64{t}, F: []float64{60}}); err != nil {
				b.Fatal(err)
			}
			drain(b, t)
		}
		if err := p.settle(); err != nil { // what waits in the write buffer is part of the cost
			b.Fatal(err)
		}
		b.ReportMetric(float64(cputime.Process()-cpu)/1e3/float64(b.N), "cpu-µs/op")
		if err := p.Flush(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(p.Stats().FlashBytesWritten)/float64(b.N), "flash-B/point")
	})
	// frame-40series: a batch of 40 series with one point each, 60 times a second, as
	// a replica takes a PMU frame's channels or a scrape's samples sent at once; per
	// point, what each series' one-point share of a batch costs (ns/point, flash).
	b.Run("frame-40series", func(b *testing.B) {
		p := open(b)
		const width = 40
		t := testStart * 1e9
		q := p.Quantum()
		batch := make([]PairAppend, width)
		drain := streamDrains(p)
		for i := range batch {
			batch[i].Key = fmt.Sprintf("pmu%d/ch%d", i/4, i%4)
		}
		for b.Loop() {
			t += 16_666_667
			start := q.Start(t)
			for i := range batch {
				a := &batch[i]
				if a.Ref.Start != start || a.Ref.ID == (quanta.ID{}) { // the shard IDs change once a quantum
					a.Ref = ShardRef{ID: quanta.ShardID(quanta.QFI, a.Key, start), Start: start}
				}
				a.Points = series.Points{Type: series.Float, T: []int64{t}, F: []float64{60 + float64(i)}}
			}
			if err := p.AppendBatch(batch); err != nil {
				b.Fatal(err)
			}
			drain(b, t)
		}
		if err := p.settle(); err != nil { // what waits in the write buffer is part of the cost
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*width), "ns/point")
		if err := p.Flush(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(p.Stats().FlashBytesWritten)/float64(b.N*width), "flash-B/point")
	})
	b.Run("batch60", func(b *testing.B) {
		p := open(b)
		t := testStart * 1e9
		pts := series.Points{Type: series.Float, T: make([]int64, 60), F: make([]float64, 60)}
		for b.Loop() {
			for i := range pts.T {
				t += 16_666_667
				pts.T[i], pts.F[i] = t, 60+float64(i)/1000
			}
			if err := p.Append(testRef, "k", pts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*60), "ns/point")
		b.ReportMetric(float64(b.N*60)/b.Elapsed().Seconds(), "points/s")
	})
	b.Run("parallel-point", func(b *testing.B) {
		p := open(b)
		var writer atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS writers
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("w%d", writer.Add(1))
			t := testStart * 1e9
			for pb.Next() {
				t++
				if err := p.Append(testRef, key, series.Points{Type: series.Float, T: []int64{t}, F: []float64{60}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkRawFsync is the floor for a durable write on this disk, two ways:
// "append-fsync" appends 16 bytes to a file and fsyncs it (the file grows, so the
// filesystem journals its size too); "prealloc-fdatasync" overwrites 16 bytes inside a
// preallocated file and fdatasyncs it, which is what pebble's WAL does (it preallocates
// its files and reuses finished ones), hence a SyncAlways append can beat the first.
func BenchmarkRawFsync(b *testing.B) {
	b.Run("append-fsync", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 16)
		for b.Loop() {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prealloc-fdatasync", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		const size = 4 << 20
		if _, err := f.Write(make([]byte, size)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 16)
		off := int64(0)
		for b.Loop() {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
			off = (off + 16) % size
			if err := fdatasync(f); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// pmuHour simulates one hour of one PMU at 60 frames/s, three channels. A PMU stamps
// frames from its GPS clock in µs (IEEE C37.118 TIME_BASE 10⁶): the nominal instants
// k/60 s rounded to the µs, and jitter adds ns-level noise on top of that (nsJitter
// bounds it; 0 means the frames carry the µs stamps exactly, as C37.118 frames do, with
// an occasional ±1 µs clock-servo step). Values carry the instrument's resolution:
// frequency to the mHz (mean-reverting around 60 Hz), phase angle to 0.001° (drifting
// with the frequency error), voltage magnitude to 0.1 V (7.2 kV, noise in the 5th
// significant digit).
func pmuHour(seed uint64, nsJitter int64) (freq, angle, mag series.Points) {
	r := rand.New(rand.NewPCG(seed, 1))
	start := testStart * 1e9
	f, a, v := 60.0, 10.0, 7200.0
	for k := range int64(3600 * 60) {
		us := (k*1_000_000 + 30) / 60
		if r.IntN(10) == 0 {
			us += int64(r.IntN(3)) - 1
		}
		t := start + us*1000
		if nsJitter > 0 {
			t += r.Int64N(2*nsJitter+1) - nsJitter
		}
		f += (60-f)*0.002 + r.NormFloat64()*0.0004
		a = math.Mod(a+360*(f-60)/60+180, 360) - 180
		v += (7200-v)*0.001 + r.NormFloat64()*0.05
		freq.AppendFloat(t, math.Round(f*1000)/1000)
		angle.AppendFloat(t, math.Round((a+r.NormFloat64()*0.003)*1000)/1000)
		mag.AppendFloat(t, math.Round((v+r.NormFloat64()*0.3)*10)/10)
	}
	return freq, angle, mag
}

// BenchmarkBytesPerPointPMU stores an hour of a 60 Hz PMU's three channels as a node
// would receive them (a batch per channel per second, into 10 s quanta), seals it,
// compacts, and reports the bytes per point of the table files, where the data lives
// (B/point; raw, a point is 16 bytes), and the size of the whole directory (dir-MiB).
// The directory adds a fixed overhead that does not grow with the data: pebble keeps
// up to MemTableStopWritesThreshold+1 finished WAL files for reuse beside the live one.
func BenchmarkBytesPerPointPMU(b *testing.B) {
	for _, c := range []struct {
		name     string
		nsJitter int64
	}{{"us-stamps", 0}, {"ns-jitter-2us", 2000}} {
		b.Run(c.name, func(b *testing.B) {
			chans := [3]series.Points{}
			chans[0], chans[1], chans[2] = pmuHour(1, c.nsJitter)
			names := [3]string{"pmu1/freq", "pmu1/vang", "pmu1/vmag"}
			q := quanta.Quantum(10)
			for b.Loop() {
				dir := b.TempDir()
				p := openTest(b, dir, testOptions(SyncNone))
				points := 0
				for s := 0; s < chans[0].Len(); s += 60 {
					for c, pts := range chans {
						batch := pts.Slice(s, s+60)
						start := q.Start(batch.T[0])
						ref := ShardRef{ID: quanta.ShardID(quanta.QFI, names[c], start), Start: start}
						// A second of frames may straddle a quantum boundary: split it.
						if end := q.EndNanos(start); batch.T[59] >= end {
							head := batch.Trim(math.MinInt64, end)
							tail := batch.Trim(end, math.MaxInt64)
							next := q.Start(end)
							if err := p.Append(ShardRef{ID: quanta.ShardID(quanta.QFI, names[c], next), Start: next}, names[c], tail); err != nil {
								b.Fatal(err)
							}
							batch = head
						}
						if err := p.Append(ref, names[c], batch); err != nil {
							b.Fatal(err)
						}
					}
					points += 3 * 60
				}
				if _, err := p.SealNow(time.Unix(testStart+7200, 0)); err != nil {
					b.Fatal(err)
				}
				if err := p.db.Compact([]byte{0}, []byte{0xff}, false); err != nil {
					b.Fatal(err)
				}
				if st := p.Stats(); st.Points != int64(points) {
					b.Fatalf("Stats.Points = %d, want %d", st.Points, points)
				}
				tables := p.db.Metrics().Total().Size
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(tables)/float64(points), "B/point")
				b.ReportMetric(float64(dirSize(b, dir))/(1<<20), "dir-MiB")
			}
		})
	}
}

func dirSize(b *testing.B, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			b.Fatal(err)
		}
		n += info.Size()
	}
	return n
}
