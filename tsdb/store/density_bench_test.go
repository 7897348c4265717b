package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/pmudata"
	"github.com/tsdht/tsdht/quanta"
)

// dirUsage is what a directory's files take on the device (allocated blocks, as du
// counts them: preallocated WAL space included), split into WAL, tables and the rest.
type dirUsage struct{ wal, tables, other int64 }

func (u dirUsage) total() int64 { return u.wal + u.tables + u.other }

func usage(tb testing.TB, dir string) dirUsage {
	var u dirUsage
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // pebble deleted an obsolete file meanwhile
		}
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n = int64(st.Blocks) * 512
		}
		switch {
		case strings.HasSuffix(path, ".log"):
			u.wal += n
		case strings.HasSuffix(path, ".sst"):
			u.tables += n
		default:
			u.other += n
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// BenchmarkPMUBytesPerPoint plays the reference PMU data set (internal/pmudata: 6 PMUs
// × 4 float32 channels at 60 Hz, one hour, 5.18 M points) into a store as a node
// receives it in real time — one 60-point batch per channel per second, the background
// sealer's pass (sealPass: the seal, then the flush when writes stopped) every quantum
// (10 s) on a simulated clock — and reports the growth of the whole
// data directory (allocated blocks: WAL, tables, manifest, everything) per point:
//
//	live-B/point      at the end of the hour, while the last quanta are unsealed
//	2min-B/point      two simulated minutes later: everything sealed, nothing forced
//	compact-B/point   after a manual compaction of the whole key space
//	wal-/sst-B/point  the WAL's and the tables' share of the 2-minute figure
//	flash-B/point     bytes the engine wrote to the device per point stored (WAL,
//	                  flushes, compactions: Stats.FlashBytesWritten)
//	flash/stored      flash bytes ÷ the 2-minute directory growth: how many times each
//	                  byte kept was written
//	flash/raw         flash bytes ÷ 16 bytes a point (8 of timestamp, 8 of value): the
//	                  usual write amplification, device bytes per byte of user data
//	idle-compactions  key ranges the idle passes after the stream compacted
//	                  (idlecompact.go)
//
// A raw point is 16 bytes. -benchtime 1x is enough: the data set is deterministic.
func BenchmarkPMUBytesPerPoint(b *testing.B) {
	for _, c := range []struct {
		name  string
		noise float64
	}{{"noise-1x", 1}, {"noise-4x", 4}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := pmudata.Default()
			cfg.NoiseScale = c.noise
			chans := pmudata.Generate(cfg)
			for b.Loop() {
				benchPMUDensity(b, cfg, chans)
			}
		})
	}
}

func benchPMUDensity(b *testing.B, cfg pmudata.Config, chans []pmudata.Channel) {
	dir := b.TempDir()
	o := DefaultPebbleOptions()
	o.Sync = SyncNone
	o.SealInterval = -1 // sealed below, on the simulated clock
	o.EnforceInterval = -1
	p := openTest(b, dir, o)
	defer p.Close()
	before := usage(b, dir)
	q := quanta.Quantum(10)
	cursor := make([]int, len(chans))
	start := cfg.Start.Unix()
	end := start + int64(cfg.Duration/time.Second)
	points := int64(0)
	for sec := start; sec < end; sec++ {
		until := (sec + 1) * 1e9
		for c, ch := range chans {
			i := cursor[c]
			j := i
			for j < ch.Points.Len() && ch.Points.T[j] < until {
				j++
			}
			cursor[c] = j
			if j == i {
				continue
			}
			batch := ch.Points.Slice(i, j)
			qs := q.Start(batch.T[0])
			ref := ShardRef{ID: quanta.ShardID(quanta.QFI, ch.Key(), qs), Start: qs}
			if err := p.Append(ref, ch.Key(), batch); err != nil {
				b.Fatal(err)
			}
			points += int64(batch.Len())
		}
		if (sec+1)%10 == 0 {
			if err := p.sealAll(time.Unix(sec+1, 0)); err != nil {
				b.Fatal(err)
			}
		}
	}
	perPoint := func(n int64) float64 { return float64(n) / float64(points) }
	live := usage(b, dir)
	for sec := end; sec <= end+120; sec += 10 {
		if err := p.sealAll(time.Unix(sec, 0)); err != nil {
			b.Fatal(err)
		}
	}
	settle(b, p)
	later := usage(b, dir)
	if testing.Verbose() {
		listDir(b, dir)
		b.Log(p.db.Metrics().String())
	}
	st := p.Stats()
	if st.Points != points {
		b.Fatalf("Stats.Points = %d, want %d", st.Points, points)
	}
	if err := p.db.Compact([]byte{0}, []byte{0xff}, false); err != nil {
		b.Fatal(err)
	}
	settle(b, p) // the compaction's input files are deleted after it returns
	compacted := usage(b, dir)
	if testing.Verbose() {
		b.Log("after the compaction:")
		listDir(b, dir)
	}
	b.ReportMetric(perPoint(live.total()-before.total()), "live-B/point")
	b.ReportMetric(perPoint(later.total()-before.total()), "2min-B/point")
	b.ReportMetric(perPoint(compacted.total()-before.total()), "compact-B/point")
	b.ReportMetric(perPoint(later.wal-before.wal), "wal-B/point")
	b.ReportMetric(perPoint(later.tables-before.tables), "sst-B/point")
	b.ReportMetric(perPoint(st.FlashBytesWritten), "flash-B/point")
	b.ReportMetric(float64(st.FlashBytesWritten)/float64(later.total()-before.total()), "flash/stored")
	b.ReportMetric(perPoint(st.FlashBytesWritten)/16, "flash/raw")
	b.ReportMetric(float64(points), "points")
	b.ReportMetric(float64(p.compactedWindows()), "idle-compactions")
}

func listDir(tb testing.TB, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		info, _ := e.Info()
		st := info.Sys().(*syscall.Stat_t)
		tb.Logf("%-20s %10d %10d", e.Name(), info.Size(), st.Blocks*512)
	}
}
